//! The host-death keeper: a local spawn that is not durable does not outlive the process
//! that started it (the host), even when the host is SIGKILLed and runs no destructor.
//!
//! At the first [`register`] this process forks one small *keeper* process (no `exec`:
//! it runs only raw system calls from then on, on memory it maps itself). The keeper
//! leaves our session (so a Ctrl-C or hang-up aimed at the host's group does not end it
//! first), ignores the terminal signals, keeps none of our files open but the read end
//! of a pipe whose only write end is ours (close-on-exec, so no spawn inherits it), and
//! reads fixed 64-byte records from it: a spawn's process group id with the name of its
//! cgroup (registered), or the negated id (the leader was reaped, or the spawn is to
//! outlive the host: forgotten). When every write end is closed (the host exited, however), the
//! read returns end-of-file, and the keeper writes `cgroup.kill` of every registered
//! spawn's cgroup (which reaches what left the group) and SIGKILLs every registered
//! process group, then exits.
//!
//! Why not `PR_SET_PDEATHSIG` on each leader: the kernel sends it when the *thread* that
//! forked the child ends, not the process, so a spawn made from a short-lived thread (a
//! `spawn_blocking` worker, which tokio retires after 10 s idle) would be killed while
//! the host lives on; and it reaches only the leader, not its group or cgroup. The keeper
//! costs one `fork` per host process and one non-blocking 64-byte `write` per spawn and
//! per reap, off the kernel's critical path of the spawn itself.
//!
//! Limits: a record that cannot be written (the keeper is gone, or a burst filled the
//! pipe, 1 MiB where the system allows it) is dropped with a debug log: a dropped
//! registration leaves that spawn unguarded, a dropped forget leaves a stale id that the
//! keeper would signal at the host's end even if the kernel reused it meanwhile; without a cgroup per spawn, a process that left
//! the spawn's process group (`setsid`) is not reached (as with the E2B plain mode); a
//! fork of the host that does not exec keeps the write end open, so the keeper then waits
//! for that fork too. Durable spawns must not be registered.
//!
//! ```
//! // A process group id no process can have (pids stay below 2^22): harmless.
//! exec_world_sys::keeper::register(1 << 23, None);
//! exec_world_sys::keeper::forget(1 << 23);
//! ```

use std::ffi::{CString, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// Size of one record: the id (4 bytes, native order), the name's length, the name.
const RECORD: usize = 64;
/// Longest cgroup name a record carries (longer ones: the process group only).
const MAX_NAME: usize = RECORD - 5;
/// Most spawns the keeper tracks at once (more are not tracked).
const TABLE: usize = 1 << 14;

/// The write end of the keeper's pipe.
struct Keeper {
    tx: OwnedFd,
}

static KEEPER: OnceLock<Option<Keeper>> = OnceLock::new();

/// Registers the spawn led by `pgid` (its own process group) and its cgroup `cgroup`
/// (a directory of this process's spawn cgroups, if it got one): the keeper ends them
/// when this process is gone. Starts the keeper on first use; never fails (see the
/// module docs for what is dropped).
pub fn register(pgid: u32, cgroup: Option<&Path>) {
    let name = cgroup
        .filter(|d| d.parent() == crate::cgroup::parent())
        .and_then(Path::file_name)
        .map(|n| n.as_bytes())
        .filter(|n| n.len() <= MAX_NAME && !n.is_empty())
        .unwrap_or_default();
    send(pgid as i32, name);
}

/// Forgets the spawn led by `pgid` (its leader was reaped, or it is durable and is to
/// outlive this process).
pub fn forget(pgid: u32) {
    if KEEPER.get().is_some_and(Option::is_some) {
        send(-(pgid as i32), &[]);
    }
}

fn send(id: i32, name: &[u8]) {
    if id == 0 || id == i32::MIN {
        return;
    }
    let Some(k) = KEEPER.get_or_init(start).as_ref() else {
        return;
    };
    let mut rec = [0u8; RECORD];
    rec[..4].copy_from_slice(&id.to_ne_bytes());
    rec[4] = name.len() as u8;
    rec[5..5 + name.len()].copy_from_slice(name);
    // SAFETY: a valid buffer of RECORD bytes; a pipe write of at most PIPE_BUF is atomic.
    let n = unsafe { libc::write(k.tx.as_raw_fd(), rec.as_ptr() as *const c_void, RECORD) };
    if n != RECORD as isize {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "host-death keeper: record dropped"
        );
    }
}

/// Forks the keeper; `None` when the pipe or the fork fails.
fn start() -> Option<Keeper> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: a valid out-array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: pipe2 just returned these two fds, owned by nothing else.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on our own fd. A bigger pipe (best effort: up to the system's
    // limit) holds 16384 records, so a burst of spawns does not drop any.
    unsafe {
        libc::fcntl(tx.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(tx.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
    }
    // Everything the keeper needs from our memory is made before the fork.
    let parent = crate::cgroup::parent()
        .and_then(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .unwrap_or_default();
    // SAFETY: the child runs only `keeper_main` (raw system calls, no allocation, no
    // lock) and never returns.
    match unsafe { libc::fork() } {
        0 => unsafe { keeper_main(rx.as_raw_fd(), parent.as_bytes()) },
        pid if pid > 0 => {
            drop(rx);
            Some(Keeper { tx })
        }
        _ => None,
    }
}

/// The keeper process (see the module docs).
///
/// # Safety
/// Only in the child of `fork`: it uses raw system calls on its own stack and mappings.
unsafe fn keeper_main(rx: RawFd, parent: &[u8]) -> ! {
    // SAFETY: raw system calls on fds and memory of this process only.
    unsafe {
        libc::setsid();
        // Every signal back to its default, the terminal's ignored, none blocked.
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for sig in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Only the pipe: stdin; stdout and stderr to /dev/null; nothing else open.
        libc::dup2(rx, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        libc::dup2(null, 1);
        libc::dup2(null, 2);
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..4096 {
                libc::close(fd);
            }
        }
        let table = libc::mmap(
            std::ptr::null_mut(),
            TABLE * RECORD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if table == libc::MAP_FAILED {
            libc::_exit(1);
        }
        let table = table as *mut [u8; RECORD];
        let mut n = 0usize;
        let id_of = |r: &[u8]| i32::from_ne_bytes([r[0], r[1], r[2], r[3]]);
        let mut buf = [0u8; RECORD * 64];
        loop {
            let got = libc::read(0, buf.as_mut_ptr() as *mut c_void, buf.len());
            if got == 0 {
                break;
            }
            if got < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            // Every write is one whole record (atomic), so reads hold whole records.
            for rec in buf[..got as usize].chunks_exact(RECORD) {
                let id = id_of(rec);
                if id > 0 {
                    if n < TABLE {
                        (*table.add(n)).copy_from_slice(rec);
                        n += 1;
                    }
                } else if let Some(i) = (0..n).find(|&i| id_of(&*table.add(i)) == -id) {
                    n -= 1;
                    *table.add(i) = *table.add(n);
                }
            }
        }
        // The host is gone: end what it registered.
        let mut path = [0u8; 4096 + RECORD + 16];
        for i in 0..n {
            let rec = &*table.add(i);
            let len = rec[4] as usize;
            let need = parent.len() + 1 + len + b"/cgroup.kill".len() + 1;
            if len > 0 && !parent.is_empty() && len <= MAX_NAME && need <= path.len() {
                let mut at = 0;
                for part in [parent, b"/", &rec[5..5 + len], b"/cgroup.kill"] {
                    path[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                path[at] = 0;
                let fd = libc::open(path.as_ptr() as *const libc::c_char, libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, b"1".as_ptr() as *const c_void, 1);
                    libc::close(fd);
                }
            }
            libc::kill(-id_of(rec), libc::SIGKILL);
        }
        libc::_exit(0)
    }
}
