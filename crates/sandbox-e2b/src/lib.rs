//! The conversation-sandbox provider (`sandbox@1`) on E2B: [`E2bSandboxes`], one E2B
//! sandbox per conversation, implementing exec-world's [`SandboxProvider`] by composing
//! the world's layers: `e2b-core` (client, lease classification), `fs-e2b` (every file
//! operation, as the sandbox user) and `subprocess-e2b` (the exec wrapper and tree kill).
//!
//! * [`SandboxConfig`]: the strict deployment config (JSON or built).
//! * Lifecycle by name: `create` deletes every sandbox already carrying the name (listed
//!   by metadata [`NAME_METADATA_KEY`], running and paused, every page), then creates one
//!   with auto-pause and an envd access token, and the egress mapping (`none` → no
//!   internet access; `allowlist` → `allowOut` = hosts and `denyOut` = `0.0.0.0/0`; `open`
//!   → internet access, only with `allow_open_egress`).
//! * A lease per sandbox (see `lease.rs`): an operation connects only when the end of
//!   life it knows is too close, or when e2b-core calls envd's answer unroutable.
//! * [`E2bWorld`]: an `Fs` + `Subprocess` world in a sandbox in one call (owner, adapters,
//!   keep-alive, shutdown), for consumers of the exec-world seams.
//! * durable execs (`durable.rs`): `exec_start`, `exec_attach`, `exec_list`, `exec_kill`,
//!   `exec_forget` on subprocess-e2b's durable commands (records kept in the sandbox).
//! * exec (`exec.rs`), files through fs-e2b (`io.rs`), and `kill_all` / `kill_tagged`
//!   through exec-world's in-world script as the sandbox user.
//!
//! ```no_run
//! use exec_world::sandbox::{CreateSpec, ExecSpec, SandboxProvider};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = sandbox_e2b::SandboxConfig::from_json(
//!     r#"{"api_key": "e2b_…", "template": "capybara-sandbox"}"#,
//! )?;
//! let sandboxes = sandbox_e2b::E2bSandboxes::new(cfg)?;
//! let h = sandboxes.create(CreateSpec::new("conv-42")).await?;
//! sandboxes.write_file(&h, "/workspace/notes.txt", b"hello").await?;
//! let out = sandboxes.exec(&h, ExecSpec::new("cat notes.txt")).await?;
//! assert_eq!(out.stdout, "hello");
//! let head = sandboxes.read_file(&h, "/workspace/notes.txt", 1024).await?;
//! sandboxes.suspend(&h).await?;
//! sandboxes.resume(&h).await?;
//! sandboxes.destroy(&h).await?;
//! # let _ = head; Ok(()) }
//! ```

mod config;
mod conversation;
mod durable;
mod errors;
mod exec;
mod fork;
mod io;
mod release_on_exit;
mod world;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use e2b_core::proto::control::SandboxState;
use e2b_core::trusted_shell::TrustedShell;
use e2b_core::{Client, CreateOptions, ListQuery};
use exec_world::OutputOffsets;
use exec_world::sandbox::{
    CreateSpec, Egress, ExecId, ExecInfo, ExecOutput, ExecSpec, ExecStream, FileContent, FileStat,
    ResumeOutcome, SIGNAL_EXECS_SH, SandboxCapabilities, SandboxError, SandboxHandle,
    SandboxProvider, validate,
};
use exec_world_sys::tree_script::KILL_TREE_SH;

pub use config::{ConfigError, MAX_TIMEOUT_SECONDS, MIN_TIMEOUT_SECONDS, SandboxConfig};
pub use io::UPLOAD_DIR;
pub use world::E2bWorld;

use crate::conversation::{Attached, check_id, contract};
use crate::errors::{map_core, op_failed};
use e2b_core::lifecycle::Leases;

/// The metadata key carrying a sandbox's conversation name (the same key as the
/// TypeScript plugin, so both find each other's sandboxes).
pub const NAME_METADATA_KEY: &str = "capybara-sandbox-name";

/// Default bound on stopping a command: the tree kill and the end of its output.
pub const DEFAULT_STOP_WAIT: Duration = Duration::from_secs(5);

/// Conversation sandboxes on E2B. Cheap to clone; clones share leases.
#[derive(Debug, Clone)]
pub struct E2bSandboxes {
    leases: Arc<Leases<Attached>>,
    cfg: Arc<SandboxConfig>,
    stop_wait: Duration,
    containment: Arc<conversation::Containment>,
}

/// A failure to build the provider.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built.
    #[error("sandbox-e2b: cannot build the E2B client: {0}")]
    Client(#[from] e2b_core::Error),
}

impl E2bSandboxes {
    /// A provider for `cfg` (validated here).
    pub fn new(cfg: SandboxConfig) -> Result<E2bSandboxes, NewError> {
        cfg.validate()?;
        let mut core = e2b_core::Config::new()
            .with_api_key(cfg.api_key.clone())
            .with_domain(cfg.domain.clone())
            .with_api_url(cfg.api_url());
        if let Some(u) = &cfg.sandbox_url {
            core = core.with_sandbox_url(u.clone());
        }
        if let Some(k) = cfg.keepalive_interval {
            core = core.with_keepalive_interval(k);
        }
        let client = Client::new(core)?;
        let containment = Arc::new(conversation::Containment::default());
        Ok(E2bSandboxes {
            leases: Arc::new(conversation::leases(client, &cfg, containment.clone())),
            cfg: Arc::new(cfg),
            stop_wait: DEFAULT_STOP_WAIT,
            containment,
        })
    }

    /// How long a stop (tree kill and end of output) may take before the sandbox is
    /// rebooted (default [`DEFAULT_STOP_WAIT`]).
    pub fn stop_wait(mut self, wait: Duration) -> E2bSandboxes {
        self.stop_wait = wait;
        self
    }

    /// The config in use.
    pub fn config(&self) -> &SandboxConfig {
        &self.cfg
    }

    async fn signal_execs(
        &self,
        op: &'static str,
        h: &SandboxHandle,
        tags: Option<&[String]>,
    ) -> Result<(), SandboxError> {
        let all = if tags.is_none() { "1" } else { "0" };
        // The sandbox id too: on a host without PID namespaces (the emulator) /proc shows
        // other sandboxes' processes under the same uid.
        let group = exec_world::sandbox::sandbox_group(&h.id);
        let mut args: Vec<&str> = vec!["kill", KILL_TREE_SH, &h.id, &group, all];
        args.extend(tags.unwrap_or_default().iter().map(String::as_str));
        let run = || {
            self.leases.run(op, &h.id, io::FILE_OP_NEED, |a: Attached| {
                let args = args.clone();
                async move {
                    TrustedShell::new(a.api.clone())
                        .user(conversation::SANDBOX_USER)
                        .max_output(64 * 1024)
                        .run(SIGNAL_EXECS_SH, &args)
                        .await
                        .map_err(|e| e.into_world(op))
                }
            })
        };
        let mut out = run().await.map_err(|e| contract(op, &h.id, e))?;
        if out.exit_code == -1 {
            // The script itself was killed by a signal (not a survivor: that is exit 1);
            // signalling again is harmless, and it finds whatever the first run left.
            tracing::warn!(
                sandbox = %h.id,
                op,
                status = %out.status,
                "sandbox-e2b: the signal script was killed; running it again"
            );
            out = run().await.map_err(|e| contract(op, &h.id, e))?;
        }
        if out.exit_code != 0 {
            let text = String::from_utf8_lossy(&out.stderr);
            let text = text.trim();
            let tail: String = {
                let chars: Vec<char> = text.chars().collect();
                chars[chars.len().saturating_sub(500)..].iter().collect()
            };
            return Err(exec_world::sandbox::failed(
                op,
                None,
                format!("could not stop every command ({}): {tail}", out.status),
            ));
        }
        Ok(())
    }
}

impl E2bSandboxes {
    /// The ids of the running or paused sandboxes named `name` (the name metadata).
    async fn named(&self, op: &'static str, name: &str) -> Result<Vec<String>, SandboxError> {
        let listed = self
            .leases
            .client()
            .list_all(
                ListQuery::new()
                    .metadata(NAME_METADATA_KEY, name)
                    .states([SandboxState::Running, SandboxState::Paused])
                    .limit(100),
            )
            .await
            .map_err(|e| op_failed(op, None, e))?;
        let mut ids = Vec::new();
        for s in listed {
            let named = s
                .metadata
                .as_ref()
                .and_then(|m| m.get(NAME_METADATA_KEY))
                .is_some_and(|n| n == name);
            if named {
                check_id(op, &s.sandbox_id)?;
                ids.push(s.sandbox_id);
            }
        }
        Ok(ids)
    }

    /// Kills the sandboxes `ids` (but `keep`), forgetting their leases.
    async fn kill_named(
        &self,
        op: &'static str,
        ids: &[String],
        keep: Option<&str>,
    ) -> Result<(), SandboxError> {
        for id in ids.iter().filter(|id| Some(id.as_str()) != keep) {
            self.leases.forget(id);
            self.leases
                .client()
                .kill(id)
                .await
                .map_err(|e| map_core(op, id, None, e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl SandboxProvider for E2bSandboxes {
    async fn create(&self, spec: CreateSpec) -> Result<SandboxHandle, SandboxError> {
        const OP: &str = "create";
        validate::name(OP, &spec.name)?;
        validate::limits(OP, &spec.limits)?;
        let cfg = &self.cfg;
        let mut egress = spec.limits.egress.clone();
        if egress == Egress::Open && !cfg.allow_open_egress {
            return Err(exec_world::sandbox::invalid(
                OP,
                "egress \"open\"",
                "it is refused because the sandbox-e2b setting allow_open_egress is false; \
                 set allow_open_egress to true (trusted environments only) or use egress none or allowlist",
            ));
        }
        if matches!(egress, Egress::Allowlist(_)) && !cfg.domain_allowlist {
            tracing::warn!(
                name = %spec.name,
                "sandbox-e2b: domain allowlists are disabled for this deployment (domain_allowlist is false); egress allowlist degraded to none"
            );
            egress = Egress::None;
        }
        let mut opts = CreateOptions::new(cfg.template.clone())
            .timeout(cfg.timeout())
            .metadata(NAME_METADATA_KEY, spec.name.clone())
            .auto_pause(true)
            .secure(true);
        opts = match egress {
            Egress::Allowlist(hosts) if !hosts.is_empty() => opts
                .allow_internet_access(true)
                .allow_out(hosts)
                .deny_out(vec!["0.0.0.0/0".to_owned()]),
            Egress::Open => opts.allow_internet_access(true),
            _ => opts.allow_internet_access(false),
        };
        // The sandboxes of the old name are looked up beside the create (one round trip
        // for both) and killed once the new one exists: a failed create keeps the old
        // one; a failed lookup kills the new one.
        let since = Instant::now();
        let (named, made) = tokio::join!(
            self.named("destroy_by_name", &spec.name),
            self.leases.client().create(&opts)
        );
        let sb = made.map_err(|e| op_failed(OP, None, e))?;
        let id = sb.id().to_owned();
        check_id(OP, &id)?;
        let named = match named {
            Ok(ids) => ids,
            Err(e) => {
                if let Err(k) = self.leases.client().kill(&id).await {
                    tracing::warn!(sandbox = %id, error = %k, "killing a sandbox whose name could not be checked");
                }
                return Err(e);
            }
        };
        self.kill_named("destroy_by_name", &named, Some(&id))
            .await?;
        // No request to envd here: the first exec places the spawn helper with its own
        // start (subprocess-e2b's boot), one request in all.
        self.leases
            .remember(OP, sb, since, cfg.timeout())
            .map_err(|e| contract(OP, &id, e))?;
        Ok(SandboxHandle::new(id))
    }

    async fn resume(&self, h: &SandboxHandle) -> Result<ResumeOutcome, SandboxError> {
        check_id("resume", &h.id)?;
        match self
            .leases
            .connect("resume", &h.id, Duration::ZERO, None)
            .await
            .map_err(|e| contract("resume", &h.id, e))
        {
            Ok(_) => Ok(ResumeOutcome::Resumed),
            Err(e) if e.is_gone() => Ok(ResumeOutcome::Gone),
            Err(e) => Err(e),
        }
    }

    async fn suspend(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        const OP: &str = "suspend";
        check_id(OP, &h.id)?;
        self.leases.forget(&h.id);
        match self
            .leases
            .client()
            .pause(&h.id, e2b_core::PauseOptions { memory: true })
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.is_sandbox_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(op_failed(OP, None, e)),
        }
    }

    async fn destroy(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        const OP: &str = "destroy";
        check_id(OP, &h.id)?;
        self.leases.forget(&h.id);
        self.leases
            .client()
            .kill(&h.id)
            .await
            .map(|_| ())
            .map_err(|e| op_failed(OP, None, e))
    }

    async fn destroy_by_name(&self, name: &str) -> Result<(), SandboxError> {
        const OP: &str = "destroy_by_name";
        validate::name(OP, name)?;
        let named = self.named(OP, name).await?;
        self.kill_named(OP, &named, None).await
    }

    async fn kill_all(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        self.signal_execs("kill_all", h, None).await
    }

    async fn kill_tagged(&self, h: &SandboxHandle, tags: &[String]) -> Result<(), SandboxError> {
        for t in tags {
            validate::tag("kill_tagged", t)?;
        }
        check_id("kill_tagged", &h.id)?;
        if tags.is_empty() {
            return Ok(());
        }
        self.signal_execs("kill_tagged", h, Some(tags)).await
    }

    async fn exec(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecOutput, SandboxError> {
        exec::exec(&self.leases, &h.id, spec, self.stop_wait).await
    }

    async fn exec_start(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecId, SandboxError> {
        durable::start(&self.leases, &h.id, spec).await
    }

    async fn exec_attach(
        &self,
        h: &SandboxHandle,
        id: &ExecId,
        from: OutputOffsets,
    ) -> Result<ExecStream, SandboxError> {
        durable::attach(&self.leases, &h.id, id, from).await
    }

    async fn exec_list(&self, h: &SandboxHandle) -> Result<Vec<ExecInfo>, SandboxError> {
        durable::list(&self.leases, &h.id).await
    }

    async fn exec_kill(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError> {
        durable::kill(&self.leases, &h.id, id).await
    }

    async fn exec_forget(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError> {
        durable::forget(&self.leases, &h.id, id).await
    }

    async fn read_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        max_bytes: u64,
    ) -> Result<Option<FileContent>, SandboxError> {
        io::read_file(&self.leases, &h.id, path, max_bytes).await
    }

    async fn write_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        data: &[u8],
    ) -> Result<(), SandboxError> {
        io::write_file(&self.leases, &h.id, path, data).await
    }

    async fn stat(&self, h: &SandboxHandle, path: &str) -> Result<Option<FileStat>, SandboxError> {
        io::stat(&self.leases, &h.id, path).await
    }

    async fn fork(&self, h: &SandboxHandle, new_name: &str) -> Result<SandboxHandle, SandboxError> {
        self.fork_sandbox(h, new_name).await
    }

    fn capabilities(&self) -> SandboxCapabilities {
        SandboxCapabilities {
            concurrent_exec: true,
            suspend_keeps_processes: true,
            user_isolation: true,
            egress_control: true,
            // The spawn helper's cgroup per spawn (templates with a writable cgroup2
            // mount, as E2B's and the emulator's are): assumed until a spawn's setup
            // finds none.
            kill_reaches_escapes: self.containment.holds(),
        }
    }
}
