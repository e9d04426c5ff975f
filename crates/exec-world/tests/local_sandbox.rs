//! The sandbox conformance suite on `LocalSandboxes`: one directory per conversation
//! under a temp dir, two provider instances on it.

use std::sync::Arc;

use exec_world::conformance::sandbox::SandboxWorld;
use exec_world::sandbox::LocalSandboxes;

async fn world() -> SandboxWorld {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = LocalSandboxes::new(dir.path()).expect("provider");
    let b = LocalSandboxes::new(dir.path()).expect("second provider");
    SandboxWorld::new(Arc::new(a), Arc::new(b), "local").with_guard(dir)
}

exec_world::sandbox_conformance_tests!(world);
