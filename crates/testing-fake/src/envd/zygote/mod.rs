//! A sandbox's starter: one small process per isolated sandbox that starts its commands.
//!
//! A command started by forking the emulator pays for a copy of the emulator's page
//! tables (they grow with every sandbox alive), and its child for joining the time and
//! user namespaces and dropping the bounding set. A starter does that once: it joins
//! every namespace and group of its sandbox and drops the bounding set when the boundary
//! is built, then starts each command with `clone3(CLONE_VM | CLONE_VFORK |
//! CLONE_PARENT)`: no page table is copied, the command is born in the sandbox's PID
//! namespace and groups, and it is a child of the emulator, which waits for it as for
//! any other.
//!
//! Starters are forked by the starters' maker ([`Maker`]), one per emulator, forked from
//! the emulator once and trimmed (`trim.rs`: it gives back the emulator's heap, its
//! other threads' memory and the main stack with the emulator's environment), so a
//! starter costs a fork of a small process and holds no copy of the host's environment. The code that
//! runs inside them is `inside.rs`.
//!
//! A starter lives in the host's PID namespace, so no process of the sandbox can name
//! it. It is not dumpable (nor are its children until they exec: they run on its
//! memory), so the sandbox's root could not read it even then. It ends when its socket
//! closes (the emulator dropped it or died) or is killed with the sandbox.
//!
//! Requests go over a `SOCK_SEQPACKET` pair, one at a time: the strings in one message
//! with the three standard descriptors; the answer is the child's pid on the host, its
//! pid in the sandbox, an errno and the step that failed. What a starter cannot take (a
//! request over [`MAX_REQUEST`], a starter that died) is started the old way, by
//! `spawn.rs`'s fork.

use std::ffi::{CStr, CString, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use exec_world_sys::launch::CloneArgs;

use super::isolation::{NsFds, RawNs};
use super::spawn::{Child, Prepared};

mod inside;
mod trim;

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
        let mut args = CloneArgs::with_pidfd(&mut pidfd);
        // SAFETY: clone3 with fork semantics (no CLONE_VM): the child has its own copy of
        // our memory and runs only raw system calls (`maker_main`), never returning.
        let pid = unsafe { exec_world_sys::launch::clone3_fork(&mut args) };
        if pid == 0 {
            // SAFETY: in the forked child, see above.
            unsafe { inside::maker_main(theirs_raw) }
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
    /// `starter_sock`: its pid on the host, or the maker's error (its clone refused).
    /// The outer error: the maker is gone.
    fn make(
        &self,
        raw: &RawNs,
        cgroup_dir: RawFd,
        starter_sock: RawFd,
    ) -> std::io::Result<std::io::Result<i32>> {
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
            return Ok(Err(std::io::Error::from_raw_os_error(code)));
        }
        Ok(Ok(pid))
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
                Ok(made) => made?,
                Err(_) => {
                    // None yet, or gone: (re)make it once.
                    *maker = None;
                    let m = Maker::start()?;
                    let made = m.make(&raw, cgroup_dir, theirs.as_raw_fd());
                    *maker = Some(m);
                    made??
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

#[cfg(test)]
mod tests {
    use super::*;

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
