//! The conversation-sandbox contract (`sandbox@1`): one sandbox per conversation that a
//! host kernel creates, hibernates, resumes, destroys, and runs commands and file
//! operations in, possibly from several replicas and sub-agents at once.
//!
//! * [`SandboxProvider`]: the trait; [`SandboxError`]: its error, the one
//!   [`crate::Error`] of the seams, whose kinds carry the contract's distinctions
//!   (`Gone` a kernel acts on by recreating the sandbox; see [`error`]).
//! * [`LocalSandboxes`]: one directory per conversation on this machine (development
//!   without E2B); `sandbox-e2b`'s `E2bSandboxes` is the E2B implementation.
//! * [`validate`]: the checks both implementations share (names, tags, env names, paths,
//!   limits, allowlist hosts).
//! * [`run_capped`]: the exec loop both implementations share (bounded output, timeout,
//!   cancel, whole-tree kill).
//! * The conformance suite: `exec_world_conformance::sandbox` (crate `exec-world-conformance`).
//!
//! Paths are the sandbox's view: absolute POSIX paths, the workspace at
//! [`WORKSPACE`] (`/workspace`), which is also `HOME` and the default cwd of `exec`.
//!
//! ```no_run
//! use exec_world::sandbox::{CreateSpec, ExecSpec, LocalSandboxes, SandboxProvider};
//! # async fn demo() -> Result<(), exec_world::sandbox::SandboxError> {
//! let sandboxes = LocalSandboxes::new(std::env::temp_dir().join("sandboxes"))?;
//! let h = sandboxes.create(CreateSpec::new("conv-1")).await?;
//! sandboxes.write_file(&h, "/workspace/a.txt", b"hi").await?;
//! let out = sandboxes.exec(&h, ExecSpec::new("cat a.txt")).await?;
//! assert_eq!(out.stdout, "hi");
//! sandboxes.destroy(&h).await?;
//! # Ok(()) }
//! ```

mod durable_exec;
pub mod error;
mod local;
mod local_fork;
mod run;
mod scripts;
pub mod validate;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use durable_exec::{
    ExecEnd, ExecEvent, ExecId, ExecInfo, ExecState, ExecStream, TIMEOUT_PROGRAM, durable_program,
    durable_spec, exec_events, exec_id, exec_info, not_an_exec,
};
pub use error::{SandboxError, failed, failed_by, gone, invalid, not_regular_file};
pub use local::LocalSandboxes;
pub use run::{RunOutcome, exit_code_of, run_capped, utf8_cut};
pub use scripts::{
    SANDBOX_ID_VAR, SIGNAL_EXECS_SH, TAG_VAR, UNTAGGED, exec_group, sandbox_group,
    signal_execs_args,
};

/// The workspace inside every sandbox: `HOME` and the default cwd of `exec`.
pub const WORKSPACE: &str = "/workspace";

/// The root-owned, read-only-for-the-user skills directory.
pub const SKILLS: &str = "/skills";

/// What a sandbox is known by: the id the provider returned from `create`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxHandle {
    /// Provider-specific id (an E2B sandbox id, a local directory name).
    pub id: String,
}

impl SandboxHandle {
    /// A handle for a known id (e.g. stored by the kernel between runs).
    pub fn new(id: impl Into<String>) -> SandboxHandle {
        SandboxHandle { id: id.into() }
    }
}

/// Outbound network policy of a sandbox, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Egress {
    /// No internet access.
    #[default]
    None,
    /// Only these hosts (`example.com`, or `*.example.com` for its subdomains only); an
    /// empty list is the same as [`Egress::None`].
    Allowlist(Vec<String>),
    /// Unrestricted (a provider may refuse it unless configured to allow it).
    Open,
}

/// Resources and egress asked for at creation.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxLimits {
    /// CPU cores (positive).
    pub cpu: f64,
    /// Memory in MiB (positive).
    pub memory_mb: u64,
    /// Disk in MiB (positive).
    pub disk_mb: u64,
    /// Outbound network policy.
    pub egress: Egress,
}

impl Default for SandboxLimits {
    /// 1 core, 2048 MiB, 10 GiB of disk, no egress.
    fn default() -> Self {
        SandboxLimits {
            cpu: 1.0,
            memory_mb: 2048,
            disk_mb: 10 * 1024,
            egress: Egress::None,
        }
    }
}

/// Arguments of [`SandboxProvider::create`].
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSpec {
    /// Conversation name (`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`); an existing sandbox of
    /// that name is replaced.
    pub name: String,
    /// Resources and egress.
    pub limits: SandboxLimits,
}

impl CreateSpec {
    /// A sandbox named `name` with default limits.
    pub fn new(name: impl Into<String>) -> CreateSpec {
        CreateSpec {
            name: name.into(),
            limits: SandboxLimits::default(),
        }
    }

    /// With these limits.
    pub fn limits(mut self, limits: SandboxLimits) -> CreateSpec {
        self.limits = limits;
        self
    }
}

/// What [`SandboxProvider::resume`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// Running again (or was running).
    Resumed,
    /// It no longer exists: the kernel should create a new one.
    Gone,
}

/// Arguments of [`SandboxProvider::exec`].
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// A `bash -c` command line.
    pub command: String,
    /// Extra environment (names `^[A-Za-z_][A-Za-z0-9_]*$`), over `HOME=/workspace`,
    /// `LANG=C.UTF-8`.
    pub env: BTreeMap<String, String>,
    /// Working directory (sandbox path); default [`WORKSPACE`].
    pub cwd: Option<String>,
    /// Time limit; at expiry the whole process tree is killed and `timed_out` is set.
    pub timeout: Duration,
    /// Cap on stdout + stderr together.
    pub max_output_bytes: usize,
    /// The holder's tag (see [`validate::tag`]), for [`SandboxProvider::kill_tagged`].
    pub tag: Option<String>,
    /// Cancels the command (its tree is killed; the output so far is returned).
    pub cancel: CancellationToken,
    /// A caller-chosen exec id (`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`): required by
    /// [`SandboxProvider::exec_start`]; with `exec`, it makes the command durable (found by
    /// [`SandboxProvider::exec_list`], attachable) and a retried `exec` with the same id is
    /// refused with [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) instead
    /// of running twice.
    pub id: Option<String>,
    /// Bytes of each output stream a durable exec keeps in the sandbox for attaches
    /// (oldest dropped first, counted); default [`DEFAULT_OUTPUT_CAP`](crate::DEFAULT_OUTPUT_CAP).
    pub kept_output_bytes: u64,
}

impl ExecSpec {
    /// `command` with a 60 s timeout, a 1 MiB output cap, no tag, a fresh token.
    pub fn new(command: impl Into<String>) -> ExecSpec {
        ExecSpec {
            command: command.into(),
            env: BTreeMap::new(),
            cwd: None,
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
            tag: None,
            cancel: CancellationToken::new(),
            id: None,
            kept_output_bytes: crate::DEFAULT_OUTPUT_CAP,
        }
    }

    /// The exec id (see [`ExecSpec::id`]); [`ExecId::random`] gives a fresh one.
    ///
    /// ```
    /// use exec_world::sandbox::{ExecId, ExecSpec};
    /// let spec = ExecSpec::new("make deploy").id("deploy-42");
    /// assert_eq!(spec.id.as_deref(), Some("deploy-42"));
    /// let spec = ExecSpec::new("make").id(ExecId::random().as_str());
    /// assert_eq!(spec.id.map(|i| i.len()), Some(16));
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> ExecSpec {
        self.id = Some(id.into());
        self
    }

    /// Bytes kept per output stream of a durable exec.
    pub fn kept_output_bytes(mut self, bytes: u64) -> ExecSpec {
        self.kept_output_bytes = bytes;
        self
    }

    /// One more environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> ExecSpec {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> ExecSpec {
        self.cwd = Some(cwd.into());
        self
    }

    /// Time limit.
    pub fn timeout(mut self, timeout: Duration) -> ExecSpec {
        self.timeout = timeout;
        self
    }

    /// Output cap.
    pub fn max_output_bytes(mut self, cap: usize) -> ExecSpec {
        self.max_output_bytes = cap;
        self
    }

    /// Holder's tag.
    pub fn tag(mut self, tag: impl Into<String>) -> ExecSpec {
        self.tag = Some(tag.into());
        self
    }

    /// Cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> ExecSpec {
        self.cancel = token;
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// The exit code; `128 + n` when ended by a signal `n` we did not send; `None` on
    /// timeout, cancel, or an unknown end.
    pub exit_code: Option<i32>,
    /// stdout (lossy UTF-8; cut back to a whole character when truncated).
    pub stdout: String,
    /// stderr (same rules).
    pub stderr: String,
    /// stdout + stderr went past `max_output_bytes`.
    pub truncated: bool,
    /// The command was killed at its timeout.
    pub timed_out: bool,
}

/// The head of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    /// At most `max_bytes` bytes.
    pub data: Vec<u8>,
    /// The file is longer than `max_bytes`.
    pub truncated: bool,
}

impl FileContent {
    /// The head of a file from `data`, read with a limit of `max_bytes + 1` bytes: at most
    /// `max_bytes` are kept and `truncated` says whether there were more.
    ///
    /// ```
    /// use exec_world::sandbox::FileContent;
    /// let c = FileContent::capped(b"abcd".to_vec(), 3);
    /// assert_eq!((c.data.as_slice(), c.truncated), (&b"abc"[..], true));
    /// ```
    pub fn capped(mut data: Vec<u8>, max_bytes: u64) -> FileContent {
        let truncated = data.len() as u64 > max_bytes;
        data.truncate(
            usize::try_from(max_bytes)
                .unwrap_or(usize::MAX)
                .min(data.len()),
        );
        FileContent { data, truncated }
    }
}

/// Size and kind of a path (symlinks followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Size in bytes.
    pub size: u64,
    /// A directory.
    pub is_dir: bool,
}

/// What a provider offers beyond the common contract; the conformance suite reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxCapabilities {
    /// Parallel execs and file operations on one sandbox from several tasks and provider
    /// instances.
    pub concurrent_exec: bool,
    /// Background processes survive suspend/resume (memory kept).
    pub suspend_keeps_processes: bool,
    /// Commands run as an unprivileged sandbox user: `/skills` is read-only for them and
    /// file operations resolve with that user's permissions.
    pub user_isolation: bool,
    /// Egress settings are enforced or passed to a control plane that enforces them.
    pub egress_control: bool,
    /// `kill_tagged`, `kill_all` and a timeout reach everything a command started, also
    /// an `env -i` + `setsid` double fork (the command's own cgroup is the ground truth);
    /// without, they reach the command's group, session, descendants and the processes
    /// that kept its variables.
    pub kill_reaches_escapes: bool,
}

/// The conversation-sandbox provider.
///
/// Every operation on a suspended sandbox resumes it first (auto-start). A sandbox that no
/// longer exists is [`ErrorKind::Gone`](crate::ErrorKind::Gone) (from `resume`: [`ResumeOutcome::Gone`]).
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// Creates a sandbox named `spec.name`, replacing any sandbox of that name.
    async fn create(&self, spec: CreateSpec) -> Result<SandboxHandle, SandboxError>;

    /// Makes the sandbox usable again (a suspended one resumes).
    async fn resume(&self, h: &SandboxHandle) -> Result<ResumeOutcome, SandboxError>;

    /// Hibernates it (files kept); a missing or already suspended one counts as done.
    async fn suspend(&self, h: &SandboxHandle) -> Result<(), SandboxError>;

    /// Deletes it with everything in it; a missing one counts as done.
    async fn destroy(&self, h: &SandboxHandle) -> Result<(), SandboxError>;

    /// Deletes every sandbox named `name`.
    async fn destroy_by_name(&self, name: &str) -> Result<(), SandboxError>;

    /// Kills every command started by `exec` that is still running (any holder).
    async fn kill_all(&self, h: &SandboxHandle) -> Result<(), SandboxError>;

    /// Kills the commands started by `exec` with one of these tags (e.g. of a crashed
    /// holder), from any provider instance.
    async fn kill_tagged(&self, h: &SandboxHandle, tags: &[String]) -> Result<(), SandboxError>;

    /// Runs `spec.command` with `bash -c` as the sandbox user and returns when it ends
    /// (its timeout, cancel, output cap). Without an id it is the plain fused form (one
    /// request on E2B, nothing kept); with [`ExecSpec::id`] it is
    /// [`SandboxProvider::exec_start`] + [`SandboxProvider::exec_attach`] collected with
    /// the same limits, and the exec's record stays for `exec_list` / `exec_attach` until
    /// [`SandboxProvider::exec_forget`].
    async fn exec(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecOutput, SandboxError>;

    /// Starts `spec.command` (as `exec` does) under [`ExecSpec::id`] (required) and
    /// returns its id at once. The command outlives this call and this host: its time
    /// limit is kept in the sandbox (the whole process group is killed at the deadline),
    /// its output (up to [`ExecSpec::kept_output_bytes`] per stream) and its end are
    /// recorded there. An id that exists (running, or ended and not forgotten) is
    /// [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) and runs nothing.
    /// `spec.cancel` and `spec.max_output_bytes` do not apply (no host waits).
    ///
    /// ```no_run
    /// use exec_world::sandbox::{ExecEvent, ExecSpec, LocalSandboxes, SandboxHandle, SandboxProvider};
    /// use exec_world::OutputOffsets;
    /// use futures::StreamExt as _;
    /// # async fn demo(p: LocalSandboxes, h: SandboxHandle) -> Result<(), exec_world::Error> {
    /// let id = p.exec_start(&h, ExecSpec::new("make test").id("test-1")).await?;
    /// // ... this host may restart; any instance of the provider can go on:
    /// let mut events = p.exec_attach(&h, &id, OutputOffsets::default()).await?;
    /// while let Some(ev) = events.next().await {
    ///     match ev? {
    ///         ExecEvent::Stdout { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
    ///         ExecEvent::End(end) => println!("exit {:?}", end.exit_code()),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    async fn exec_start(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecId, SandboxError>;

    /// The output of exec `id` from byte offsets `from` (0 = everything kept), then live,
    /// then its end ([`ExecEnd::Unknown`] when it cannot be known), from any provider
    /// instance; many attaches may run at once. Dropping the stream leaves the exec
    /// running. NotFound when there is no such exec.
    async fn exec_attach(
        &self,
        h: &SandboxHandle,
        id: &ExecId,
        from: crate::OutputOffsets,
    ) -> Result<ExecStream, SandboxError>;

    /// The durable execs of the sandbox: running, or ended and not forgotten.
    async fn exec_list(&self, h: &SandboxHandle) -> Result<Vec<ExecInfo>, SandboxError>;

    /// Kills exec `id` and everything it started (SIGTERM to its tree, then SIGKILL to
    /// what remains), from any provider instance; returns when none survives. An exec
    /// that already ended: Ok. NotFound when there is no such exec.
    async fn exec_kill(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError>;

    /// Forgets an ended exec's record (its output and end); its id may be used again.
    /// Running: InvalidSpec. Missing: NotFound.
    async fn exec_forget(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError>;

    /// Reads at most `max_bytes` of a file; `None` when missing or a directory.
    async fn read_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        max_bytes: u64,
    ) -> Result<Option<FileContent>, SandboxError>;

    /// Writes a file as the sandbox user (parents created), or as root under `/skills`.
    async fn write_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        data: &[u8],
    ) -> Result<(), SandboxError>;

    /// Size and kind; `None` when missing.
    async fn stat(&self, h: &SandboxHandle, path: &str) -> Result<Option<FileStat>, SandboxError>;

    /// Creates a sandbox named `new_name` with the files `h` has at this instant (its
    /// commands are held still while they are copied) and none of its processes, replacing
    /// any other sandbox of that name; `h` keeps running, untouched. A `new_name` equal to
    /// the source's own name is refused with [`ErrorKind::InvalidSpec`](crate::ErrorKind::InvalidSpec).
    async fn fork(&self, h: &SandboxHandle, new_name: &str) -> Result<SandboxHandle, SandboxError>;

    /// What this provider offers.
    fn capabilities(&self) -> SandboxCapabilities;
}
