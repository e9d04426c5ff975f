//! The host lease (`--lease FILE SECS`): the watching parent (`backstop.rs`) also ends
//! the program's tree when the host that started it stops renewing `FILE` for about SECS
//! seconds, so a command that is not durable does not outlive a lost host (killed, cut
//! off, or facing a frozen envd) by more than that bound, even when no kill can reach the
//! sandbox.
//!
//! The host renews the lease by rewriting `FILE` (one envd request per adapter and
//! interval, whatever the number of commands); the watcher only looks at it: every
//! `CHECK` (an eighth of the bound, at least 250 ms) it reads the file's identity and
//! times (`newfstatat`: inode, size, modification and change times) and notes *on its
//! own monotonic clock* when they last changed. A change is a renewal; what it says and
//! the sandbox's wall clock play no part (a clock step at resume, or a host whose clock
//! differs, can neither shorten nor stretch the bound). The watcher's start counts as a
//! renewal (the host just started the command). Once no change was seen for
//! `SECS - 2 * CHECK`, the tree is killed: a renewal is seen at most one `CHECK` after it
//! happened and the expiry at most one `CHECK` after it is due, so the program ends at
//! most SECS after the host's last renewal. A missing file is a state like any other
//! (its appearance is a renewal, its absence is not).
//!
//! When the program ends first while members of its tree remain (a background job, or,
//! in a cgroup, anything it started), the host may be gone already: a program killed by
//! `SIGPIPE` on its output to a dead envd is exactly that. So the watcher ends as the
//! program did (envd reports the end at once) but leaves behind a detached *reaper*
//! (`linger`) that keeps watching: it quits as soon as the tree is empty or a renewal
//! arrives after the end (the host is alive: what the program left running is its
//! business, as it is without a lease; the host renews once more after an end it saw),
//! and kills the tree when the lease expires first.
//!
//! `FILE` lives in the adapter's root-owned helper directory: the sandbox user can read
//! it but neither renew it nor replace it, so the agent cannot keep a command alive past
//! its host. Durable commands are started without `--lease` and outlive their host.

use crate::mem::parse_num;
use crate::sys::*;

/// `[seconds, nanoseconds]`, the kernel's `struct timespec`.
pub(crate) type Timespec = [i64; 2];

/// Shortest interval between two looks at the lease file.
const MIN_CHECK_MS: i64 = 250;

/// A lease being watched.
pub(crate) struct Lease {
    /// The lease file (NUL-terminated in memory, as every argument).
    path: &'static [u8],
    /// Milliseconds between two looks at the file.
    check_ms: i64,
    /// Milliseconds without a change after which the lease has expired.
    expire_ms: i64,
    /// What the file looked like at the last look (or `None`: missing).
    seen: Option<[u64; 6]>,
    /// Monotonic milliseconds of the last change seen (or of the start).
    changed_at: i64,
    /// Monotonic milliseconds of the next look.
    next_ms: i64,
    /// Changes seen so far.
    changes: u64,
}

fn ms(t: Timespec) -> i64 {
    t[0].saturating_mul(1000).saturating_add(t[1] / 1_000_000)
}

/// The identity and times of `path`: inode, size, mtime (s, ns), ctime (s, ns).
fn version(path: &[u8]) -> Option<[u64; 6]> {
    let mut st = [0u64; 18];
    // SAFETY: `path` is NUL-terminated; `st` has room for a `struct stat` (144 bytes).
    let r = unsafe {
        sys(
            SYS_NEWFSTATAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            st.as_mut_ptr() as usize,
            0,
            0,
            0,
        )
    };
    (r == 0).then_some([st[1], st[6], st[11], st[12], st[13], st[14]])
}

impl Lease {
    /// `--lease FILE SECS` at `argv[at..]`: the lease and the index after it, `None` when
    /// the arguments there are not a lease; a malformed one is a usage failure.
    pub(crate) fn parse(
        arg: &dyn Fn(usize) -> &'static [u8],
        argc: usize,
        at: usize,
    ) -> Option<(Lease, usize)> {
        if argc < at + 3 || arg(at) != b"--lease" {
            return None;
        }
        let path = arg(at + 1);
        let bound_ms = match parse_num(arg(at + 2)) {
            Some(secs) if secs > 0 && !path.is_empty() => (secs as i64).saturating_mul(1000),
            _ => fail(b"usage", 125),
        };
        let check_ms = (bound_ms / 8).max(MIN_CHECK_MS);
        let lease = Lease {
            path,
            check_ms,
            expire_ms: (bound_ms - 2 * check_ms).max(check_ms),
            seen: None,
            changed_at: 0,
            next_ms: 0,
            changes: 0,
        };
        Some((lease, at + 3))
    }

    /// Starts the clock at `now` (the start counts as a renewal).
    pub(crate) fn begin(&mut self, now: Timespec) {
        self.seen = version(self.path);
        self.changed_at = ms(now);
        self.next_ms = self.changed_at + self.check_ms;
    }

    /// Looks at the file when a look is due; true once the lease has expired.
    pub(crate) fn expired(&mut self, now: Timespec) -> bool {
        let now = ms(now);
        if now >= self.next_ms {
            let v = version(self.path);
            if v != self.seen {
                self.seen = v;
                self.changed_at = now;
                self.changes += 1;
            }
            self.next_ms = now + self.check_ms;
        }
        now - self.changed_at >= self.expire_ms
    }

    /// When the next look is due (monotonic).
    pub(crate) fn next_check(&self) -> Timespec {
        [self.next_ms / 1000, (self.next_ms % 1000) * 1_000_000]
    }
}

/// True when the tree of `child` has no member left: its cgroup's `cgroup.procs` is
/// empty (or gone), or without a cgroup its process group is.
fn tree_empty(child: isize, cgroup_kill: &[u8]) -> bool {
    if cgroup_kill.is_empty() {
        return sys_plain(SYS_KILL, (-child) as usize, 0, 0) == -ESRCH;
    }
    // `…/cgroup.kill` → `…/cgroup.procs`, NUL-terminated, in a buffer of our own.
    let mut buf = [0u8; 4096];
    let stem = cgroup_kill.len().saturating_sub(b"kill".len());
    if stem + b"procs".len() + 1 > buf.len() {
        return false;
    }
    buf[..stem].copy_from_slice(&cgroup_kill[..stem]);
    buf[stem..stem + 5].copy_from_slice(b"procs");
    let fd = open(&buf[..stem + 5], O_RDONLY);
    if fd < 0 {
        return true;
    }
    let mut one = [0u8; 16];
    let n = read(fd, &mut one);
    close(fd);
    n == 0
}

/// The program (`child`, already reaped with `status`) ended while `lease` was watched:
/// when members of its tree remain, forks the reaper described in the module docs; then
/// ends as the program did.
pub(crate) fn linger(child: isize, status: i32, cgroup_kill: &[u8], mut lease: Lease) -> ! {
    if tree_empty(child, cgroup_kill) || sys_plain(SYS_FORK, 0, 0, 0) != 0 {
        crate::process::mirror(status);
    }
    // The reaper: out of envd's session and pipes, so that nothing waits for it.
    sys_plain(SYS_SETSID, 0, 0, 0);
    for fd in 0..3 {
        close(fd);
    }
    let ended = lease.changes;
    loop {
        let now = crate::backstop::now();
        let expired = lease.expired(now);
        if lease.changes != ended || tree_empty(child, cgroup_kill) {
            exit(0);
        }
        if expired {
            crate::backstop::kill_tree(child, cgroup_kill);
            exit(0);
        }
        let wait = lease.next_check();
        // SAFETY: a valid pointer to a timespec; an absolute monotonic deadline.
        unsafe {
            sys(
                SYS_CLOCK_NANOSLEEP,
                CLOCK_MONOTONIC,
                TIMER_ABSTIME,
                wait.as_ptr() as usize,
                0,
                0,
                0,
            );
        }
    }
}
