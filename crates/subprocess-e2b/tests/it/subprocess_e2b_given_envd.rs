//! The exec-world proc and terminal suites against an envd given by URL
//! (`E2B_TEST_ENVD_URL`, and `E2B_TEST_ENVD_TOKEN` for a secured sandbox; see
//! `emulator_fixture::GivenEnvd`), so a self-hosted E2B deployment checks this crate in
//! one command:
//!
//! ```sh
//! E2B_TEST_ENVD_URL=https://49983-<id>.<domain> E2B_TEST_ENVD_TOKEN=... \
//!   cargo test -p subprocess-e2b --test it subprocess_e2b_given_envd:: -- --nocapture
//! ```
//!
//! Without it the suites skip with a message. Each test gets its own scratch directory
//! under the default user's home. The same path (a handle attached by URL and sandbox id,
//! no control plane) runs in CI on the emulator, on the first tests of each suite.

use emulator_fixture::{EmulatedSandbox, GivenEnvd};
use exec_world_conformance::{proc_tests, terminal_tests};
use std::time::Duration;

use crate::subprocess_e2b_support::world_on;

async fn run_suites(given: &GivenEnvd, limit: usize) {
    let proc = proc_tests().into_iter().take(limit);
    let terminal = terminal_tests().into_iter().take(limit);
    for (name, test) in proc.chain(terminal) {
        println!("given envd: {name}");
        let world = world_on(given.api(), ()).await;
        test(&world).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_and_terminal_suites_on_a_given_envd() {
    let Some(given) = GivenEnvd::from_env() else {
        println!(
            "skipped: set E2B_TEST_ENVD_URL (and E2B_TEST_ENVD_TOKEN) to run the proc and terminal suites on that envd"
        );
        return;
    };
    run_suites(&given, usize::MAX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_envd_is_reached_by_url_alone() {
    let sb = EmulatedSandbox::start(Duration::from_secs(60)).await;
    let given = GivenEnvd::of_emulated(&sb.emu, &sb.sandbox);
    run_suites(&given, 3).await;
}
