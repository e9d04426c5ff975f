//! The [`Terminal`] handle: a program on a pseudo-terminal (interactive shells, TUIs),
//! its spec, and the [`TerminalBackend`] a backend implements.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Error;
use crate::path::WorldPath;
use crate::proc::{EnvBase, ExitStatus, OutputStream, Signal};

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TermSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl Default for TermSize {
    fn default() -> Self {
        TermSize { cols: 80, rows: 24 }
    }
}

/// What to start on a terminal.
///
/// ```
/// # use exec_world::{TerminalSpec, TermSize};
/// let spec = TerminalSpec::shell().size(TermSize { cols: 120, rows: 40 });
/// let spec = TerminalSpec::new("bash").arg("-l");
/// # drop(spec);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TerminalSpec {
    /// The program; `None` is the world user's shell (local: `$SHELL`, else `/bin/sh`).
    pub program: Option<String>,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Environment base (see [`EnvBase`]); `TERM=xterm-256color` is added unless set.
    pub env_base: EnvBase,
    /// Variables on top of the base.
    pub env: BTreeMap<String, String>,
    /// Working directory; relative resolves against [`Subprocess::cwd`](crate::Subprocess::cwd).
    pub cwd: Option<WorldPath>,
    /// Initial size.
    pub size: TermSize,
}

impl TerminalSpec {
    /// The user's shell, 80×24.
    pub fn shell() -> Self {
        TerminalSpec {
            program: None,
            args: Vec::new(),
            env_base: EnvBase::Base,
            env: BTreeMap::new(),
            cwd: None,
            size: TermSize::default(),
        }
    }

    /// `program` on a terminal, 80×24.
    pub fn new(program: impl Into<String>) -> Self {
        TerminalSpec {
            program: Some(program.into()),
            ..TerminalSpec::shell()
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the environment base.
    pub fn env_base(mut self, base: EnvBase) -> Self {
        self.env_base = base;
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: WorldPath) -> Self {
        self.cwd = Some(cwd);
        self
    }

    /// Sets the initial size.
    pub fn size(mut self, size: TermSize) -> Self {
        self.size = size;
        self
    }
}

/// A backend's side of a terminal session; callers use [`Terminal`].
///
/// Methods taking `&self` may run concurrently (write from one task while another
/// resizes). Dropping the backend must end every process of the session.
#[async_trait]
pub trait TerminalBackend: Send + Sync + 'static {
    /// The session leader's pid, once known.
    fn pid(&self) -> Option<u32>;
    /// Waits until started; the pid or the start error.
    async fn started(&self) -> Result<u32, Error>;
    /// Writes input bytes (keystrokes) to the terminal.
    async fn write(&self, data: &[u8]) -> Result<(), Error>;
    /// Takes the output stream (once): everything the terminal displays, raw bytes.
    fn take_output(&mut self) -> Option<OutputStream>;
    /// Changes the terminal size (the session gets SIGWINCH).
    async fn resize(&self, size: TermSize) -> Result<(), Error>;
    /// Sends `sig` to the terminal's foreground process group (as a keyboard would).
    async fn signal(&self, sig: Signal) -> Result<(), Error>;
    /// Ends every process group of the session (and tracked descendants): SIGHUP and
    /// SIGTERM, `grace`, then SIGKILL. Returns the leader's status.
    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error>;
    /// Waits for the session leader to exit.
    async fn wait(&self) -> Result<ExitStatus, Error>;
}

/// A program running on a pseudo-terminal, from [`Subprocess::spawn_terminal`](crate::Subprocess::spawn_terminal).
///
/// **Drop** ends every process of the session (like [`Terminal::terminate`] with no grace).
pub struct Terminal {
    inner: Box<dyn TerminalBackend>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("pid", &self.pid())
            .finish()
    }
}

impl Terminal {
    /// Wraps a backend's terminal.
    pub fn new(inner: Box<dyn TerminalBackend>) -> Terminal {
        Terminal { inner }
    }

    /// The session leader's pid, once known.
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid()
    }

    /// Waits until started; the pid or the start error.
    pub async fn started(&self) -> Result<u32, Error> {
        self.inner.started().await
    }

    /// Writes input bytes (keystrokes; `b"\x03"` is Ctrl-C as the line discipline sees it).
    pub async fn write(&self, data: &[u8]) -> Result<(), Error> {
        self.inner.write(data).await
    }

    /// Takes the output stream (once).
    pub fn take_output(&mut self) -> Option<OutputStream> {
        self.inner.take_output()
    }

    /// Resizes the terminal.
    pub async fn resize(&self, size: TermSize) -> Result<(), Error> {
        self.inner.resize(size).await
    }

    /// Sends `sig` to the foreground process group.
    pub async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.inner.signal(sig).await
    }

    /// Ends every process group of the session; see [`TerminalBackend::terminate`].
    pub async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.inner.terminate(grace).await
    }

    /// Waits for the session leader to exit.
    pub async fn wait(&self) -> Result<ExitStatus, Error> {
        self.inner.wait().await
    }
}
