//! [`SandboxError`]: the typed error of every sandbox provider operation. Each message
//! names the operation, the path when there is one, and the cause once.

use crate::BoxError;

/// What went wrong in a [`SandboxProvider`](super::SandboxProvider) operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The sandbox no longer exists (destroyed, or never existed): create a new one.
    #[error("{op}: sandbox {id} no longer exists")]
    Gone {
        /// The operation.
        op: &'static str,
        /// The sandbox id.
        id: String,
    },
    /// An argument was refused before anything ran.
    #[error("{op}: invalid {what}: {reason}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// Which argument (with its value when it is safe to show).
        what: String,
        /// Why.
        reason: String,
    },
    /// The caller's cancellation token was already cancelled.
    #[error("{op}: cancelled before it started")]
    Cancelled {
        /// The operation.
        op: &'static str,
    },
    /// The sandbox user may not do this (e.g. write outside its permissions).
    #[error("{op} {path}: permission denied: {detail}")]
    PermissionDenied {
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
        /// What the sandbox said.
        detail: String,
    },
    /// Anything else: the provider's backend failed.
    #[error("{op}{}: {message}", path.as_deref().map(|p| format!(" {p}")).unwrap_or_default())]
    Failed {
        /// The operation.
        op: &'static str,
        /// The path, for file operations.
        path: Option<String>,
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

impl SandboxError {
    /// True for [`SandboxError::Gone`].
    pub fn is_gone(&self) -> bool {
        matches!(self, SandboxError::Gone { .. })
    }

    /// A [`SandboxError::Invalid`].
    pub fn invalid(op: &'static str, what: impl Into<String>, reason: impl Into<String>) -> Self {
        SandboxError::Invalid {
            op,
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// A [`SandboxError::Failed`] without a source.
    pub fn failed(op: &'static str, path: Option<&str>, message: impl Into<String>) -> Self {
        SandboxError::Failed {
            op,
            path: path.map(str::to_owned),
            message: message.into(),
            source: None,
        }
    }

    /// `read_file` of something that is not a regular file (a FIFO, socket or device):
    /// refused, never opened for reading.
    pub fn not_regular_file(op: &'static str, path: &str) -> Self {
        SandboxError::failed(
            op,
            Some(path),
            "not a regular file (a FIFO, socket or device is never read)",
        )
    }

    /// A [`SandboxError::Failed`] with its source (its message is the source's text).
    pub fn from_source(
        op: &'static str,
        path: Option<&str>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SandboxError::Failed {
            op,
            path: path.map(str::to_owned),
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }
}
