//! The lease: per sandbox, the envd handle and the end of life the last connect (or
//! create) granted. An operation connects only when the lease is missing or shorter
//! than it needs; when envd says the sandbox is paused or missing (another replica
//! suspended it), the lease is dropped and the operation connects once and retries.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2b_core::{Client, ConnectOptions, EnvdApi, Error, Sandbox, Surface};
use exec_world::ErrorKind;
use exec_world::sandbox::SandboxError;
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions, UserInfo};

use crate::config::{MAX_TIMEOUT_SECONDS, SandboxConfig};
use crate::errors::{map_core, op_failed};

/// The template's sandbox user.
pub(crate) const SANDBOX_USER: &str = "sandbox";
/// Tries of a connect that meets a 409 (a resume in flight), and the wait between them.
const CONFLICT_TRIES: u32 = 5;
const CONFLICT_WAIT: Duration = Duration::from_millis(500);
/// Host-side queue per output stream of a command (read eagerly; output past the cap
/// is dropped as it arrives).
const OUTPUT_BUFFER: usize = 64 * 1024;

/// A usable sandbox: its envd API and the exec adapter on it.
#[derive(Clone, Debug)]
pub(crate) struct Attached {
    pub(crate) api: Arc<dyn EnvdApi>,
    pub(crate) proc: E2bSubprocess,
}

#[derive(Debug)]
struct Lease {
    attached: Attached,
    until: Instant,
}

/// Leases of every sandbox this provider instance used.
#[derive(Debug)]
pub(crate) struct Leases {
    pub(crate) client: Client,
    pub(crate) cfg: SandboxConfig,
    map: Mutex<HashMap<String, Lease>>,
}

/// The template's user, known in advance so exec needs no lookup.
fn sandbox_user() -> UserInfo {
    UserInfo {
        name: SANDBOX_USER.into(),
        home: exec_world::sandbox::WORKSPACE.into(),
        shell: "/bin/bash".into(),
        path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    }
}

/// `^[a-zA-Z0-9-]{1,128}$`: an id safe to put in a URL path.
pub(crate) fn check_id(op: &'static str, id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::invalid(
            op,
            format!("sandbox id {:?}", id.chars().take(140).collect::<String>()),
            "it must match ^[a-zA-Z0-9-]{1,128}$",
        ))
    }
}

/// The edge proxy's text for a paused sandbox (HTTP 409 in front of envd).
const PAUSED_TEXT: &str = "sandbox is paused";

/// envd's answer for a sandbox that is paused (the proxy's 409 `The sandbox is paused`,
/// which e2b-core reports as an envd 409) or missing (the proxy's 502).
pub(crate) fn is_stale(e: &Error) -> bool {
    match e {
        Error::SandboxNotFound {
            surface: Surface::Envd,
            ..
        }
        | Error::Conflict {
            surface: Surface::Envd,
            ..
        } => true,
        Error::Envd {
            status: Some(409),
            message,
            ..
        } => message.contains(PAUSED_TEXT),
        _ => false,
    }
}

/// The same for an exec start that failed: `Gone`, or an e2b-core source that
/// [`is_stale`].
pub(crate) fn is_stale_proc(e: &exec_world::Error) -> bool {
    e.kind() == ErrorKind::Gone
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<Error>())
            .is_some_and(is_stale)
}

impl Leases {
    pub(crate) fn new(client: Client, cfg: SandboxConfig) -> Leases {
        Leases {
            client,
            cfg,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lease>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sandbox timeout to ask for: the config's, at least `need`, at most 24 h.
    fn timeout_for(&self, need: Duration) -> Duration {
        need.max(self.cfg.timeout())
            .min(Duration::from_secs(MAX_TIMEOUT_SECONDS))
    }

    /// Records a connected sandbox with `timeout` granted from `since`.
    pub(crate) fn remember(
        &self,
        op: &'static str,
        sb: Sandbox,
        since: Instant,
        timeout: Duration,
    ) -> Result<Attached, SandboxError> {
        if sb.access_token().is_none() {
            self.forget(sb.id());
            // Never an unauthenticated request: the kernel recreates the sandbox.
            tracing::warn!(
                sandbox = sb.id(),
                "E2B returned no envd access token; treating the sandbox as gone"
            );
            return Err(SandboxError::Gone {
                op,
                id: sb.id().to_owned(),
            });
        }
        let id = sb.id().to_owned();
        let api = sb.into_api();
        let opts = E2bSubprocessOptions::new("/")
            .output_buffer(OUTPUT_BUFFER)
            .known_user(sandbox_user());
        let proc = E2bSubprocess::new(api.clone(), opts)
            .map_err(|e| SandboxError::from_source(op, None, e))?;
        let attached = Attached { api, proc };
        self.lock().insert(
            id,
            Lease {
                attached: attached.clone(),
                until: since + timeout,
            },
        );
        Ok(attached)
    }

    /// Drops the lease (after suspend, destroy, or a stale answer).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The sandbox with at least `need` of life left: the lease, or a connect.
    pub(crate) async fn attach(
        &self,
        op: &'static str,
        id: &str,
        need: Duration,
    ) -> Result<Attached, SandboxError> {
        check_id(op, id)?;
        if let Some(l) = self.lock().get(id)
            && Instant::now()
                .checked_add(need)
                .is_some_and(|t| l.until > t)
        {
            return Ok(l.attached.clone());
        }
        self.connect(op, id, need, None).await
    }

    /// `POST /v2/sandboxes/{id}/connect` (resumes a paused one): an E2B-format 404 is
    /// `Gone`, a 409 (a resume in flight) is retried 5 times 500 ms apart.
    pub(crate) async fn connect(
        &self,
        op: &'static str,
        id: &str,
        need: Duration,
        memory: Option<bool>,
    ) -> Result<Attached, SandboxError> {
        check_id(op, id)?;
        let timeout = self.timeout_for(need);
        let mut tries = 0;
        loop {
            let since = Instant::now();
            match self
                .client
                .connect(id, ConnectOptions { timeout, memory })
                .await
            {
                Ok(sb) => return self.remember(op, sb, since, timeout),
                Err(e) if e.is_conflict() && tries < CONFLICT_TRIES => {
                    tries += 1;
                    tokio::time::sleep(CONFLICT_WAIT).await;
                }
                Err(e) => {
                    self.forget(id);
                    return Err(map_core(op, id, None, e));
                }
            }
        }
    }

    /// Runs `f` on the sandbox (leased for `need`); when envd answers that the sandbox is
    /// paused or missing, connects once and runs `f` again.
    pub(crate) async fn with_envd<T, F, Fut>(
        &self,
        op: &'static str,
        id: &str,
        path: Option<&str>,
        need: Duration,
        f: F,
    ) -> Result<T, SandboxError>
    where
        F: Fn(Attached) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let a = self.attach(op, id, need).await?;
        match f(a).await {
            Ok(v) => Ok(v),
            Err(e) if is_stale(&e) => {
                tracing::debug!(sandbox = id, error = %e, "lease stale; connecting again");
                let a = self.connect(op, id, need, None).await?;
                f(a).await.map_err(|e| map_core(op, id, path, e))
            }
            Err(e) => Err(map_core(op, id, path, e)),
        }
    }

    /// Reboot: pause, then connect with `memory: false` (a cold boot from disk ends every
    /// process). Failures are logged, never returned.
    pub(crate) async fn reboot(&self, id: &str) {
        tracing::warn!(
            sandbox = id,
            "sandbox-e2b: could not stop a command cleanly; rebooting the sandbox"
        );
        self.forget(id);
        let paused = match self
            .client
            .pause(id, e2b_core::PauseOptions { memory: true })
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        };
        let result = match paused {
            Ok(()) => self
                .connect("reboot", id, Duration::ZERO, Some(false))
                .await
                .map(|_| ()),
            Err(e) => Err(op_failed("reboot", None, e)),
        };
        if let Err(e) = result {
            tracing::warn!(
                sandbox = id,
                error = %e,
                "sandbox-e2b: sandbox reboot failed; the stuck command may still be running"
            );
        }
    }
}
