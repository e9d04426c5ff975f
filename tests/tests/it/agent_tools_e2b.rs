//! The agent-tools shared tests (bash tool, terminal, LSP bridge) against the E2B adapters
//! (`E2bFs` + `E2bSubprocess`) on the emulator: the same functions `crates/agent-tools`
//! runs against the local adapters, unchanged.

use std::sync::Arc;
use std::time::Duration;

use agent_tools::testing::{ToolWorld, ensure_pylsp};
use exec_world::{Fs, LocalFs, LocalSubprocess, WorldPath};

/// The python-lsp-server cache on the host, filled from the host once and reused: the
/// sandbox sees the host's paths outside its own tree read-only, so the sandbox's python
/// imports it without installing anything inside the sandbox.
async fn host_lsp_cache() -> WorldPath {
    let cache = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/lsp-cache");
    let cache = WorldPath::new(cache).expect("path").normalize();
    let dir = tempfile::tempdir().expect("temp dir");
    let scratch = WorldPath::new(dir.path().to_str().expect("UTF-8")).expect("path");
    let local = ToolWorld::new(
        Arc::new(LocalFs::at(scratch.clone()).expect("LocalFs")),
        Arc::new(LocalSubprocess::at(scratch.clone())),
        scratch,
    );
    ensure_pylsp(&local, "python3", &cache).await;
    cache
}

/// A fresh emulator, a fresh `base` sandbox, and both adapters over its one handle.
async fn e2b_world() -> ToolWorld {
    let emulator_fixture::EmulatedSandbox { api, emu, .. } =
        emulator_fixture::EmulatedSandbox::start(Duration::from_secs(60)).await;
    let scratch = WorldPath::new("/home/user/agent-tools-scratch").expect("path");
    let fs =
        fs_e2b::E2bFs::new(api.clone(), fs_e2b::E2bFsOptions::new("/home/user")).expect("E2bFs");
    fs.mkdir(&scratch, true).await.expect("scratch dir");
    let proc = subprocess_e2b::E2bSubprocess::new(
        api,
        subprocess_e2b::E2bSubprocessOptions::new(scratch.as_str()),
    )
    .expect("E2bSubprocess");
    ToolWorld::new(Arc::new(fs), Arc::new(proc), scratch)
        .with_lsp_cache(host_lsp_cache().await)
        .with_guard(emu)
}

agent_tools::agent_tools_tests!(e2b_world);
