//! Termination signals to e2bx itself (SIGINT from Ctrl-C, SIGTERM, SIGHUP). Once these
//! handlers exist the default "die at once" action is gone, so every command either waits
//! on [`Interrupts::recv`] itself (run, shell, serve) or is cancelled by `main`, and the
//! cleanup (remote process group, fresh sandbox, embedded emulator) always runs.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The termination signals e2bx handles.
pub struct Interrupts {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Interrupts {
    /// Install the handlers.
    pub fn install() -> std::io::Result<Interrupts> {
        Ok(Interrupts {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Wait for the next one; returns its number (2, 15 or 1).
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => 2,
            _ = self.term.recv() => 15,
            _ = self.hup.recv() => 1,
        }
    }
}
