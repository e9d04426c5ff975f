//! Pseudo-terminals, the one PTY helper of the workspace (rustix, no raw `libc`): open a
//! master/slave pair of a given size, resize it, and make a child's stdin its controlling
//! terminal. Used by the local terminals, the emulator's PTY processes and the tests that
//! drive a command line in a real terminal.
//!
//! ```no_run
//! let pty = exec_world_sys::pty::open(100, 30)?; // columns, rows
//! exec_world_sys::pty::set_size(&pty.master, 120, 40)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};

/// The two ends of a pseudo-terminal, both close-on-exec.
#[derive(Debug)]
pub struct Pty {
    /// What the terminal emulator reads and writes.
    pub master: OwnedFd,
    /// What the program runs on (its stdin, stdout and stderr).
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal pair of `cols` x `rows`. Neither end becomes this process's
/// controlling terminal.
pub fn open(cols: u16, rows: u16) -> std::io::Result<Pty> {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    set_size(&master, cols, rows)?;
    Ok(Pty { master, slave })
}

/// Sets the size of the terminal `fd` belongs to (either end) to `cols` x `rows`; the
/// foreground process group gets `SIGWINCH`.
pub fn set_size(fd: impl AsFd, cols: u16, rows: u16) -> std::io::Result<()> {
    let ws = Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    Ok(tcsetwinsize(fd, ws)?)
}

/// For a child between fork and exec (`CommandExt::pre_exec`): starts a new session and
/// makes its stdin, a terminal's slave end, the controlling terminal. Only raw syscalls,
/// so async-signal-safe.
pub fn make_controlling_terminal() -> std::io::Result<()> {
    rustix::process::setsid()?;
    rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::termios::tcgetwinsize;

    #[test]
    fn opens_a_pair_of_the_size_and_resizes_it() {
        let pty = open(100, 30).expect("open pty");
        let ws = tcgetwinsize(&pty.slave).expect("slave size");
        assert_eq!((ws.ws_col, ws.ws_row), (100, 30));
        set_size(&pty.master, 123, 41).expect("resize");
        let ws = tcgetwinsize(&pty.slave).expect("slave size");
        assert_eq!((ws.ws_col, ws.ws_row), (123, 41));
        // Bytes written on the slave come out of the master.
        rustix::io::write(&pty.slave, b"x").expect("write slave");
        let mut buf = [0u8; 8];
        let n = rustix::io::read(&pty.master, &mut buf).expect("read master");
        assert_eq!(&buf[..n], b"x");
    }
}
