//! A sandbox's starter: one small process per isolated sandbox that starts its commands.
//!
//! A command started by forking the emulator pays for a copy of the emulator's page
//! tables (they grow with every sandbox alive), and its child for joining the time and
//! user namespaces and dropping the bounding set. The starter does that once: it is
//! forked when the boundary is built, joins every namespace and group of the sandbox,
//! drops the bounding set, gives back the memory it will not touch ([`trim`]), and then
//! starts each command with `clone3(CLONE_VM | CLONE_VFORK | CLONE_PARENT)`: no page
//! table is copied, the command is born in the sandbox's PID namespace and groups, and
//! it is a child of the emulator, which waits for it as for any other.
//!
//! The starter lives in the host's PID namespace, so no process of the sandbox can name
//! it. It is not dumpable (nor are its children until they exec: they run on its
//! memory), so the sandbox's root could not read it even then. It ends when its socket
//! closes (the emulator dropped it or died) or is killed with the sandbox.
//!
//! Requests go over a `SOCK_SEQPACKET` pair, one at a time: the strings in one message
//! with the three standard descriptors; the answer is the child's pid on the host, its
//! pid in the sandbox and an errno. What the starter cannot take (a request over
//! [`MAX_REQUEST`], a starter that died) is started the old way, by `spawn.rs`'s fork.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use exec_world_sys::launch::{
    CLONE_CLEAR_SIGHAND, CLONE_INTO_CGROUP, CLONE_PARENT, CLONE_PIDFD, CLONE_VFORK, CLONE_VM,
    ChildStack, CloneArgs, clone3_entry,
};

use super::isolation::{NsFds, RawNs};
use super::spawn::{Child, Prepared};

/// The largest request (strings) the starter takes; a larger one is forked the old way.
const MAX_REQUEST: usize = 256 * 1024;
/// The first word of a request.
const MAGIC: u32 = 0x5a79_676f;
/// Request flags: set the credentials; make the PTY on stdin the controlling terminal.
const FLAG_CREDS: u32 = 1;
const FLAG_PTY: u32 = 2;
/// The header: magic, flags, uid, gid, argc, envc (native-endian `u32`s).
const HEADER: usize = 24;
/// The child's mark that it ran (an errno replaces it on failure; 0: it never ran).
const RAN: i32 = -1;
/// The answer: pid on the host (or -1), pid in the sandbox, errno, step.
const REPLY: usize = 16;

/// What one command needs from the starter besides its program and environment.
struct Request<'a> {
    /// `argv[0]` is the program's path.
    argv: &'a [CString],
    /// `NAME=value` entries: the whole environment.
    env: &'a [CString],
    /// The working directory, as the sandbox names it.
    cwd: &'a CStr,
    /// `(uid, gid)` to take, as the sandbox numbers them.
    creds: Option<(u32, u32)>,
    /// stdin is a PTY's slave to make the controlling terminal (a new session).
    pty: bool,
}

/// How a command's start through the starter went.
pub(crate) enum Outcome {
    /// It runs.
    Started(Child),
    /// Its child failed before `execve` (or the kernel refused the clone): nothing runs.
    /// `missing_cwd`: its working directory does not exist (as the sandbox's root sees).
    Failed {
        missing_cwd: bool,
        error: std::io::Error,
    },
    /// The starter cannot take it (too large, or the starter is gone): start it another
    /// way; nothing was started.
    Unavailable(Prepared),
}

/// What a command's start is, as the starter sets it up.
pub(crate) struct Setup {
    /// The working directory, as the sandbox names it.
    pub(crate) cwd: CString,
    /// `(uid, gid)` to take, as the sandbox numbers them.
    pub(crate) creds: Option<(u32, u32)>,
    /// stdin is a PTY's slave to make the controlling terminal (a new session).
    pub(crate) pty: bool,
}

/// The answer's `step`: the child's `chdir` failed and the directory does not exist.
const STEP_NO_CWD: u32 = 1;

/// The starter of one sandbox, from the emulator's side.
pub(crate) struct Zygote {
    /// Our end of its socket (non-blocking); `None` once it broke (then every start
    /// forks). Held for a whole exchange: one request at a time.
    sock: tokio::sync::Mutex<Option<OwnedFd>>,
    /// The starter process (reaped in the background once dropped).
    child: Child,
    /// Commands it started.
    started: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Zygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zygote")
            .field("pid", &self.child.id())
            .finish()
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A `SOCK_SEQPACKET` pair (close-on-exec), each end's buffer large enough for the
/// largest request.
fn packet_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut pair = [0 as c_int; 2];
    // SAFETY: socketpair writes two fds into an array we own.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds we own.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // Room for the largest request in flight (root may raise the default; best effort).
    let size = (2 * MAX_REQUEST) as c_int;
    for (fd, opt) in [(&a, libc::SO_SNDBUFFORCE), (&b, libc::SO_RCVBUFFORCE)] {
        // SAFETY: setsockopt with a local int.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const c_int).cast(),
                std::mem::size_of::<c_int>() as libc::socklen_t,
            )
        };
    }
    Ok((a, b))
}

/// Wait for a new process's first word on `sock`: 0 once ready, else the errno of what
/// failed. Nothing (the socket closed): it died, or was killed at birth.
fn await_ready(sock: &OwnedFd) -> std::io::Result<()> {
    let mut word = [0u8; 4];
    loop {
        // SAFETY: reading into a local.
        let n = unsafe { libc::recv(sock.as_raw_fd(), word.as_mut_ptr().cast(), 4, 0) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n != 4 {
            return Err(std::io::Error::other("it died before it was ready"));
        }
        break;
    }
    match i32::from_ne_bytes(word) {
        0 => Ok(()),
        code => Err(std::io::Error::from_raw_os_error(code)),
    }
}

/// Our child `pid`, now followed by a pidfd (it is ours and not yet reaped, so the pid
/// cannot have been reused).
fn adopt(pid: i32) -> std::io::Result<Child> {
    Child::adopt(pid as u32, pidfd_of_child(pid)?)
}

/// A pidfd of our unreaped child `pid` (made by the starter or the maker with
/// `CLONE_PARENT`); when none can be had, the child is killed and reaped (a process we
/// cannot follow must not run).
fn pidfd_of_child(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open on our own unreaped child.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: kill and reap our own child, which we cannot follow.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(pid, &mut st, 0);
        }
        return Err(e);
    }
    // SAFETY: a fresh pidfd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

/// The starters' maker: one process per emulator, forked from it once and trimmed
/// ([`trim`]), that forks each sandbox's starter (a fork of a small process, where a
/// fork of the emulator copies page tables that grow with every sandbox alive, and a
/// trim that gives them back costs as much again). Its starters are the emulator's
/// children (`CLONE_PARENT`).
struct Maker {
    sock: OwnedFd,
    /// Kept so the maker is killed and reaped when it is replaced.
    _process: Child,
}

/// The maker, made at the first starter; `None` again once it is gone (made anew).
static MAKER: std::sync::Mutex<Option<Maker>> = std::sync::Mutex::new(None);

/// The first word of a request to the maker.
const MAGIC_MAKE: u32 = 0x6d61_6b65;
/// Which optional descriptors a request to the maker carries, in this order after the
/// starter's socket and the mount, network and UTS namespaces.
const HAS_PID: u32 = 1;
const HAS_CGROUP_NS: u32 = 2;
const HAS_TIME: u32 = 4;
const HAS_USER: u32 = 8;
const HAS_CGROUP_DIR: u32 = 16;
/// Descriptors in one request to the maker, at most.
const MAX_MAKE_FDS: usize = 9 + RawNs::MAX_TASKS;

impl Maker {
    /// Fork the maker from the emulator and wait until it is ready.
    fn start() -> std::io::Result<Maker> {
        let (ours, theirs) = packet_pair()?;
        let theirs_raw = theirs.as_raw_fd();
        let mut pidfd: c_int = -1;
        let mut args = CloneArgs {
            flags: CLONE_PIDFD | CLONE_CLEAR_SIGHAND,
            pidfd: &mut pidfd as *mut c_int as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..CloneArgs::default()
        };
        // SAFETY: clone3 with fork semantics (no CLONE_VM): the child has its own copy of
        // our memory and runs only raw system calls (`maker_main`), never returning.
        let pid = unsafe { exec_world_sys::launch::clone3_fork(&mut args) };
        if pid == 0 {
            // SAFETY: in the forked child, see above.
            unsafe { maker_main(theirs_raw) }
        }
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(theirs);
        // SAFETY: a pidfd the kernel just gave us.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        let child = Child::adopt(pid as u32, pidfd)?;
        await_ready(&ours)?;
        Ok(Maker {
            sock: ours,
            _process: child,
        })
    }

    /// Ask for a starter joined to `raw` (born in `cgroup_dir` when given) that serves
    /// `starter_sock`: its pid on the host.
    fn make(&self, raw: &RawNs, cgroup_dir: RawFd, starter_sock: RawFd) -> std::io::Result<i32> {
        let mut flags = 0;
        let mut fds = [-1 as c_int; MAX_MAKE_FDS];
        let mut n = 0;
        let mut put = |fd: RawFd| {
            if let Some(slot) = fds.get_mut(n) {
                *slot = fd;
                n += 1;
            }
        };
        for fd in [starter_sock, raw.mnt, raw.net, raw.uts] {
            put(fd);
        }
        for (bit, fd) in [
            (HAS_PID, raw.pid),
            (HAS_CGROUP_NS, raw.cgroup_ns),
            (HAS_TIME, raw.time),
            (HAS_USER, raw.user),
            (HAS_CGROUP_DIR, cgroup_dir),
        ] {
            if fd >= 0 {
                flags |= bit;
                put(fd);
            }
        }
        let tasks = raw.tasks.iter().filter(|fd| **fd >= 0).count() as u32;
        for fd in raw.tasks.into_iter().filter(|fd| *fd >= 0) {
            put(fd);
        }
        let mut msg = [0u8; 12];
        msg[0..4].copy_from_slice(&MAGIC_MAKE.to_ne_bytes());
        msg[4..8].copy_from_slice(&flags.to_ne_bytes());
        msg[8..12].copy_from_slice(&tasks.to_ne_bytes());
        send_with_fds(self.sock.as_raw_fd(), &msg, fds.get(..n).unwrap_or(&[]), 0)?;
        let mut reply = [0u8; 8];
        loop {
            // SAFETY: reading into a local.
            let got = unsafe { libc::recv(self.sock.as_raw_fd(), reply.as_mut_ptr().cast(), 8, 0) };
            if got == 8 {
                break;
            }
            if got < 0 && errno() == libc::EINTR {
                continue;
            }
            return Err(std::io::Error::other("the starters' maker is gone"));
        }
        let pid = i32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]);
        let code = i32::from_ne_bytes([reply[4], reply[5], reply[6], reply[7]]);
        if pid <= 0 {
            return Err(std::io::Error::from_raw_os_error(code));
        }
        Ok(pid)
    }
}

impl Zygote {
    /// Have the sandbox `ns` describes get its starter (from the maker, made at the
    /// first call) and wait until it is ready, inside the sandbox. An error: it could
    /// not be made; commands then fork.
    pub(crate) fn start(ns: &NsFds) -> std::io::Result<Zygote> {
        if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
        }
        let (ours, theirs) = packet_pair()?;
        let raw = ns.raw();
        let cgroup_dir = ns.cgroup_dir().map_or(-1, |fd| fd.as_raw_fd());
        let pid = {
            let mut maker = MAKER
                .lock()
                .map_err(|_| std::io::Error::other("the starters' maker is poisoned"))?;
            let made = match maker.as_ref() {
                Some(m) => m.make(&raw, cgroup_dir, theirs.as_raw_fd()),
                None => Err(std::io::Error::other("no maker yet")),
            };
            match made {
                Ok(pid) => pid,
                Err(_) => {
                    // None yet, or gone: (re)make it once.
                    *maker = None;
                    let m = Maker::start()?;
                    let pid = m.make(&raw, cgroup_dir, theirs.as_raw_fd());
                    *maker = Some(m);
                    pid?
                }
            }
        };
        drop(theirs);
        let child = adopt(pid)?;
        if let Err(e) = await_ready(&ours) {
            child.start_kill();
            return Err(e);
        }
        let flags = rustix::fs::fcntl_getfl(&ours)?;
        rustix::fs::fcntl_setfl(&ours, flags | rustix::fs::OFlags::NONBLOCK)?;
        Ok(Zygote {
            sock: tokio::sync::Mutex::new(Some(ours)),
            child,
            started: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// End the starter (its socket closed, and killed); commands fork from now on.
    pub(crate) fn stop(&self) {
        if let Ok(mut g) = self.sock.try_lock() {
            g.take();
        }
        self.child.start_kill();
    }

    /// The starter's pid on the host.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many commands it started; `None` once it is gone (commands fork).
    pub(crate) fn started(&self) -> Option<u64> {
        let alive = self.sock.try_lock().map_or(true, |g| g.is_some());
        alive.then(|| self.started.load(Ordering::Relaxed))
    }

    /// Start `prepared` through the starter, set up as `setup` says. The exchange runs
    /// as a task of its own: a caller that goes away mid-way leaves no command running
    /// (the task's [`Child`], never waited for, is killed when it drops).
    pub(crate) async fn start_command(
        self: Arc<Self>,
        prepared: Prepared,
        setup: Setup,
    ) -> std::io::Result<Outcome> {
        tokio::spawn(async move { self.exchange(prepared, setup).await })
            .await
            .map_err(std::io::Error::other)?
    }

    async fn exchange(&self, prepared: Prepared, setup: Setup) -> std::io::Result<Outcome> {
        let req = Request {
            argv: prepared.argv(),
            env: prepared.env(),
            cwd: &setup.cwd,
            creds: setup.creds,
            pty: setup.pty,
        };
        let Some(msg) = encode(&req) else {
            return Ok(Outcome::Unavailable(prepared));
        };
        let mut guard = self.sock.lock().await;
        let Some(sock) = guard.take() else {
            return Ok(Outcome::Unavailable(prepared));
        };
        // Registered for this exchange only: a starter made on one runtime serves
        // another (a spare), and a dropped exchange closes the socket with it (the
        // starter then ends, and later starts fork).
        // SAFETY: an OwnedFd is a valid open descriptor, owned by the AsyncFd until
        // `into_inner` gives it back.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(sock) }?;
        let reply = match talk(&fd, &msg, &prepared.stdio()).await {
            Ok(r) => r,
            Err(_) => {
                // Gone (killed with its cgroup, or the sandbox is ending): fork from now on.
                drop(fd);
                self.child.start_kill();
                return Ok(Outcome::Unavailable(prepared));
            }
        };
        *guard = Some(fd.into_inner());
        drop(guard);
        let (pid, ns_pid, code, step) = reply;
        if pid <= 0 {
            return Ok(Outcome::Failed {
                missing_cwd: false,
                error: std::io::Error::from_raw_os_error(code),
            });
        }
        let pidfd = pidfd_of_child(pid)?;
        let child = prepared.finish(pid as u32, ns_pid, pidfd)?;
        if code != 0 {
            // It exited (127) before its exec, or never ran: `child` reaps it.
            return Ok(Outcome::Failed {
                missing_cwd: step == STEP_NO_CWD,
                error: std::io::Error::from_raw_os_error(code),
            });
        }
        self.started.fetch_add(1, Ordering::Relaxed);
        Ok(Outcome::Started(child))
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // `child` reaps it once it is gone.
        self.stop();
    }
}

/// The request's message: the header, then the NUL-terminated cwd, argv and env.
/// `None` when it is over [`MAX_REQUEST`] or a count does not fit.
fn encode(req: &Request<'_>) -> Option<Vec<u8>> {
    let strings: usize = std::iter::once(req.cwd)
        .chain(req.argv.iter().map(CString::as_c_str))
        .chain(req.env.iter().map(CString::as_c_str))
        .map(|s| s.to_bytes_with_nul().len())
        .sum();
    if HEADER + strings > MAX_REQUEST || req.argv.is_empty() {
        return None;
    }
    let mut flags = 0;
    if req.creds.is_some() {
        flags |= FLAG_CREDS;
    }
    if req.pty {
        flags |= FLAG_PTY;
    }
    let (uid, gid) = req.creds.unwrap_or((0, 0));
    let mut msg = Vec::with_capacity(HEADER + strings);
    for w in [
        MAGIC,
        flags,
        uid,
        gid,
        u32::try_from(req.argv.len()).ok()?,
        u32::try_from(req.env.len()).ok()?,
    ] {
        msg.extend_from_slice(&w.to_ne_bytes());
    }
    msg.extend_from_slice(req.cwd.to_bytes_with_nul());
    for s in req.argv.iter().chain(req.env) {
        msg.extend_from_slice(s.to_bytes_with_nul());
    }
    Some(msg)
}

/// Send `msg` with the three descriptors and read the answer: (pid on the host or -1,
/// pid in the sandbox, errno, step). An error: the starter is gone.
async fn talk(
    fd: &tokio::io::unix::AsyncFd<OwnedFd>,
    msg: &[u8],
    fds: &[RawFd; 3],
) -> std::io::Result<(i32, u32, i32, u32)> {
    loop {
        let mut ready = fd.writable().await?;
        match ready.try_io(|inner| send_with_fds(inner.as_raw_fd(), msg, fds, libc::MSG_DONTWAIT)) {
            Ok(sent) => break sent?,
            Err(_would_block) => continue,
        }
    }
    let reply = loop {
        let mut ready = fd.readable().await?;
        match ready.try_io(|inner| recv_reply(inner.as_raw_fd())) {
            Ok(r) => break r?,
            Err(_would_block) => continue,
        }
    };
    let word = |i: usize| [reply[i], reply[i + 1], reply[i + 2], reply[i + 3]];
    Ok((
        i32::from_ne_bytes(word(0)),
        u32::from_ne_bytes(word(4)),
        i32::from_ne_bytes(word(8)),
        u32::from_ne_bytes(word(12)),
    ))
}

/// One `sendmsg` of `msg` with `fds` (at most [`MAX_MAKE_FDS`]) and `flags` besides
/// `MSG_NOSIGNAL` (`WouldBlock` when a non-blocking send finds the socket full).
fn send_with_fds(sock: RawFd, msg: &[u8], fds: &[RawFd], flags: c_int) -> std::io::Result<()> {
    if fds.len() > MAX_MAKE_FDS {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    }
    let bytes = std::mem::size_of_val(fds);
    // SAFETY: sendmsg on locals; the control buffer is aligned and large enough for
    // MAX_MAKE_FDS descriptors (checked above).
    unsafe {
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr() as *mut c_void,
            iov_len: msg.len(),
        };
        let mut control = [0u64; 2 + MAX_MAKE_FDS];
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = libc::CMSG_SPACE(bytes as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<c_int>(),
            fds.len(),
        );
        loop {
            let n = libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL | flags);
            if n == msg.len() as isize {
                return Ok(());
            }
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Err(std::io::Error::other("a short send on a packet socket"));
        }
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

/// The starter's answer (`WouldBlock` before it came; an error once it is gone).
fn recv_reply(sock: RawFd) -> std::io::Result<[u8; REPLY]> {
    let mut reply = [0u8; REPLY];
    // SAFETY: reading into a local.
    let n = unsafe {
        libc::recv(
            sock,
            reply.as_mut_ptr().cast(),
            reply.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n == REPLY as isize {
        return Ok(reply);
    }
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Err(std::io::Error::other("the starter is gone"))
}

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
unsafe fn maker_main(sock: RawFd) -> ! {
    // SAFETY: raw system calls on this process and its buffers.
    unsafe {
        settle(sock);
        // Our maps, through the host's /proc.
        let maps = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if maps >= 0 {
            trim(maps);
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
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cgroup_dir as u64;
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

/// In the starter, once: unmap every private anonymous mapping it will never touch (the
/// emulator's heaps, other threads' stacks, buffers), so it keeps no copy of the
/// emulator's memory as the emulator changes it. Kept: mappings of files (the program
/// and its libraries), an anonymous mapping right after a file's (a `.bss`), the
/// special ones (`[stack]`, `[vdso]`, …), and the mappings holding our stack and our
/// thread pointer (TLS). The program is linked with immediate binding (no lazy symbol
/// resolution touches the loader's heap later).
///
/// # Safety
/// In the starter only, before anything of what it unmaps is used again.
unsafe fn trim(maps: RawFd) {
    let marker = 0u8;
    let sp = &marker as *const u8 as usize;
    let mut fs: usize = 0;
    // SAFETY: arch_prctl reads our thread pointer into a local; the rest reads our maps
    // into locals and unmaps what the doc comment names.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        libc::syscall(
            libc::SYS_arch_prctl,
            0x1003, /* ARCH_GET_FS */
            &mut fs as *mut usize,
        );
        loop {
            let mut doomed = [(0usize, 0usize); 256];
            let mut count = 0;
            let mut full = false;
            libc::lseek(maps, 0, libc::SEEK_SET);
            let mut chunk = [0u8; 4096];
            let mut line = [0u8; 256];
            let mut line_len = 0;
            let mut prev_file_end = 0usize;
            'read: loop {
                let n = libc::read(maps, chunk.as_mut_ptr().cast(), chunk.len());
                if n <= 0 {
                    break;
                }
                for &b in chunk.get(..n as usize).unwrap_or(&[]) {
                    if b != b'\n' {
                        if line_len < line.len() {
                            line[line_len] = b;
                            line_len += 1;
                        }
                        continue;
                    }
                    let m = parse(line.get(..line_len).unwrap_or(&[]));
                    line_len = 0;
                    let Some((start, end, kind)) = m else {
                        continue;
                    };
                    let mine = (start <= sp && sp < end) || (start <= fs && fs < end);
                    let bss = kind == Kind::Anon && start == prev_file_end;
                    prev_file_end = if kind == Kind::File { end } else { 0 };
                    if mine || bss || !matches!(kind, Kind::Anon | Kind::Heap) {
                        continue;
                    }
                    if count == doomed.len() {
                        full = true;
                        break 'read;
                    }
                    doomed[count] = (start, end);
                    count += 1;
                }
            }
            for &(start, end) in doomed.get(..count).unwrap_or(&[]) {
                libc::munmap(start as *mut c_void, end - start);
            }
            if !full {
                return;
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Anonymous, no name.
    Anon,
    /// `[heap]`.
    Heap,
    /// A file's.
    File,
    /// `[stack]`, `[vdso]`, `[vvar]`, …
    Special,
}

/// One line of `/proc/self/maps`: `start-end perms offset dev inode [name]`.
fn parse(line: &[u8]) -> Option<(usize, usize, Kind)> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(range.get(..dash)?)?;
    let end = hex(range.get(dash + 1..)?)?;
    let kind = match fields.nth(4).and_then(|name| name.first()) {
        None => Kind::Anon,
        Some(b'/') => Kind::File,
        Some(b'[') if line.ends_with(b"[heap]") => Kind::Heap,
        Some(b'[') => Kind::Special,
        // Other names (`anon_inode:…`, `/memfd:…` starts with '/'): keep.
        Some(_) => Kind::Special,
    };
    Some((start, end, kind))
}

fn hex(s: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for &b in s {
        let d = (b as char).to_digit(16)? as usize;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_is_read_as_its_range_and_kind() {
        let l = |s: &str| parse(s.as_bytes());
        assert_eq!(
            l("7f0000001000-7f0000003000 rw-p 00000000 00:00 0 ").map(|m| (m.0, m.1)),
            Some((0x7f00_0000_1000, 0x7f00_0000_3000))
        );
        assert!(l("55d0-55e0 rw-p 00000000 00:00 0").is_some_and(|m| m.2 == Kind::Anon));
        assert!(
            l("55d0-55e0 rw-p 00000000 00:00 0          [heap]").is_some_and(|m| m.2 == Kind::Heap)
        );
        assert!(
            l("55d0-55e0 r-xp 00000000 08:01 1234       /usr/lib/libc.so.6")
                .is_some_and(|m| m.2 == Kind::File)
        );
        assert!(l("55d0-55e0 r--p 00000000 00:00 0 [vvar]").is_some_and(|m| m.2 == Kind::Special));
        assert_eq!(l("garbage"), None);
    }

    #[test]
    fn a_request_over_the_limit_is_left_to_the_fork() {
        let argv = [CString::new("/bin/true").unwrap_or_default()];
        let big = [CString::new(vec![b'x'; MAX_REQUEST]).unwrap_or_default()];
        let fits = Request {
            argv: &argv,
            env: &[],
            cwd: c"/",
            creds: Some((1000, 1000)),
            pty: true,
        };
        let msg = encode(&fits).unwrap_or_default();
        assert_eq!(msg.len(), HEADER + 2 + 10);
        assert_eq!(&msg[..4], &MAGIC.to_ne_bytes());
        assert_eq!(&msg[4..8], &(FLAG_CREDS | FLAG_PTY).to_ne_bytes());
        let over = Request {
            argv: &argv,
            env: &big,
            cwd: c"/",
            creds: None,
            pty: false,
        };
        assert!(encode(&over).is_none());
        let none = Request {
            argv: &[],
            env: &[],
            cwd: c"/",
            creds: None,
            pty: false,
        };
        assert!(encode(&none).is_none());
    }
}
