//! [`E2bWorld`]: an execution world in an E2B sandbox in one call. It composes the
//! lifecycle owner (`e2b_core::lifecycle`), `fs-e2b` and `subprocess-e2b` on one shared
//! handle, so a consumer gets an `Fs` and a `Subprocess` (with terminals) without wiring
//! four crates, and one `shutdown` that deletes what it created and never what it borrowed.

use std::sync::Arc;

use e2b_core::lifecycle::{
    KeepAlive, LifecycleError, OwnedHandle, OwnerOptions, Ownership, SandboxOwner, ShutdownOutcome,
};
use e2b_core::{Client, EnvdApi};
use exec_world::{Fs, Rooted, Subprocess, WorldPath};
use fs_e2b::{E2bFs, E2bFsOptions};
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};

/// Files, processes and terminals of one E2B sandbox, with its owner.
///
/// ```no_run
/// use e2b_core::lifecycle::OwnerOptions;
/// use exec_world::{SpawnSpec, Subprocess as _};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = e2b_core::Client::new(e2b_core::Config::from_env())?;
/// let world = sandbox_e2b::E2bWorld::create(&client, OwnerOptions::default()).await?;
/// let status = world.subprocess().spawn(SpawnSpec::new("true"))?.wait().await?;
/// assert!(status.success());
/// world.shutdown().await?; // the sandbox it created is deleted
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct E2bWorld {
    owner: SandboxOwner,
    handle: OwnedHandle,
    fs: E2bFs,
    subprocess: E2bSubprocess,
}

impl E2bWorld {
    /// Create a sandbox (template, timeout, workdir, keep-alive and name from `opts`),
    /// owned: [`E2bWorld::shutdown`] deletes it.
    pub async fn create(client: &Client, opts: OwnerOptions) -> Result<E2bWorld, LifecycleError> {
        Self::from_owner(SandboxOwner::create(client, opts).await?).await
    }

    /// Connect to the sandbox named `name` (running, or paused and resumed), owned.
    pub async fn connect_by_name(
        client: &Client,
        name: &str,
        opts: OwnerOptions,
    ) -> Result<E2bWorld, LifecycleError> {
        let owner = SandboxOwner::connect_by_name(client, name, opts, Ownership::Owned).await?;
        Self::from_owner(owner).await
    }

    /// Wrap a sandbox the caller brought (any `EnvdApi`), never deleted; `client` is needed
    /// only for keep-alive. Must be called inside a tokio runtime.
    pub async fn attach(
        api: Arc<dyn EnvdApi>,
        client: Option<Client>,
        opts: OwnerOptions,
    ) -> Result<E2bWorld, LifecycleError> {
        Self::from_owner(SandboxOwner::attach_api(api, client, opts)?).await
    }

    /// Wait for the owner's setup and build both adapters on its one handle; a failed
    /// setup shuts the owner down (deleting a sandbox it created) and reports the cause.
    async fn from_owner(owner: SandboxOwner) -> Result<E2bWorld, LifecycleError> {
        let handle = match owner.handle().await {
            Ok(h) => h,
            Err(e) => {
                let _ = owner.shutdown().await;
                return Err(e);
            }
        };
        // The owner validated the workdir (absolute, no NUL) before any request.
        let workdir = handle.workdir().to_owned();
        let invalid = |_| LifecycleError::InvalidWorkdir {
            path: workdir.clone(),
            reason: "not a usable exec-world path",
        };
        let fs = E2bFs::new(handle.api(), E2bFsOptions::new(&workdir)).map_err(invalid)?;
        let subprocess = E2bSubprocess::new(handle.api(), E2bSubprocessOptions::new(&workdir))
            .map_err(invalid)?;
        Ok(E2bWorld {
            owner,
            handle,
            fs,
            subprocess,
        })
    }

    /// The files, with the workdir as cwd.
    pub fn fs(&self) -> Arc<dyn Fs> {
        Arc::new(self.fs.clone())
    }

    /// The files seen through a virtual `/` at `root` (e.g. `/home/user`): `..`, absolute
    /// paths and symlinks cannot reach outside it.
    pub fn rooted(&self, root: &str) -> Result<Rooted, exec_world::Error> {
        Rooted::new(self.fs(), WorldPath::new(root)?)
    }

    /// The processes and terminals, with the workdir as cwd.
    pub fn subprocess(&self) -> Arc<dyn Subprocess> {
        Arc::new(self.subprocess.clone())
    }

    /// The adapters as their concrete types, for backend-specific options.
    pub fn adapters(&self) -> (&E2bFs, &E2bSubprocess) {
        (&self.fs, &self.subprocess)
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        self.handle.sandbox_id()
    }

    /// The shared handle (envd API behind the keep-alive lease, workdir, root shell).
    pub fn handle(&self) -> &OwnedHandle {
        &self.handle
    }

    /// The lifecycle owner.
    pub fn owner(&self) -> &SandboxOwner {
        &self.owner
    }

    /// The keep-alive, when the options turned it on.
    pub fn keepalive(&self) -> Option<&KeepAlive> {
        self.owner.keepalive()
    }

    /// Stop keep-alive and delete the sandbox when this world created or owns it (a
    /// borrowed one is left running). The adapters stop working once it is deleted.
    pub async fn shutdown(self) -> Result<ShutdownOutcome, LifecycleError> {
        self.owner.shutdown().await
    }
}
