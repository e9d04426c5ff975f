//! The local terminal: its size, and raw mode with a guard that restores the saved
//! settings when dropped (normal return, error, or unwinding panic), plus an explicit
//! restore used by the panic hook path in `main`.

use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use rustix::termios::{self, OptionalActions, Termios};

/// Settings saved by the active raw-mode guard, so a panic hook can restore them too.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

fn stdin_fd() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

/// `(cols, rows)` of the terminal on stdin (or stdout), 80x24 when unknown.
pub fn size() -> (u32, u32) {
    for fd in [rustix::stdio::stdin(), rustix::stdio::stdout()] {
        if let Ok(ws) = termios::tcgetwinsize(fd)
            && ws.ws_col > 0
            && ws.ws_row > 0
        {
            return (u32::from(ws.ws_col), u32::from(ws.ws_row));
        }
    }
    (80, 24)
}

/// Raw mode on stdin while alive.
pub struct RawMode {
    _private: (),
}

impl RawMode {
    /// Save the terminal settings and switch to raw mode.
    pub fn enable() -> std::io::Result<RawMode> {
        let fd = stdin_fd();
        let saved = termios::tcgetattr(fd)?;
        let mut raw = saved.clone();
        raw.make_raw();
        if let Ok(mut slot) = SAVED.lock() {
            *slot = Some(saved);
        }
        termios::tcsetattr(fd, OptionalActions::Now, &raw)?;
        Ok(RawMode { _private: () })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Put back the settings saved by [`RawMode::enable`], if any (idempotent).
pub fn restore() {
    let saved = match SAVED.lock() {
        Ok(mut slot) => slot.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    if let Some(t) = saved {
        let _ = termios::tcsetattr(stdin_fd(), OptionalActions::Now, &t);
    }
}

/// Read e2bx's stdin on a plain thread (a blocking read cannot be cancelled, and this way
/// it never holds up the runtime's shutdown), in chunks of at most `chunk` bytes; the
/// channel closes at EOF or on a read error.
pub fn stdin_reader(chunk: usize) -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let spawned = std::thread::Builder::new()
        .name("e2bx-stdin".into())
        .spawn(move || {
            let mut buf = vec![0u8; chunk.max(1)];
            loop {
                match rustix::io::read(rustix::stdio::stdin(), &mut buf[..]) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    Err(_) => break,
                }
            }
        });
    // Without the thread the sender is gone and the channel reads as EOF.
    drop(spawned);
    rx
}
