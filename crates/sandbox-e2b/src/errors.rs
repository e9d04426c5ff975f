//! e2b-core errors as [`SandboxError`]s: what e2b-core's one table
//! (`e2b_core::world_error`) calls [`ErrorKind::Gone`] (an E2B-format 404, the proxy's
//! 502: the sandbox no longer exists) is `Gone`; a bare 404, 401, 5xx and network errors
//! stay `Failed`.

use e2b_core::Error;
use exec_world::ErrorKind;
use exec_world::sandbox::SandboxError;

/// Maps an e2b-core error of `op` on sandbox `id`.
pub(crate) fn map_core(op: &'static str, id: &str, path: Option<&str>, e: Error) -> SandboxError {
    if e.world_kind() == ErrorKind::Gone {
        return SandboxError::Gone {
            op,
            id: id.to_owned(),
        };
    }
    op_failed(op, path, e)
}

/// A `Failed` with the e2b-core error as its source.
pub(crate) fn op_failed(op: &'static str, path: Option<&str>, e: Error) -> SandboxError {
    SandboxError::from_source(op, path, e)
}

/// A failed in-sandbox script: `PermissionDenied` when its stderr says so.
pub(crate) fn script_failed(op: &'static str, path: &str, stderr: &[u8]) -> SandboxError {
    let text = String::from_utf8_lossy(stderr);
    let text: String = text.trim().chars().take(500).collect();
    if text.contains("Permission denied") || text.contains("Operation not permitted") {
        return SandboxError::PermissionDenied {
            op,
            path: path.to_owned(),
            detail: text,
        };
    }
    SandboxError::failed(op, Some(path), text)
}
