//! The exec-world fs, watch and tree suites against an envd given by URL
//! (`E2B_TEST_ENVD_URL`, and `E2B_TEST_ENVD_TOKEN` for a secured sandbox; see
//! `emulator_fixture::GivenEnvd`), so a self-hosted E2B deployment checks this crate in
//! one command:
//!
//! ```sh
//! E2B_TEST_ENVD_URL=https://49983-<id>.<domain> E2B_TEST_ENVD_TOKEN=... \
//!   cargo test -p fs-e2b --test it fs_e2b_given_envd:: -- --nocapture
//! ```
//!
//! Without it the suites skip with a message. The sandbox must have the `base` template's
//! user (`user`, home `/home/user`); each test gets its own scratch directory there. The
//! same path (a handle attached by URL and sandbox id, no control plane) runs in CI on
//! the emulator, on the first tests of the suite.

use emulator_fixture::{EmulatedSandbox, GivenEnvd};
use exec_world_conformance::{fs_tests, tree_tests, watch_tests};
use std::time::Duration;

use crate::fs_e2b_support::world_on;

async fn run_suite(given: &GivenEnvd, limit: usize) {
    let all = fs_tests()
        .into_iter()
        .chain(watch_tests())
        .chain(tree_tests());
    for (name, test) in all.take(limit) {
        println!("given envd: {name}");
        let world = world_on(given.api(), ()).await;
        test(&world).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_suite_on_a_given_envd() {
    let Some(given) = GivenEnvd::from_env() else {
        println!(
            "skipped: set E2B_TEST_ENVD_URL (and E2B_TEST_ENVD_TOKEN) to run the fs, watch and tree suites on that envd"
        );
        return;
    };
    run_suite(&given, usize::MAX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_envd_is_reached_by_url_alone() {
    let sb = EmulatedSandbox::start(Duration::from_secs(60)).await;
    let given = GivenEnvd::of_emulated(&sb.emu, &sb.sandbox);
    run_suite(&given, 4).await;
}
