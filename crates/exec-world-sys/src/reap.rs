//! Waiting for a `launch.rs` child through its pidfd, and reaping children whose waiter
//! went away before they exited (so none stays a zombie for long).

use std::io;
use std::os::fd::OwnedFd;

/// Children whose reaper was dropped before they exited (a runtime shut down): reaped
/// without blocking by later launches, so none stays a zombie for long.
static ORPHANS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Reaps the orphaned children (see `ORPHANS`) that have exited.
pub fn reap_orphans() {
    let Ok(mut orphans) = ORPHANS.try_lock() else {
        return;
    };
    orphans.retain(|&pid| {
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child's pid; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
        r == 0
    });
}

/// Waits for the child behind `pidfd` (pid `pid`) to exit and reaps it.
pub async fn wait(pid: u32, pidfd: OwnedFd) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    /// Hands the pid to [`ORPHANS`] when the wait ends before the reaping.
    struct Guard(Option<u32>);
    impl Drop for Guard {
        fn drop(&mut self) {
            if let (Some(pid), Ok(mut o)) = (self.0, ORPHANS.lock()) {
                o.push(pid);
            }
        }
    }
    let mut guard = Guard(Some(pid));
    // SAFETY: an OwnedFd is a valid open descriptor, owned by the AsyncFd until it drops.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)?
    };
    loop {
        let mut ready = fd.readable().await?;
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child's pid (the pidfd we hold keeps the pid from
        // being reused until it is reaped here); `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
        if r == pid as i32 {
            guard.0 = None;
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                guard.0 = None;
                return Err(e);
            }
        }
        ready.clear_ready();
    }
}
