//! Pseudo-terminals for PTY processes: the pair and the controlling terminal come from
//! exec-world-sys's one PTY helper; this adds a non-blocking async master and resize.

use std::os::fd::OwnedFd;

use rustix::fs::OFlags;
use tokio::io::unix::AsyncFd;

/// A master side registered with the tokio reactor.
#[derive(Debug)]
pub(crate) struct Master {
    fd: AsyncFd<OwnedFd>,
}

/// Open a PTY pair of the given size: (master, slave), both close-on-exec.
pub(crate) fn open(cols: u16, rows: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let pty = exec_world_sys::pty::open(cols, rows)?;
    Ok((pty.master, pty.slave))
}

/// Make the calling child process a session leader with `fd 0` as controlling terminal
/// (called in `pre_exec`).
pub(crate) fn make_controlling() -> std::io::Result<()> {
    exec_world_sys::pty::make_controlling_terminal()
}

impl Master {
    /// Wrap the master fd (switched to non-blocking).
    pub(crate) fn new(fd: OwnedFd) -> std::io::Result<Master> {
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
        Ok(Master {
            // SAFETY: the fd is owned by the AsyncFd and stays open for its lifetime.
            fd: unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?,
        })
    }

    /// Read up to `buf.len()` bytes; `Ok(0)` at end (EIO: every slave fd closed).
    pub(crate) async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|inner| Ok(rustix::io::read(inner.get_ref(), &mut *buf)?)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Write all of `data`.
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|inner| Ok(rustix::io::write(inner.get_ref(), data)?)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Set the terminal size.
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> std::io::Result<()> {
        exec_world_sys::pty::set_size(self.fd.get_ref(), cols, rows)
    }
}
