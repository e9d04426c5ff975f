//! [`Error`]: the one error of the seams ([`Fs`](crate::Fs), [`Subprocess`](crate::Subprocess),
//! [`Terminal`](crate::Terminal)), in the style of object_store / opendal.
//!
//! An error is an [`ErrorKind`] a caller can act on (create the parent, report "not found",
//! give up on a gone world), the operation and the path (or program) it concerns, whether
//! retrying later may help ([`Error::is_temporary`]) and the lower-layer error it came from
//! ([`std::error::Error::source`]). It is cheap to clone (one `Arc`), so a failure kept for
//! repeated `started()` / `wait()` calls is just a clone.
//!
//! [`Display`](std::fmt::Display) says `<op> <path>: <kind>: <detail>`, each part once and
//! only when known. The source is *not* repeated in the text: the detail already says the
//! cause in words, the source keeps it as a value (to downcast or to walk).
//!
//! A process that exits non-zero is *not* an error (see [`ExitStatus`](crate::ExitStatus)).

use std::fmt;
use std::io;
use std::sync::Arc;

use crate::path::WorldPath;

/// A boxed error from a lower layer (HTTP client, envd, OS).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A shared error from a lower layer: the source of an [`Error`].
pub type SharedError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an [`Error`] is. `#[non_exhaustive]`: match the kinds you handle
/// and keep a fallback arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Nothing exists at the path (or one of its parents is missing); for a spawn, the
    /// program does not exist.
    NotFound,
    /// Something already exists at the path.
    AlreadyExists,
    /// The path, or a component of it, is not a directory where one is needed.
    NotADirectory,
    /// The path is a directory where a file is needed.
    IsADirectory,
    /// The directory is not empty (remove without `recursive`, rename onto it).
    NotEmpty,
    /// The file is larger than [`Error::limit`] bytes (see [`Fs::read`](crate::Fs::read)).
    TooLarge,
    /// The world's user may not do this (to the path, the program or the cwd), or the
    /// backend refused our credentials.
    PermissionDenied,
    /// A path that cannot be used (empty, NUL, relative where absolute is needed, loop, …).
    InvalidPath,
    /// The request is unusable: a spawn spec (empty program, missing cwd, NUL or an
    /// oversized argument) or an argument the backend refused.
    InvalidSpec,
    /// The backend cannot do this at all (see its capability flags).
    Unsupported,
    /// The world no longer exists (the sandbox was killed or expired).
    Gone,
    /// The operation took longer than allowed.
    Timeout,
    /// The operation was cancelled by the caller (cleanup has run when this is returned).
    Cancelled,
    /// A process the operation relied on (e.g. a file holder of the world's user) was
    /// stopped or killed midway: the operation did not complete; trying again may work.
    Interrupted,
    /// The connection to the world failed (network, protocol, a busy or limiting server).
    Transport,
    /// The end of a durable command cannot be known: its record is gone, its supervising
    /// parent was killed before recording a status, the sandbox rebooted. Never a guess,
    /// never a rerun (see [`crate::durable`]).
    OutcomeUnknown,
    /// Anything else; the detail says what.
    Other,
}

impl ErrorKind {
    /// The kind in words, as [`Error`]'s `Display` says it (empty for [`ErrorKind::Other`](crate::ErrorKind::Other)).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::AlreadyExists => "already exists",
            ErrorKind::NotADirectory => "not a directory",
            ErrorKind::IsADirectory => "is a directory",
            ErrorKind::NotEmpty => "directory not empty",
            ErrorKind::TooLarge => "too large",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::InvalidPath => "invalid path",
            ErrorKind::InvalidSpec => "invalid spec",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Gone => "the world is gone",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Transport => "transport error",
            ErrorKind::OutcomeUnknown => "outcome unknown",
            ErrorKind::Other => "",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Other => "other",
            k => k.as_str(),
        })
    }
}

/// What went wrong with a file or process operation: a kind, the operation and path it
/// concerns, whether it is temporary, and its source.
///
/// `Display` says `<op> <path>: <kind>: <detail>`, each part once and only when known;
/// the source is kept as a value ([`std::error::Error::source`]), not repeated in the
/// text. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Error(Arc<Inner>);

#[derive(Clone)]
struct Inner {
    kind: ErrorKind,
    op: Option<String>,
    path: Option<String>,
    detail: Option<String>,
    limit: Option<u64>,
    temporary: bool,
    source: Option<SharedError>,
}

impl Error {
    /// An error of `kind` with nothing else known yet; add to it with the `with_*` methods.
    pub fn new(kind: ErrorKind) -> Error {
        Error(Arc::new(Inner {
            kind,
            op: None,
            path: None,
            detail: None,
            limit: None,
            temporary: false,
            source: None,
        }))
    }

    fn at(kind: ErrorKind, path: impl AsRef<str>) -> Error {
        Error::new(kind).with_path(path)
    }

    /// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) for `path` (or a program name).
    pub fn not_found(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::NotFound, path)
    }

    /// [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) for `path`.
    pub fn already_exists(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::AlreadyExists, path)
    }

    /// [`ErrorKind::NotADirectory`](crate::ErrorKind::NotADirectory) for `path`.
    pub fn not_a_directory(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::NotADirectory, path)
    }

    /// [`ErrorKind::IsADirectory`](crate::ErrorKind::IsADirectory) for `path`.
    pub fn is_a_directory(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::IsADirectory, path)
    }

    /// [`ErrorKind::NotEmpty`](crate::ErrorKind::NotEmpty) for the directory `path`.
    pub fn not_empty(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::NotEmpty, path)
    }

    /// [`ErrorKind::TooLarge`](crate::ErrorKind::TooLarge): the file at `path` is larger than `limit` bytes.
    pub fn too_large(path: impl AsRef<str>, limit: u64) -> Error {
        let mut e = Error::at(ErrorKind::TooLarge, path);
        e.inner().limit = Some(limit);
        e
    }

    /// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied) for `path` (or a program, or a cwd).
    pub fn permission_denied(path: impl AsRef<str>) -> Error {
        Error::at(ErrorKind::PermissionDenied, path)
    }

    /// [`ErrorKind::InvalidPath`](crate::ErrorKind::InvalidPath): the text `path` cannot be used, because `reason`.
    pub fn invalid_path(path: impl AsRef<str>, reason: impl Into<String>) -> Error {
        Error::at(ErrorKind::InvalidPath, path).with_detail(reason)
    }

    /// [`ErrorKind::InvalidSpec`](crate::ErrorKind::InvalidSpec): the spawn spec or argument is unusable, because `reason`.
    pub fn invalid_spec(reason: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidSpec).with_detail(reason)
    }

    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported): the backend cannot do `what`.
    pub fn unsupported(what: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unsupported).with_detail(what)
    }

    /// [`ErrorKind::Gone`](crate::ErrorKind::Gone) while doing `op`.
    pub fn gone(op: impl Into<String>) -> Error {
        Error::new(ErrorKind::Gone).with_op(op)
    }

    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) while doing `op`.
    pub fn timeout(op: impl Into<String>) -> Error {
        Error::new(ErrorKind::Timeout).with_op(op)
    }

    /// [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled) while doing `op`.
    pub fn cancelled(op: impl Into<String>) -> Error {
        Error::new(ErrorKind::Cancelled).with_op(op)
    }

    /// True for [`ErrorKind::Gone`](crate::ErrorKind::Gone): the world (sandbox) no
    /// longer exists; make a new one.
    pub fn is_gone(&self) -> bool {
        self.kind() == ErrorKind::Gone
    }

    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted) while doing `op`:
    /// temporary (the next try starts a new process).
    ///
    /// ```
    /// let e = exec_world::Error::interrupted("read").with_path("/a");
    /// assert_eq!(e.kind(), exec_world::ErrorKind::Interrupted);
    /// assert!(e.is_temporary());
    /// ```
    pub fn interrupted(op: impl Into<String>) -> Error {
        Error::new(ErrorKind::Interrupted)
            .with_op(op)
            .with_temporary(true)
    }

    /// [`ErrorKind::Transport`](crate::ErrorKind::Transport) while doing `op`, caused by `source` (its text is the
    /// detail). Temporary: a broken connection is worth another try.
    pub fn transport(
        op: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::new(ErrorKind::Transport)
            .with_op(op)
            .with_cause(source)
            .with_temporary(true)
    }

    /// [`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown) while doing `op`,
    /// because `detail`.
    ///
    /// ```
    /// let e = exec_world::Error::outcome_unknown("wait for durable command x", "its supervisor vanished");
    /// assert_eq!(e.kind(), exec_world::ErrorKind::OutcomeUnknown);
    /// ```
    pub fn outcome_unknown(op: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::OutcomeUnknown)
            .with_op(op)
            .with_detail(detail)
    }

    /// [`ErrorKind::Other`](crate::ErrorKind::Other) with just a message.
    pub fn other(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Other).with_detail(message)
    }

    /// An OS error met while doing `op` (no path), as [`ErrorKind::Other`](crate::ErrorKind::Other) with the OS
    /// error as detail and source.
    pub fn io(op: impl Into<String>, err: io::Error) -> Error {
        Error::new(ErrorKind::Other).with_op(op).with_cause(err)
    }

    /// Maps an OS error met while doing `op` to `path` to the matching kind (ENOENT →
    /// NotFound, EEXIST → AlreadyExists, ENOTDIR, EISDIR, ENOTEMPTY, EACCES/EPERM/EROFS →
    /// PermissionDenied, ELOOP/ENAMETOOLONG/EINVAL → InvalidPath); anything else is
    /// [`ErrorKind::Other`](crate::ErrorKind::Other) with the OS error as detail and source.
    pub fn from_io(path: &WorldPath, op: &str, err: io::Error) -> Error {
        let kind = match err.raw_os_error() {
            Some(libc::ENOENT) => ErrorKind::NotFound,
            Some(libc::EEXIST) => ErrorKind::AlreadyExists,
            Some(libc::ENOTDIR) => ErrorKind::NotADirectory,
            Some(libc::EISDIR) => ErrorKind::IsADirectory,
            Some(libc::ENOTEMPTY) => ErrorKind::NotEmpty,
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                ErrorKind::PermissionDenied
            }
            Some(libc::ELOOP) | Some(libc::ENAMETOOLONG) | Some(libc::EINVAL) => {
                return Error::invalid_path(path, err.to_string()).with_op(op);
            }
            _ => match err.kind() {
                io::ErrorKind::NotFound => ErrorKind::NotFound,
                io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
                io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => {
                    return Error::new(ErrorKind::Other)
                        .with_op(op)
                        .with_path(path)
                        .with_cause(err);
                }
            },
        };
        Error::at(kind, path).with_op(op)
    }

    fn inner(&mut self) -> &mut Inner {
        Arc::make_mut(&mut self.0)
    }

    /// This error, naming the operation `op` (`"read"`, `"starting sh in /home/user"`).
    pub fn with_op(mut self, op: impl Into<String>) -> Error {
        self.inner().op = Some(op.into());
        self
    }

    /// This error, naming `path` (a path, or the program of a spawn).
    pub fn with_path(mut self, path: impl AsRef<str>) -> Error {
        self.inner().path = Some(path.as_ref().to_owned());
        self
    }

    /// This error, with `detail`: what happened, in words.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.inner().detail = Some(detail.into());
        self
    }

    /// This error, marked temporary (retrying later may help) or not.
    pub fn with_temporary(mut self, temporary: bool) -> Error {
        self.inner().temporary = temporary;
        self
    }

    /// This error, with `source` as its source (kept as a value; the text is not shown,
    /// see [`with_cause`](Error::with_cause)).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.inner().source = Some(Arc::new(source));
        self
    }

    /// This error, caused by `source`: its text becomes the detail and it is the source.
    pub fn with_cause(self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        let detail = source.to_string();
        self.with_detail(detail).with_source(source)
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The operation, when known.
    pub fn op(&self) -> Option<&str> {
        self.0.op.as_deref()
    }

    /// The path (or program) it concerns, when known.
    pub fn path(&self) -> Option<&str> {
        self.0.path.as_deref()
    }

    /// What happened, in words, when more than the kind is known.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail.as_deref()
    }

    /// The limit that was exceeded, for [`ErrorKind::TooLarge`](crate::ErrorKind::TooLarge).
    pub fn limit(&self) -> Option<u64> {
        self.0.limit
    }

    /// True when retrying the operation later may succeed (a broken connection, a busy
    /// or rate-limiting server, a timeout of ours). Never true for [`ErrorKind::Gone`](crate::ErrorKind::Gone).
    pub fn is_temporary(&self) -> bool {
        self.0.temporary
    }

    /// The same error with its path rewritten by `f` (a [`Rooted`](crate::Rooted) view
    /// shows its virtual paths, not the real ones).
    pub fn map_path(mut self, f: impl FnOnce(&str) -> String) -> Error {
        if let Some(p) = self.0.path.as_deref() {
            let mapped = f(p);
            self.inner().path = Some(mapped);
        }
        self
    }
}

/// Writes `path`, quoted when it holds control characters (a NUL, a newline).
fn write_path(f: &mut fmt::Formatter<'_>, path: &str) -> fmt::Result {
    if path.chars().any(char::is_control) || path.is_empty() {
        write!(f, "{path:?}")
    } else {
        f.write_str(path)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &*self.0;
        let mut lead = false;
        if let Some(op) = &e.op {
            f.write_str(op)?;
            lead = true;
        }
        if let Some(path) = &e.path {
            if lead {
                f.write_str(" ")?;
            }
            write_path(f, path)?;
            lead = true;
        }
        let mut sep = if lead { ": " } else { "" };
        if e.kind == ErrorKind::TooLarge {
            let limit = e.limit.unwrap_or_default();
            write!(f, "{sep}larger than the limit of {limit} bytes")?;
            sep = ": ";
        } else if e.kind != ErrorKind::Other {
            write!(f, "{sep}{}", e.kind.as_str())?;
            sep = ": ";
        }
        if let Some(detail) = &e.detail {
            write!(f, "{sep}{detail}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &*self.0;
        let mut d = f.debug_struct("Error");
        d.field("kind", &e.kind);
        if let Some(op) = &e.op {
            d.field("op", op);
        }
        if let Some(path) = &e.path {
            d.field("path", path);
        }
        if let Some(detail) = &e.detail {
            d.field("detail", detail);
        }
        if let Some(limit) = e.limit {
            d.field("limit", &limit);
        }
        d.field("temporary", &e.temporary);
        if let Some(source) = &e.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> WorldPath {
        WorldPath::new(s).expect("path")
    }

    #[test]
    fn display_names_op_path_and_cause_once() {
        assert_eq!(Error::not_found(p("/x")).to_string(), "/x: not found");
        assert_eq!(
            Error::too_large(p("/x"), 9).with_op("read").to_string(),
            "read /x: larger than the limit of 9 bytes"
        );
        assert_eq!(
            Error::invalid_path("a\0b", "contains a NUL byte").to_string(),
            "\"a\\0b\": invalid path: contains a NUL byte"
        );
        assert_eq!(Error::other("it broke").to_string(), "it broke");
        assert_eq!(
            Error::cancelled("waiting for a process").to_string(),
            "waiting for a process: cancelled"
        );
        let t = Error::transport("spawn sh", io::Error::other("connection reset"));
        assert_eq!(t.to_string(), "spawn sh: transport error: connection reset");
        assert!(t.is_temporary());
        let src = std::error::Error::source(&t).expect("source");
        assert_eq!(src.to_string(), "connection reset");
    }

    #[test]
    fn from_io_maps_errno_to_kind() {
        let x = p("/x");
        let k = |errno| Error::from_io(&x, "stat", io::Error::from_raw_os_error(errno)).kind();
        assert_eq!(k(libc::ENOENT), ErrorKind::NotFound);
        assert_eq!(k(libc::EEXIST), ErrorKind::AlreadyExists);
        assert_eq!(k(libc::ENOTDIR), ErrorKind::NotADirectory);
        assert_eq!(k(libc::EISDIR), ErrorKind::IsADirectory);
        assert_eq!(k(libc::ENOTEMPTY), ErrorKind::NotEmpty);
        assert_eq!(k(libc::EACCES), ErrorKind::PermissionDenied);
        assert_eq!(k(libc::EROFS), ErrorKind::PermissionDenied);
        assert_eq!(k(libc::ELOOP), ErrorKind::InvalidPath);
        let eio = Error::from_io(&x, "stat", io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(eio.kind(), ErrorKind::Other);
        assert!(eio.to_string().starts_with("stat /x: "), "{eio}");
        assert!(std::error::Error::source(&eio).is_some());
        assert_eq!(
            Error::from_io(&x, "stat", io::Error::other("x")).path(),
            Some("/x")
        );
    }

    #[test]
    fn clones_share_and_builders_copy_on_write() {
        let a = Error::not_found("/a").with_op("read");
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        let c = b.map_path(|p| format!("/root{p}"));
        assert_eq!(a.path(), Some("/a"));
        assert_eq!(c.path(), Some("/root/a"));
        assert_eq!(c.to_string(), "read /root/a: not found");
    }
}
