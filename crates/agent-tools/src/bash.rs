//! The bash tool: runs a command string through the world's shell (`bash -c`, else
//! `sh -c`) with cwd, env, a timeout and a per-stream output cap, and returns a
//! serializable [`BashOutput`]. Written only against [`Subprocess`].
//!
//! Memory is bounded: both pipes are drained together until EOF, and bytes past the cap
//! are counted and discarded, so a command printing gigabytes costs at most the cap.
//! A non-zero exit is data ([`BashOutput::exit_code`]), never an error.
//!
//! **Lifetime of what the command starts**: by default, when `run` returns nothing the
//! command started is left running. After the shell exits, output is still drained for
//! [`BashRequest::linger`] (a background job may still be writing); then the process
//! group (and every tracked descendant) is terminated. On timeout the same termination
//! runs at once and `timed_out` is set; [`BashTool::run_cancellable`] does the same when
//! its token fires (`cancelled`). Dropping the `run` future drops the
//! [`exec_world::Child`], which kills the group too. With
//! [`BashRequest::keep_background`] a command that exits in time leaves its background
//! jobs running (detached); they should redirect their output, since the pipes are
//! closed when `run` returns.
//!
//! **Errors never leave processes behind**: when waiting fails (a lost connection, a
//! process deadline of the world) the whole group is terminated before the error is
//! returned; termination itself is bounded by the grace plus [`KILL_BOUND`], so `run`
//! returns within `timeout + grace + KILL_BOUND` plus the spawn's handshake.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use exec_world::{
    Child, Error, ExitStatus, OutputStream, SpawnSpec, StdinMode, Subprocess, WorldPath,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::capture::{Capture, CapturedOutput};

/// Default [`BashRequest::timeout`]: 2 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default [`BashRequest::max_output_bytes`]: 64 KiB per stream.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;
/// Default [`BashRequest::grace`] between SIGTERM and SIGKILL: 2 s.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// Default [`BashRequest::linger`] after the shell exits: 250 ms.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(250);
/// After termination, how long output still in flight is awaited before giving up.
const FINAL_DRAIN: Duration = Duration::from_secs(5);
/// How long the termination may take beyond the grace before `run` gives up on it and
/// reports an error (a frozen or unreachable world must not hold the tool for the sum of
/// its transport timeouts); dropping the child then retries the kill in the background.
pub const KILL_BOUND: Duration = Duration::from_secs(15);

mod duration_ms {
    //! Serializes a `Duration` as whole milliseconds.
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// What to run. Deserializable from a harness's JSON (durations in milliseconds:
/// `{"command": "ls", "timeout": 5000}`); missing fields take the defaults.
///
/// ```
/// # use agent_tools::bash::BashRequest;
/// # use std::time::Duration;
/// let req = BashRequest::new("cargo test 2>&1 | tail -n 20")
///     .cwd("/home/user/project")
///     .env("RUST_BACKTRACE", "1")
///     .timeout(Duration::from_secs(600))
///     .max_output_bytes(32 * 1024);
/// # drop(req);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct BashRequest {
    /// The command string, given to `bash -c` (or `sh -c`).
    pub command: String,
    /// Working directory (relative: against the Subprocess's cwd); `None`: its cwd.
    pub cwd: Option<String>,
    /// Variables set on top of the world's base environment.
    pub env: BTreeMap<String, String>,
    /// How long the command may run before it is terminated.
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Bytes kept per stream (stdout and stderr each); the rest is counted, discarded.
    pub max_output_bytes: usize,
    /// Grace between SIGTERM and SIGKILL when terminating.
    #[serde(with = "duration_ms")]
    pub grace: Duration,
    /// How long to keep reading after the shell exited while a background process still
    /// holds the output open, before terminating it.
    #[serde(with = "duration_ms")]
    pub linger: Duration,
    /// Leave background jobs running when the shell exits in time (default false: they
    /// are terminated). A timeout still terminates everything.
    pub keep_background: bool,
    /// Text given to the command's standard input, then EOF; `None`: `/dev/null`.
    /// Written concurrently, so a command that never reads it does not block the tool.
    pub stdin: Option<String>,
}

impl Default for BashRequest {
    fn default() -> Self {
        BashRequest {
            command: String::new(),
            cwd: None,
            env: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT,
            grace: DEFAULT_GRACE,
            linger: DEFAULT_LINGER,
            keep_background: false,
            stdin: None,
        }
    }
}

impl BashRequest {
    /// A request for `command` with the defaults.
    pub fn new(command: impl Into<String>) -> Self {
        BashRequest {
            command: command.into(),
            ..BashRequest::default()
        }
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the per-stream cap.
    pub fn max_output_bytes(mut self, cap: usize) -> Self {
        self.max_output_bytes = cap;
        self
    }

    /// Sets the termination grace.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the linger after the shell exits.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sets [`BashRequest::stdin`].
    pub fn stdin(mut self, input: impl Into<String>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// Sets [`BashRequest::keep_background`].
    pub fn keep_background(mut self, keep: bool) -> Self {
        self.keep_background = keep;
        self
    }
}

/// The outcome of a command that ran (whatever its exit code).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BashOutput {
    /// The shell's exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the shell (Linux numbering), when one did (e.g. 15 or 9
    /// after a timeout).
    pub signal: Option<i32>,
    /// True when the timeout expired and the command was terminated.
    pub timed_out: bool,
    /// True when the caller's cancellation token fired and the command was terminated.
    #[serde(default)]
    pub cancelled: bool,
    /// Standard output (capped).
    pub stdout: CapturedOutput,
    /// Standard error (capped).
    pub stderr: CapturedOutput,
    /// The shell that ran the command (absolute path in the world).
    pub shell: String,
}

impl BashOutput {
    /// True when the command exited with code 0 in time.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }
}

/// Why a command could not be run at all (not: it ran and failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BashError {
    /// Neither `bash` nor `sh` is on the world's PATH.
    #[error("no shell found in the world (looked for bash and sh)")]
    NoShell,
    /// The request is unusable (empty command, bad cwd).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Starting or talking to the process failed.
    #[error(transparent)]
    Proc(#[from] Error),
}

/// The bash tool over one world's [`Subprocess`]. Cheap to clone; the shell's path is
/// looked up once (`which bash`, else `which sh`) and reused.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use agent_tools::bash::{BashTool, BashRequest};
/// # async fn demo(proc: Arc<dyn exec_world::Subprocess>) -> Result<(), agent_tools::bash::BashError> {
/// let tool = BashTool::new(proc);
/// let out = tool.run(BashRequest::new("echo hi; exit 3")).await?;
/// assert_eq!(out.exit_code, Some(3));
/// assert_eq!(out.stdout.text, "hi\n");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BashTool {
    proc: Arc<dyn Subprocess>,
    shell: Arc<OnceCell<String>>,
}

impl std::fmt::Debug for BashTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BashTool")
            .field("shell", &self.shell.get())
            .finish()
    }
}

impl BashTool {
    /// A tool running commands through `proc`.
    pub fn new(proc: Arc<dyn Subprocess>) -> BashTool {
        BashTool {
            proc,
            shell: Arc::new(OnceCell::new()),
        }
    }

    /// The shell used: `bash` if the world has it, else `sh` (looked up once).
    pub async fn shell(&self) -> Result<String, BashError> {
        self.shell
            .get_or_try_init(|| async {
                for name in ["bash", "sh"] {
                    if let Some(path) = self.proc.which(name).await? {
                        return Ok(path);
                    }
                }
                Err(BashError::NoShell)
            })
            .await
            .cloned()
    }

    /// Runs `req` to completion (or timeout) and returns what happened.
    pub async fn run(&self, req: BashRequest) -> Result<BashOutput, BashError> {
        self.run_cancellable(req, &CancellationToken::new()).await
    }

    /// Like [`BashTool::run`], but when `cancel` fires the command is terminated like on
    /// a timeout (the whole group, with the grace) and the output so far is returned
    /// with `cancelled` set. Cleanup has run when this returns.
    pub async fn run_cancellable(
        &self,
        req: BashRequest,
        cancel: &CancellationToken,
    ) -> Result<BashOutput, BashError> {
        if req.command.trim().is_empty() {
            return Err(BashError::InvalidRequest("empty command".into()));
        }
        let shell = self.shell().await?;
        let mut child = self.proc.spawn(spawn_spec(&shell, &req)?)?;
        let _feeder = feed_stdin(&mut child, req.stdin.clone());
        let mut pipes = Pipes {
            out: Drain::new(child.take_stdout(), req.max_output_bytes),
            err: Drain::new(child.take_stderr(), req.max_output_bytes),
        };
        let stop = stop_signal(req.timeout, cancel);
        tokio::pin!(stop);

        let ran = match wait_for_exit(&child, &mut pipes, req.linger, stop).await {
            Ok(ran) => ran,
            Err(lost) => {
                terminate_after_lost_wait(&child, req.grace).await;
                return Err(lost.into());
            }
        };
        let detach = req.keep_background && ran.stopped.is_none() && ran.status.is_some();
        let mut status = ran.status;
        if ran.stopped.is_some() || (!pipes.done() && !detach) {
            let ended = terminate_and_collect(&child, &mut pipes, req.grace).await?;
            status.get_or_insert(ended);
        }
        let status = match status {
            Some(s) => s,
            None => child.wait().await?,
        };
        let (stdout, stderr) = (pipes.out.finish(), pipes.err.finish()); // closes our pipe ends
        if detach {
            child.detach();
        }
        Ok(BashOutput {
            exit_code: status.code,
            signal: status.signal,
            timed_out: ran.stopped == Some(Stop::Timeout),
            cancelled: ran.stopped == Some(Stop::Cancelled),
            stdout,
            stderr,
            shell,
        })
    }
}

/// The `shell -c command` spawn for `req` (env, cwd, piped stdin when input is given).
fn spawn_spec(shell: &str, req: &BashRequest) -> Result<SpawnSpec, BashError> {
    let mut spec = SpawnSpec::new(shell).arg("-c").arg(req.command.clone());
    for (k, v) in &req.env {
        spec = spec.env(k.clone(), v.clone());
    }
    if let Some(cwd) = &req.cwd {
        let cwd = WorldPath::new(cwd.clone())
            .map_err(|e| BashError::InvalidRequest(format!("cwd: {e}")))?;
        spec = spec.cwd(cwd);
    }
    if req.stdin.is_some() {
        spec = spec.stdin(StdinMode::Piped);
    }
    Ok(spec)
}

/// Writes `input` to the child's stdin and closes it, in a task that ends with the
/// returned guard (the feeder must not outlive `run`).
fn feed_stdin(child: &mut Child, input: Option<String>) -> Option<AbortOnDrop> {
    let (input, mut sink) = (input?, child.take_stdin()?);
    Some(AbortOnDrop(tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        // A command that exits without reading gives EPIPE: not an error.
        let _ = sink.write_all(input.as_bytes()).await;
        let _ = sink.shutdown().await;
    })))
}

/// Resolves when the command must be stopped: its timeout (counted from now) expired or
/// `cancel` fired.
fn stop_signal(timeout: Duration, cancel: &CancellationToken) -> impl Future<Output = Stop> + '_ {
    let timeout = tokio::time::sleep(timeout);
    async move {
        tokio::select! {
            _ = timeout => Stop::Timeout,
            _ = cancel.cancelled() => Stop::Cancelled,
        }
    }
}

/// What [`wait_for_exit`] observed.
struct Ran {
    /// The shell's exit, when it was seen.
    status: Option<ExitStatus>,
    /// Why the command must be stopped, when it must.
    stopped: Option<Stop>,
}

/// Drains both pipes until the shell exits and both close, or `stop` fires. When the
/// shell has exited but something still holds a pipe, draining goes on for `linger`
/// only (the caller then ends the group). An error means the end could not be observed.
async fn wait_for_exit<S: Future<Output = Stop>>(
    child: &Child,
    pipes: &mut Pipes,
    linger: Duration,
    mut stop: Pin<&mut S>,
) -> Result<Ran, Error> {
    let wait = child.wait();
    tokio::pin!(wait);
    let mut status = None;
    while status.is_none() || !pipes.done() {
        tokio::select! {
            s = &mut wait, if status.is_none() => status = Some(s?),
            () = pipes.step() => {}
            why = stop.as_mut() => return Ok(Ran { status, stopped: Some(why) }),
        }
        if status.is_some() && !pipes.done() {
            let stopped = linger_on(pipes, linger, stop.as_mut()).await;
            return Ok(Ran { status, stopped });
        }
    }
    Ok(Ran {
        status,
        stopped: None,
    })
}

/// After the shell exited with a pipe still open: drains for at most `linger`, unless
/// `stop` fires first (then returns why).
async fn linger_on<S: Future<Output = Stop>>(
    pipes: &mut Pipes,
    linger: Duration,
    mut stop: Pin<&mut S>,
) -> Option<Stop> {
    let linger = tokio::time::sleep(linger);
    tokio::pin!(linger);
    while !pipes.done() {
        tokio::select! {
            () = pipes.step() => {}
            _ = &mut linger => break,
            why = stop.as_mut() => return Some(why),
        }
    }
    None
}

/// Ends the whole group (SIGTERM, `grace`, SIGKILL) while still draining, then awaits
/// output in flight for at most [`FINAL_DRAIN`]. Gives up after `grace +` [`KILL_BOUND`].
async fn terminate_and_collect(
    child: &Child,
    pipes: &mut Pipes,
    grace: Duration,
) -> Result<ExitStatus, Error> {
    let bound = grace + KILL_BOUND;
    let term = tokio::time::timeout(bound, child.terminate(grace));
    tokio::pin!(term);
    let terminated = loop {
        tokio::select! {
            t = &mut term => break t,
            () = pipes.step() => {}
        }
    };
    let status = terminated.map_err(|_| {
        Error::timeout("terminating the command").with_detail(format!(
            "no confirmation within {bound:?} (the kill is retried in the background)"
        ))
    })??;
    let final_drain = tokio::time::sleep(FINAL_DRAIN);
    tokio::pin!(final_drain);
    while !pipes.done() {
        tokio::select! {
            () = pipes.step() => {}
            _ = &mut final_drain => {
                tracing::warn!("bash tool: output still open after termination");
                break;
            }
        }
    }
    Ok(status)
}

/// Waiting failed, so the end was not observed: ends the group (through a new request)
/// before the error is reported, bounded so a dead world cannot hold the tool.
async fn terminate_after_lost_wait(child: &Child, grace: Duration) {
    match tokio::time::timeout(grace + KILL_BOUND, child.terminate(grace)).await {
        Ok(Ok(_)) => {}
        Ok(Err(t)) => tracing::debug!(error = %t, "bash tool: terminate after a lost wait"),
        Err(_) => tracing::warn!("bash tool: terminate after a lost wait timed out"),
    }
}

/// Both output pipes of the command, drained together.
struct Pipes {
    out: Drain,
    err: Drain,
}

impl Pipes {
    /// True once both pipes are closed.
    fn done(&self) -> bool {
        self.out.done() && self.err.done()
    }

    /// Takes one chunk (or the end) from whichever pipe is ready; pending forever once
    /// both are done. Cancel-safe: no chunk is lost when another branch wins a select.
    async fn step(&mut self) {
        tokio::select! {
            chunk = self.out.next(), if !self.out.done() => self.out.take(chunk),
            chunk = self.err.next(), if !self.err.done() => self.err.take(chunk),
            else => std::future::pending().await,
        }
    }
}

/// Why a command was stopped before it finished by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Timeout,
    Cancelled,
}

/// Aborts the task when dropped (the stdin feeder must not outlive `run`).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One output stream being drained into a bounded capture.
struct Drain {
    stream: Option<OutputStream>,
    capture: Capture,
}

impl Drain {
    fn new(stream: Option<OutputStream>, cap: usize) -> Drain {
        Drain {
            stream,
            capture: Capture::new(cap),
        }
    }

    fn done(&self) -> bool {
        self.stream.is_none()
    }

    /// The next item; pending forever once done (guarded by `done()` in selects).
    async fn next(&mut self) -> Option<Result<bytes::Bytes, Error>> {
        match self.stream.as_mut() {
            Some(s) => s.next().await,
            None => std::future::pending().await,
        }
    }

    fn take(&mut self, item: Option<Result<bytes::Bytes, Error>>) {
        match item {
            Some(Ok(chunk)) => self.capture.push(&chunk),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "bash tool: output stream failed");
                self.stream = None;
            }
            None => self.stream = None,
        }
    }

    fn finish(self) -> CapturedOutput {
        self.capture.finish()
    }
}
