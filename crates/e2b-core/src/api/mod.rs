//! The control-plane client: create, list, get, kill, set timeout, refresh, pause and
//! connect/resume sandboxes over E2B's REST API (`X-API-KEY`). Creating or connecting
//! returns a connected [`Sandbox`](crate::Sandbox) handle for envd. Snapshots, fork and
//! team volumes are in `snapshots` and `volumes`.
//!
//! Create and connect use the v2 paths (`POST /v2/sandboxes`,
//! `POST /v2/sandboxes/{id}/connect`) and fall back to v1 only when the control plane
//! answers v2 with a bare (non-E2B-format) 404; the fallback is then remembered.

mod create;
mod lifecycle;
mod list;
mod snapshots;
mod volumes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use create::{CREATE_TOKEN_KEY, CreateOptions};
pub use lifecycle::{ConnectOptions, PauseOptions};
pub use list::{ListPage, ListQuery, SandboxStream};
pub use snapshots::{ForkOptions, SnapshotPage, SnapshotQuery};
pub use volumes::VolumeContent;

use crate::config::{Config, Secret};
use crate::error::{Error, Surface};
use crate::http;
use crate::proto::headers;
use crate::retry::{Idempotence, RetryPolicy};

/// A control-plane client. Cheap to clone (shares one connection pool).
///
/// ```no_run
/// # async fn demo() -> Result<(), e2b_core::Error> {
/// use e2b_core::{Client, Config, CreateOptions, EnvdApi};
/// let client = Client::new(Config::from_env())?;
/// let sandbox = client.create(&CreateOptions::new("base")).await?;
/// let out = sandbox.stat("/home/user", None).await?;
/// client.kill(sandbox.id()).await?;
/// # let _ = out; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cfg: Config,
    http: reqwest::Client,
    api_url: String,
    api_key: Secret,
    /// Set once v2 create/connect answered with a bare 404.
    v1_only: AtomicBool,
    /// Retries of idempotent calls (and of create after a metadata check).
    retry: RetryPolicy,
}

impl Client {
    /// A client for this configuration; fails without an API key.
    pub fn new(cfg: Config) -> Result<Client, Error> {
        let api_key = cfg.api_key.clone().ok_or_else(|| {
            Error::Config("no API key: set E2B_API_KEY or Config::api_key".into())
        })?;
        let api_url = cfg.resolved_api_url();
        url::Url::parse(&api_url)
            .map_err(|e| Error::Config(format!("invalid API URL {api_url:?}: {e}")))?;
        let http = http::build_client(&cfg)?;
        Ok(Client {
            inner: Arc::new(Inner {
                cfg,
                http,
                api_url,
                api_key,
                v1_only: AtomicBool::new(false),
                retry: RetryPolicy::default(),
            }),
        })
    }

    /// This client with another retry policy (same configuration and connection pool);
    /// [`RetryPolicy::none`] makes every call once.
    pub fn with_retry_policy(&self, retry: RetryPolicy) -> Client {
        Client {
            inner: Arc::new(Inner {
                cfg: self.inner.cfg.clone(),
                http: self.inner.http.clone(),
                api_url: self.inner.api_url.clone(),
                api_key: self.inner.api_key.clone(),
                v1_only: AtomicBool::new(self.v1_only()),
                retry,
            }),
        }
    }

    /// The retry policy in use.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// [`Client::new`] with [`Config::from_env`].
    pub fn from_env() -> Result<Client, Error> {
        Client::new(Config::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The control-plane base URL in use.
    pub fn api_url(&self) -> &str {
        &self.inner.api_url
    }

    /// A handle for a sandbox known by its parts (bring your own sandbox), sharing this
    /// client's configuration and connection pool; no control-plane call is made.
    pub fn attach(&self, parts: crate::sandbox::SandboxParts) -> Result<crate::Sandbox, Error> {
        crate::Sandbox::attach_with(&self.inner.cfg, self.inner.http.clone(), parts)
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    fn v1_only(&self) -> bool {
        self.inner.v1_only.load(Ordering::Relaxed)
    }

    fn set_v1_only(&self) {
        tracing::debug!("control plane has no v2 create/connect; using v1 from now on");
        self.inner.v1_only.store(true, Ordering::Relaxed);
    }

    /// Send one request; a 2xx answer is returned, anything else mapped to an [`Error`].
    pub(crate) async fn send<B: Serialize + ?Sized>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<reqwest::Response, Error> {
        let timeout = self.inner.cfg.request_timeout;
        let method_is_read = method == reqwest::Method::GET || method == reqwest::Method::HEAD;
        let url = format!("{}{}", self.inner.api_url, path);
        let mut req = self
            .inner
            .http
            .request(method, url)
            .header(headers::API_KEY, self.inner.api_key.expose())
            .timeout(timeout);
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            let json = serde_json::to_vec(b)
                .map_err(|e| Error::Config(format!("cannot encode the request: {e}")))?;
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(json);
        }
        // Reads are resent once when they met a dropped pooled connection.
        let resp = if method_is_read {
            http::send_resending_stale(req).await
        } else {
            req.send().await
        };
        let resp = resp.map_err(|e| {
            Error::from_reqwest(Surface::Control, e, "control-plane request", timeout)
        })?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(http::error_from(Surface::Control, resp, timeout, &[&self.inner.api_key]).await)
        }
    }

    /// [`Client::send`] with retries as `idempotence` allows (see [`crate::retry`]).
    pub(crate) async fn send_retrying<B: Serialize + ?Sized>(
        &self,
        idempotence: Idempotence,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<reqwest::Response, Error> {
        self.inner
            .retry
            .run(path, idempotence, |_| {
                self.send(method.clone(), path, query, body)
            })
            .await
    }

    /// [`Client::send_retrying`] of an idempotent call.
    pub(crate) async fn send_idempotent<B: Serialize + ?Sized>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<reqwest::Response, Error> {
        self.send_retrying(Idempotence::Idempotent, method, path, query, body)
            .await
    }

    /// Read a JSON body of a successful answer.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        resp: reqwest::Response,
    ) -> Result<T, Error> {
        let timeout = self.inner.cfg.request_timeout;
        let body = resp.bytes().await.map_err(|e| {
            Error::from_reqwest(Surface::Control, e, "control-plane response body", timeout)
        })?;
        serde_json::from_slice(&body).map_err(|e| {
            Error::protocol(
                Surface::Control,
                format!(
                    "undecodable JSON ({e}): {}",
                    crate::error::snippet(&body, &[&self.inner.api_key])
                ),
            )
        })
    }
}

/// Percent-encode a sandbox id for a path segment (ids are `[a-z0-9]`, but never trust).
pub(crate) fn seg(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}
