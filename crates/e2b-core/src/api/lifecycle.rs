//! Sandbox lifecycle on the control plane: get, kill, set timeout, refresh, pause and
//! connect (which resumes a paused sandbox).

use std::time::Duration;

use reqwest::Method;

use super::create::secs_ceil;
use super::{Client, seg};
use crate::config::DEFAULT_SANDBOX_TIMEOUT;
use crate::error::Error;
use crate::proto::control::{
    ConnectSandbox, PauseSandbox, RefreshSandbox, Sandbox as WireSandbox, SandboxDetail, SetTimeout,
};
use crate::retry::Idempotence;
use crate::sandbox::Sandbox;

/// Options of [`Client::pause`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseOptions {
    /// Keep memory (default true); false is a filesystem-only snapshot and the next
    /// connect cold-boots.
    pub memory: bool,
}

impl Default for PauseOptions {
    fn default() -> Self {
        PauseOptions { memory: true }
    }
}

/// Options of [`Client::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Lifetime from now; only extends a running sandbox (default 300 s).
    pub timeout: Duration,
    /// `Some(false)` resumes a paused sandbox from disk only (cold boot); `None` lets the
    /// server decide (memory kept).
    pub memory: Option<bool>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            timeout: DEFAULT_SANDBOX_TIMEOUT,
            memory: None,
        }
    }
}

impl ConnectOptions {
    /// Connect with this lifetime.
    pub fn with_timeout(timeout: Duration) -> Self {
        ConnectOptions {
            timeout,
            memory: None,
        }
    }
}

impl Client {
    /// `GET /sandboxes/{id}`. A missing sandbox is [`Error::SandboxNotFound`]. Retried
    /// as [`crate::retry`] says.
    pub async fn get(&self, sandbox_id: &str) -> Result<SandboxDetail, Error> {
        let resp = self
            .send_idempotent::<()>(
                Method::GET,
                &format!("/sandboxes/{}", seg(sandbox_id)),
                &[],
                None,
            )
            .await?;
        self.json(resp).await
    }

    /// `DELETE /sandboxes/{id}`: `true` when killed, `false` when it did not exist.
    /// Retried after a reset or 502/503/504 (killing twice is harmless); when the answer
    /// of an attempt that did kill was lost, the retry finds nothing and says `false`.
    pub async fn kill(&self, sandbox_id: &str) -> Result<bool, Error> {
        match self
            .send_idempotent::<()>(
                Method::DELETE,
                &format!("/sandboxes/{}", seg(sandbox_id)),
                &[],
                None,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::SandboxNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `POST /sandboxes/{id}/timeout`: end of life = now + `timeout` (may shorten; whole
    /// seconds rounded up).
    pub async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), Error> {
        let body = SetTimeout {
            timeout: secs_ceil(timeout),
        };
        self.send_idempotent(
            Method::POST,
            &format!("/sandboxes/{}/timeout", seg(sandbox_id)),
            &[],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/refreshes`: extend (never shorten) the life by `duration`
    /// (server default and minimum 15 s, maximum 3600 s).
    pub async fn refresh(&self, sandbox_id: &str, duration: Option<Duration>) -> Result<(), Error> {
        let body = RefreshSandbox {
            duration: duration.map(secs_ceil),
        };
        self.send_idempotent(
            Method::POST,
            &format!("/sandboxes/{}/refreshes", seg(sandbox_id)),
            &[],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/pause`. Pausing an already paused sandbox is
    /// [`Error::Conflict`] (check with [`Error::is_conflict`] for idempotence); a missing
    /// one is [`Error::SandboxNotFound`]. Retried only after 429/503 (a repeated pause
    /// after a lost answer would be a conflict).
    pub async fn pause(&self, sandbox_id: &str, opts: PauseOptions) -> Result<(), Error> {
        let body = PauseSandbox {
            memory: Some(opts.memory),
            require_healthy_guest: None,
        };
        self.send_retrying(
            Idempotence::NotIfAmbiguous,
            Method::POST,
            &format!("/sandboxes/{}/pause", seg(sandbox_id)),
            &[],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// Connect to a sandbox, resuming it if paused, and return a handle
    /// ([`Sandbox::was_resumed`] tells whether it was paused).
    pub async fn connect(&self, sandbox_id: &str, opts: ConnectOptions) -> Result<Sandbox, Error> {
        let (wire, resumed) = self.connect_raw(sandbox_id, opts).await?;
        Sandbox::from_wire(self, &wire, resumed)
    }

    /// Connect and return the control plane's answer as is, with `true` when the sandbox
    /// was resumed (HTTP 201) rather than already running (200).
    pub async fn connect_raw(
        &self,
        sandbox_id: &str,
        opts: ConnectOptions,
    ) -> Result<(WireSandbox, bool), Error> {
        let body = ConnectSandbox {
            timeout: secs_ceil(opts.timeout),
            memory: opts.memory,
        };
        let v1 = format!("/sandboxes/{}/connect", seg(sandbox_id));
        let resp = if self.v1_only() {
            self.send_idempotent(Method::POST, &v1, &[], Some(&body))
                .await
        } else {
            match self
                .send_idempotent(Method::POST, &format!("/v2{v1}"), &[], Some(&body))
                .await
            {
                Err(Error::EndpointNotFound { .. }) => {
                    self.set_v1_only();
                    self.send_idempotent(Method::POST, &v1, &[], Some(&body))
                        .await
                }
                other => other,
            }
        }?;
        let resumed = resp.status() == reqwest::StatusCode::CREATED;
        Ok((self.json(resp).await?, resumed))
    }
}
