//! `LocalSubprocess`: [`Subprocess`] on this machine, each child in its own session and
//! process group (and cgroup, where this process can make them), with descendant
//! tracking for `terminate` (see `tree.rs`). Children start through `launch.rs`
//! (`clone3`, no copy of this process), else through tokio::process (`spawn_std`).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::net::unix::pipe::{Receiver, Sender};
use tokio::sync::watch;

use super::durable::{Records, default_state_dir};
use super::tree::{MARKER_VAR, Tree, new_marker, send};
use crate::durable::{Attached, DurableId, DurableInfo, OutputOffsets};
use crate::error::Error;
use crate::path::WorldPath;
use crate::proc::{
    Child, ChildBackend, EnvBase, ExitStatus, InputSink, OutputStream, ProcCapabilities, Signal,
    SpawnSpec, StdinMode, Subprocess,
};
use crate::terminal::{Terminal, TerminalSpec};
use exec_world_sys::cgroup::{SpawnCgroup, spawn_joined};
use exec_world_sys::launch::{Launch, Outcome};

/// `PATH` when this process has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Processes on this machine.
///
/// Every child starts in a new session (`setsid`), so it leads its own process group,
/// and carries `EXEC_WORLD_SPAWN=<unique id>` so `terminate` and `Drop` find descendants
/// that left the group. Requires Linux `/proc` for descendant tracking.
///
/// **State directory**: durable commands ([`SpawnSpec::durable`]) keep their records
/// (output, status, stdin FIFO; one 0700 directory per command under `durable/`) in the
/// world's state directory: by default `$XDG_STATE_HOME/exec-world`, else
/// `$HOME/.local/state/exec-world`, else `/tmp/exec-world-<uid>`; set it with
/// [`LocalSubprocess::with_state_dir`]. Every `LocalSubprocess` (in any process of the
/// same user) with the same state directory sees the same durable commands.
#[derive(Clone, Debug)]
pub struct LocalSubprocess {
    cwd: WorldPath,
    records: Records,
    state_dir: PathBuf,
}

impl LocalSubprocess {
    /// Local processes whose default cwd is this process's current directory.
    pub fn new() -> Result<LocalSubprocess, Error> {
        let cwd = std::env::current_dir().map_err(|e| Error::io("current directory", e))?;
        let cwd = cwd
            .to_str()
            .ok_or_else(|| Error::invalid_spec("current directory is not UTF-8"))?;
        let cwd = WorldPath::new(cwd).map_err(|e| Error::invalid_spec(e.to_string()))?;
        Ok(LocalSubprocess::at(cwd))
    }

    /// Local processes whose default cwd is `cwd` (made absolute against `/`).
    pub fn at(cwd: WorldPath) -> LocalSubprocess {
        let state_dir = default_state_dir();
        LocalSubprocess {
            cwd: cwd.resolve(&WorldPath::root()),
            records: Records::new(&state_dir),
            state_dir,
        }
    }

    /// The same processes with `dir` as the world's state directory (where durable
    /// commands keep their records; created 0700 on first use).
    ///
    /// ```
    /// # use exec_world::LocalSubprocess;
    /// let proc = LocalSubprocess::new()?.with_state_dir("/var/lib/my-agent/world");
    /// assert_eq!(proc.state_dir(), std::path::Path::new("/var/lib/my-agent/world"));
    /// # Ok::<(), exec_world::Error>(())
    /// ```
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> LocalSubprocess {
        self.state_dir = dir.into();
        self.records = Records::new(&self.state_dir);
        self
    }

    /// The world's state directory (see [`LocalSubprocess`]).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The absolute cwd for a spec's optional cwd; InvalidSpec if it is not a directory.
    pub(crate) fn resolve_cwd(&self, cwd: Option<&WorldPath>) -> Result<WorldPath, Error> {
        let dir = match cwd {
            Some(c) => c.resolve(&self.cwd),
            None => self.cwd.clone(),
        };
        match std::fs::metadata(dir.as_str()) {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(Error::invalid_spec(format!("cwd {dir} is not a directory"))),
            Err(e) => Err(Error::invalid_spec(format!("cwd {dir}: {e}"))),
        }
    }
}

/// The environment for `base` plus `vars`, plus the marker.
pub(crate) fn build_env(
    base: EnvBase,
    vars: &BTreeMap<String, String>,
    marker: &str,
    terminal: bool,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    match base {
        EnvBase::Clean => {}
        // The host's environment minus credentials (exec_world_sys::env_scrub, the one list).
        EnvBase::Inherit => env.extend(exec_world_sys::env_scrub::scrub(std::env::vars())),
        EnvBase::Base => {
            for key in ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG"] {
                if let Ok(v) = std::env::var(key) {
                    env.insert(key.into(), v);
                }
            }
            env.entry("PATH".into())
                .or_insert_with(|| DEFAULT_PATH.into());
            env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
        }
    }
    if terminal && base != EnvBase::Clean {
        env.entry("TERM".into())
            .or_insert_with(|| "xterm-256color".into());
    }
    env.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.insert(MARKER_VAR.into(), marker.into());
    env
}

/// Spawning needs a tokio runtime (for the pipes and the reaping task).
pub(crate) fn ensure_runtime() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(|_| ())
        .map_err(|_| Error::other("spawn must be called within a tokio runtime"))
}

/// Maps a spawn error of `program` to a Error kind.
pub(crate) fn spawn_error(program: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::not_found(program),
        std::io::ErrorKind::PermissionDenied => Error::permission_denied(program),
        std::io::ErrorKind::InvalidInput => Error::invalid_spec(format!("{program}: {e}")),
        _ => Error::io(format!("spawn {program}"), e),
    }
}

/// Converts a std exit status.
pub(crate) fn to_status(s: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: s.code(),
        signal: s.signal(),
    }
}

/// Owns the OS child in a task; publishes its status. Shared by processes and terminals.
pub(crate) struct Reaped {
    pub(crate) pid: u32,
    pub(crate) tree: Tree,
    status: watch::Receiver<Option<Result<ExitStatus, String>>>,
}

impl Reaped {
    /// Starts the reaping task for a std-spawned `child`.
    pub(crate) fn start(
        mut child: tokio::process::Child,
        marker: String,
        cgroup: Option<std::path::PathBuf>,
    ) -> Result<Reaped, Error> {
        let pid = child
            .id()
            .ok_or_else(|| Error::other("spawned child has no pid"))?;
        exec_world_sys::keeper::register(pid, cgroup.as_deref());
        // Before the reaper runs: the tree checks the unreaped leader's cgroup.
        let tree = Tree::new(pid, marker, cgroup);
        Ok(Reaped::watch(pid, tree, async move { child.wait().await }))
    }

    /// Starts the reaping task for a child `launch`ed into its cgroup (`cgroup`, when it
    /// got one: the kernel placed it there at birth, so the tree is contained).
    pub(crate) fn start_launched(
        pid: u32,
        pidfd: std::os::fd::OwnedFd,
        marker: String,
        cgroup: Option<std::path::PathBuf>,
    ) -> Reaped {
        exec_world_sys::keeper::register(pid, cgroup.as_deref());
        let tree = Tree::born_in(pid, marker, cgroup);
        Reaped::watch(pid, tree, exec_world_sys::reap::wait(pid, pidfd))
    }

    /// Publishes what `wait` yields. Every spawn is registered with the host-death
    /// keeper (`exec_world_sys::keeper`: it ends the spawn's group and cgroup when this
    /// process is gone) until its leader is reaped; a spawn that is to outlive the host (a
    /// durable one) calls `exec_world_sys::keeper::forget` with its pid.
    fn watch<F>(pid: u32, tree: Tree, wait: F) -> Reaped
    where
        F: std::future::Future<Output = std::io::Result<std::process::ExitStatus>> + Send + 'static,
    {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let r = wait.await.map(to_status).map_err(|e| e.to_string());
            exec_world_sys::keeper::forget(pid);
            let _ = tx.send(Some(r));
        });
        Reaped {
            pid,
            tree,
            status: rx,
        }
    }

    pub(crate) fn exited(&self) -> bool {
        self.status.borrow().is_some()
    }

    pub(crate) async fn wait(&self) -> Result<ExitStatus, Error> {
        let mut rx = self.status.clone();
        let r = rx
            .wait_for(|s| s.is_some())
            .await
            .map_err(|_| Error::other("reaper task ended without a status"))?;
        match r.as_ref() {
            Some(Ok(s)) => Ok(*s),
            Some(Err(e)) => Err(Error::other(format!("wait: {e}"))),
            None => Err(Error::other("no status")),
        }
    }

    pub(crate) fn signal(&self, sig: Signal) {
        if !self.exited() {
            send(self.pid as i32, sig.number());
        }
    }

    pub(crate) async fn terminate(
        &self,
        grace: Duration,
        hangup: bool,
    ) -> Result<ExitStatus, Error> {
        self.tree.terminate(grace, hangup).await;
        self.wait().await
    }
}

struct LocalChild {
    reaped: Arc<Reaped>,
    // Mutex only to make the handle Sync; taken once, never contended.
    stdin: std::sync::Mutex<Option<InputSink>>,
    stdout: std::sync::Mutex<Option<OutputStream>>,
    stderr: std::sync::Mutex<Option<OutputStream>>,
    detached: bool,
}

fn output<R>(r: R, what: &'static str) -> OutputStream
where
    R: tokio::io::AsyncRead + Send + 'static,
{
    Box::pin(
        tokio_util::io::ReaderStream::with_capacity(r, 64 * 1024)
            .map(move |x| x.map_err(|e| Error::io(what, e))),
    )
}

#[async_trait]
impl ChildBackend for LocalChild {
    fn pid(&self) -> Option<u32> {
        Some(self.reaped.pid)
    }

    async fn started(&self) -> Result<u32, Error> {
        Ok(self.reaped.pid)
    }

    fn take_stdin(&mut self) -> Option<InputSink> {
        self.stdin.get_mut().ok()?.take()
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        self.stdout.get_mut().ok()?.take()
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        self.stderr.get_mut().ok()?.take()
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        self.reaped.wait().await
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.reaped.signal(sig);
        Ok(())
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.reaped.terminate(grace, false).await
    }

    fn detach(&mut self) {
        // Past the handle, not past the host (that is what a durable spawn is for): the
        // host-death keeper still ends it, as the host lease does on E2B.
        self.detached = true;
    }
}

impl Drop for LocalChild {
    fn drop(&mut self) {
        if !self.detached {
            self.reaped.tree.kill_on_drop();
        }
    }
}

/// The child handle over a started process and our ends of its pipes.
fn local_child(
    reaped: Reaped,
    stdin: Option<InputSink>,
    stdout: Option<OutputStream>,
    stderr: Option<OutputStream>,
) -> Child {
    Child::new(Box::new(LocalChild {
        reaped: Arc::new(reaped),
        stdin: std::sync::Mutex::new(stdin),
        stdout: std::sync::Mutex::new(stdout),
        stderr: std::sync::Mutex::new(stderr),
        detached: false,
    }))
}

/// `spec` through std's `Command` (it forks the whole process for the `pre_exec` hook):
/// where `clone3` cannot be used (see `launch.rs`).
fn spawn_std(
    spec: &SpawnSpec,
    program: &str,
    cwd: &WorldPath,
    env: &BTreeMap<String, String>,
    marker: String,
    cg: Option<SpawnCgroup>,
) -> Result<Child, Error> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(env)
        .current_dir(cwd.as_str())
        .stdin(match spec.stdin {
            StdinMode::Null => Stdio::null(),
            StdinMode::Piped => Stdio::piped(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    fn new_session() -> std::io::Result<()> {
        rustix::process::setsid()?;
        Ok(())
    }
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the parent.
    let (mut child, cg) = unsafe { spawn_joined(&mut cmd, cg, new_session) }
        .map_err(|e| spawn_error(&spec.program, e))?;
    let stdin = child.stdin.take().map(|s| Box::pin(s) as InputSink);
    let stdout = child.stdout.take().map(|s| output(s, "read stdout"));
    let stderr = child.stderr.take().map(|s| output(s, "read stderr"));
    let reaped = Reaped::start(child, marker, cg)?;
    Ok(local_child(reaped, stdin, stdout, stderr))
}

/// A relative program path with a `/` (`./run.sh`) made absolute against `cwd`; a bare
/// name is left for the `PATH` search.
pub(crate) fn absolute_program(program: &str, cwd: &WorldPath) -> String {
    if program.contains('/') && !program.starts_with('/') {
        match WorldPath::new(program) {
            Ok(p) => p.resolve(cwd).to_string(),
            Err(_) => program.to_string(),
        }
    } else {
        program.to_string()
    }
}

/// Searches `path_var` for an executable `program`.
fn search_path(program: &str, path_var: &str) -> Option<String> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        return is_exec(Path::new(program)).then(|| program.to_string());
    }
    path_var
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| is_exec(p))
        .map(|p| p.to_string_lossy().into_owned())
}

#[async_trait]
impl Subprocess for LocalSubprocess {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn capabilities(&self) -> ProcCapabilities {
        ProcCapabilities {
            stdin: true,
            signals: true,
            process_groups: true,
            escaped_descendants: true,
            // A cgroup per spawn where this process may create them.
            contained_escapes: exec_world_sys::cgroup::available(),
            clean_env: true,
            terminals: true,
            terminal_resize: true,
            exit_before_output_eof: true,
            durable: true,
        }
    }

    async fn which(&self, program: &str) -> Result<Option<String>, Error> {
        let env = build_env(EnvBase::Base, &BTreeMap::new(), "", false);
        let path = env.get("PATH").cloned().unwrap_or_default();
        let program = absolute_program(program, &self.cwd);
        tokio::task::spawn_blocking(move || search_path(&program, &path))
            .await
            .map_err(|e| Error::other(format!("which: {e}")))
    }

    fn spawn(&self, spec: SpawnSpec) -> Result<Child, Error> {
        ensure_runtime()?;
        if spec.program.is_empty() {
            return Err(Error::invalid_spec("empty program"));
        }
        spec.check_group()?;
        if let Some(d) = spec.durable.clone() {
            return self.records.start(self, spec, d);
        }
        let cwd = self.resolve_cwd(spec.cwd.as_ref())?;
        let marker = new_marker();
        let env = build_env(spec.env_base, &spec.env, &marker, false);
        let program = absolute_program(&spec.program, &cwd);
        let cg = SpawnCgroup::create_in_group(&marker, spec.group.as_deref());
        let launched = exec_world_sys::launch::launch(&Launch {
            program: &program,
            args: &spec.args,
            env: &env,
            cwd: cwd.as_str(),
            stdin_piped: spec.stdin == StdinMode::Piped,
            cgroup: cg.as_ref().map(SpawnCgroup::dir_fd),
        });
        let (reaped, stdin, stdout, stderr) = match launched {
            Ok(Outcome::Started(l)) => {
                let reaped = Reaped::start_launched(l.pid, l.pidfd, marker, cg.map(|c| c.dir));
                let pipes = (|| {
                    let stdin = match l.stdin {
                        Some(fd) => {
                            Some(Box::pin(Sender::from_owned_fd_unchecked(fd)?) as InputSink)
                        }
                        None => None,
                    };
                    let stdout = Receiver::from_owned_fd_unchecked(l.stdout)?;
                    let stderr = Receiver::from_owned_fd_unchecked(l.stderr)?;
                    Ok::<_, std::io::Error>((stdin, stdout, stderr))
                })();
                match pipes {
                    Ok((stdin, stdout, stderr)) => (
                        reaped,
                        stdin,
                        Some(output(stdout, "read stdout")),
                        Some(output(stderr, "read stderr")),
                    ),
                    Err(e) => {
                        // No handle will own the child: end it now.
                        reaped.tree.kill_on_drop();
                        return Err(Error::io("register a pipe", e));
                    }
                }
            }
            Ok(Outcome::Unsupported) => {
                return spawn_std(&spec, &program, &cwd, &env, marker, cg);
            }
            Ok(Outcome::Unborn) => {
                // Killed at birth by its cgroup: that one is spoiled; a new one, std's way.
                if let Some(c) = cg {
                    if !c.reused {
                        exec_world_sys::launch::unborn_in_new_cgroup();
                    }
                    exec_world_sys::cgroup::discard(&c.dir);
                }
                let cg = SpawnCgroup::create_new(&marker);
                return spawn_std(&spec, &program, &cwd, &env, marker, cg);
            }
            Err(e) => {
                if let Some(c) = &cg {
                    exec_world_sys::cgroup::remove(&c.dir);
                }
                return Err(spawn_error(&spec.program, e));
            }
        };
        Ok(local_child(reaped, stdin, stdout, stderr))
    }

    fn spawn_terminal(&self, spec: TerminalSpec) -> Result<Terminal, Error> {
        super::pty::spawn(self, spec)
    }

    async fn durable_list(&self) -> Result<Vec<DurableInfo>, Error> {
        let records = self.records.clone();
        tokio::task::spawn_blocking(move || records.list())
            .await
            .map_err(|e| Error::other(format!("list durable commands: {e}")))?
    }

    async fn durable_attach(&self, id: &DurableId, from: OutputOffsets) -> Result<Attached, Error> {
        // Runs on this task (opening the stdin FIFO registers it with this runtime); it
        // reads a few small files of the record.
        self.records.attach(id, from)
    }

    async fn durable_collect(&self, id: &DurableId) -> Result<(), Error> {
        let (records, id) = (self.records.clone(), id.clone());
        tokio::task::spawn_blocking(move || records.collect(&id))
            .await
            .map_err(|e| Error::other(format!("collect durable command: {e}")))?
    }
}
