//! Reconnect: find a sandbox again by id or by the logical name kept in its metadata
//! (listing states running and paused); connecting resumes a paused one.

use crate::api::{Client, ListQuery};
use crate::lifecycle::error::LifecycleError;
use crate::lifecycle::owner::{NAME_METADATA_KEY, OwnerOptions, Ownership, SandboxOwner};
use crate::proto::control::{ListedSandbox, SandboxState};

impl SandboxOwner {
    /// Connect to a sandbox by id (resuming it when paused) and own it as `ownership`
    /// says. Setup runs again (it is idempotent; files are kept).
    pub async fn connect(
        client: &Client,
        sandbox_id: &str,
        opts: OwnerOptions,
        ownership: Ownership,
    ) -> Result<SandboxOwner, LifecycleError> {
        Self::connect_inner(client, sandbox_id, opts, ownership).await
    }

    /// Connect to the sandbox named `name` ([`OwnerOptions::name`]), running or paused
    /// (resumed). When several carry the name, a running one wins, then the first listed
    /// (newest first). None: [`LifecycleError::NameNotFound`].
    pub async fn connect_by_name(
        client: &Client,
        name: &str,
        opts: OwnerOptions,
        ownership: Ownership,
    ) -> Result<SandboxOwner, LifecycleError> {
        opts.validate()?;
        let found =
            find_by_name(client, name)
                .await?
                .ok_or_else(|| LifecycleError::NameNotFound {
                    name: name.to_owned(),
                })?;
        Self::connect_inner(client, &found.sandbox_id, opts, ownership).await
    }

    /// Connect to the sandbox named `name` when one exists, else create it (with the name
    /// in its metadata). Owned either way. The name is metadata, not a lock: two callers
    /// racing on a new name may both create.
    pub async fn connect_or_create(
        client: &Client,
        name: &str,
        opts: OwnerOptions,
    ) -> Result<SandboxOwner, LifecycleError> {
        opts.validate()?;
        match find_by_name(client, name).await? {
            Some(found) => {
                Self::connect_inner(client, &found.sandbox_id, opts, Ownership::Owned).await
            }
            None => Self::create(client, opts.name(name)).await,
        }
    }
}

/// The sandbox carrying logical name `name`, running preferred over paused.
pub async fn find_by_name(
    client: &Client,
    name: &str,
) -> Result<Option<ListedSandbox>, LifecycleError> {
    let all = client
        .list_all(
            ListQuery::new()
                .metadata(NAME_METADATA_KEY, name)
                .states([SandboxState::Running, SandboxState::Paused]),
        )
        .await?;
    let running = all.iter().position(|s| s.state == SandboxState::Running);
    Ok(match running {
        Some(i) => all.into_iter().nth(i),
        None => all.into_iter().next(),
    })
}
