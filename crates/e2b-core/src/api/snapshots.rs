//! Snapshots and fork: `POST /sandboxes/{id}/snapshots`, `GET /snapshots`,
//! `DELETE /templates/{id}` (how the SDKs delete a snapshot) and
//! `POST /sandboxes/{id}/fork`. A sandbox is created from a snapshot by naming its
//! `snapshotID` as the template of [`CreateOptions`](super::CreateOptions).
//!
//! Creating a snapshot and forking are not idempotent: they are retried only after a
//! failure that certainly did nothing (429, 503, a refused connection), never after an
//! ambiguous one (the caller gets that error and may list snapshots or sandboxes to see).

use std::time::Duration;

use super::{Client, seg};
use crate::error::{Error, Surface};
use crate::proto::control::ApiError;
use crate::proto::headers;
use crate::proto::snapshot::{ForkRequest, ForkResult, SnapshotInfo, SnapshotRequest};
use crate::retry::Idempotence;
use crate::sandbox::Sandbox;

/// Filters of a snapshot listing.
///
/// ```
/// let q = e2b_core::SnapshotQuery::new().sandbox("iabc").limit(10);
/// assert_eq!(q.limit, Some(10));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotQuery {
    /// Only snapshots taken of this sandbox.
    pub sandbox_id: Option<String>,
    /// Only snapshots with this name or id (optionally `:tag`).
    pub name: Option<String>,
    /// Page size (1..=100).
    pub limit: Option<u32>,
}

impl SnapshotQuery {
    /// No filters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only snapshots of this sandbox.
    pub fn sandbox(mut self, id: impl Into<String>) -> Self {
        self.sandbox_id = Some(id.into());
        self
    }

    /// Only snapshots with this name or id.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// One page of snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotPage {
    /// The snapshots, newest first.
    pub snapshots: Vec<SnapshotInfo>,
    /// Cursor of the next page (`X-Next-Token`), `None` on the last page.
    pub next_token: Option<String>,
}

/// How to fork.
///
/// ```
/// use std::time::Duration;
/// let o = e2b_core::ForkOptions::new().count(2).timeout(Duration::from_secs(600));
/// assert_eq!((o.count, o.timeout), (2, Some(Duration::from_secs(600))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkOptions {
    /// How many forks (1..=100).
    pub count: u32,
    /// Lifetime of each fork (server default 15 s when `None`).
    pub timeout: Option<Duration>,
}

impl Default for ForkOptions {
    fn default() -> Self {
        ForkOptions {
            count: 1,
            timeout: None,
        }
    }
}

impl ForkOptions {
    /// One fork, server-default lifetime.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many forks.
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Lifetime of each fork (sent as whole seconds, rounded up).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
}

/// An error of one fork in a fork answer, mapped as the same answer to a request would
/// be; a 404 there is about what the fork needed (its snapshot), never the source sandbox.
fn fork_error(e: ApiError) -> Error {
    if e.code == 404 {
        return Error::TemplateNotFound { message: e.message };
    }
    let status = u16::try_from(e.code).unwrap_or(500);
    let body = serde_json::to_vec(&e).unwrap_or_default();
    Error::from_response(Surface::Control, status, None, &body, &[])
}

impl Client {
    /// Snapshot a running sandbox's state (optionally under a name: `name`, `name:tag`);
    /// the answer's `snapshot_id` creates sandboxes from it. An unknown sandbox is
    /// [`Error::SandboxNotFound`].
    pub async fn create_snapshot(
        &self,
        sandbox_id: &str,
        name: Option<&str>,
    ) -> Result<SnapshotInfo, Error> {
        let body = SnapshotRequest {
            name: name.map(str::to_owned),
        };
        let path = format!("/sandboxes/{}/snapshots", seg(sandbox_id));
        let resp = self
            .send_retrying(
                Idempotence::NotIfAmbiguous,
                reqwest::Method::POST,
                &path,
                &[],
                Some(&body),
            )
            .await?;
        self.json(resp).await
    }

    /// One page of snapshots (`next_token` from the previous page, `None` for the first).
    pub async fn list_snapshots(
        &self,
        query: &SnapshotQuery,
        next_token: Option<&str>,
    ) -> Result<SnapshotPage, Error> {
        let mut params: Vec<(&str, String)> = Vec::new();
        if let Some(s) = &query.sandbox_id {
            params.push(("sandboxID", s.clone()));
        }
        if let Some(n) = &query.name {
            params.push(("name", n.clone()));
        }
        if let Some(l) = query.limit {
            params.push(("limit", l.to_string()));
        }
        if let Some(t) = next_token {
            params.push(("nextToken", t.to_owned()));
        }
        let resp = self
            .send_idempotent::<()>(reqwest::Method::GET, "/snapshots", &params, None)
            .await?;
        let next_token = resp
            .headers()
            .get(headers::NEXT_TOKEN)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        let snapshots = self.json(resp).await?;
        Ok(SnapshotPage {
            snapshots,
            next_token,
        })
    }

    /// Every snapshot matching `query`, following the pages.
    pub async fn list_all_snapshots(
        &self,
        query: &SnapshotQuery,
    ) -> Result<Vec<SnapshotInfo>, Error> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_snapshots(query, token.as_deref()).await?;
            all.extend(page.snapshots);
            match page.next_token {
                Some(t) if Some(&t) != token.as_ref() => token = Some(t),
                _ => return Ok(all),
            }
        }
    }

    /// Delete a snapshot (by `snapshot_id` or name): `true` when deleted, `false` when
    /// there was none. Sandboxes already made from it keep running.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<bool, Error> {
        let path = format!("/templates/{}", seg(snapshot_id));
        match self
            .send_idempotent::<()>(reqwest::Method::DELETE, &path, &[], None)
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::SandboxNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Fork a running sandbox: its state is captured once and `count` sandboxes boot from
    /// it. One entry per fork, each connected or the error that fork met. A paused source
    /// is [`Error::Conflict`], an unknown one [`Error::SandboxNotFound`].
    pub async fn fork(
        &self,
        sandbox_id: &str,
        opts: &ForkOptions,
    ) -> Result<Vec<Result<Sandbox, Error>>, Error> {
        if opts.count < 1 {
            return Err(Error::Config("fork: count must be at least 1".into()));
        }
        let results = self.fork_raw(sandbox_id, opts).await?;
        Ok(results
            .into_iter()
            .map(|r| match (r.sandbox, r.error) {
                (Some(wire), _) => Sandbox::from_wire(self, &wire, false),
                (None, Some(e)) => Err(fork_error(e)),
                (None, None) => Err(Error::protocol(
                    Surface::Control,
                    "a fork result with neither sandbox nor error",
                )),
            })
            .collect())
    }

    /// [`Client::fork`] answering the control plane's results as they are.
    pub async fn fork_raw(
        &self,
        sandbox_id: &str,
        opts: &ForkOptions,
    ) -> Result<Vec<ForkResult>, Error> {
        let body = ForkRequest {
            timeout: opts.timeout.map(super::create::secs_ceil),
            count: Some(i64::from(opts.count)),
        };
        let path = format!("/sandboxes/{}/fork", seg(sandbox_id));
        let resp = self
            .send_retrying(
                Idempotence::NotIfAmbiguous,
                reqwest::Method::POST,
                &path,
                &[],
                Some(&body),
            )
            .await?;
        self.json(resp).await
    }
}
