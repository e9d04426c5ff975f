//! e2b-core errors as sandbox errors: what e2b-core's one table
//! (`e2b_core::world_error`) calls [`ErrorKind::Gone`](exec_world::ErrorKind::Gone) (an
//! E2B-format 404, the proxy's answer for a sandbox it cannot route) is the contract's
//! gone; every other kind is kept as e2b-core's table gives it.

use e2b_core::Error;
use exec_world::sandbox::{SandboxError, gone};

/// Maps an e2b-core error of `op` on sandbox `id`.
pub(crate) fn map_core(op: &'static str, id: &str, path: Option<&str>, e: Error) -> SandboxError {
    if e.world_kind() == exec_world::ErrorKind::Gone {
        return gone(op, id);
    }
    op_failed(op, path, e)
}

/// The e2b-core error as an error of `op` (its kind from e2b-core's table).
pub(crate) fn op_failed(op: &'static str, path: Option<&str>, e: Error) -> SandboxError {
    let w = e.into_world(op);
    match path {
        Some(p) => w.with_path(p),
        None => w,
    }
}
