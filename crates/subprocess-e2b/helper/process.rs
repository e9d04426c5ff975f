//! What the root part does to the process before the user's program: the cgroup join, the
//! drop to the user's ids and groups, and the parent's wait after a fork (forced by
//! `setsid`, or the backstop's).

use crate::mem::{Arena, parse_num, strip_prefix};
use crate::sys::*;

/// Makes (or reuses while empty) the spawn's cgroup `mount + own cgroup + / + name`, or
/// `name.<pid>` when that one still has a live member; returns its directory.
pub(crate) fn cgroup_dir(
    arena: &mut Arena,
    mount: &[u8],
    name: &[u8],
    pid: &[u8],
) -> &'static [u8] {
    let mut buf = [0u8; 4096];
    let n = read_start(b"/proc/self/cgroup\0", &mut buf);
    if n <= 0 {
        fail(b"cgroup", 125);
    }
    let mut base: &[u8] = b"";
    for line in buf[..n as usize].split(|&c| c == b'\n') {
        if let Some(rest) = strip_prefix(line, b"0::") {
            base = rest;
        }
    }
    while let [head @ .., b'/'] = base {
        base = head;
    }
    let mut dir = arena.join(&[mount, base, b"/", name]);
    let made = mkdir(dir);
    if made == -EEXIST {
        // Reused while empty: a leftover of an earlier spawn still in it gets its own.
        let n = read_start(arena.join(&[dir, b"/cgroup.procs"]), &mut [0u8; 16]);
        if n < 0 {
            fail(b"cgroup", 125);
        }
        if n > 0 {
            dir = arena.join(&[dir, b".", pid]);
            if mkdir(dir) != 0 {
                fail(b"cgroup", 125);
            }
        }
    } else if made != 0 {
        fail(b"cgroup", 125);
    }
    dir
}

/// Moves the calling process (`pid`) into the cgroup directory `dir`.
pub(crate) fn enter_cgroup(arena: &mut Arena, dir: &[u8], pid: &[u8]) {
    let fd = open(arena.join(&[dir, b"/cgroup.procs"]), O_WRONLY);
    if fd < 0 {
        fail(b"cgroup", 125);
    }
    let written = write(fd, pid);
    close(fd);
    if written != pid.len() as isize {
        fail(b"cgroup", 125);
    }
}

/// Drops to `uid`/`gid` with the supplementary `groups` (comma-separated numbers).
pub(crate) fn drop_to(arena: &mut Arena, uid: &[u8], gid: &[u8], groups: &[u8]) {
    let (Some(uid), Some(gid)) = (parse_num(uid), parse_num(gid)) else {
        fail(b"ids", 125)
    };
    let count = if groups.is_empty() {
        0
    } else {
        groups.split(|&c| c == b',').count()
    };
    let list = arena.take(count.max(1) * 4) as *mut u32;
    for (i, g) in groups.split(|&c| c == b',').take(count).enumerate() {
        let Some(g) = parse_num(g) else {
            fail(b"ids", 125)
        };
        // SAFETY: `i < count`, the list holds `count` slots.
        unsafe { *list.add(i) = g as u32 };
    }
    // SAFETY: `list` holds `count` gids; the id calls take plain numbers.
    let ok = unsafe { sys(SYS_SETGROUPS, count, list as usize, 0, 0, 0, 0) } == 0
        && sys_plain(SYS_SETRESGID, gid as usize, gid as usize, gid as usize) == 0
        && sys_plain(SYS_SETRESUID, uid as usize, uid as usize, uid as usize) == 0;
    if !ok {
        fail(b"drop", 125);
    }
}

/// `wait4(child, &status, flags)`: `child` with its wait status once it ended, `0`
/// (with `WNOHANG`) while it runs, or `-errno`.
pub(crate) fn wait_for(child: isize, flags: usize, status: &mut i32) -> isize {
    // SAFETY: `status` is a valid out-pointer.
    unsafe {
        sys(
            SYS_WAIT4,
            child as usize,
            status as *mut i32 as usize,
            flags,
            0,
            0,
            0,
        )
    }
}

/// The parent of a forced fork: waits for `child` and ends as it did.
pub(crate) fn wait_and_mirror(child: isize) -> ! {
    let mut status: i32 = 0;
    loop {
        let r = wait_for(child, 0, &mut status);
        if r == child {
            break;
        }
        if r != -EINTR {
            exit(125);
        }
    }
    mirror(status)
}

/// Ends this process as the wait status `status` says its child ended: the same exit
/// code, or death by the same signal (without a core file).
pub(crate) fn mirror(status: i32) -> ! {
    let sig = status & 0x7f;
    if sig == 0 {
        exit((status >> 8) & 0xff);
    }
    // Die of the same signal, without a core file.
    let no_core = [0u64; 2];
    // SAFETY: a valid pointer to a zero rlimit.
    unsafe { sys(SYS_SETRLIMIT, 4, no_core.as_ptr() as usize, 0, 0, 0, 0) };
    default_action(sig as usize);
    mask(SIG_UNBLOCK, sig as usize);
    sys_plain(
        SYS_KILL,
        sys_plain(SYS_GETPID, 0, 0, 0) as usize,
        sig as usize,
        0,
    );
    exit(128 + sig)
}
