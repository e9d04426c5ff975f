//! The lease: per sandbox, the envd handle, the world on it (fs-e2b as the sandbox user
//! and as root for `/skills`, subprocess-e2b) and the end of life the last connect (or
//! create) granted. An operation connects only when the lease is missing or shorter
//! than it needs; when e2b-core classifies envd's answer as unroutable (the proxy
//! cannot reach the sandbox: another replica paused it, or it is gone), the lease is
//! dropped and the operation connects once and retries.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2b_core::{Client, ConnectOptions, Disposition, EnvdApi, Error, Sandbox};
use exec_world::sandbox::{SandboxError, failed_by, gone};
use fs_e2b::{E2bFs, E2bFsOptions};
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions, UserInfo};

use crate::config::{MAX_TIMEOUT_SECONDS, SandboxConfig};
use crate::errors::{map_core, op_failed};
use crate::io::UPLOAD_DIR;

/// The template's sandbox user.
pub(crate) const SANDBOX_USER: &str = "sandbox";
/// Tries of a connect that meets a 409 (a resume in flight), and the wait between them.
const CONFLICT_TRIES: u32 = 5;
const CONFLICT_WAIT: Duration = Duration::from_millis(500);
/// Host-side queue per output stream of a command (read eagerly; output past the cap
/// is dropped as it arrives).
const OUTPUT_BUFFER: usize = 64 * 1024;

/// A usable sandbox: its envd API and the world's adapters on it.
#[derive(Clone, Debug)]
pub(crate) struct Attached {
    pub(crate) api: Arc<dyn EnvdApi>,
    pub(crate) proc: E2bSubprocess,
    /// Files as the sandbox user.
    pub(crate) fs: E2bFs,
    /// Files as root, for `/skills` only (root-owned all the way down).
    pub(crate) root_fs: E2bFs,
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
        Err(exec_world::sandbox::invalid(
            op,
            format!("sandbox id {:?}", id.chars().take(140).collect::<String>()),
            "it must match ^[a-zA-Z0-9-]{1,128}$",
        ))
    }
}

/// envd's answer for a sandbox the proxy cannot route to (paused or missing), as
/// e2b-core's one table says.
pub(crate) fn is_stale(e: &Error) -> bool {
    e.disposition() == Disposition::Unroutable
}

/// The same for an error of an adapter: `Gone`, or an e2b-core source that
/// [`is_stale`].
pub(crate) fn is_stale_world(e: &exec_world::Error) -> bool {
    e.is_gone()
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
            return Err(gone(op, sb.id()));
        }
        let id = sb.id().to_owned();
        let api = sb.into_api();
        let opts = E2bSubprocessOptions::new("/")
            .output_buffer(OUTPUT_BUFFER)
            .known_user(sandbox_user());
        let proc = E2bSubprocess::new(api.clone(), opts).map_err(|e| failed_by(op, None, e))?;
        let fs_opts = |user: &str| {
            E2bFsOptions::new(exec_world::sandbox::WORKSPACE)
                .user(user)
                .root_staging(UPLOAD_DIR)
        };
        let fs =
            E2bFs::new(api.clone(), fs_opts(SANDBOX_USER)).map_err(|e| failed_by(op, None, e))?;
        let root_fs =
            E2bFs::new(api.clone(), fs_opts("root")).map_err(|e| failed_by(op, None, e))?;
        let attached = Attached {
            api,
            proc,
            fs,
            root_fs,
        };
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

    /// Runs the adapter operation `f` on the sandbox (leased for `need`); when the
    /// answer is unroutable (paused or missing behind the proxy), connects once and runs
    /// `f` again. The adapter's error is returned as it is (its kind kept).
    pub(crate) async fn with_fs<T, F, Fut>(
        &self,
        op: &'static str,
        id: &str,
        need: Duration,
        f: F,
    ) -> Result<T, exec_world::Error>
    where
        F: Fn(Attached) -> Fut,
        Fut: Future<Output = Result<T, exec_world::Error>>,
    {
        let a = self.attach(op, id, need).await?;
        match f(a).await {
            Err(e) if is_stale_world(&e) => {
                tracing::debug!(sandbox = id, error = %e, "lease stale; connecting again");
                let a = self.connect(op, id, need, None).await?;
                f(a).await
                    .map_err(|e| if e.is_gone() { gone(op, id) } else { e })
            }
            other => other,
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
