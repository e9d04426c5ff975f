//! Starting a local child without copying this process: one `clone3` with
//! `CLONE_VM | CLONE_VFORK` (the child borrows our memory until it execs, as
//! `posix_spawn` does), `CLONE_INTO_CGROUP` (it is born in its spawn's cgroup, so it runs
//! nothing outside it), `CLONE_CLEAR_SIGHAND` (none of our signal handlers can run in it)
//! and `CLONE_PIDFD` (its reaper waits on the pidfd). Before `execve` the child only makes
//! raw async-signal-safe system calls: `setsid`, `dup2`, `chdir`, the signal mask,
//! `execve` along `PATH`.
//!
//! std's `Command` with a `pre_exec` hook (the fallback, `proc.rs`) forks the whole
//! address space instead (page tables copied, then torn down at `exec`), which made a
//! local spawn cost half as much again as a bare `tokio::process` one.
//!
//! Only on x86_64 Linux (the child's entry needs a few lines of assembly:
//! `launch/clone3.rs`); elsewhere, or where `clone3` is refused (old kernels, seccomp),
//! [`launch`] says so and the caller uses the fallback, as it does for a child the kernel
//! killed at birth ([`Outcome`]). The child is reaped through its pidfd (`reap.rs`).

// Elsewhere the child's side below is never started.
#![cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code, unused_imports)
)]

use std::collections::BTreeMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// What to start.
pub struct Launch<'a> {
    /// The program: a path with a `/`, or a name searched along the child's `PATH`.
    pub program: &'a str,
    /// Arguments after `argv[0]` (which is `program`).
    pub args: &'a [String],
    /// The whole environment of the child.
    pub env: &'a BTreeMap<String, String>,
    /// The child's working directory (absolute).
    pub cwd: &'a str,
    /// Give the child a pipe for stdin (else `/dev/null`).
    pub stdin_piped: bool,
    /// The cgroup directory the child is born in, if any.
    pub cgroup: Option<BorrowedFd<'a>>,
}

/// A started child: its pid, a pidfd for it, our ends of its pipes.
pub struct Launched {
    /// The child's pid (it leads its own session and process group).
    pub pid: u32,
    /// A pidfd of the child: readable once it exited.
    pub pidfd: OwnedFd,
    /// The write end of its stdin pipe (non-blocking), when piped.
    pub stdin: Option<OwnedFd>,
    /// The read end of its stdout pipe (non-blocking).
    pub stdout: OwnedFd,
    /// The read end of its stderr pipe (non-blocking).
    pub stderr: OwnedFd,
}

/// What became of a launch.
pub enum Outcome {
    /// The child runs the program.
    Started(Launched),
    /// `clone3` cannot be used here (platform, kernel, seccomp, these flags): nothing was
    /// started; use std's spawn.
    Unsupported,
    /// The child was killed before it ran a single instruction of ours: it was reaped,
    /// and that cgroup must not be used again; spawn again another way (see
    /// [`unborn_in_new_cgroup`]).
    ///
    /// Linux (6.18 here) SIGKILLs a child born with `CLONE_INTO_CGROUP` when the target
    /// cgroup's `cgroup.kill` count differs from that of the parent's own cgroup
    /// (`cgroup_css_set_fork` notes the parent's count, `cgroup_post_fork` compares it
    /// with the target's): so into any cgroup that was once `cgroup.kill`ed, and into
    /// every new one when our own cgroup was once killed.
    Unborn,
}

/// Set once `clone3` was refused as a whole (ENOSYS, EPERM from a filter): never tried again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Children killed at birth in a new cgroup so far; from [`UNBORN_MAX`] on, spawns with a
/// cgroup use std's spawn (which joins the cgroup by writing `cgroup.procs` instead).
static UNBORN: AtomicU32 = AtomicU32::new(0);
const UNBORN_MAX: u32 = 2;

/// Notes an [`Outcome::Unborn`] in a cgroup made for that spawn (not a spare that may
/// have been killed behind our back): new cgroups are poisoned for this process, as when
/// its own cgroup was once killed.
pub fn unborn_in_new_cgroup() {
    UNBORN.fetch_add(1, Ordering::Relaxed);
}

/// The child's mark that it ran (stored first thing; an errno replaces it on failure).
const RAN: i32 = -1;

/// Starts `l` with `clone3`. Errors: NUL bytes (`InvalidInput`), and the child's own
/// failure before `exec` (`setsid`, `chdir`, `execve`: `NotFound`, `PermissionDenied`, ...).
pub fn launch(l: &Launch<'_>) -> io::Result<Outcome> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64"))
        || REFUSED.load(Ordering::Relaxed)
        || (l.cgroup.is_some() && UNBORN.load(Ordering::Relaxed) >= UNBORN_MAX)
    {
        return Ok(Outcome::Unsupported);
    }
    crate::reap::reap_orphans();
    let prepared = Prepared::new(l)?;
    let stdio = Stdio::new(l.stdin_piped)?;
    run(&prepared, stdio, l.cgroup)
}

/// `CLONE_PIDFD`: `clone3` stores a pidfd of the child at [`CloneArgs::pidfd`].
pub const CLONE_PIDFD: u64 = 0x1000;
/// `CLONE_VM`: the child runs on our memory (until it execs).
pub const CLONE_VM: u64 = 0x100;
/// `CLONE_VFORK`: the call returns once the child has exec'd or exited.
pub const CLONE_VFORK: u64 = 0x4000;
/// `CLONE_PARENT`: the child's parent is our parent (it is our sibling).
pub const CLONE_PARENT: u64 = 0x8000;
/// `CLONE_CLEAR_SIGHAND`: every handled signal is reset to its default in the child.
pub const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;
/// `CLONE_INTO_CGROUP`: the child is born in the cgroup v2 directory [`CloneArgs::cgroup`].
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` of `clone3(2)` (version 2: with `cgroup`).
///
/// ```
/// let args = exec_world_sys::launch::CloneArgs {
///     flags: exec_world_sys::launch::CLONE_PIDFD,
///     exit_signal: libc::SIGCHLD as u64,
///     ..Default::default()
/// };
/// assert_eq!(std::mem::size_of_val(&args), 88);
/// ```
#[repr(C)]
#[derive(Debug, Default)]
pub struct CloneArgs {
    /// `CLONE_*` flags.
    pub flags: u64,
    /// Where the kernel stores the child's pidfd (a `*mut c_int`).
    pub pidfd: u64,
    /// Where the kernel stores the child's tid, in the child.
    pub child_tid: u64,
    /// Where the kernel stores the child's tid, in the parent.
    pub parent_tid: u64,
    /// The signal the parent gets when the child ends (`SIGCHLD`).
    pub exit_signal: u64,
    /// The child's stack (0: the parent's, copied).
    pub stack: u64,
    /// Its size.
    pub stack_size: u64,
    /// The child's TLS.
    pub tls: u64,
    /// Pids to give the child (none: 0).
    pub set_tid: u64,
    /// How many.
    pub set_tid_size: u64,
    /// The cgroup v2 directory's descriptor, with `CLONE_INTO_CGROUP`.
    pub cgroup: u64,
}

impl CloneArgs {
    /// A child that reports its end with `SIGCHLD`, starts with default signal handlers
    /// (`CLONE_CLEAR_SIGHAND`) and whose pidfd the kernel stores in `pidfd`
    /// (`CLONE_PIDFD`); add flags to `flags` for more.
    ///
    /// ```
    /// let mut pidfd = -1;
    /// let args = exec_world_sys::launch::CloneArgs::with_pidfd(&mut pidfd);
    /// assert_ne!(args.flags & exec_world_sys::launch::CLONE_PIDFD, 0);
    /// assert_eq!(args.exit_signal, libc::SIGCHLD as u64);
    /// ```
    pub fn with_pidfd(pidfd: &mut c_int) -> CloneArgs {
        CloneArgs {
            flags: CLONE_PIDFD | CLONE_CLEAR_SIGHAND,
            pidfd: pidfd as *mut c_int as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..CloneArgs::default()
        }
    }

    /// The child is born in the cgroup v2 directory open as `dir` (`CLONE_INTO_CGROUP`).
    ///
    /// ```
    /// let mut args = exec_world_sys::launch::CloneArgs::default();
    /// args.born_in(7);
    /// assert_eq!(args.cgroup, 7);
    /// assert_ne!(args.flags & exec_world_sys::launch::CLONE_INTO_CGROUP, 0);
    /// ```
    pub fn born_in(&mut self, dir: RawFd) {
        self.flags |= CLONE_INTO_CGROUP;
        self.cgroup = dir as u64;
    }
}

/// What the child reads before `exec`, built before the clone (the child must not
/// allocate: another thread of ours may hold the allocator's lock).
pub(crate) struct Prepared {
    /// Where to `execve`, in order (one entry for a path, else one per `PATH` directory).
    pub(crate) candidates: Vec<CString>,
    pub(crate) argv: Vec<CString>,
    pub(crate) env: Vec<CString>,
    pub(crate) cwd: CString,
}

impl Prepared {
    pub(crate) fn new(l: &Launch<'_>) -> io::Result<Prepared> {
        let c = |s: &str| {
            CString::new(s).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                )
            })
        };
        let candidates = if l.program.contains('/') {
            vec![c(l.program)?]
        } else {
            // glibc's execvp: the child's PATH, else its default; an empty entry is the cwd.
            let path = l.env.get("PATH").map_or("/bin:/usr/bin", String::as_str);
            path.split(':')
                .map(|d| match d {
                    "" => c(l.program),
                    d => c(&format!("{}/{}", d.trim_end_matches('/'), l.program)),
                })
                .collect::<io::Result<_>>()?
        };
        let mut argv = vec![c(l.program)?];
        for a in l.args {
            argv.push(c(a)?);
        }
        let env = l
            .env
            .iter()
            .map(|(k, v)| c(&format!("{k}={v}")))
            .collect::<io::Result<_>>()?;
        Ok(Prepared {
            candidates,
            argv,
            env,
            cwd: c(l.cwd)?,
        })
    }
}

/// The child's stdio: its ends (blocking, close-on-exec here, `dup2`'d to 0-2 in the
/// child) and ours (non-blocking).
struct Stdio {
    child: [OwnedFd; 3],
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

impl Stdio {
    fn new(stdin_piped: bool) -> io::Result<Stdio> {
        let (stdin, child_in) = if stdin_piped {
            let (r, w) = pipe()?;
            nonblocking(&w)?;
            (Some(w), r)
        } else {
            (None, dev_null()?)
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        nonblocking(&out_r)?;
        nonblocking(&err_r)?;
        Ok(Stdio {
            child: [child_in, out_w, err_w],
            stdin,
            stdout: out_r,
            stderr: err_r,
        })
    }
}

/// A close-on-exec pipe whose descriptors are all above 2 (so the child's `dup2` onto
/// 0, 1, 2 never overwrites one it still needs).
///
/// ```
/// use std::os::fd::AsRawFd;
/// let (r, w) = exec_world_sys::launch::pipe().unwrap();
/// assert!(r.as_raw_fd() > 2 && w.as_raw_fd() > 2);
/// ```
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `fd` itself, or a close-on-exec duplicate of it above 2 when it is 0, 1 or 2.
///
/// ```
/// use std::os::fd::AsRawFd;
/// let null = std::fs::File::open("/dev/null").unwrap();
/// let fd = exec_world_sys::launch::above_stdio(null.into()).unwrap();
/// assert!(fd.as_raw_fd() > 2);
/// ```
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

pub(crate) fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// A fresh descriptor of `/dev/null` for the child's stdin.
pub(crate) fn dev_null() -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    above_stdio(fd)
}

/// The child's part, read through one pointer on its own stack.
#[repr(C)]
struct ChildArgs {
    /// NULL-terminated arrays.
    candidates: *const *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// `["/bin/sh", <slot>, argv[1..], NULL]`: a script without `#!` (ENOEXEC) runs
    /// under `/bin/sh`, as glibc's execvp does; the child fills the slot.
    sh_argv: *mut *const c_char,
    cwd: *const c_char,
    stdio: [RawFd; 3],
    /// [`RAN`] once the child runs, then the errno of its failure before `exec`, if any
    /// (still 0: it never ran).
    error: AtomicI32,
}

/// `errno` (the calling thread's: the child shares our thread's TLS until it execs).
pub(crate) fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The child, between `clone3` and `execve`. Only raw system calls (async-signal-safe,
/// no allocation, no lock, no panic): our memory is shared with it and any other thread
/// of ours may be anywhere.
///
/// # Safety
/// `arg` points to a live [`ChildArgs`] whose arrays are NULL-terminated.
unsafe extern "C" fn child_main(arg: *mut c_void) -> ! {
    // SAFETY: the parent passes a valid ChildArgs and waits (CLONE_VFORK) until we exec
    // or exit, so everything it points to stays alive and unchanged.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        a.error.store(RAN, Ordering::Relaxed);
        let fail = |e: c_int| -> ! {
            a.error.store(e, Ordering::Relaxed);
            libc::_exit(127)
        };
        // Its own session, so its own process group (pgid = sid = pid).
        if libc::setsid() < 0 {
            fail(errno());
        }
        for (target, &src) in a.stdio.iter().enumerate() {
            // All sources are above 2 (`above_stdio`), so none is overwritten here;
            // dup2 clears close-on-exec on the copy.
            if libc::dup2(src, target as c_int) < 0 {
                fail(errno());
            }
        }
        if libc::chdir(a.cwd) < 0 {
            fail(errno());
        }
        // As std does: SIGPIPE back to its default (we ignore it), an empty signal mask.
        // (CLONE_CLEAR_SIGHAND already reset every handled signal to its default.)
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        fail(exec_along(a.candidates, a.argv, a.envp, a.sh_argv))
    }
}

/// glibc's execvp along `candidates` (NULL-terminated): EACCES is remembered and the
/// search goes on; "not there" errors go on; any other error ends it. A file without `#!`
/// (ENOEXEC) runs under `/bin/sh` through `sh_argv` (`["/bin/sh", <slot>, argv[1..],
/// NULL]`, the slot filled here). Returns the errno to report (it returns only on failure).
/// Only raw system calls: callable between a fork or clone and exec.
///
/// # Safety
/// Every array is NULL-terminated and points to NUL-terminated strings; `sh_argv` is
/// writable and has the slot.
pub(crate) unsafe fn exec_along(
    candidates: *const *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    sh_argv: *mut *const c_char,
) -> c_int {
    // SAFETY: the caller's contract on the arrays.
    unsafe {
        let mut eacces = false;
        let mut last = libc::ENOENT;
        let mut c = candidates;
        while !(*c).is_null() {
            libc::execve(*c, argv, envp);
            let mut e = errno();
            if e == libc::ENOEXEC {
                *sh_argv.add(1) = *c;
                libc::execve(*sh_argv, sh_argv as *const *const c_char, envp);
                e = errno();
            }
            match e {
                libc::EACCES => eacces = true,
                libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return e,
            }
            last = e;
            c = c.add(1);
        }
        if eacces { libc::EACCES } else { last }
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod clone3;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use clone3::run;
/// `clone3(args)` with fork semantics (no `CLONE_VM` in `args`): returns 0 in the
/// child, which goes on from here on its own copy of our memory; in the parent the
/// child's pid, or -1 with `errno` set.
///
/// # Safety
/// In a multithreaded process the child may make raw, async-signal-safe system calls
/// only (no allocation, no lock) until it execs or exits; `args` must not ask for
/// `CLONE_VM` (see [`clone3_entry`] for that).
///
/// ```
/// use exec_world_sys::launch::{CloneArgs, clone3_fork};
/// let mut args = CloneArgs { exit_signal: libc::SIGCHLD as u64, ..CloneArgs::default() };
/// // SAFETY: the child only exits.
/// let pid = unsafe { clone3_fork(&mut args) };
/// if pid == 0 {
///     unsafe { libc::_exit(7) };
/// }
/// let mut st = 0;
/// unsafe { libc::waitpid(pid as i32, &mut st, 0) };
/// assert_eq!(libc::WEXITSTATUS(st), 7);
/// ```
pub unsafe fn clone3_fork(args: &mut CloneArgs) -> i64 {
    // SAFETY: the caller's contract; clone3 reads `args` only.
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use clone3::{ChildStack, clone3_entry};

/// No `clone3` child entry for this platform: std's spawn.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn run(_: &Prepared, _: Stdio, _: Option<BorrowedFd<'_>>) -> io::Result<Outcome> {
    Ok(Outcome::Unsupported)
}
