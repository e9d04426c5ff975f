//! [`SandboxOwner`]: the one owner of a sandbox. It creates (or connects to, or wraps) the
//! sandbox, prepares the working directory and the private adapter state directory in
//! the background, hands out one shared [`OwnedHandle`] (so the fs and subprocess adapters
//! live in the same remote tree and process world), and deletes the sandbox at shutdown
//! when it owns it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::api::{Client, CreateOptions};
use crate::config::DEFAULT_SANDBOX_TIMEOUT;
use crate::lifecycle::error::LifecycleError;
use crate::lifecycle::keepalive::{KeepAlive, KeepAliveConfig};
use crate::lifecycle::setup::{
    self, DEFAULT_STATE_DIR, DEFAULT_WORKDIR, DEFAULT_WORKDIR_OWNER, Prepared,
};
use crate::sandbox::EnvdApi;
use crate::trusted_shell::TrustedShell;

/// Metadata key holding a sandbox's logical name (see [`OwnerOptions::name`]).
pub const NAME_METADATA_KEY: &str = "e2b-core.name";

/// Whether shutdown deletes the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Ours: shutdown deletes it.
    Owned,
    /// Brought by the caller: never created nor deleted by the owner.
    Borrowed,
}

/// How to create or adopt a sandbox and prepare it.
///
/// ```
/// use std::time::Duration;
/// use e2b_core::CreateOptions;
/// use e2b_core::lifecycle::{KeepAliveConfig, OwnerOptions};
/// let opts = OwnerOptions::new(CreateOptions::new("base").env_var("LANG", "C.UTF-8"))
///     .timeout(Duration::from_secs(600))
///     .workdir("/home/user/project")
///     .name("conversation-42")
///     .keepalive(KeepAliveConfig::new());
/// assert_eq!(opts.sandbox_timeout(), Duration::from_secs(600));
/// ```
#[derive(Debug, Clone)]
pub struct OwnerOptions {
    pub(crate) create: CreateOptions,
    pub(crate) workdir: String,
    pub(crate) state_dir: String,
    pub(crate) workdir_owner: Option<String>,
    pub(crate) keepalive: Option<KeepAliveConfig>,
    pub(crate) prepare: bool,
}

impl Default for OwnerOptions {
    fn default() -> Self {
        Self::new(CreateOptions::default())
    }
}

impl OwnerOptions {
    /// Create with these options (template, timeout, metadata, env, network, autoPause);
    /// workdir `/home/user/workspace` owned by `user`, state dir `.e2b-state`, no
    /// keep-alive.
    pub fn new(create: CreateOptions) -> Self {
        OwnerOptions {
            create,
            workdir: DEFAULT_WORKDIR.to_owned(),
            state_dir: DEFAULT_STATE_DIR.to_owned(),
            workdir_owner: Some(DEFAULT_WORKDIR_OWNER.to_owned()),
            keepalive: None,
            prepare: true,
        }
    }

    /// Sandbox timeout at create, and the one asked for at connect (default 5 min).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.create = self.create.timeout(t);
        self
    }

    /// Pause instead of kill when the timeout expires (passed to the control plane).
    pub fn auto_pause(mut self, on: bool) -> Self {
        self.create = self.create.auto_pause(on);
        self
    }

    /// The working directory: an absolute POSIX path (checked before any request).
    pub fn workdir(mut self, path: impl Into<String>) -> Self {
        self.workdir = path.into();
        self
    }

    /// Name of the private adapter state directory inside the workdir (root, 0700).
    pub fn state_dir_name(mut self, name: impl Into<String>) -> Self {
        self.state_dir = name.into();
        self
    }

    /// Owner of workdir components that setup creates (`None`: root).
    pub fn workdir_owner(mut self, user: Option<&str>) -> Self {
        self.workdir_owner = user.map(str::to_owned);
        self
    }

    /// Turn keep-alive on.
    pub fn keepalive(mut self, cfg: KeepAliveConfig) -> Self {
        self.keepalive = Some(cfg);
        self
    }

    /// A logical name, stored in metadata under [`NAME_METADATA_KEY`], for
    /// [`SandboxOwner::connect_by_name`].
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.create = self.create.metadata(NAME_METADATA_KEY, name);
        self
    }

    /// Do not create or verify the workdir (bring-your-own sandboxes prepared elsewhere).
    pub fn skip_setup(mut self) -> Self {
        self.prepare = false;
        self
    }

    /// The sandbox timeout these options ask for.
    pub fn sandbox_timeout(&self) -> Duration {
        self.create
            .to_wire()
            .timeout
            .and_then(|s| u64::try_from(s).ok())
            .map_or(DEFAULT_SANDBOX_TIMEOUT, Duration::from_secs)
    }

    /// Everything checkable without a request; the normalized workdir.
    pub(crate) fn validate(&self) -> Result<String, LifecycleError> {
        let wd = setup::normalize_workdir(&self.workdir)?;
        setup::check_state_dir_name(&self.state_dir)?;
        if let Some(ka) = &self.keepalive {
            ka.check(self.sandbox_timeout())?;
        }
        Ok(wd)
    }
}

/// The shared handle: the sandbox's envd API (decorated for keep-alive when on), the
/// prepared directories, and the keep-alive. Cheap to clone; every clone is the same
/// handle.
#[derive(Debug, Clone)]
pub struct OwnedHandle {
    api: Arc<dyn EnvdApi>,
    raw: Arc<dyn EnvdApi>,
    workdir: String,
    state_dir: String,
    keepalive: Option<KeepAlive>,
}

impl OwnedHandle {
    /// The envd API to give the adapters.
    pub fn api(&self) -> Arc<dyn EnvdApi> {
        self.api.clone()
    }

    /// The envd API without keep-alive reporting (for calls that are no activity,
    /// e.g. background polls); the same as [`OwnedHandle::api`] when keep-alive is off.
    pub fn raw_api(&self) -> Arc<dyn EnvdApi> {
        self.raw.clone()
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        self.api.sandbox_id()
    }

    /// The working directory (absolute, normalized).
    pub fn workdir(&self) -> &str {
        &self.workdir
    }

    /// The private adapter state directory (root, 0700).
    pub fn state_dir(&self) -> &str {
        &self.state_dir
    }

    /// A trusted shell on this handle (root, random root-level `HOME`).
    pub fn trusted_shell(&self) -> TrustedShell {
        TrustedShell::new(self.api.clone())
    }

    /// The keep-alive, when on.
    pub fn keepalive(&self) -> Option<&KeepAlive> {
        self.keepalive.as_ref()
    }
}

/// What shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// The sandbox was deleted (by shutdown, or by a failed setup's cleanup).
    Deleted,
    /// It was already gone (E2B-format 404).
    AlreadyGone,
    /// Not ours (bring your own): left running.
    Released,
}

type SetupResult = Option<Result<OwnedHandle, LifecycleError>>;

#[derive(Debug)]
struct Inner {
    client: Option<Client>,
    sandbox_id: String,
    ownership: Ownership,
    closing: AtomicBool,
    /// What the cleanup after a failed setup did.
    cleanup: std::sync::Mutex<Option<ShutdownOutcome>>,
    setup: watch::Receiver<SetupResult>,
    keepalive: Option<KeepAlive>,
    outcome: tokio::sync::Mutex<Option<ShutdownOutcome>>,
}

/// The lifecycle owner of one sandbox. Cheap to clone (clones share the owner).
///
/// Dropping every clone without [`SandboxOwner::shutdown`] leaves the sandbox to its
/// timeout (the control plane deletes or pauses it then).
///
/// ```no_run
/// # async fn demo() -> Result<(), e2b_core::lifecycle::LifecycleError> {
/// use e2b_core::{Client, Config, CreateOptions, EnvdApi, StartProcess};
/// use e2b_core::lifecycle::{OwnerOptions, SandboxOwner};
/// let client = Client::new(Config::from_env())?;
/// let owner = SandboxOwner::create(&client, OwnerOptions::new(CreateOptions::new("base"))).await?;
/// let handle = owner.handle().await?; // waits for setup
/// let out = handle.api().run(StartProcess::shell("pwd").cwd(handle.workdir())).await?;
/// owner.shutdown().await?;
/// # let _ = out; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SandboxOwner {
    inner: Arc<Inner>,
}

impl SandboxOwner {
    /// Create a sandbox and start its setup in the background. Invalid options fail here
    /// before any request; a failed create returns its error (nothing to clean up).
    pub async fn create(
        client: &Client,
        opts: OwnerOptions,
    ) -> Result<SandboxOwner, LifecycleError> {
        let workdir = opts.validate()?;
        let started = Instant::now();
        let sandbox = client.create(&opts.create).await?;
        let id = sandbox.id().to_owned();
        let known_end = started + opts.sandbox_timeout();
        let launched = Self::launch(
            Some(client.clone()),
            sandbox.into_api(),
            Ownership::Owned,
            opts,
            workdir,
            Some(known_end),
        );
        if launched.is_err() {
            // Never leave a created sandbox without an owner.
            let _ = client.kill(&id).await;
        }
        launched
    }

    /// Start the owner on a connected handle: keep-alive, then setup in the background.
    pub(crate) fn launch(
        client: Option<Client>,
        api: Arc<dyn EnvdApi>,
        ownership: Ownership,
        opts: OwnerOptions,
        workdir: String,
        known_end: Option<Instant>,
    ) -> Result<SandboxOwner, LifecycleError> {
        let sandbox_id = api.sandbox_id().to_owned();
        let keepalive = match (&opts.keepalive, &client) {
            (None, _) => None,
            (Some(_), None) => return Err(LifecycleError::NoClient),
            (Some(cfg), Some(c)) => Some(KeepAlive::new(
                c.clone(),
                sandbox_id.clone(),
                opts.sandbox_timeout(),
                known_end,
                cfg.clone(),
            )?),
        };
        let (tx, rx) = watch::channel(None);
        let inner = Arc::new(Inner {
            client: client.clone(),
            sandbox_id: sandbox_id.clone(),
            ownership,
            closing: AtomicBool::new(false),
            cleanup: std::sync::Mutex::new(None),
            setup: rx,
            keepalive: keepalive.clone(),
            outcome: tokio::sync::Mutex::new(None),
        });
        let task_inner = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let prepared = if opts.prepare {
                let shell = TrustedShell::new(api.clone());
                setup::prepare(
                    &shell,
                    &workdir,
                    &opts.state_dir,
                    opts.workdir_owner.as_deref(),
                )
                .await
            } else {
                Ok(Prepared {
                    state_dir: format!("{workdir}/{}", opts.state_dir),
                    workdir,
                })
            };
            let result = match prepared {
                Ok(p) => Ok(OwnedHandle {
                    api: match &keepalive {
                        Some(ka) => ka.wrap(api.clone()),
                        None => api.clone(),
                    },
                    raw: api,
                    workdir: p.workdir,
                    state_dir: p.state_dir,
                    keepalive,
                }),
                Err(e) => {
                    if let Some(ka) = &keepalive {
                        ka.close();
                    }
                    if ownership == Ownership::Owned {
                        if let Some(c) = &client {
                            // One attempt; the original error is what gets reported.
                            match c.kill(&sandbox_id).await {
                                Ok(killed) => {
                                    if let Some(i) = task_inner.upgrade() {
                                        *i.cleanup
                                            .lock()
                                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                                            Some(if killed {
                                                ShutdownOutcome::Deleted
                                            } else {
                                                ShutdownOutcome::AlreadyGone
                                            });
                                    }
                                }
                                Err(k) => tracing::warn!(
                                    sandbox = %sandbox_id,
                                    error = %k,
                                    "deleting the sandbox after a failed setup failed"
                                ),
                            }
                        }
                    }
                    Err(e)
                }
            };
            tx.send_replace(Some(result));
        });
        Ok(SandboxOwner { inner })
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// Whether shutdown deletes the sandbox.
    pub fn ownership(&self) -> Ownership {
        self.inner.ownership
    }

    /// The keep-alive, when on (available before setup ends).
    pub fn keepalive(&self) -> Option<&KeepAlive> {
        self.inner.keepalive.as_ref()
    }

    /// The shared handle, once setup has finished. A failed setup returns its original
    /// error (to every caller); after shutdown began, [`LifecycleError::ShuttingDown`].
    pub async fn handle(&self) -> Result<OwnedHandle, LifecycleError> {
        if self.inner.closing.load(Ordering::SeqCst) {
            return Err(LifecycleError::ShuttingDown);
        }
        let result = self.wait_setup().await;
        if self.inner.closing.load(Ordering::SeqCst) {
            return Err(LifecycleError::ShuttingDown);
        }
        result
    }

    /// Wait for setup to finish and report how it went, without taking a handle (also
    /// after shutdown began).
    pub async fn setup_status(&self) -> Result<(), LifecycleError> {
        self.wait_setup().await.map(|_| ())
    }

    async fn wait_setup(&self) -> Result<OwnedHandle, LifecycleError> {
        let mut rx = self.inner.setup.clone();
        let guard = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| LifecycleError::SetupAborted)?;
        match &*guard {
            Some(r) => r.clone(),
            None => Err(LifecycleError::SetupAborted),
        }
    }

    /// Refuse new handles, wait for an in-flight setup, stop keep-alive, then delete the
    /// sandbox when owned. A sandbox that is already gone counts as deleted
    /// ([`ShutdownOutcome::AlreadyGone`]). Idempotent; a failed delete can be retried.
    pub async fn shutdown(&self) -> Result<ShutdownOutcome, LifecycleError> {
        self.inner.closing.store(true, Ordering::SeqCst);
        let mut outcome = self.inner.outcome.lock().await;
        if let Some(o) = *outcome {
            return Ok(o);
        }
        let _ = self.wait_setup().await;
        if let Some(ka) = &self.inner.keepalive {
            ka.close();
        }
        let cleaned = *self
            .inner
            .cleanup
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let o = match (self.inner.ownership, &self.inner.client, cleaned) {
            (Ownership::Borrowed, _, _) | (Ownership::Owned, None, _) => ShutdownOutcome::Released,
            (Ownership::Owned, Some(_), Some(done)) => done,
            (Ownership::Owned, Some(c), None) => match c.kill(&self.inner.sandbox_id).await? {
                true => ShutdownOutcome::Deleted,
                false => ShutdownOutcome::AlreadyGone,
            },
        };
        *outcome = Some(o);
        Ok(o)
    }
}
