//! The [`Subprocess`] seam: starting programs in the execution world, and the [`Child`]
//! handle (a struct over a backend's [`ChildBackend`]) with its spec and status types.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

use crate::durable::{Attached, DurableId, DurableInfo, DurableSpec, OutputOffsets};
use crate::error::Error;
use crate::path::WorldPath;
use crate::terminal::{Terminal, TerminalSpec};

/// Output bytes of a process (stdout, stderr, or a terminal), in order, exactly as
/// written (not necessarily UTF-8); ends at EOF. An `Err` item ends it.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send + 'static>>;

/// A process's standard input. Dropping it (or `shutdown`) closes the pipe: EOF.
pub type InputSink = Pin<Box<dyn AsyncWrite + Send + 'static>>;

/// Which environment a process starts from, before [`SpawnSpec::env`] is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvBase {
    /// Nothing: the process sees exactly [`SpawnSpec::env`] (plus, on backends that need
    /// it to track descendants, the marker variable `EXEC_WORLD_SPAWN`).
    Clean,
    /// The documented base: `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL` and `LANG` of the
    /// world's user (local: taken from this process's environment where set, with
    /// `PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` and
    /// `LANG=C.UTF-8` as fallbacks). Terminals also get `TERM=xterm-256color`.
    #[default]
    Base,
    /// Everything the backend's own process environment has (local: the parent's env;
    /// E2B: envd's default environment for the user).
    Inherit,
}

/// Where a process's standard input comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StdinMode {
    /// `/dev/null`: reading gives EOF at once.
    #[default]
    Null,
    /// A pipe: take it with [`Child::take_stdin`].
    Piped,
}

/// What to start: a program and its arguments (no shell), environment, cwd, stdin.
///
/// ```
/// # use exec_world::{SpawnSpec, StdinMode};
/// let spec = SpawnSpec::new("grep")
///     .arg("-n")
///     .arg("needle")
///     .env("LC_ALL", "C")
///     .cwd("/home/user".parse()?)
///     .stdin(StdinMode::Piped);
/// # Ok::<(), exec_world::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpawnSpec {
    /// The program: an absolute path, a relative path containing `/` (resolved against
    /// the spawn's cwd), or a bare name looked up in the `PATH` of the resulting
    /// environment.
    pub program: String,
    /// Arguments after the program (argv[1..]).
    pub args: Vec<String>,
    /// The environment base (default [`EnvBase::Base`]).
    pub env_base: EnvBase,
    /// Variables set on top of the base (they win over it).
    pub env: BTreeMap<String, String>,
    /// The working directory; relative ones resolve against [`Subprocess::cwd`];
    /// `None` is `Subprocess::cwd()` itself.
    pub cwd: Option<WorldPath>,
    /// Standard input (default `/dev/null`).
    pub stdin: StdinMode,
    /// Makes the command durable (see [`crate::durable`]): it outlives its [`Child`], its
    /// output and status are kept where it runs. `None` (default): killed on drop.
    pub durable: Option<DurableSpec>,
    /// A label for what this spawn leaves behind (see [`SpawnSpec::group`]); `None`
    /// (default): no label.
    pub group: Option<String>,
}

impl SpawnSpec {
    /// A spec running `program` with no arguments, [`EnvBase::Base`], default cwd,
    /// stdin from `/dev/null`. Stdout and stderr are always piped.
    pub fn new(program: impl Into<String>) -> Self {
        SpawnSpec {
            program: program.into(),
            args: Vec::new(),
            env_base: EnvBase::Base,
            env: BTreeMap::new(),
            cwd: None,
            stdin: StdinMode::Null,
            durable: None,
            group: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
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

    /// Sets standard input.
    pub fn stdin(mut self, mode: StdinMode) -> Self {
        self.stdin = mode;
        self
    }

    /// Makes the spawn durable (backends with [`ProcCapabilities::durable`]; others
    /// refuse it with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)).
    ///
    /// ```
    /// # use exec_world::{DurableId, DurableSpec, SpawnSpec};
    /// let spec = SpawnSpec::new("sleep").arg("600").durable(DurableSpec::new("nap-1".parse()?));
    /// assert_eq!(spec.durable.map(|d| d.id.to_string()).as_deref(), Some("nap-1"));
    /// # Ok::<(), exec_world::Error>(())
    /// ```
    pub fn durable(mut self, spec: DurableSpec) -> Self {
        self.durable = Some(spec);
        self
    }

    /// Labels the spawn's group, for finding what it leaves behind after it ended.
    /// Where the backend gives each spawn a cgroup
    /// ([`ProcCapabilities::contained_escapes`]), the cgroup's name ends with
    /// `--LABEL` (or `--LABEL.<n>`), so every process the spawn ever started (an
    /// `env -i` + `setsid` double fork included, which has neither a parent chain nor
    /// variables) can be found by label and ended long after the spawn itself exited.
    /// Elsewhere the label is ignored. It must match `^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$`
    /// (the spawn fails with [`ErrorKind::InvalidSpec`](crate::ErrorKind::InvalidSpec)
    /// otherwise).
    ///
    /// ```
    /// # use exec_world::SpawnSpec;
    /// let spec = SpawnSpec::new("make").arg("serve").group("sb-1.web");
    /// assert_eq!(spec.group.as_deref(), Some("sb-1.web"));
    /// ```
    pub fn group(mut self, label: impl Into<String>) -> Self {
        self.group = Some(label.into());
        self
    }

    /// Checks [`SpawnSpec::group`]'s label (backends call it before they start anything).
    pub fn check_group(&self) -> Result<(), crate::Error> {
        let Some(g) = &self.group else {
            return Ok(());
        };
        let b = g.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 200
            && b[0] != b'.'
            && b.iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
        if ok {
            Ok(())
        } else {
            Err(crate::Error::invalid_spec(format!(
                "group label {:?}: it must match ^[A-Za-z0-9_-][A-Za-z0-9_.-]{{0,199}}$",
                g.chars().take(210).collect::<String>()
            ))
            .with_op("spawn"))
        }
    }
}

/// How a process ended. A non-zero `code` is data, never an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExitStatus {
    /// The exit code, when the process exited normally.
    pub code: Option<i32>,
    /// The signal number (Linux numbering), when a signal killed it.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// A signal, named portably; numbers are Linux's (the world is Linux locally and in E2B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Signal {
    /// SIGHUP (1).
    Hup,
    /// SIGINT (2).
    Int,
    /// SIGQUIT (3).
    Quit,
    /// SIGKILL (9).
    Kill,
    /// SIGUSR1 (10).
    Usr1,
    /// SIGUSR2 (12).
    Usr2,
    /// SIGTERM (15).
    Term,
    /// SIGCONT (18).
    Cont,
    /// SIGSTOP (19).
    Stop,
    /// SIGWINCH (28).
    Winch,
}

impl Signal {
    /// The Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            Signal::Hup => 1,
            Signal::Int => 2,
            Signal::Quit => 3,
            Signal::Kill => 9,
            Signal::Usr1 => 10,
            Signal::Usr2 => 12,
            Signal::Term => 15,
            Signal::Cont => 18,
            Signal::Stop => 19,
            Signal::Winch => 28,
        }
    }

    /// The conventional name without `SIG` (`"TERM"`), as envd and `kill -s` use it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Hup => "HUP",
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Kill => "KILL",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
            Signal::Term => "TERM",
            Signal::Cont => "CONT",
            Signal::Stop => "STOP",
            Signal::Winch => "WINCH",
        }
    }
}

/// What a process backend supports. New flags default to `false`.
///
/// Build with struct update syntax so flags added later default to `false`:
/// `ProcCapabilities { /* flags you claim */ ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcCapabilities {
    /// Piped stdin ([`StdinMode::Piped`]).
    pub stdin: bool,
    /// [`Child::signal`] delivers arbitrary signals.
    pub signals: bool,
    /// `terminate` reaches the child's whole process group (children, grandchildren,
    /// nohup'd ones).
    pub process_groups: bool,
    /// `terminate` also reaches descendants that left the group with `setsid`.
    pub escaped_descendants: bool,
    /// `terminate` and `Drop` reach *every* process a spawn started, even one that left
    /// the session, cleared its environment (`env -i`, so no marker) and lost its parent
    /// (e.g. a cgroup per spawn, ended with `cgroup.kill`).
    pub contained_escapes: bool,
    /// [`EnvBase::Clean`] gives exactly the explicit environment.
    pub clean_env: bool,
    /// [`Subprocess::spawn_terminal`] works.
    pub terminals: bool,
    /// [`Terminal::resize`] reaches the terminal (`stty size` sees it).
    pub terminal_resize: bool,
    /// [`Child::wait`] returns when the program exits, even while a background
    /// descendant still holds its stdout/stderr open. Without it (envd 0.6.13 reports a
    /// process's end only after its output pipes close), such a descendant keeps `wait`
    /// pending until it ends or is terminated.
    pub exit_before_output_eof: bool,
    /// Durable spawns ([`SpawnSpec::durable`]) and [`Subprocess::durable_list`],
    /// [`Subprocess::durable_attach`], [`Subprocess::durable_collect`] work.
    pub durable: bool,
}

/// A backend's side of a running process. Implement this (plus [`Subprocess`]) to add a
/// backend; callers use the [`Child`] wrapper.
///
/// Contract: methods taking `&self` may be called concurrently from several tasks;
/// `wait` may be called many times and returns the same status once the process ended.
/// Dropping the backend without [`ChildBackend::detach`] must end the process group (see
/// [`Child`]).
#[async_trait]
pub trait ChildBackend: Send + Sync + 'static {
    /// The process id in the world, once known.
    fn pid(&self) -> Option<u32>;
    /// Waits until the process started (pid known) or failed to start (the error a
    /// remote start reports, e.g. [`ErrorKind::NotFound`](crate::ErrorKind::NotFound)).
    async fn started(&self) -> Result<u32, Error>;
    /// Takes the stdin pipe (once; `None` after, or when stdin is not piped).
    fn take_stdin(&mut self) -> Option<InputSink>;
    /// Takes the stdout stream (once).
    fn take_stdout(&mut self) -> Option<OutputStream>;
    /// Takes the stderr stream (once).
    fn take_stderr(&mut self) -> Option<OutputStream>;
    /// Waits for the process to end.
    async fn wait(&self) -> Result<ExitStatus, Error>;
    /// Sends `sig` to the process (not its group). A process that already ended: Ok.
    async fn signal(&self, sig: Signal) -> Result<(), Error>;
    /// SIGTERM to the process group and every tracked descendant, waits up to `grace` for
    /// them to exit, then SIGKILL to whatever remains; returns when none survives.
    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error>;
    /// Leaves the process running when the handle is dropped.
    fn detach(&mut self);
}

/// A running (or finished) process started by [`Subprocess::spawn`].
///
/// Output streams must be consumed (or dropped) or the process may block on a full pipe.
///
/// **Drop**: dropping a `Child` whose process group may still be running kills it
/// (SIGKILL to the group and tracked descendants; remote backends send the kill from a
/// background task). Call [`Child::detach`] to leave it running on purpose.
pub struct Child {
    inner: Box<dyn ChildBackend>,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child").field("pid", &self.pid()).finish()
    }
}

impl Child {
    /// Wraps a backend's process.
    pub fn new(inner: Box<dyn ChildBackend>) -> Child {
        Child { inner }
    }

    /// The process id in the world; `None` until known (remote starts).
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid()
    }

    /// Waits until the process started and returns its pid, or the start error.
    pub async fn started(&self) -> Result<u32, Error> {
        self.inner.started().await
    }

    /// Takes stdin (with [`StdinMode::Piped`]); drop it to send EOF.
    pub fn take_stdin(&mut self) -> Option<InputSink> {
        self.inner.take_stdin()
    }

    /// Takes the stdout byte stream.
    pub fn take_stdout(&mut self) -> Option<OutputStream> {
        self.inner.take_stdout()
    }

    /// Takes the stderr byte stream.
    pub fn take_stderr(&mut self) -> Option<OutputStream> {
        self.inner.take_stderr()
    }

    /// Waits for the process to end. A start failure is returned here too.
    pub async fn wait(&self) -> Result<ExitStatus, Error> {
        self.inner.wait().await
    }

    /// Sends `sig` to the process.
    pub async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.inner.signal(sig).await
    }

    /// Ends the process and all it started: SIGTERM to the group (and escaped descendants
    /// where [`ProcCapabilities::escaped_descendants`]), `grace` to exit, then SIGKILL.
    /// Returns the child's status once nothing survives.
    pub async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.inner.terminate(grace).await
    }

    /// Waits for the end, or, when `cancel` fires first, runs [`Child::terminate`] with
    /// `grace` to completion and then returns [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled).
    pub async fn wait_or_cancel(
        &self,
        cancel: &CancellationToken,
        grace: Duration,
    ) -> Result<ExitStatus, Error> {
        tokio::select! {
            status = self.inner.wait() => status,
            _ = cancel.cancelled() => {
                self.inner.terminate(grace).await?;
                Err(Error::cancelled("waiting for a process"))
            }
        }
    }

    /// Gives up the handle and leaves the process running (nothing is killed). Streams not
    /// taken are closed.
    pub fn detach(mut self) {
        self.inner.detach();
    }

    /// The backend, for backend-specific operations.
    pub fn backend(&self) -> &dyn ChildBackend {
        self.inner.as_ref()
    }
}

/// Starting programs in the execution world.
///
/// `spawn` and `spawn_terminal` return at once (they must not wait on a remote round
/// trip; a remote backend starts a task and reports a start failure from
/// [`Child::started`] / [`Child::wait`]). They must be called inside a tokio runtime.
#[async_trait]
pub trait Subprocess: Send + Sync {
    /// The default working directory of spawned processes (absolute).
    fn cwd(&self) -> &WorldPath;

    /// What this backend supports.
    fn capabilities(&self) -> ProcCapabilities;

    /// The absolute path of `program` as found in the base environment's `PATH` (or
    /// `program` itself if it contains `/` and is executable); `None` if not found.
    async fn which(&self, program: &str) -> Result<Option<String>, Error>;

    /// Starts `spec`; stdout and stderr are piped. The child runs in its own session and
    /// process group where the backend has them.
    fn spawn(&self, spec: SpawnSpec) -> Result<Child, Error>;

    /// Starts `spec` on a new pseudo-terminal (its own session).
    fn spawn_terminal(&self, spec: TerminalSpec) -> Result<Terminal, Error>;

    /// The durable commands of this world that run, or ended and are not yet collected.
    /// It returns once this instance's own durable starts still in flight were answered
    /// (a backend's `spawn` may return before its start reached the world, so another
    /// instance, or host, sees a command only after that).
    /// Default: [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # use exec_world::{LocalSubprocess, Subprocess, DurableState};
    /// # async fn demo() -> Result<(), exec_world::Error> {
    /// let proc = LocalSubprocess::new()?;
    /// for c in proc.durable_list().await? {
    ///     println!("{} {} {:?}", c.id, c.program, c.state);
    /// }
    /// # Ok(()) }
    /// ```
    async fn durable_list(&self) -> Result<Vec<DurableInfo>, Error> {
        Err(Error::unsupported("durable commands"))
    }

    /// A [`Child`] for the durable command `id` (running or ended), with its stdout and
    /// stderr from `from` (bytes the cap dropped are skipped and counted in
    /// [`Attached::dropped`]), then live, then its status. NotFound when there is no
    /// such command. Default: [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # use exec_world::{LocalSubprocess, OutputOffsets, Subprocess};
    /// # async fn demo() -> Result<(), exec_world::Error> {
    /// let proc = LocalSubprocess::new()?;
    /// let mut a = proc.durable_attach(&"nap-1".parse()?, OutputOffsets::default()).await?;
    /// let out = a.child.take_stdout();
    /// let status = a.child.wait().await?;
    /// # let _ = (out, status); Ok(()) }
    /// ```
    async fn durable_attach(&self, id: &DurableId, from: OutputOffsets) -> Result<Attached, Error> {
        let _ = (id, from);
        Err(Error::unsupported("durable commands"))
    }

    /// Forgets an ended durable command's record (its output and status); its id may be
    /// used again. Running: InvalidSpec. Missing: NotFound. Default:
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # use exec_world::{LocalSubprocess, Subprocess};
    /// # async fn demo() -> Result<(), exec_world::Error> {
    /// let proc = LocalSubprocess::new()?;
    /// proc.durable_collect(&"nap-1".parse()?).await?;
    /// # Ok(()) }
    /// ```
    async fn durable_collect(&self, id: &DurableId) -> Result<(), Error> {
        let _ = id;
        Err(Error::unsupported("durable commands"))
    }
}

#[cfg(test)]
mod tests {
    use super::SpawnSpec;
    use crate::ErrorKind;

    #[test]
    fn group_labels_are_checked() {
        for ok in ["a", "sbx0123.web", "-", "x_y-z.1", &"a".repeat(200)] {
            assert!(
                SpawnSpec::new("true").group(ok).check_group().is_ok(),
                "{ok}"
            );
        }
        assert!(SpawnSpec::new("true").check_group().is_ok());
        for bad in ["", ".a", "a/b", "a b", "a*", "../x", "é", &"a".repeat(201)] {
            let e = SpawnSpec::new("true")
                .group(bad)
                .check_group()
                .expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{bad}: {e}");
            assert_eq!(e.op(), Some("spawn"));
        }
    }
}
