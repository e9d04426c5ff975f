//! Durable spawns (`--durable STATE ID CAP META`): the record a command leaves where it
//! runs, written by its watching parent (root, outside the program's cgroup, session and
//! group), so that another client can find it, read its output from any kept offset and
//! learn how it ended.
//!
//! `STATE` is an absolute directory every component of which must be a real directory
//! owned by root and writable by nobody else (missing ones are made, 0700); the record is
//! `STATE/ID/` (0700, root), made with `mkdir` before anything runs, so an id that exists
//! is refused (`EXEC-WORLD-FAIL exists`, exit 125) and nothing starts. In it:
//!
//! - `meta`: `META` as given (the host's description: program, args, cwd, start time…);
//! - `proc`: `WATCHER_PID WATCHER_START BOOT_ID CAP` (written before the fork: the
//!   watcher is this process);
//! - `pid`: `PID CGROUP`, the program's pid and its cgroup directory (`-`: none), written
//!   by the watcher after the fork;
//! - `out`, `err`: a 16-byte header (the total bytes ever written, twice, little-endian
//!   u64) and a ring of `CAP` bytes: byte `n` of the stream is at `16 + n % CAP` while
//!   `n >= total - CAP`; older bytes were overwritten (dropped, counted by `total`);
//! - `status`: `exit N` or `signal N`, renamed into place once the program ended and its
//!   last output was recorded.
//!
//! The watcher tees the program's stdout and stderr (pipes) into the ring and on to its
//! own stdout and stderr (envd's stream of the spawn), enforces `--kill-after` like the
//! backstop, and ends as the program did. `tail.rs` reads records.

use crate::mem::{Arena, decimal, parse_num};
use crate::process::{mirror, wait_for};
use crate::sys::*;

pub(crate) const SYS_PREAD64: usize = 17;
pub(crate) const SYS_PWRITE64: usize = 18;
pub(crate) const SYS_POLL: usize = 7;
pub(crate) const SYS_DUP2: usize = 33;
pub(crate) const SYS_FSTAT: usize = 5;
pub(crate) const SYS_UNLINKAT: usize = 263;
pub(crate) const SYS_RENAMEAT: usize = 264;
pub(crate) const SYS_SIGNALFD4: usize = 289;
pub(crate) const SYS_PIPE2: usize = 293;
pub(crate) const O_DIRECTORY: usize = 0o200000;
pub(crate) const O_NOFOLLOW: usize = 0o400000;
pub(crate) const O_CREAT: usize = 0o100;
pub(crate) const O_EXCL: usize = 0o200;
pub(crate) const O_RDWR: usize = 2;
pub(crate) const O_NONBLOCK: usize = 0o4000;
pub(crate) const ENOENT: isize = 2;
pub(crate) const EAGAIN: isize = 11;
pub(crate) const SIGPIPE: usize = 13;
pub(crate) const POLLIN: i16 = 1;
pub(crate) const HEADER: u64 = 16;
/// Bytes per read of a pipe or a ring (one frame of the tail).
pub(crate) const CHUNK: usize = 64 << 10;

/// What a durable spawn was given.
pub(crate) struct Durable {
    pub(crate) state: &'static [u8],
    pub(crate) id: &'static [u8],
    pub(crate) cap: u64,
    pub(crate) meta: &'static [u8],
}

/// `--durable STATE ID CAP META` at `at`: the spec and the index after it.
pub(crate) fn parse(argc: usize, arg: &dyn Fn(usize) -> &'static [u8], at: usize) -> (Option<Durable>, usize) {
    if argc < at + 5 || arg(at) != b"--durable" {
        return (None, at);
    }
    let Some(cap) = parse_cap(arg(at + 3)) else {
        fail(b"usage", 125)
    };
    if !valid_id(arg(at + 2)) || arg(at + 1).first() != Some(&b'/') {
        fail(b"usage", 125);
    }
    let d = Durable {
        state: arg(at + 1),
        id: arg(at + 2),
        cap,
        meta: arg(at + 4),
    };
    (Some(d), at + 5)
}

/// A cap: decimal, at most 2^40.
fn parse_cap(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 13 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = s.iter().fold(0u64, |v, c| v * 10 + u64::from(c - b'0'));
    (v <= 1 << 40).then_some(v)
}

/// A durable id: `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}` (never `.`, `..` or a `/`).
pub(crate) fn valid_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id[0].is_ascii_alphanumeric()
        && id
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// `openat(dir, name, flags, mode)`; `name` NUL-terminated.
pub(crate) fn openat(dir: isize, name: &[u8], flags: usize, mode: usize) -> isize {
    // SAFETY: `name` is NUL-terminated (the caller's contract).
    unsafe {
        sys(
            SYS_OPENAT,
            dir as usize,
            name.as_ptr() as usize,
            flags | O_CLOEXEC,
            mode,
            0,
            0,
        )
    }
}

/// `(mode, uid, size)` of an open file.
pub(crate) fn fstat(fd: isize) -> Option<(u32, u32, u64)> {
    let mut st = [0u64; 18];
    // SAFETY: `st` has room for a `struct stat`.
    let r = unsafe { sys(SYS_FSTAT, fd as usize, st.as_mut_ptr() as usize, 0, 0, 0, 0) };
    (r == 0).then(|| ((st[3] & 0xffff_ffff) as u32, (st[3] >> 32) as u32, st[6]))
}

pub(crate) fn pread(fd: isize, buf: &mut [u8], at: u64) -> isize {
    // SAFETY: `buf` is valid for writes of its length.
    unsafe {
        sys(
            SYS_PREAD64,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            at as usize,
            0,
            0,
        )
    }
}

fn pwrite(fd: isize, buf: &[u8], at: u64) -> bool {
    // SAFETY: `buf` is valid for reads of its length.
    let n = unsafe {
        sys(
            SYS_PWRITE64,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
            at as usize,
            0,
            0,
        )
    };
    n == buf.len() as isize
}

/// The name as a NUL-terminated copy in `buf` (names are at most 255 bytes).
pub(crate) fn c_name<'a>(name: &[u8], buf: &'a mut [u8; 256]) -> &'a [u8] {
    let n = name.len().min(255);
    buf[..n].copy_from_slice(&name[..n]);
    buf[n] = 0;
    &buf[..=n]
}

/// True for a directory owned by root that nobody else may write.
fn root_only(fd: isize) -> bool {
    fstat(fd).is_some_and(|(mode, uid, _)| mode & S_IFMT == 0o040000 && uid == 0 && mode & 0o022 == 0)
}

/// Opens the state directory `path` component by component, never following a link,
/// each one a root-owned directory nobody else can write (`create`: missing ones are
/// made, 0700). `None` when it is missing (and not made) or fails the check.
pub(crate) fn open_state(path: &[u8], create: bool) -> Option<isize> {
    let mut dir = openat(AT_FDCWD, b"/\0", O_DIRECTORY | O_RDONLY, 0);
    if dir < 0 || !root_only(dir) {
        return None;
    }
    for comp in path.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
        if comp == b"." || comp == b".." {
            close(dir);
            return None;
        }
        let mut buf = [0u8; 256];
        let name = c_name(comp, &mut buf);
        let mut next = openat(dir, name, O_DIRECTORY | O_NOFOLLOW | O_RDONLY, 0);
        if next == -ENOENT && create {
            // SAFETY: `name` is NUL-terminated.
            unsafe { sys(SYS_MKDIRAT, dir as usize, name.as_ptr() as usize, 0o700, 0, 0, 0) };
            next = openat(dir, name, O_DIRECTORY | O_NOFOLLOW | O_RDONLY, 0);
        }
        close(dir);
        if next < 0 || !root_only(next) {
            if next >= 0 {
                close(next);
            }
            return None;
        }
        dir = next;
    }
    Some(dir)
}

/// A new file `name` (NUL-terminated) in `dir`, 0600, holding `data`.
fn create_file(dir: isize, name: &[u8], data: &[u8]) -> isize {
    let fd = openat(dir, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0o600);
    if fd < 0 || (!data.is_empty() && !pwrite(fd, data, 0)) {
        fail(b"record", 125);
    }
    fd
}

/// Writes `data` to `tmp` in `dir` and renames it to `name` (both NUL-terminated).
fn replace_file(dir: isize, tmp: &[u8], name: &[u8], data: &[u8]) {
    // SAFETY: NUL-terminated names.
    unsafe { sys(SYS_UNLINKAT, dir as usize, tmp.as_ptr() as usize, 0, 0, 0, 0) };
    let fd = create_file(dir, tmp, data);
    close(fd);
    // SAFETY: NUL-terminated names, the same directory.
    unsafe {
        sys(
            SYS_RENAMEAT,
            dir as usize,
            tmp.as_ptr() as usize,
            dir as usize,
            name.as_ptr() as usize,
            0,
            0,
        )
    };
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`, 36 characters), or `-`.
pub(crate) fn boot_id(buf: &mut [u8; 64]) -> &[u8] {
    let n = read_start(b"/proc/sys/kernel/random/boot_id\0", buf);
    if n <= 0 {
        return b"-";
    }
    let s = &buf[..n as usize];
    let end = s.iter().position(|c| c.is_ascii_whitespace()).unwrap_or(s.len());
    if end == 0 { b"-" } else { &buf[..end] }
}

/// The start time (field 22 of `/proc/PID/stat`, clock ticks since boot) of `pid`
/// (`self` when `pid` is empty) and whether it is a zombie; `None` when it is gone.
pub(crate) fn start_time(pid: &[u8], arena: &mut Arena) -> Option<(u64, bool)> {
    let path = if pid.is_empty() {
        arena.join(&[b"/proc/self/stat"])
    } else {
        arena.join(&[b"/proc/", pid, b"/stat"])
    };
    let mut buf = [0u8; 1024];
    let n = read_start(path, &mut buf);
    if n <= 0 {
        return None;
    }
    let s = &buf[..n as usize];
    let close_paren = s.iter().rposition(|&c| c == b')')?;
    let mut fields = s[close_paren + 1..]
        .split(|&c| c == b' ')
        .filter(|f| !f.is_empty());
    let state = fields.next()?;
    // Fields 4..21 come between the state (3) and the start time (22).
    let start = fields.nth(18)?;
    let start = parse_num_long(start)?;
    Some((start, state == b"Z" || state == b"X"))
}

/// A decimal of up to 19 digits.
pub(crate) fn parse_num_long(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |v, c| v * 10 + u64::from(c - b'0')))
}

/// What the spawn keeps between the record's creation and the fork.
pub(crate) struct Record {
    dir: isize,
    out: Ring,
    err: Ring,
    /// The pipes the program writes: `[read, write]`.
    out_pipe: [i32; 2],
    err_pipe: [i32; 2],
}

/// One stream's ring file.
struct Ring {
    fd: isize,
    cap: u64,
    total: u64,
}

impl Ring {
    /// Appends `data`: the ring bytes first, then the header (twice the new total).
    fn append(&mut self, mut data: &[u8]) {
        if self.cap > 0 {
            // Only the last `cap` bytes of a large write can survive it.
            if data.len() as u64 > self.cap {
                let skip = data.len() - self.cap as usize;
                self.total += skip as u64;
                data = &data[skip..];
            }
            while !data.is_empty() {
                let pos = self.total % self.cap;
                let n = ((self.cap - pos) as usize).min(data.len());
                pwrite(self.fd, &data[..n], HEADER + pos);
                self.total += n as u64;
                data = &data[n..];
            }
        } else {
            self.total += data.len() as u64;
        }
        let t = self.total.to_le_bytes();
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&t);
        h[8..].copy_from_slice(&t);
        pwrite(self.fd, &h, 0);
    }
}

fn pipe() -> [i32; 2] {
    let mut p = [0i32; 2];
    // SAFETY: `p` holds two ints.
    if unsafe { sys(SYS_PIPE2, p.as_mut_ptr() as usize, O_CLOEXEC, 0, 0, 0, 0) } != 0 {
        fail(b"pipe", 125);
    }
    p
}

/// Makes the record (before anything runs: an existing id is refused here) with `meta`
/// and `proc`, and the program's pipes. Must run as root.
pub(crate) fn create(d: &Durable, arena: &mut Arena) -> Record {
    let Some(state) = open_state(d.state, true) else {
        fail(b"state-dir", 125)
    };
    let mut buf = [0u8; 256];
    let id = c_name(d.id, &mut buf);
    // SAFETY: `id` is NUL-terminated.
    let made = unsafe { sys(SYS_MKDIRAT, state as usize, id.as_ptr() as usize, 0o700, 0, 0, 0) };
    if made == -EEXIST {
        fail(b"exists", 125);
    }
    let dir = openat(state, id, O_DIRECTORY | O_NOFOLLOW | O_RDONLY, 0);
    close(state);
    if made != 0 || dir < 0 || !root_only(dir) {
        fail(b"record", 125);
    }
    close(create_file(dir, b"meta\0", d.meta));
    let me = sys_plain(SYS_GETPID, 0, 0, 0);
    let Some((started, _)) = start_time(b"", arena) else {
        fail(b"record", 125)
    };
    let mut boot = [0u8; 64];
    let (mut a, mut b, mut c) = ([0u8; 20], [0u8; 20], [0u8; 20]);
    let line = arena.join(&[
        decimal(me as u64, &mut a),
        b" ",
        decimal(started, &mut b),
        b" ",
        boot_id(&mut boot),
        b" ",
        decimal(d.cap, &mut c),
        b"\n",
    ]);
    replace_file(dir, b"proc.tmp\0", b"proc\0", line);
    let zero = [0u8; 16];
    let out = create_file(dir, b"out\0", &zero);
    let err = create_file(dir, b"err\0", &zero);
    Record {
        dir,
        out: Ring {
            fd: out,
            cap: d.cap,
            total: 0,
        },
        err: Ring {
            fd: err,
            cap: d.cap,
            total: 0,
        },
        out_pipe: pipe(),
        err_pipe: pipe(),
    }
}

/// In the program's process, after the fork: let go of the record.
pub(crate) fn child_side(r: &Record) {
    close(r.dir);
    close(r.out.fd);
    close(r.err.fd);
    close(r.out_pipe[0] as isize);
    close(r.err_pipe[0] as isize);
}

/// Just before the program's exec: its stdout and stderr become the record's pipes.
pub(crate) fn redirect(r: &Record) {
    sys_plain(SYS_DUP2, r.out_pipe[1] as usize, 1, 0);
    sys_plain(SYS_DUP2, r.err_pipe[1] as usize, 2, 0);
}

/// `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PollFd {
    pub(crate) fd: i32,
    pub(crate) events: i16,
    pub(crate) revents: i16,
}

pub(crate) fn poll(fds: &mut [PollFd], timeout_ms: i64) -> isize {
    // SAFETY: `fds` is a valid array of pollfd.
    unsafe {
        sys(
            SYS_POLL,
            fds.as_mut_ptr() as usize,
            fds.len(),
            timeout_ms as usize,
            0,
            0,
            0,
        )
    }
}

fn monotonic_ms() -> i64 {
    let mut ts = [0i64; 2];
    // SAFETY: a valid timespec out-pointer.
    unsafe { sys(SYS_CLOCK_GETTIME, CLOCK_MONOTONIC, ts.as_mut_ptr() as usize, 0, 0, 0, 0) };
    ts[0] * 1000 + ts[1] / 1_000_000
}

/// The watcher: tees the program's output into the record and on to envd, kills its
/// tree once `kill_after` seconds passed (like the backstop), records its status and
/// ends as it did.
pub(crate) fn watch(
    r: &mut Record,
    child: isize,
    kill_after: Option<u64>,
    cgroup: &[u8],
    cgroup_kill: &[u8],
    arena: &mut Arena,
) -> ! {
    let mut d = [0u8; 20];
    let line = arena.join(&[
        decimal(child as u64, &mut d),
        b" ",
        if cgroup.is_empty() { b"-" } else { cgroup },
        b"\n",
    ]);
    replace_file(r.dir, b"pid.tmp\0", b"pid\0", line);
    close(r.out_pipe[1] as isize);
    close(r.err_pipe[1] as isize);
    close(0);
    // envd's pipes may go away; the record must not.
    let ignore = [1u64, 0, 0, 0];
    // SAFETY: a valid kernel sigaction with SIG_IGN.
    unsafe { sys(SYS_RT_SIGACTION, SIGPIPE, ignore.as_ptr() as usize, 0, 8, 0, 0) };
    default_action(SIGCHLD);
    mask(SIG_BLOCK, SIGCHLD);
    let set: u64 = 1 << (SIGCHLD - 1);
    // SAFETY: a valid signal set.
    let sfd = unsafe {
        sys(
            SYS_SIGNALFD4,
            usize::MAX,
            &set as *const u64 as usize,
            8,
            O_CLOEXEC | O_NONBLOCK,
            0,
            0,
        )
    };
    let deadline = kill_after.map(|s| monotonic_ms().saturating_add((s as i64).saturating_mul(1000)));
    let mut killed = false;
    let mut forward = [true, true];
    let mut fds = [
        PollFd { fd: r.out_pipe[0], events: POLLIN, revents: 0 },
        PollFd { fd: r.err_pipe[0], events: POLLIN, revents: 0 },
        PollFd { fd: sfd as i32, events: POLLIN, revents: 0 },
    ];
    let buf = arena.take(CHUNK);
    // SAFETY: `buf` holds CHUNK bytes for this run.
    let buf = unsafe { core::slice::from_raw_parts_mut(buf, CHUNK) };
    let mut status: i32 = 0;
    let mut ended = false;
    // Reads after the end: what is left in the pipes, bounded (a descendant may keep
    // writing).
    let mut drain = 256;
    loop {
        let timeout = match (deadline, killed) {
            (Some(d), false) => (d - monotonic_ms()).max(0),
            _ => -1,
        };
        // With no signalfd, fall back to a tick for the child's end.
        let timeout = if sfd < 0 && (timeout < 0 || timeout > 100) { 100 } else { timeout };
        let n = poll(&mut fds, if ended { 0 } else { timeout });
        if n < 0 && n != -EINTR {
            break;
        }
        for (i, ring) in [(0usize, &mut r.out), (1, &mut r.err)] {
            if fds[i].fd < 0 || fds[i].revents == 0 {
                continue;
            }
            let k = read(fds[i].fd as isize, buf);
            if k > 0 {
                let data = &buf[..k as usize];
                ring.append(data);
                if forward[i] {
                    forward[i] = write_fully(i + 1, data);
                }
            } else if k != -EINTR && k != -EAGAIN {
                close(fds[i].fd as isize);
                fds[i].fd = -1;
            }
        }
        if !ended {
            if fds[2].revents != 0 {
                let mut info = [0u8; 128];
                let _ = read(sfd, &mut info);
            }
            if wait_for(child, WNOHANG, &mut status) == child {
                // Whatever is still in the pipes is drained (without waiting for
                // a descendant that keeps them open), then the status is final.
                ended = true;
                fds[2].fd = -1;
                continue;
            }
            if let (Some(d), false) = (deadline, killed)
                && monotonic_ms() >= d
            {
                killed = true;
                crate::backstop::kill_tree(child, cgroup_kill);
            }
        } else {
            drain -= 1;
            if n == 0 || drain == 0 || (fds[0].fd < 0 && fds[1].fd < 0) {
                break;
            }
        }
    }
    if !ended {
        // poll failed: wait for the end without the tee.
        loop {
            let w = wait_for(child, 0, &mut status);
            if w == child || (w < 0 && w != -EINTR) {
                break;
            }
        }
    }
    let sig = status & 0x7f;
    let mut d = [0u8; 20];
    let text = if sig == 0 {
        arena.join(&[b"exit ", decimal(((status >> 8) & 0xff) as u64, &mut d), b"\n"])
    } else {
        arena.join(&[b"signal ", decimal(sig as u64, &mut d), b"\n"])
    };
    replace_file(r.dir, b"status.tmp\0", b"status\0", text);
    mirror(status)
}

/// Writes all of `data` to `fd`; false once it cannot (envd's pipe is gone).
fn write_fully(fd: usize, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        let n = write(fd as isize, data);
        if n == -EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        data = &data[n as usize..];
    }
    true
}

/// `parse_num` re-exported for the tail (ids and offsets).
pub(crate) fn num(s: &[u8]) -> Option<u64> {
    parse_num(s).or_else(|| parse_num_long(s))
}
