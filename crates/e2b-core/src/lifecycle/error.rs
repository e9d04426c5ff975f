//! The error type of the lifecycle owner and keep-alive: typed refusals (bad working
//! directory, symlinked reserved path, shutdown in progress, plan cap, timeout mismatch)
//! plus the client's own [`Error`], shared behind an `Arc` so one setup failure can be
//! reported, unchanged, to every waiter.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

/// What a reserved path turned out to be instead of a real directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A symbolic link (to anything, even to a directory).
    Symlink,
    /// Something that exists but is not a directory (file, socket, fifo, device).
    NotADirectory,
}

/// Everything the lifecycle layer can refuse or fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    /// The working directory is not an absolute, normalized POSIX path (checked before
    /// any request).
    #[error("invalid working directory {path:?}: {reason}")]
    InvalidWorkdir {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// Invalid option (state dir name, keep-alive settings, ...), before any request.
    #[error("invalid lifecycle option: {0}")]
    InvalidOption(String),
    /// A reserved path (a component of the working directory, or the state dir) is not
    /// a real directory.
    #[error("reserved path {path:?} is not a real directory ({kind:?})")]
    ReservedPath {
        /// The offending path.
        path: String,
        /// What it is instead.
        kind: PathKind,
    },
    /// Preparing the working directory failed for another reason (mkdir, chown, chmod).
    #[error("preparing {path:?} failed: {message}")]
    Prepare {
        /// The path being prepared.
        path: String,
        /// Bounded stderr of the shell command.
        message: String,
    },
    /// The owner is shutting down (or shut down): no new handles.
    #[error("sandbox owner is shutting down; no new handles")]
    ShuttingDown,
    /// The background setup task ended without reporting (it panicked or the runtime
    /// shut down).
    #[error("sandbox setup ended without a result")]
    SetupAborted,
    /// No sandbox in state running or paused carries this logical name.
    #[error("no running or paused sandbox is named {name:?}")]
    NameNotFound {
        /// The logical name looked for.
        name: String,
    },
    /// A lifetime above the plan's hard cap was asked for.
    #[error("asked for {asked:?} of sandbox life, above the plan's hard cap of {cap:?}")]
    CapExceeded {
        /// What was asked (timeout, or life from start).
        asked: Duration,
        /// The cap.
        cap: Duration,
    },
    /// Keep-alive's `idle_timeout` differs from the sandbox's create/connect timeout
    /// (see [`KeepAliveConfig`](super::KeepAliveConfig)).
    #[error(
        "keep-alive idle_timeout {idle:?} differs from the sandbox timeout {timeout:?}; \
         use the same value or allow the mismatch explicitly"
    )]
    TimeoutMismatch {
        /// The create/connect timeout.
        timeout: Duration,
        /// The keep-alive idle timeout.
        idle: Duration,
    },
    /// Keep-alive needs a control-plane [`Client`](crate::Client) (bring-your-own
    /// handles attached without one cannot renew).
    #[error("keep-alive needs a control-plane client")]
    NoClient,
    /// The control plane or envd failed.
    #[error(transparent)]
    Api(Arc<Error>),
}

impl From<Error> for LifecycleError {
    fn from(e: Error) -> Self {
        LifecycleError::Api(Arc::new(e))
    }
}

impl LifecycleError {
    /// The client error behind this one, if any.
    pub fn api_error(&self) -> Option<&Error> {
        match self {
            LifecycleError::Api(e) => Some(e),
            _ => None,
        }
    }

    /// True when the sandbox is gone ([`Error::is_sandbox_not_found`]).
    pub fn is_sandbox_not_found(&self) -> bool {
        self.api_error().is_some_and(Error::is_sandbox_not_found)
    }
}
