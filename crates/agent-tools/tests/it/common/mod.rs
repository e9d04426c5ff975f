//! The local world for the shared tests: LocalFs + LocalSubprocess on a fresh temp dir.

use std::sync::Arc;

use agent_tools::testing::ToolWorld;
use exec_world::{LocalFs, LocalSubprocess, WorldPath};

/// A fresh local world; the LSP cache is `<workspace>/target/lsp-cache` (kept between runs).
pub async fn local_world() -> ToolWorld {
    let dir = tempfile::tempdir().expect("temp dir");
    let scratch = WorldPath::new(dir.path().to_str().expect("UTF-8 temp dir")).expect("path");
    let fs = LocalFs::at(scratch.clone()).expect("LocalFs");
    let proc = LocalSubprocess::at(scratch.clone());
    let cache = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/lsp-cache");
    let cache = WorldPath::new(cache).expect("path").normalize();
    ToolWorld::new(Arc::new(fs), Arc::new(proc), scratch)
        .with_lsp_cache(cache)
        .with_guard(dir)
}
