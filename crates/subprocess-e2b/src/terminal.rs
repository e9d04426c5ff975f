//! `E2bTerminal`: the [`TerminalBackend`] over envd's PTY. Input is SendInput `pty`
//! bytes, resize is envd's Update, signals go to the terminal's foreground process
//! group (`kill -s NAME -- -TPGID` through the trusted shell), terminate runs the tree
//! kill with hang-up over the whole session.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use crate::session::Session;
use async_trait::async_trait;
use e2b_core::proto::process::{ProcessInput, ProcessSelector, PtySize};
use exec_world::{Error, ExitStatus, OutputStream, Signal, TermSize, TerminalBackend};

/// A program on a PTY in the sandbox.
pub(crate) struct E2bTerminal {
    pub(crate) session: Arc<Session>,
    output: Mutex<Option<OutputStream>>,
}

impl E2bTerminal {
    pub(crate) fn new(session: Arc<Session>) -> E2bTerminal {
        let output = session.reader(crate::route::Party::Out);
        E2bTerminal {
            session,
            output: Mutex::new(Some(output)),
        }
    }
}

#[async_trait]
impl TerminalBackend for E2bTerminal {
    fn pid(&self) -> Option<u32> {
        self.session.pid()
    }

    async fn started(&self) -> Result<u32, Error> {
        self.session.started().await.map(|s| s.pid)
    }

    async fn write(&self, data: &[u8]) -> Result<(), Error> {
        let s = self.session.started().await?;
        for chunk in data.chunks(64 << 10) {
            self.session
                .world
                .api
                .send_input(
                    ProcessSelector::Pid(s.envd_pid),
                    ProcessInput::Pty(chunk.to_vec()),
                )
                .await
                .map_err(|e| e.into_world("writing to the terminal"))?;
        }
        Ok(())
    }

    fn take_output(&mut self) -> Option<OutputStream> {
        self.output
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    async fn resize(&self, size: TermSize) -> Result<(), Error> {
        let s = self.session.started().await?;
        let size = PtySize {
            cols: u32::from(size.cols),
            rows: u32::from(size.rows),
        };
        self.session
            .world
            .api
            .resize_pty(ProcessSelector::Pid(s.envd_pid), size)
            .await
            .map_err(|e| e.into_world("resizing the terminal"))
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        let s = self.session.started().await?;
        if self.session.ended() {
            return Ok(());
        }
        self.session.world.shell.signal(s.pid, sig, true).await
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.session.terminate(grace).await
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        self.session.wait().await
    }
}

impl Drop for E2bTerminal {
    fn drop(&mut self) {
        self.session.drop_kill();
    }
}
