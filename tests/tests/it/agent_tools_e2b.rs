//! The agent-tools shared tests (bash tool, terminal, LSP bridge) against the E2B adapters
//! (`E2bFs` + `E2bSubprocess`) on the emulator: the same functions `crates/agent-tools`
//! runs against the local adapters, unchanged. The LSP test installs python-lsp-server
//! inside the sandbox (pip, into the test's scratch directory): the emulator's sandbox
//! sees none of the host's files, so a cache on the host would not reach it.

use std::sync::Arc;
use std::time::Duration;

use agent_tools::testing::ToolWorld;
use exec_world::{Fs, WorldPath};

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
    ToolWorld::new(Arc::new(fs), Arc::new(proc), scratch).with_guard(emu)
}

agent_tools::agent_tools_tests!(e2b_world);
