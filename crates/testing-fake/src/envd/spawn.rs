//! Starting a process of the emulator's own making (a sandbox's init, a command when the
//! sandbox has no starter, every command without isolation): a `clone3` born in the
//! sandbox's cgroup subtree (`CLONE_INTO_CGROUP`), so it never migrates there. A
//! sandbox's commands usually start through its starter instead (`zygote/`), from the
//! [`Prepared`] made here.
//!
//! Moving a process between cgroups (`cgroup.procs`) takes a lock whose write side waits
//! for an RCU grace period when none was taken within about one grace period before: on a
//! quiet host every command's start paid that (about 7 ms here, against 0.01 ms back to
//! back). A child born in the subtree pays nothing; the cgroup v1 limit groups are those
//! of the forking thread, which joined them (`tasks`, no such lock).
//!
//! A command that joins a sandbox's namespaces is a fork ([`Via::Fork`]: its own copy of
//! our memory, not `CLONE_VM`): it must join the sandbox's time namespace, which the
//! kernel refuses to a process sharing its memory, and it is not dumpable until its
//! `execve` (once in the sandbox's user namespace, its root could otherwise read that
//! copy). One that joins neither runs on our memory ([`Via::SharedMemory`]): a command
//! without isolation, and a sandbox's init, which stays in the host's user and time
//! namespaces. Between `clone3`
//! and `execve` it makes raw system calls only. It marks that it ran on a
//! pipe first: a child the kernel killed at birth (Linux kills one born in a cgroup whose
//! `cgroup.kill` count differs from its parent's cgroup's, see exec-world-sys's `launch`)
//! leaves no mark, and the spawn is made again joining the cgroup the old way.

use std::ffi::{CString, c_char, c_int};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;

use exec_world_sys::launch::{CLONE_VFORK, CLONE_VM, CloneArgs, above_stdio, pipe};

/// One of the child's standard descriptors.
pub(crate) enum Io {
    /// `/dev/null`.
    Null,
    /// A pipe whose other end the [`Child`] holds.
    Piped,
    /// This descriptor (a PTY's slave).
    Fd(OwnedFd),
}

/// What to start: `argv[0]` is the program's path; `env` the whole environment.
pub(crate) struct Spawn {
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) stdio: [Io; 3],
}

/// How a child is made ([`Prepared::start`]).
pub(crate) enum Via {
    /// A fork: the child has its own copy of our memory, so its setup may join any
    /// namespace (the time namespace refuses a process that shares its memory).
    Fork,
    /// `clone3(CLONE_VM | CLONE_VFORK)`: the child runs on our memory until it execs,
    /// so no page table is copied. Its setup must change nothing of the memory's state
    /// (no time namespace, no `prctl` on it): for a child that joins no namespace.
    SharedMemory,
}

/// A started child: our ends of its pipes, and its pidfd.
pub(crate) struct Child {
    pid: u32,
    /// Its pid in its own PID namespace (the sandbox's), as it reported it.
    ns_pid: u32,
    /// Taken by [`Child::wait`]; a child dropped without a wait is reaped in the background.
    pidfd: Option<OwnedFd>,
    /// Signals the child (a duplicate of the pidfd, usable while a wait holds the other).
    killer: OwnedFd,
    pub(crate) stdin: Option<tokio::net::unix::pipe::Sender>,
    pub(crate) stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub(crate) stderr: Option<tokio::net::unix::pipe::Receiver>,
}

impl Child {
    /// A child started another way (the sandbox's starter, `zygote.rs`), known by its
    /// pid and pidfd: waited for, signalled and reaped like one of ours, no pipes.
    pub(crate) fn adopt(pid: u32, pidfd: OwnedFd) -> std::io::Result<Child> {
        Ok(Child {
            pid,
            ns_pid: pid,
            killer: pidfd.try_clone()?,
            pidfd: Some(pidfd),
            stdin: None,
            stdout: None,
            stderr: None,
        })
    }

    /// The child's pid on the host.
    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// The child's pid as its PID namespace (the sandbox's) numbers it.
    pub(crate) fn ns_pid(&self) -> u32 {
        self.ns_pid
    }

    /// A future that reaps the child (to await once; see [`Child::killer`] for signals
    /// meanwhile).
    pub(crate) fn wait(&mut self) -> impl Future<Output = std::io::Result<ExitStatus>> + use<> {
        let pid = self.pid;
        let pidfd = self.pidfd.take();
        async move {
            match pidfd {
                Some(fd) => exec_world_sys::reap::wait(pid, fd).await,
                None => Err(std::io::Error::other("the child was already waited for")),
            }
        }
    }

    /// A pidfd of the child of its own (for signals and liveness checks).
    pub(crate) fn pidfd(&self) -> std::io::Result<OwnedFd> {
        self.killer.try_clone()
    }

    /// Block until the child exits and reap it (on a thread of its own, not the runtime).
    pub(crate) fn wait_blocking(mut self) -> std::io::Result<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let _fd = self.pidfd.take();
        let mut st = 0;
        loop {
            // SAFETY: waitpid on our own child, reaped only here (its pidfd was taken).
            if unsafe { libc::waitpid(self.pid as c_int, &mut st, 0) } >= 0 {
                return Ok(ExitStatus::from_raw(st));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// SIGKILL the child (nothing when it is gone).
    pub(crate) fn start_kill(&self) {
        let _ = exec_world_sys::supervise::pidfd_signal(self.killer.as_fd(), libc::SIGKILL);
    }
}

impl Drop for Child {
    /// A child nobody waited for (its start was abandoned: the caller went away) is
    /// killed; every child is reaped once it exits, so none stays a zombie.
    fn drop(&mut self) {
        let Some(fd) = self.pidfd.take() else { return };
        self.start_kill();
        let pid = self.pid;
        // Reaped when it exits, so it never stays a zombie.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(exec_world_sys::reap::wait(pid, fd));
            }
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("envd-reap".into())
                    .spawn(move || {
                        let _fd = fd;
                        let mut st = 0;
                        // SAFETY: waitpid on our own child.
                        unsafe { libc::waitpid(pid as c_int, &mut st, 0) };
                    });
            }
        }
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn cstring(s: String) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// The child's mark that it ran (its own pid follows, then an errno on failure).
const RAN: u8 = b'R';

impl Spawn {
    /// The strings as C strings and the child's descriptors: what any way of starting
    /// it needs ([`Prepared::start`], or the sandbox's starter). A null stdio is a copy
    /// of `null` when given, else `/dev/null` opened here.
    pub(crate) fn prepare(self, null: Option<BorrowedFd<'_>>) -> std::io::Result<Prepared> {
        let argv: Vec<CString> = self
            .argv
            .into_iter()
            .map(cstring)
            .collect::<std::io::Result<_>>()?;
        let env: Vec<CString> = self
            .env
            .into_iter()
            .map(|(k, v)| cstring(format!("{k}={v}")))
            .collect::<std::io::Result<_>>()?;
        if argv.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no program",
            ));
        }
        // The child's ends (given to it, closed here after the clone) and ours.
        let mut child_ends: Vec<OwnedFd> = Vec::new();
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        for (i, io) in self.stdio.into_iter().enumerate() {
            let end = match io {
                Io::Null => match null {
                    Some(fd) => rustix::io::fcntl_dupfd_cloexec(fd, 3)?,
                    None => above_stdio(rustix::fs::open(
                        "/dev/null",
                        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )?)?,
                },
                Io::Piped => {
                    let (r, w) = pipe()?;
                    let (theirs, mine) = if i == 0 { (r, w) } else { (w, r) };
                    ours[i] = Some(mine);
                    theirs
                }
                Io::Fd(fd) => above_stdio(fd)?,
            };
            child_ends.push(end);
        }
        Ok(Prepared {
            argv,
            env,
            child_ends,
            ours,
        })
    }
}

/// A [`Spawn`] ready to start: its C strings, the child's descriptors and ours.
pub(crate) struct Prepared {
    argv: Vec<CString>,
    env: Vec<CString>,
    /// stdin, stdout, stderr as the child gets them (all above 2).
    child_ends: Vec<OwnedFd>,
    ours: [Option<OwnedFd>; 3],
}

impl Prepared {
    /// `argv` (its first is the program's path; never empty).
    pub(crate) fn argv(&self) -> &[CString] {
        &self.argv
    }

    /// The environment, `NAME=value` each.
    pub(crate) fn env(&self) -> &[CString] {
        &self.env
    }

    /// The child's stdin, stdout and stderr.
    pub(crate) fn stdio(&self) -> [RawFd; 3] {
        let fd = |i: usize| self.child_ends.get(i).map_or(-1, |f| f.as_raw_fd());
        [fd(0), fd(1), fd(2)]
    }

    /// Start the child as `via` says: born in `cgroup` (a cgroup v2 directory) when
    /// given; in the child, after its stdio is in place, `setup(join_cgroup)` runs (raw
    /// system calls only; `join_cgroup` is true when the child was not born in `cgroup`
    /// and must join it itself), then `execve`. An error is the child's own (`setup`'s or
    /// `execve`'s).
    pub(crate) fn start(
        self,
        via: Via,
        cgroup: Option<BorrowedFd<'_>>,
        setup: &(dyn Fn(bool) -> std::io::Result<()> + Sync),
    ) -> std::io::Result<Child> {
        let mut argv_p: Vec<*const c_char> = self.argv.iter().map(|a| a.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut env_p: Vec<*const c_char> = self.env.iter().map(|e| e.as_ptr()).collect();
        env_p.push(std::ptr::null());
        let stdio = self.stdio();
        let program = argv_p[0];
        let shared = matches!(via, Via::SharedMemory);
        let fork = |into: Option<BorrowedFd<'_>>| -> std::io::Result<Option<(u32, u32, OwnedFd)>> {
            let (mark_r, mark_w) = pipe()?;
            let mut pidfd: c_int = -1;
            let mut args = CloneArgs::with_pidfd(&mut pidfd);
            if let Some(cg) = into {
                args.born_in(cg.as_raw_fd());
            }
            let frame = Frame {
                mark: mark_w.as_raw_fd(),
                stdio: &stdio,
                setup,
                join_cgroup: into.is_none() && cgroup.is_some(),
                program,
                argv: argv_p.as_ptr(),
                envp: env_p.as_ptr(),
                shared,
            };
            let pid = if shared {
                args.flags |= CLONE_VM | CLONE_VFORK;
                shared_clone(&mut args, &frame)?
            } else {
                // SAFETY: clone3 with fork semantics (no CLONE_VM): the child has its own
                // copy of our memory and runs only raw system calls up to execve or _exit.
                let pid = unsafe { exec_world_sys::launch::clone3_fork(&mut args) };
                if pid == 0 {
                    // SAFETY: in the child, see above.
                    unsafe { child(&frame) }
                }
                if pid < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                pid
            };
            drop(mark_w);
            // SAFETY: a pidfd the kernel just gave us.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            // RAN and the child's own pid, then an errno on failure.
            let mut buf = [0u8; 9];
            let mut got = 0;
            loop {
                let n = rustix::io::read(&mark_r, &mut buf[got..]);
                match n {
                    Ok(0) => break,
                    Ok(n) => {
                        got += n;
                        if got == buf.len() {
                            break;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let reap = || {
                let mut st = 0;
                // SAFETY: waitpid on our own child, which has exited or is exiting.
                unsafe { libc::waitpid(pid as c_int, &mut st, 0) };
            };
            match got {
                0 => {
                    // Killed before it ran a single instruction of ours.
                    reap();
                    Ok(None)
                }
                9 => {
                    reap();
                    let code = i32::from_ne_bytes([buf[5], buf[6], buf[7], buf[8]]);
                    Err(std::io::Error::from_raw_os_error(code))
                }
                _ => {
                    let own = match got {
                        5.. => u32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]),
                        _ => pid as u32,
                    };
                    Ok(Some((pid as u32, own, pidfd)))
                }
            }
        };
        let started = match cgroup {
            Some(cg) => match fork(Some(cg))? {
                Some(s) => s,
                None => fork(None)?.ok_or_else(|| {
                    std::io::Error::other("the child was killed before it started")
                })?,
            },
            None => fork(None)?
                .ok_or_else(|| std::io::Error::other("the child was killed before it started"))?,
        };
        let (pid, ns_pid, pidfd) = started;
        self.finish(pid, ns_pid, pidfd)
    }

    /// The [`Child`] started from this (pid `pid` on the host, `ns_pid` in its PID
    /// namespace): the child's descriptors are closed here, ours go to the child.
    pub(crate) fn finish(self, pid: u32, ns_pid: u32, pidfd: OwnedFd) -> std::io::Result<Child> {
        drop(self.child_ends);
        let killer = pidfd.try_clone()?;
        let [stdin, stdout, stderr] = self.ours;
        Ok(Child {
            pid,
            ns_pid,
            pidfd: Some(pidfd),
            killer,
            stdin: stdin
                .map(tokio::net::unix::pipe::Sender::from_owned_fd)
                .transpose()?,
            stdout: stdout
                .map(tokio::net::unix::pipe::Receiver::from_owned_fd)
                .transpose()?,
            stderr: stderr
                .map(tokio::net::unix::pipe::Receiver::from_owned_fd)
                .transpose()?,
        })
    }
}

/// What the child reads: prepared before the clone, alive until it execs or exits.
struct Frame<'a> {
    /// The write end of the mark pipe.
    mark: RawFd,
    stdio: &'a [RawFd; 3],
    setup: &'a (dyn Fn(bool) -> std::io::Result<()> + Sync),
    join_cgroup: bool,
    program: *const c_char,
    /// NULL-terminated arrays.
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// The child runs on our memory ([`Via::SharedMemory`]).
    shared: bool,
}

thread_local! {
    /// This thread's stack for its [`Via::SharedMemory`] children (free again once
    /// `clone3` with `CLONE_VFORK` returns).
    static STACK: std::cell::RefCell<Option<exec_world_sys::launch::ChildStack>> =
        const { std::cell::RefCell::new(None) };
}

/// `clone3(args)` (with `CLONE_VM | CLONE_VFORK`) whose child runs [`child`] on this
/// thread's child stack; the child's pid.
fn shared_clone(args: &mut CloneArgs, frame: &Frame<'_>) -> std::io::Result<i64> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
    }
    /// The child's entry on its own stack.
    ///
    /// # Safety
    /// `arg` is the [`Frame`] of the `clone3` call, alive until the child execs.
    unsafe extern "C" fn entry(arg: *mut std::ffi::c_void) -> ! {
        // SAFETY: see above.
        unsafe { child(&*(arg as *const Frame<'_>)) }
    }
    STACK.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(exec_world_sys::launch::ChildStack::new()?);
        }
        if let Some(stack) = slot.as_ref() {
            stack.set_on(args);
        }
        // SAFETY: this thread's stack, unused (CLONE_VFORK: its previous child exec'd or
        // exited); `entry` never returns and reads only `frame`, alive until clone3
        // returns here; the child makes raw system calls only and changes nothing of
        // our memory but its mark's bytes on the pipe.
        let ret = unsafe {
            exec_world_sys::launch::clone3_entry(args, entry, frame as *const Frame<'_> as *mut _)
        };
        if ret < 0 {
            return Err(std::io::Error::from_raw_os_error((-ret) as i32));
        }
        Ok(ret)
    })
}

/// The child, between `clone3` and `execve`: not dumpable (unless it shares our
/// memory), its mark, its stdio, the default signal state, `setup`, `execve`; a failure
/// writes its errno after the mark and exits 127.
///
/// # Safety
/// Only in the child of a clone; the frame's arrays are NULL-terminated.
unsafe fn child(f: &Frame<'_>) -> ! {
    let mark = f.mark;
    // SAFETY: raw system calls on descriptors and strings prepared before the clone.
    unsafe {
        // The mark, then the pid as the child's own PID namespace numbers it (the
        // sandbox's: it was born there).
        let mut hello = [RAN, 0, 0, 0, 0];
        let own = libc::syscall(libc::SYS_getpid) as u32;
        hello[1..].copy_from_slice(&own.to_ne_bytes());
        libc::write(mark, hello.as_ptr().cast(), hello.len());
        let fail = |e: c_int| -> ! {
            let b = e.to_ne_bytes();
            libc::write(mark, b.as_ptr().cast(), 4);
            libc::_exit(127)
        };
        // Until its `execve` the child is a copy of the emulator's memory (the host's
        // environment, every sandbox's buffers in flight). Once it joins a sandbox's user
        // namespace, that sandbox's root may ptrace it or read it (`process_vm_readv`) if
        // it is dumpable; not dumpable, that takes CAP_SYS_PTRACE over the host's user
        // namespace. `execve` makes the new program dumpable again as usual.
        // A child on our memory joins no user namespace (and would make the emulator
        // itself not dumpable): it stays as it is.
        if !f.shared && libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            fail(errno());
        }
        for (target, &src) in f.stdio.iter().enumerate() {
            // Every source is above 2; dup2 clears close-on-exec on the copy.
            if libc::dup2(src, target as c_int) < 0 {
                fail(errno());
            }
        }
        // As std does: SIGPIPE back to its default (we ignore it), an empty signal mask.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if let Err(e) = (f.setup)(f.join_cgroup) {
            fail(e.raw_os_error().unwrap_or(libc::EIO));
        }
        libc::execve(f.program, f.argv, f.envp);
        fail(errno())
    }
}
