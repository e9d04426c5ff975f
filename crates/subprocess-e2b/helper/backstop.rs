//! The backstop (`--kill-after SECS`): the helper stays behind as the watching parent of
//! the user's program and, once SECS have passed, SIGKILLs the program's whole tree: its
//! cgroup when it has one (what left the process group included), else its process
//! group. Then, or when the program ends first, it ends as the program did. This is what
//! `timeout -s KILL SECS PROGRAM` in front of the program gave, without that extra exec,
//! and it holds when the host that started the program is gone.
//!
//! With a host lease (`lease.rs`) the same watcher also kills the tree once the host
//! stopped renewing it; without `--kill-after` only the lease decides.
//!
//! The watcher is not in the program's cgroup, session or process group, and when it
//! started as root it stays root: the program's user can neither signal it nor move it.

use crate::lease::{Lease, Timespec};
use crate::process::{mirror, wait_and_mirror, wait_for};
use crate::sys::*;

pub(crate) fn now() -> Timespec {
    let mut ts: Timespec = [0, 0];
    // SAFETY: `ts` is a valid out-pointer for a timespec.
    unsafe {
        sys(
            SYS_CLOCK_GETTIME,
            CLOCK_MONOTONIC,
            ts.as_mut_ptr() as usize,
            0,
            0,
            0,
            0,
        );
    }
    ts
}

/// `deadline - now`, or `None` once the deadline passed.
fn left(deadline: Timespec) -> Option<Timespec> {
    let t = now();
    let mut s = deadline[0] - t[0];
    let mut ns = deadline[1] - t[1];
    if ns < 0 {
        s -= 1;
        ns += 1_000_000_000;
    }
    (s >= 0 && (s > 0 || ns > 0)).then_some([s, ns])
}

/// The earlier of two instants.
fn earlier(a: Timespec, b: Timespec) -> Timespec {
    if (a[0], a[1]) <= (b[0], b[1]) { a } else { b }
}

/// The parent's part: waits for `child` at most `secs` seconds (`None`: no limit) and
/// while `lease` (if any) holds, then kills its tree ([`kill_tree`]); ends as `child`
/// did. With a lease, an end of `child` that leaves members of its tree behind is
/// watched on (`lease::linger`).
pub(crate) fn watch(
    child: isize,
    secs: Option<u64>,
    cgroup_kill: &[u8],
    mut lease: Option<Lease>,
) -> ! {
    // SIGCHLD with its default action (an inherited "ignore" would reap the child
    // behind our back) and blocked, so that it stays pending for the timed wait below.
    default_action(SIGCHLD);
    mask(SIG_BLOCK, SIGCHLD);
    let chld: u64 = 1 << (SIGCHLD - 1);
    let start = now();
    // Without a backstop the deadline never comes (about 146 years of seconds).
    let secs = secs.map_or(i64::MAX / 2_000_000_000, |s| s as i64);
    let deadline: Timespec = [start[0].saturating_add(secs), start[1]];
    if let Some(l) = &mut lease {
        l.begin(start);
    }
    let mut status: i32 = 0;
    loop {
        // Checked after SIGCHLD was blocked: an end before that is seen here.
        let r = wait_for(child, WNOHANG, &mut status);
        if r == child {
            if let Some(l) = lease {
                crate::lease::linger(child, status, cgroup_kill, l);
            }
            mirror(status);
        }
        if r < 0 && r != -EINTR {
            exit(125);
        }
        if lease.as_mut().is_some_and(|l| l.expired(now())) {
            break;
        }
        if left(deadline).is_none() {
            break;
        }
        let wake = lease
            .as_ref()
            .map_or(deadline, |l| earlier(deadline, l.next_check()));
        let wait = left(wake).unwrap_or([0, 1]);
        // SAFETY: valid pointers to a signal set and a timespec; no siginfo wanted.
        unsafe {
            sys(
                SYS_RT_SIGTIMEDWAIT,
                &chld as *const u64 as usize,
                0,
                wait.as_ptr() as usize,
                8,
                0,
                0,
            );
        }
    }
    kill_tree(child, cgroup_kill);
    wait_and_mirror(child)
}

/// Kills `child`'s tree: `1` to `cgroup_kill` (a NUL-terminated `…/cgroup.kill`; empty:
/// no cgroup) or, failing that, SIGKILL to its process group and to itself.
pub(crate) fn kill_tree(child: isize, cgroup_kill: &[u8]) {
    let killed = !cgroup_kill.is_empty() && {
        let fd = open(cgroup_kill, O_WRONLY);
        fd >= 0 && {
            let n = write(fd, b"1");
            close(fd);
            n == 1
        }
    };
    if !killed {
        sys_plain(SYS_KILL, (-child) as usize, SIGKILL, 0);
        sys_plain(SYS_KILL, child as usize, SIGKILL, 0);
    }
}
