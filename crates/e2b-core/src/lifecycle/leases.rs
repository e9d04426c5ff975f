//! [`Leases`]: many sandboxes used from stateless replicas (a conversation-sandbox
//! provider), each known by the end of life its last create or connect granted, with a
//! world of adapters built once per connect. Unlike [`SandboxOwner`](super::SandboxOwner)
//! nothing runs in the background and nothing is renewed ahead of need: an operation that
//! needs more life than its lease has left connects (asking for the configured timeout,
//! or the need, at most the cap); a sandbox another replica paused is met as an
//! unroutable answer ([`Disposition::Unroutable`](crate::Disposition)), and the operation
//! connects once (resuming it) and runs again ([`Leases::run`]). A connect meeting a 409
//! (a resume in flight elsewhere) waits on the one retry loop
//! ([`RetryPolicy::run_also`]). A connect answer without an envd access token is gone:
//! no unauthenticated request is ever sent.
//!
//! ```no_run
//! use std::time::Duration;
//! use e2b_core::lifecycle::Leases;
//! # async fn demo(client: e2b_core::Client) -> Result<(), exec_world::Error> {
//! let leases = Leases::new(client, Duration::from_secs(3600), Duration::from_secs(86_400), Ok);
//! let api = leases.attach("exec", "sbx-1", Duration::from_secs(120)).await?;
//! # drop(api); Ok(()) }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::ConnectOptions;
use crate::retry::{Idempotence, RetryPolicy};
use crate::sandbox::{EnvdApi, Sandbox};
use crate::{Client, Disposition, Error};

/// Builds the world of one connect from its envd API.
type Build<T> = dyn Fn(Arc<dyn EnvdApi>) -> Result<T, exec_world::Error> + Send + Sync;

#[derive(Debug)]
struct Lease<T> {
    world: T,
    until: Instant,
}

/// Leases of every sandbox one provider instance used; `T` is the world built on each
/// connect (adapters on its envd API).
pub struct Leases<T> {
    client: Client,
    timeout: Duration,
    max: Duration,
    build: Box<Build<T>>,
    conflicts: RetryPolicy,
    map: Mutex<HashMap<String, Lease<T>>>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Leases<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("Leases")
            .field("timeout", &self.timeout)
            .field("max", &self.max)
            .field("leases", &*map)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + Sync + 'static> Leases<T> {
    /// Leases through `client`, asking for `timeout` of life per connect (more when an
    /// operation needs more, never past `max`); `build` makes the world of each connect.
    pub fn new(
        client: Client,
        timeout: Duration,
        max: Duration,
        build: impl Fn(Arc<dyn EnvdApi>) -> Result<T, exec_world::Error> + Send + Sync + 'static,
    ) -> Leases<T> {
        Leases {
            client,
            timeout,
            max,
            build: Box::new(build),
            // A resume in flight answers 409 for a few hundred milliseconds.
            conflicts: RetryPolicy::default()
                .max_attempts(6)
                .min_delay(Duration::from_millis(500))
                .max_delay(Duration::from_millis(500))
                .max_total_delay(Duration::from_secs(5)),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The control-plane client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lease<T>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sandbox timeout to ask for: the configured one, at least `need`, at most the
    /// cap.
    pub fn timeout_for(&self, need: Duration) -> Duration {
        need.max(self.timeout).min(self.max)
    }

    /// Records a sandbox just created or connected, granted `timeout` from `since`, and
    /// builds its world. Without an envd access token it is `Gone` (and forgotten).
    pub fn remember(
        &self,
        op: &str,
        sb: Sandbox,
        since: Instant,
        timeout: Duration,
    ) -> Result<T, exec_world::Error> {
        if sb.access_token().is_none() {
            self.forget(sb.id());
            tracing::warn!(
                sandbox = sb.id(),
                "E2B returned no envd access token; treating the sandbox as gone"
            );
            return Err(exec_world::Error::gone(op)
                .with_detail("the connect answer carried no envd access token"));
        }
        let id = sb.id().to_owned();
        let world = (self.build)(sb.into_api()).map_err(|e| e.with_op(op))?;
        self.lock().insert(
            id,
            Lease {
                world: world.clone(),
                until: since + timeout,
            },
        );
        Ok(world)
    }

    /// Drops the lease (after suspend, destroy, or an answer that it is stale).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The world of sandbox `id` with at least `need` of life left: the lease, or a
    /// connect.
    pub async fn attach(&self, op: &str, id: &str, need: Duration) -> Result<T, exec_world::Error> {
        if let Some(l) = self.lock().get(id)
            && Instant::now()
                .checked_add(need)
                .is_some_and(|t| l.until > t)
        {
            return Ok(l.world.clone());
        }
        self.connect(op, id, need, None).await
    }

    /// `connect` (resumes a paused sandbox): an E2B-format 404 is `Gone`; a 409 (a
    /// resume in flight) is waited on by the one retry loop.
    pub async fn connect(
        &self,
        op: &str,
        id: &str,
        need: Duration,
        memory: Option<bool>,
    ) -> Result<T, exec_world::Error> {
        let timeout = self.timeout_for(need);
        let mut since = Instant::now();
        let connected = self
            .conflicts
            .run_also(
                "connect",
                Idempotence::Idempotent,
                Error::is_conflict,
                |_| {
                    since = Instant::now();
                    self.client.connect(id, ConnectOptions { timeout, memory })
                },
            )
            .await;
        match connected {
            Ok(sb) => self.remember(op, sb, since, timeout),
            Err(e) => {
                self.forget(id);
                Err(e.into_world(op))
            }
        }
    }

    /// Runs `f` on the world of sandbox `id` (leased for `need`); when its error is
    /// stale (`Gone`, or an e2b-core source the one table calls unroutable: the proxy
    /// cannot reach the sandbox, e.g. another replica paused it), connects once and runs
    /// `f` again.
    pub async fn run<R, F, Fut>(
        &self,
        op: &str,
        id: &str,
        need: Duration,
        f: F,
    ) -> Result<R, exec_world::Error>
    where
        F: Fn(T) -> Fut,
        Fut: Future<Output = Result<R, exec_world::Error>>,
    {
        let world = self.attach(op, id, need).await?;
        match f(world).await {
            Err(e) if is_stale(&e) => {
                tracing::debug!(sandbox = id, error = %e, "lease stale; connecting again");
                let world = self.connect(op, id, need, None).await?;
                f(world).await
            }
            other => other,
        }
    }
}

/// True when an adapter's error says the lease is stale: `Gone`, or an e2b-core source
/// that the one table ([`Error::disposition`]) calls unroutable.
pub fn is_stale(e: &exec_world::Error) -> bool {
    if e.is_gone() {
        return true;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(core) = s.downcast_ref::<Error>() {
            return core.disposition() == Disposition::Unroutable;
        }
        src = s.source();
    }
    false
}
