//! envd: the daemon that runs inside every sandbox (processes, filesystem, /files).
//!
//! [`Envd::boot`] lays out (or reopens) a sandbox tree, sets up isolation, and
//! [`Envd::router`] serves every envd route: `/health`, `/files`, `/envs`, `/metrics`, the
//! reserved internal routes, and the Connect services `process.Process` and
//! `filesystem.Filesystem`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What one sandbox's envd needs to know.
#[derive(Debug, Clone)]
pub struct EnvdConfig {
    /// The sandbox id (`E2B_SANDBOX_ID`).
    pub sandbox_id: String,
    /// The template the sandbox was created from.
    pub template: crate::template::Template,
    /// Host directory that holds this sandbox's tree (created if missing).
    pub root: PathBuf,
    /// `None` = unsecured sandbox: nothing checked.
    pub access_token: Option<String>,
    /// Global env vars from create (`envVars`).
    pub env_vars: BTreeMap<String, String>,
}

/// Why envd could not boot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvdError {
    /// A filesystem or process operation on the host failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The template is inconsistent (e.g. a directory owned by an unknown user).
    #[error("invalid template: {0}")]
    Template(String),
}

/// One sandbox's envd.
pub struct Envd {
    cfg: EnvdConfig,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd")
            .field("sandbox_id", &self.cfg.sandbox_id)
            .finish_non_exhaustive()
    }
}

impl Envd {
    /// Boot envd: the first boot lays out the tree from the template; a later boot on an
    /// existing root (cold boot) keeps the files.
    pub async fn boot(cfg: EnvdConfig) -> Result<Arc<Envd>, EnvdError> {
        std::fs::create_dir_all(&cfg.root).map_err(|source| EnvdError::Io {
            context: format!("creating {}", cfg.root.display()),
            source,
        })?;
        Ok(Arc::new(Envd { cfg }))
    }

    /// Every envd route.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
    }

    /// Pause with memory: SIGSTOP every process of the sandbox.
    pub async fn freeze(&self) {}

    /// Resume after [`Envd::freeze`]: SIGCONT every process of the sandbox.
    pub async fn thaw(&self) {}

    /// SIGKILL every process of the sandbox and wait for them.
    pub async fn stop_all(&self) {}

    /// [`Envd::stop_all`], then remove the sandbox tree.
    pub async fn destroy(&self) {
        self.stop_all().await;
        let _ = std::fs::remove_dir_all(&self.cfg.root);
    }
}
