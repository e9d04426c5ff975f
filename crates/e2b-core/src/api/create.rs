//! `POST /v2/sandboxes` (fallback `POST /sandboxes`): create a sandbox and connect to it.

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Client, ConnectOptions, ListQuery};
use crate::proto::control::SandboxState;
use crate::retry::{Idempotence, RetryClass, classify};

/// Metadata key of the random token every create carries, so that a create whose answer
/// was lost is found (by listing) instead of repeated.
pub const CREATE_TOKEN_KEY: &str = "e2b_core_create_token";
use crate::config::DEFAULT_SANDBOX_TIMEOUT;
use crate::error::Error;
use crate::proto::control::{AutoResume, NetworkConfig, NewSandbox, Sandbox as WireSandbox};
use crate::sandbox::Sandbox;

/// What to create. Defaults follow the SDKs: template `base`, 300 s, `secure: true`,
/// internet access on.
///
/// ```
/// use std::time::Duration;
/// use e2b_core::CreateOptions;
/// let opts = CreateOptions::new("base")
///     .timeout(Duration::from_secs(600))
///     .metadata("conversation", "c-42")
///     .env_var("LANG", "C.UTF-8")
///     .auto_pause(true);
/// assert_eq!(opts.to_wire().timeout, Some(600));
/// ```
#[derive(Debug, Clone)]
pub struct CreateOptions {
    body: NewSandbox,
}

impl Default for CreateOptions {
    fn default() -> Self {
        Self::new("base")
    }
}

impl CreateOptions {
    /// Create from this template (ID, alias, `namespace/alias`, optionally `:tag`) or
    /// snapshot (its `snapshot_id`).
    pub fn new(template: impl Into<String>) -> Self {
        CreateOptions {
            body: NewSandbox {
                template_id: template.into(),
                timeout: Some(secs_ceil(DEFAULT_SANDBOX_TIMEOUT)),
                secure: Some(true),
                allow_internet_access: Some(true),
                ..Default::default()
            },
        }
    }

    /// Lifetime from now (sent as whole seconds, rounded up).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.body.timeout = Some(secs_ceil(t));
        self
    }

    /// Add one metadata pair.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.body
            .metadata
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Add one global environment variable.
    pub fn env_var(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.body
            .env_vars
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Pause (instead of kill) when the timeout expires.
    pub fn auto_pause(mut self, on: bool) -> Self {
        self.body.auto_pause = Some(on);
        self
    }

    /// Keep memory when auto-pausing (only valid with `auto_pause(true)`).
    pub fn auto_pause_memory(mut self, on: bool) -> Self {
        self.body.auto_pause_memory = Some(on);
        self
    }

    /// Resume a paused sandbox on incoming traffic.
    pub fn auto_resume(mut self, on: bool) -> Self {
        self.body.auto_resume = Some(AutoResume { enabled: on });
        self
    }

    /// Require an envd access token (default true).
    pub fn secure(mut self, on: bool) -> Self {
        self.body.secure = Some(on);
        self
    }

    /// Internet access (default true).
    pub fn allow_internet_access(mut self, on: bool) -> Self {
        self.body.allow_internet_access = Some(on);
        self
    }

    /// Network settings (egress allow/deny lists, public traffic, egress proxy).
    pub fn network(mut self, network: NetworkConfig) -> Self {
        self.body.network = Some(network);
        self
    }

    /// Allowed egress destinations (shorthand for a [`NetworkConfig`] field).
    pub fn allow_out(mut self, destinations: Vec<String>) -> Self {
        self.body
            .network
            .get_or_insert_with(Default::default)
            .allow_out = Some(destinations);
        self
    }

    /// Denied egress destinations (shorthand for a [`NetworkConfig`] field).
    pub fn deny_out(mut self, destinations: Vec<String>) -> Self {
        self.body
            .network
            .get_or_insert_with(Default::default)
            .deny_out = Some(destinations);
        self
    }

    /// Mount the team volume `name` at the absolute path `path`.
    ///
    /// ```
    /// let o = e2b_core::CreateOptions::new("base").volume_mount("cache", "/mnt/cache");
    /// assert_eq!(o.to_wire().volume_mounts.map(|v| v.len()), Some(1));
    /// ```
    pub fn volume_mount(mut self, name: impl Into<String>, path: impl Into<String>) -> Self {
        self.body.volume_mounts.get_or_insert_with(Vec::new).push(
            crate::proto::volume::VolumeMount {
                name: name.into(),
                path: path.into(),
            },
        );
        self
    }

    /// The request body as it goes on the wire.
    pub fn to_wire(&self) -> NewSandbox {
        self.body.clone()
    }

    /// Start from a complete wire body (for fields without a builder method).
    pub fn from_wire(body: NewSandbox) -> Self {
        CreateOptions { body }
    }
}

pub(crate) fn secs_ceil(d: Duration) -> i64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(s).unwrap_or(i64::MAX)
}

impl Client {
    /// Create a sandbox and return a handle connected to its envd. An unknown template is
    /// [`Error::TemplateNotFound`].
    pub async fn create(&self, opts: &CreateOptions) -> Result<Sandbox, Error> {
        let wire = self.create_raw(&opts.body).await?;
        Sandbox::from_wire(self, &wire, false)
    }

    /// Create a sandbox and return the control plane's answer as is.
    ///
    /// Never duplicated by a retry: the body carries a random
    /// [`CREATE_TOKEN_KEY`] metadata pair; a refusal that did nothing (429, 503) is
    /// retried as is, and after a failure that may have created the sandbox (connection
    /// reset, 502, 504) the sandboxes are first listed by that pair: one that exists is
    /// connected to and returned instead of creating another. A timeout is not retried
    /// (the request may still be running).
    pub async fn create_raw(&self, body: &NewSandbox) -> Result<WireSandbox, Error> {
        let token = crate::trusted_shell::random_suffix();
        let mut body = body.clone();
        body.metadata
            .get_or_insert_with(BTreeMap::new)
            .insert(CREATE_TOKEN_KEY.to_owned(), token.clone());
        let maybe_created = AtomicBool::new(false);
        let body = &body;
        let (token, maybe_created) = (&token, &maybe_created);
        self.retry_policy()
            .run("create", Idempotence::Idempotent, |_| async move {
                if maybe_created.load(Ordering::SeqCst)
                    && let Some(found) = self.created_by(token, body).await?
                {
                    return Ok(found);
                }
                match self.create_once(body).await {
                    Err(e) => {
                        if classify(&e) == RetryClass::Ambiguous {
                            maybe_created.store(true, Ordering::SeqCst);
                        }
                        Err(e)
                    }
                    ok => ok,
                }
            })
            .await
    }

    /// The sandbox an earlier attempt with `token` created, connected, if there is one.
    async fn created_by(
        &self,
        token: &str,
        body: &NewSandbox,
    ) -> Result<Option<WireSandbox>, Error> {
        let query = ListQuery::new()
            .metadata(CREATE_TOKEN_KEY, token)
            .states([SandboxState::Running, SandboxState::Paused])
            .limit(1);
        let page = self.list_page(&query, None).await?;
        let Some(found) = page.sandboxes.first() else {
            return Ok(None);
        };
        tracing::debug!(sandbox = %found.sandbox_id, "create: an earlier attempt did create the sandbox");
        let timeout = Duration::from_secs(u64::try_from(body.timeout.unwrap_or(0)).unwrap_or(0));
        let opts = if timeout.is_zero() {
            ConnectOptions::default()
        } else {
            ConnectOptions::with_timeout(timeout)
        };
        let (wire, _) = self.connect_raw(&found.sandbox_id, opts).await?;
        Ok(Some(wire))
    }

    /// One create request (v2, or v1 where v2 is missing).
    async fn create_once(&self, body: &NewSandbox) -> Result<WireSandbox, Error> {
        let post = |path: &'static str| async move {
            self.send(reqwest::Method::POST, path, &[], Some(body))
                .await
        };
        let resp = if self.v1_only() {
            post("/sandboxes").await
        } else {
            match post("/v2/sandboxes").await {
                Err(Error::EndpointNotFound { .. }) => {
                    self.set_v1_only();
                    post("/sandboxes").await
                }
                other => other,
            }
        };
        let resp = resp.map_err(|e| match e {
            Error::SandboxNotFound { message, .. } => Error::TemplateNotFound { message },
            e => e,
        })?;
        self.json(resp).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_body_matches_the_sdk() {
        let body = serde_json::to_string(&CreateOptions::default().to_wire()).unwrap_or_default();
        assert_eq!(
            body,
            r#"{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true}"#
        );
        assert_eq!(secs_ceil(Duration::from_millis(1500)), 2);
        let o = CreateOptions::new("t")
            .allow_out(vec!["1.1.1.1".into()])
            .metadata("a", "b");
        let v = serde_json::to_value(o.to_wire()).unwrap_or_default();
        assert_eq!(v["network"]["allowOut"][0], "1.1.1.1");
        assert_eq!(v["metadata"]["a"], "b");
    }
}
