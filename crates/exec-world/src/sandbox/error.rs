//! [`SandboxError`]: the error of every sandbox provider operation is the one error of
//! the seams, [`crate::Error`]; the contract's distinctions are its kinds:
//!
//! | the contract says | [`ErrorKind`] | built by |
//! | --- | --- | --- |
//! | the sandbox is gone (create a new one) | [`ErrorKind::Gone`] | [`gone`] |
//! | an argument was refused before anything ran | [`ErrorKind::InvalidSpec`] | [`invalid`] |
//! | the caller's token was already cancelled | [`ErrorKind::Cancelled`] | [`crate::Error::cancelled`] |
//! | the sandbox user may not do this | [`ErrorKind::PermissionDenied`] | from an errno or an adapter's exit status |
//! | a process the operation relied on was stopped or killed | [`ErrorKind::Interrupted`] | [`crate::Error::interrupted`] |
//! | anything else (the backend failed) | any other kind, mostly [`ErrorKind::Other`] | [`failed`], [`failed_by`] |
//!
//! Each message names the operation, the path when there is one, and the cause once.
//!
//! ```
//! use exec_world::ErrorKind;
//! let e = exec_world::sandbox::gone("exec", "sb-1");
//! assert!(e.is_gone());
//! assert_eq!(e.to_string(), "exec: the world is gone: sandbox sb-1 no longer exists");
//! let e = exec_world::sandbox::invalid("stat", "path \"a\"", "it must be absolute");
//! assert_eq!(e.kind(), ErrorKind::InvalidSpec);
//! assert_eq!(e.to_string(), "stat: invalid spec: path \"a\": it must be absolute");
//! ```

use crate::{Error, ErrorKind};

/// The error of a [`SandboxProvider`](super::SandboxProvider) operation (see the module
/// table for how a caller tells the contract's cases apart).
pub type SandboxError = Error;

/// [`ErrorKind::Gone`]: sandbox `id` no longer exists.
pub fn gone(op: &'static str, id: &str) -> Error {
    Error::gone(op).with_detail(format!("sandbox {id} no longer exists"))
}

/// [`ErrorKind::InvalidSpec`]: an argument refused before anything ran.
pub fn invalid(op: &'static str, what: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::invalid_spec(format!("{}: {}", what.into(), reason.into())).with_op(op)
}

/// [`ErrorKind::Other`] without a source.
pub fn failed(op: &'static str, path: Option<&str>, message: impl Into<String>) -> Error {
    let e = Error::other(message).with_op(op);
    match path {
        Some(p) => e.with_path(p),
        None => e,
    }
}

/// `read_file` of something that is not a regular file (a FIFO, socket or device):
/// refused, never opened for reading.
pub fn not_regular_file(op: &'static str, path: &str) -> Error {
    failed(
        op,
        Some(path),
        "not a regular file (a FIFO, socket or device is never read)",
    )
}

/// `source` as an error of `op` (on `path`): an [`Error`] keeps its kind and gets the
/// operation and path; anything else is [`ErrorKind::Other`] with it as the source.
pub fn failed_by(
    op: &'static str,
    path: Option<&str>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    let any: &(dyn std::error::Error + 'static) = &source;
    let e = match any.downcast_ref::<Error>() {
        Some(inner) => inner.clone().with_op(op),
        None => Error::new(ErrorKind::Other).with_op(op).with_cause(source),
    };
    match path {
        Some(p) => e.with_path(p),
        None => e,
    }
}
