//! Errors of the seams: [`FsError`] for file operations, [`ProcError`] for processes.
//!
//! Variants are kinds a caller can act on (retry, create the parent, report "not found"),
//! each carrying the path or context it concerns. Both enums are `#[non_exhaustive]`:
//! match the kinds you handle and keep a fallback arm. A process that exits non-zero is
//! *not* an error (see [`ExitStatus`](crate::ExitStatus)).

use std::io;

use crate::path::WorldPath;

/// A boxed error from a lower layer (HTTP client, envd, OS).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong with a file-system operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// Nothing exists at `path` (or one of its parents is missing).
    #[error("not found: {path}")]
    NotFound {
        /// The path that does not exist.
        path: WorldPath,
    },
    /// Something already exists at `path`.
    #[error("already exists: {path}")]
    AlreadyExists {
        /// The path that exists.
        path: WorldPath,
    },
    /// `path`, or a component of it, is not a directory where one is needed.
    #[error("not a directory: {path}")]
    NotADirectory {
        /// The offending path.
        path: WorldPath,
    },
    /// `path` is a directory where a file is needed.
    #[error("is a directory: {path}")]
    IsADirectory {
        /// The offending path.
        path: WorldPath,
    },
    /// The directory at `path` is not empty (remove without `recursive`, rename onto it).
    #[error("directory not empty: {path}")]
    NotEmpty {
        /// The non-empty directory.
        path: WorldPath,
    },
    /// The file at `path` is larger than `limit` bytes (see [`Fs::read`](crate::Fs::read)).
    #[error("{path}: larger than the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: WorldPath,
        /// The limit that was exceeded.
        limit: u64,
    },
    /// The world's user may not do this to `path`.
    #[error("permission denied: {path}")]
    PermissionDenied {
        /// The path.
        path: WorldPath,
    },
    /// A path that cannot be used (empty, NUL, relative where absolute is needed, …).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The text of the path.
        path: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The backend cannot do this at all (see its capability flags).
    #[error("unsupported: {what}")]
    Unsupported {
        /// What is not supported.
        what: String,
    },
    /// The world no longer exists (the sandbox was killed or expired). Not retryable.
    #[error("the world is gone: {context}")]
    Gone {
        /// What was being done.
        context: String,
    },
    /// The operation took longer than allowed.
    #[error("timed out: {context}")]
    Timeout {
        /// What was being done.
        context: String,
    },
    /// The operation was cancelled by the caller.
    #[error("cancelled: {context}")]
    Cancelled {
        /// What was being done.
        context: String,
    },
    /// The connection to the world failed (network, protocol); usually retryable.
    #[error("transport error: {context}")]
    Transport {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Anything else, with context.
    #[error("{context}")]
    Other {
        /// What was being done and what happened.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl FsError {
    /// Maps an OS error for `path` to the matching kind (ENOENT → NotFound, EEXIST →
    /// AlreadyExists, ENOTDIR, EISDIR, ENOTEMPTY, EACCES/EPERM, ELOOP/ENAMETOOLONG →
    /// InvalidPath); anything else becomes [`FsError::Other`] with `context`.
    pub fn from_io(path: &WorldPath, context: &str, err: io::Error) -> FsError {
        let path = path.clone();
        match err.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound { path },
            Some(libc::EEXIST) => FsError::AlreadyExists { path },
            Some(libc::ENOTDIR) => FsError::NotADirectory { path },
            Some(libc::EISDIR) => FsError::IsADirectory { path },
            Some(libc::ENOTEMPTY) => FsError::NotEmpty { path },
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                FsError::PermissionDenied { path }
            }
            Some(libc::ELOOP) | Some(libc::ENAMETOOLONG) | Some(libc::EINVAL) => {
                FsError::InvalidPath {
                    path: path.to_string(),
                    reason: err.to_string(),
                }
            }
            _ => match err.kind() {
                io::ErrorKind::NotFound => FsError::NotFound { path },
                io::ErrorKind::AlreadyExists => FsError::AlreadyExists { path },
                io::ErrorKind::PermissionDenied => FsError::PermissionDenied { path },
                _ => FsError::Other {
                    context: format!("{context} {path}: {err}"),
                    source: Some(Box::new(err)),
                },
            },
        }
    }

    /// An [`FsError::Other`] with just a message.
    pub fn other(context: impl Into<String>) -> FsError {
        FsError::Other {
            context: context.into(),
            source: None,
        }
    }
}

/// What went wrong starting or talking to a process. A non-zero exit is not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcError {
    /// The program does not exist (at spawn, or reported when the remote start fails).
    #[error("program not found: {program}")]
    NotFound {
        /// The program as given.
        program: String,
    },
    /// The program, or the cwd, may not be used by the world's user.
    #[error("permission denied: {what}")]
    PermissionDenied {
        /// The program or path.
        what: String,
    },
    /// The spawn spec is unusable (empty program, bad cwd, NUL in an argument, …).
    #[error("invalid spawn spec: {reason}")]
    InvalidSpec {
        /// Why.
        reason: String,
    },
    /// The backend cannot do this (see [`ProcCapabilities`](crate::ProcCapabilities)).
    #[error("unsupported: {what}")]
    Unsupported {
        /// What is not supported.
        what: String,
    },
    /// The world no longer exists (the sandbox was killed or expired). Not retryable.
    #[error("the world is gone: {context}")]
    Gone {
        /// What was being done.
        context: String,
    },
    /// The operation took longer than allowed.
    #[error("timed out: {context}")]
    Timeout {
        /// What was being done.
        context: String,
    },
    /// The operation was cancelled by the caller (cleanup has run when this is returned).
    #[error("cancelled: {context}")]
    Cancelled {
        /// What was being done.
        context: String,
    },
    /// The connection to the world failed (network, protocol).
    #[error("transport error: {context}")]
    Transport {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Anything else, with context.
    #[error("{context}")]
    Other {
        /// What was being done and what happened.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl ProcError {
    /// An [`ProcError::Other`] with just a message.
    pub fn other(context: impl Into<String>) -> ProcError {
        ProcError::Other {
            context: context.into(),
            source: None,
        }
    }

    /// Wraps an OS error with `context`.
    pub fn io(context: impl Into<String>, err: io::Error) -> ProcError {
        let context = context.into();
        ProcError::Other {
            context: format!("{context}: {err}"),
            source: Some(Box::new(err)),
        }
    }
}
