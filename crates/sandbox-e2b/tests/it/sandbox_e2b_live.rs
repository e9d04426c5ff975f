//! The sandbox conformance suite against real E2B, run only when `E2B_TEST_API_KEY` and
//! `E2B_TEST_TEMPLATE` are set (optionally `E2B_TEST_API_URL`, `E2B_TEST_DOMAIN`);
//! otherwise it prints why it skipped and passes. The template must follow the
//! conversation-template conventions (user `sandbox` uid 1000, HOME and workdir
//! `/workspace`, `/skills` root 0755, `/opt/capybara` root 0700, util-linux `runuser` /
//! `setsid`, procps, GNU coreutils `timeout`).
//!
//! Assumptions only real E2B can confirm (check them on the first run):
//! - the edge proxy answers a paused sandbox with 409 `The sandbox is paused` and a
//!   deleted one with 502 `The sandbox was not found` (our lease's stale signals);
//! - `POST /v2/sandboxes/{id}/connect` with `memory: false` cold-boots a paused sandbox
//!   (all processes end, files stay); an older control plane ignores the field, and then
//!   the reboot fallback does not end an escaped process (only logged);
//! - envd honours `Keepalive-Ping-Interval` on `Process.Start` streams;
//! - `network.allowOut` + `denyOut: ["0.0.0.0/0"]` filters by Host/SNI on ports 80/443
//!   only (see `crates/sandbox-e2b/README.md`);
//! - a paused sandbox keeps memory, so background processes survive suspend/resume
//!   (the suite's `sb_suspend_resume` checks it).

use std::sync::Arc;

use exec_world_conformance::sandbox::{SandboxWorld, sandbox_tests};
use sandbox_e2b::{E2bSandboxes, SandboxConfig};

fn live_config() -> Option<SandboxConfig> {
    let key = std::env::var("E2B_TEST_API_KEY")
        .ok()
        .filter(|k| !k.is_empty())?;
    let template = std::env::var("E2B_TEST_TEMPLATE")
        .ok()
        .filter(|t| !t.is_empty())?;
    let mut cfg = SandboxConfig::new(key, template);
    cfg.api_url = std::env::var("E2B_TEST_API_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if let Ok(d) = std::env::var("E2B_TEST_DOMAIN")
        && !d.is_empty()
    {
        cfg.domain = d;
    }
    Some(cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sandbox_suite_on_real_e2b() {
    let Some(cfg) = live_config() else {
        println!(
            "skipped: set E2B_TEST_API_KEY and E2B_TEST_TEMPLATE to run the sandbox suite on real E2B"
        );
        return;
    };
    let a = E2bSandboxes::new(cfg.clone()).expect("config");
    let b = E2bSandboxes::new(cfg).expect("config");
    let prefix = format!("live-{}", std::process::id());
    let world = SandboxWorld::new(Arc::new(a), Arc::new(b), prefix);
    for (name, test) in sandbox_tests() {
        println!("live: {name}");
        test(&world).await;
    }
}
