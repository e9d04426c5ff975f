//! Bring your own sandbox: wrap a sandbox that exists already (by id, or by an already
//! connected handle) without creating or destroying it; shutdown only stops keep-alive.

use std::sync::Arc;
use std::time::Instant;

use crate::api::{Client, ConnectOptions};
use crate::lifecycle::error::LifecycleError;
use crate::lifecycle::owner::{OwnerOptions, Ownership, SandboxOwner};
use crate::sandbox::{EnvdApi, Sandbox};

impl SandboxOwner {
    /// Connect to an existing sandbox by id (resuming it when paused, asking for the
    /// options' timeout) and wrap it without owning it.
    pub async fn attach_id(
        client: &Client,
        sandbox_id: &str,
        opts: OwnerOptions,
    ) -> Result<SandboxOwner, LifecycleError> {
        Self::connect(client, sandbox_id, opts, Ownership::Borrowed).await
    }

    /// Wrap an already connected handle without any control-plane call. Keep-alive needs
    /// `client` ([`LifecycleError::NoClient`] otherwise); its end of life is unknown, so
    /// the first activity renews. Must be called inside a tokio runtime (setup runs on a
    /// spawned task).
    pub fn attach_api(
        api: Arc<dyn EnvdApi>,
        client: Option<Client>,
        opts: OwnerOptions,
    ) -> Result<SandboxOwner, LifecycleError> {
        let workdir = opts.validate()?;
        Self::launch(client, api, Ownership::Borrowed, opts, workdir, None)
    }

    /// [`SandboxOwner::attach_api`] for a [`Sandbox`].
    pub fn attach_sandbox(
        sandbox: Sandbox,
        client: Option<Client>,
        opts: OwnerOptions,
    ) -> Result<SandboxOwner, LifecycleError> {
        Self::attach_api(sandbox.into_api(), client, opts)
    }

    /// Connect by id with the given ownership (shared by bring-your-own and reconnect).
    pub(crate) async fn connect_inner(
        client: &Client,
        sandbox_id: &str,
        opts: OwnerOptions,
        ownership: Ownership,
    ) -> Result<SandboxOwner, LifecycleError> {
        let workdir = opts.validate()?;
        let timeout = opts.sandbox_timeout();
        let started = Instant::now();
        let sandbox = client
            .connect(sandbox_id, ConnectOptions::with_timeout(timeout))
            .await?;
        Self::launch(
            Some(client.clone()),
            sandbox.into_api(),
            ownership,
            opts,
            workdir,
            Some(started + timeout),
        )
    }
}
