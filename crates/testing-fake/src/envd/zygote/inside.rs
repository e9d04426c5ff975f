//! The code that runs inside the starters' maker and inside each starter (both forked,
//! single-threaded, never returning): raw system calls only, no allocation, no lock, no
//! panic. The emulator's side is the parent module.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use exec_world_sys::launch::{
    CLONE_CLEAR_SIGHAND, CLONE_PARENT, CLONE_VFORK, CLONE_VM, ChildStack, CloneArgs, clone3_entry,
};

use super::super::isolation::RawNs;
use super::{
    FLAG_CREDS, FLAG_PTY, HAS_CGROUP_DIR, HAS_CGROUP_NS, HAS_PID, HAS_TIME, HAS_USER, HEADER,
    MAGIC, MAGIC_MAKE, MAX_MAKE_FDS, MAX_REQUEST, RAN, REPLY, STEP_NO_CWD, errno,
};

/// The first steps of the maker and of every starter, on `sock`: not dumpable (the
/// sandbox's root must never read a copy of the emulator), the default signal state,
/// the usual priority (whatever the forking thread ran at: a spare's builder), and 0, 1
/// and 2 open (`/dev/null` where there were none) so received descriptors land above.
/// An error is reported on `sock` and ends the process.
///
/// # Safety
/// In a forked child only; raw system calls.
unsafe fn settle(sock: RawFd) {
    // SAFETY: raw system calls on this process.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            fail_ready(sock, errno());
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::setpriority(libc::PRIO_PROCESS, 0, 0);
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            }
        }
    }
}

/// Report `e` as the answer to "ready?" on `sock` and exit.
///
/// # Safety
/// In a forked child only.
unsafe fn fail_ready(sock: RawFd, e: c_int) -> ! {
    let w = e.to_ne_bytes();
    // SAFETY: a send from a local, then _exit.
    unsafe {
        libc::send(sock, w.as_ptr().cast(), 4, libc::MSG_NOSIGNAL);
        libc::_exit(1)
    }
}

/// Close every descriptor but 0, 1, 2 and `keep`.
///
/// # Safety
/// In a forked child only.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: close_range on our own descriptor table.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, !0u32, 0u32);
    }
}

/// The maker: settle, give back the emulator's memory, say it is ready, then fork a
/// starter for each request. Ends when its socket does.
///
/// # Safety
/// Only in the child of a fork-like clone of the emulator (single-threaded, its own
/// copy of our memory); raw system calls only, no allocation.
pub(super) unsafe fn maker_main(sock: RawFd) -> ! {
    // SAFETY: raw system calls on this process and its buffers.
    unsafe {
        settle(sock);
        // Our maps, through the host's /proc.
        let maps = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if maps >= 0 {
            super::trim::trim(maps);
            libc::close(maps);
        }
        close_all_but(sock);
        let ready = 0i32.to_ne_bytes();
        if libc::send(sock, ready.as_ptr().cast(), 4, libc::MSG_NOSIGNAL) != 4 {
            libc::_exit(1);
        }
        let mut msg = [0u8; 12];
        loop {
            let mut fds = [-1 as c_int; MAX_MAKE_FDS];
            let Some((n, got, whole)) = recv_with_fds(sock, msg.as_mut_ptr(), msg.len(), &mut fds)
            else {
                libc::_exit(0)
            };
            let (pid, code) = if whole && n == msg.len() {
                make_starter(sock, &msg, fds.get(..got).unwrap_or(&[]))
            } else {
                (-1, libc::EINVAL)
            };
            for fd in fds.into_iter().filter(|fd| *fd >= 0) {
                libc::close(fd);
            }
            let mut reply = [0u8; 8];
            reply[0..4].copy_from_slice(&pid.to_ne_bytes());
            reply[4..8].copy_from_slice(&code.to_ne_bytes());
            if libc::send(sock, reply.as_ptr().cast(), 8, libc::MSG_NOSIGNAL) != 8 {
                libc::_exit(1);
            }
        }
    }
}

/// In the maker: fork the starter a request asks for: (its pid on the host or -1, errno).
///
/// # Safety
/// In the maker only; `fds` are the request's descriptors, open.
unsafe fn make_starter(maker_sock: RawFd, msg: &[u8; 12], fds: &[c_int]) -> (i32, c_int) {
    let word = |i: usize| u32::from_ne_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
    let (magic, flags, tasks) = (word(0), word(4), word(8) as usize);
    let mut it = fds.iter().copied();
    let mut next = |present: bool| if present { it.next() } else { Some(-1) };
    let (Some(sock), Some(mnt), Some(net), Some(uts)) =
        (next(true), next(true), next(true), next(true))
    else {
        return (-1, libc::EINVAL);
    };
    let (Some(pid), Some(cgroup_ns), Some(time), Some(user), Some(cgroup_dir)) = (
        next(flags & HAS_PID != 0),
        next(flags & HAS_CGROUP_NS != 0),
        next(flags & HAS_TIME != 0),
        next(flags & HAS_USER != 0),
        next(flags & HAS_CGROUP_DIR != 0),
    ) else {
        return (-1, libc::EINVAL);
    };
    let mut raw = RawNs {
        mnt,
        pid,
        net,
        uts,
        cgroup_ns,
        time,
        user,
        tasks: [-1; RawNs::MAX_TASKS],
    };
    if magic != MAGIC_MAKE || tasks > RawNs::MAX_TASKS {
        return (-1, libc::EINVAL);
    }
    for slot in raw.tasks.iter_mut().take(tasks) {
        match next(true) {
            Some(fd) => *slot = fd,
            None => return (-1, libc::EINVAL),
        }
    }
    let mut args = CloneArgs {
        // Our sibling: the emulator's child, like the commands it will start.
        flags: CLONE_PARENT | CLONE_CLEAR_SIGHAND,
        exit_signal: 0,
        ..CloneArgs::default()
    };
    if cgroup_dir >= 0 {
        args.born_in(cgroup_dir);
    }
    // SAFETY: clone3 with fork semantics (no CLONE_VM): the child has its own copy of
    // this small process and runs only raw system calls, never returning.
    let ret = unsafe { exec_world_sys::launch::clone3_fork(&mut args) };
    if ret == 0 {
        // SAFETY: in the forked starter.
        unsafe {
            libc::close(maker_sock);
            starter_main(sock, &raw)
        }
    }
    if ret < 0 {
        return (-1, errno());
    }
    (ret as i32, 0)
}

/// A starter, forked by the maker: settle, enter the sandbox `raw` names, say it is
/// ready on `sock`, serve. Never returns.
///
/// # Safety
/// Only in the child the maker forked; raw system calls only, no allocation.
unsafe fn starter_main(sock: RawFd, raw: &RawNs) -> ! {
    // SAFETY: raw system calls on this process and its own new mappings.
    unsafe {
        settle(sock);
        if let Err(e) = raw.join_shared().and_then(|()| raw.join_rest()) {
            fail_ready(sock, e.raw_os_error().unwrap_or(libc::EIO));
        }
        close_all_but(sock);
        let buf = libc::mmap(
            std::ptr::null_mut(),
            MAX_REQUEST,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        // One pointer per byte at most (every string is at least its NUL), plus two NULLs.
        let ptrs_len = (MAX_REQUEST + 2) * std::mem::size_of::<*const c_char>();
        let ptrs = libc::mmap(
            std::ptr::null_mut(),
            ptrs_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if buf == libc::MAP_FAILED || ptrs == libc::MAP_FAILED {
            fail_ready(sock, errno());
        }
        let stack = match ChildStack::new() {
            Ok(s) => s,
            Err(e) => fail_ready(sock, e.raw_os_error().unwrap_or(libc::ENOMEM)),
        };
        let ready = 0i32.to_ne_bytes();
        if libc::send(sock, ready.as_ptr().cast(), 4, libc::MSG_NOSIGNAL) != 4 {
            libc::_exit(1);
        }
        serve(sock, buf.cast::<u8>(), ptrs.cast::<*const c_char>(), &stack)
    }
}

/// The starter's loop: one request, one start, one answer. Ends when the socket does.
///
/// # Safety
/// In the starter only; `buf` holds [`MAX_REQUEST`] bytes and `ptrs` `MAX_REQUEST + 2`
/// pointers.
unsafe fn serve(sock: RawFd, buf: *mut u8, ptrs: *mut *const c_char, stack: &ChildStack) -> ! {
    // SAFETY: raw system calls on our own buffers; see the contract.
    unsafe {
        loop {
            let mut fds = [-1 as c_int; 3];
            let Some((n, got, whole)) = recv_with_fds(sock, buf, MAX_REQUEST, &mut fds) else {
                libc::_exit(0)
            };
            let (pid, ns_pid, code, step) = if whole && got == 3 {
                start(buf, n, ptrs, fds, stack)
            } else {
                (-1, 0, libc::E2BIG, 0)
            };
            for fd in fds {
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            let mut reply = [0u8; REPLY];
            reply[0..4].copy_from_slice(&pid.to_ne_bytes());
            reply[4..8].copy_from_slice(&ns_pid.to_ne_bytes());
            reply[8..12].copy_from_slice(&code.to_ne_bytes());
            reply[12..16].copy_from_slice(&step.to_ne_bytes());
            if libc::send(sock, reply.as_ptr().cast(), REPLY, libc::MSG_NOSIGNAL) != REPLY as isize
            {
                libc::_exit(1);
            }
        }
    }
}

/// What the command's child reads (on the starter's stack, which it shares).
#[repr(C)]
struct ChildArgs {
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    stdio: [RawFd; 3],
    creds: Option<(u32, u32)>,
    pty: bool,
    /// [`RAN`] once it runs, then the errno of its failure before `execve`.
    error: AtomicI32,
    /// Its pid as the sandbox numbers it.
    ns_pid: AtomicU32,
    /// [`STEP_NO_CWD`] when it failed at a working directory that does not exist.
    step: AtomicU32,
}

/// Parse the request in `buf[..len]` and start it: (pid on the host or -1, pid in the
/// sandbox, errno, step).
///
/// # Safety
/// In the starter only, with [`serve`]'s buffers.
unsafe fn start(
    buf: *mut u8,
    len: usize,
    ptrs: *mut *const c_char,
    stdio: [RawFd; 3],
    stack: &ChildStack,
) -> (i32, u32, i32, u32) {
    // SAFETY: reads within `buf[..len]`, writes within `ptrs`' capacity (at most one
    // pointer per byte of strings, plus two NULLs).
    unsafe {
        if len < HEADER {
            return (-1, 0, libc::EINVAL, 0);
        }
        let word = |i: usize| std::ptr::read_unaligned(buf.add(4 * i).cast::<u32>());
        let (magic, flags, uid, gid) = (word(0), word(1), word(2), word(3));
        let (argc, envc) = (word(4) as usize, word(5) as usize);
        if magic != MAGIC || argc == 0 {
            return (-1, 0, libc::EINVAL, 0);
        }
        // The strings: cwd, argc of argv, envc of env, each NUL-terminated, filling the
        // message exactly.
        let want = 1 + argc + envc;
        let mut found = 0usize;
        let mut cwd: *const c_char = std::ptr::null();
        let mut at = HEADER;
        let mut begin = at;
        while at < len {
            if *buf.add(at) == 0 {
                let s = buf.add(begin).cast::<c_char>().cast_const();
                if found == 0 {
                    cwd = s;
                } else if found <= argc {
                    *ptrs.add(found - 1) = s;
                } else if found < want {
                    *ptrs.add(found) = s;
                }
                found += 1;
                begin = at + 1;
            }
            at += 1;
        }
        if found != want || begin != len {
            return (-1, 0, libc::EINVAL, 0);
        }
        *ptrs.add(argc) = std::ptr::null();
        *ptrs.add(argc + 1 + envc) = std::ptr::null();
        let args = ChildArgs {
            argv: ptrs.cast_const(),
            envp: ptrs.add(argc + 1).cast_const(),
            cwd,
            stdio,
            creds: (flags & FLAG_CREDS != 0).then_some((uid, gid)),
            pty: flags & FLAG_PTY != 0,
            error: AtomicI32::new(0),
            ns_pid: AtomicU32::new(0),
            step: AtomicU32::new(0),
        };
        let mut clone = CloneArgs {
            flags: CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_CLEAR_SIGHAND,
            // With CLONE_PARENT the kernel takes ours (SIGCHLD) and refuses another.
            exit_signal: 0,
            ..CloneArgs::default()
        };
        stack.set_on(&mut clone);
        let ret = clone3_entry(
            &mut clone,
            child_main,
            &args as *const ChildArgs as *mut c_void,
        );
        if ret < 0 {
            return (-1, 0, (-ret) as i32, 0);
        }
        let pid = ret as i32;
        let step = args.step.load(Ordering::Relaxed);
        match args.error.load(Ordering::Relaxed) {
            RAN => (pid, args.ns_pid.load(Ordering::Relaxed), 0, 0),
            0 => (pid, 0, libc::ECHILD, 0),
            e => (pid, 0, e, step),
        }
    }
}

/// The command's child, between `clone3` and `execve`, on the starter's memory: its
/// stdio, its session (with a PTY), its working directory, its credentials, `execve`.
///
/// # Safety
/// `arg` points to a live [`ChildArgs`]; the starter waits (`CLONE_VFORK`).
unsafe extern "C" fn child_main(arg: *mut c_void) -> ! {
    // SAFETY: the starter's ChildArgs stays alive and unchanged until we exec or exit.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        a.error.store(RAN, Ordering::Relaxed);
        a.ns_pid
            .store(libc::syscall(libc::SYS_getpid) as u32, Ordering::Relaxed);
        let fail = |e: c_int| -> ! {
            a.error.store(e, Ordering::Relaxed);
            libc::_exit(127)
        };
        for (target, &src) in a.stdio.iter().enumerate() {
            // Received above 2 (the starter keeps 0-2 open); dup2 clears close-on-exec.
            if libc::dup2(src, target as c_int) < 0 {
                fail(errno());
            }
        }
        if a.pty && (libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0) {
            fail(errno());
        }
        if libc::chdir(a.cwd) != 0 {
            let e = errno();
            // Missing (as a stat sees it, links followed), or there but not enterable.
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(a.cwd, &mut st) != 0 {
                a.step.store(STEP_NO_CWD, Ordering::Relaxed);
            }
            fail(e);
        }
        if let Some((uid, gid)) = a.creds {
            // Raw system calls: glibc's would try to change every thread it believes
            // this process has.
            let groups = [gid as libc::gid_t];
            if libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()) != 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                fail(errno());
            }
        }
        libc::execve(*a.argv, a.argv, a.envp);
        fail(errno())
    }
}

/// One `recvmsg` into `buf` (`cap` bytes) with up to `fds.len()` descriptors (more are
/// closed): (bytes, descriptors, whole: neither the message nor its descriptors were
/// cut). `None`: the socket closed or failed.
///
/// # Safety
/// `buf` holds `cap` bytes. Raw system calls only (callable in the maker and starters).
unsafe fn recv_with_fds(
    sock: RawFd,
    buf: *mut u8,
    cap: usize,
    fds: &mut [c_int],
) -> Option<(usize, usize, bool)> {
    // SAFETY: recvmsg into the caller's buffer and locals; the descriptors the kernel
    // gave are either kept in `fds` or closed.
    unsafe {
        loop {
            let mut iov = libc::iovec {
                iov_base: buf.cast(),
                iov_len: cap,
            };
            let mut control = [0u64; 2 + MAX_MAKE_FDS];
            let mut hdr: libc::msghdr = std::mem::zeroed();
            hdr.msg_iov = &mut iov;
            hdr.msg_iovlen = 1;
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = std::mem::size_of_val(&control);
            let n = libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC);
            if n == 0 {
                return None;
            }
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                return None;
            }
            let mut got = 0;
            let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                    let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<c_int>();
                    for i in 0..count {
                        let fd = std::ptr::read_unaligned(data.add(i));
                        match fds.get_mut(got) {
                            Some(slot) => {
                                *slot = fd;
                                got += 1;
                            }
                            None => {
                                libc::close(fd);
                            }
                        }
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
            }
            let whole = hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) == 0;
            return Some((n as usize, got, whole));
        }
    }
}
