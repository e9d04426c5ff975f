//! [`E2bSandboxes`]' fork: a snapshot of the source (E2B pauses it for the capture and
//! resumes it), a sandbox created from that snapshot under the new name with the source's
//! egress settings, its carried commands killed (an E2B snapshot keeps memory, so they
//! would run on), then the snapshot deleted. E2B's own `fork` is not used: it copies the
//! source's metadata, and with it the source's conversation name, which cannot be changed
//! afterwards.

use std::time::Instant;

use e2b_core::CreateOptions;
use e2b_core::proto::control::NewSandbox;
use exec_world::sandbox::{SandboxError, SandboxHandle, SandboxProvider, invalid, validate};

use crate::conversation::check_id;
use crate::errors::op_failed;
use crate::{E2bSandboxes, NAME_METADATA_KEY};

impl E2bSandboxes {
    /// [`SandboxProvider::fork`] of this provider.
    pub(crate) async fn fork_sandbox(
        &self,
        h: &SandboxHandle,
        new_name: &str,
    ) -> Result<SandboxHandle, SandboxError> {
        const OP: &str = "fork";
        validate::name(OP, new_name)?;
        check_id(OP, &h.id)?;
        let client = self.leases.client();
        let detail = client
            .get(&h.id)
            .await
            .map_err(|e| op_failed(OP, None, e))?;
        let src_name = detail
            .listed
            .metadata
            .as_ref()
            .and_then(|m| m.get(NAME_METADATA_KEY));
        if src_name.is_some_and(|n| n == new_name) {
            return Err(invalid(
                OP,
                format!("name {new_name:?}"),
                "it is the source's own name (a fork would replace its source)",
            ));
        }
        // A suspended source is resumed first (auto-start), as every operation does.
        self.leases
            .connect(OP, &h.id, std::time::Duration::ZERO, None)
            .await?;
        let snap = client
            .create_snapshot(&h.id, None)
            .await
            .map_err(|e| op_failed(OP, None, e))?;
        let created = self
            .create_from(OP, &snap.snapshot_id, new_name, detail)
            .await;
        // The fork runs on its own copy; the snapshot is not needed any more.
        if let Err(e) = client.delete_snapshot(&snap.snapshot_id).await {
            tracing::warn!(snapshot = %snap.snapshot_id, error = %e, "sandbox-e2b: deleting a fork's snapshot failed");
        }
        let new = created?;
        // Commands of the source that came along in the snapshot's memory end here.
        self.kill_all(&new).await?;
        Ok(new)
    }

    async fn create_from(
        &self,
        op: &'static str,
        snapshot_id: &str,
        new_name: &str,
        source: e2b_core::proto::control::SandboxDetail,
    ) -> Result<SandboxHandle, SandboxError> {
        let cfg = &self.cfg;
        self.destroy_by_name(new_name).await?;
        let base = CreateOptions::new(snapshot_id)
            .timeout(cfg.timeout())
            .metadata(NAME_METADATA_KEY, new_name)
            .auto_pause(true)
            .secure(true)
            .to_wire();
        let body = NewSandbox {
            allow_internet_access: source.allow_internet_access.or(base.allow_internet_access),
            network: source.network,
            ..base
        };
        let since = Instant::now();
        let sb = self
            .leases
            .client()
            .create(&CreateOptions::from_wire(body))
            .await
            .map_err(|e| op_failed(op, None, e))?;
        let id = sb.id().to_owned();
        check_id(op, &id)?;
        self.leases.remember(op, sb, since, cfg.timeout())?;
        Ok(SandboxHandle::new(id))
    }
}
