//! The shared bash tests of `agent_tools::testing` against the local adapters.

use crate::common;

agent_tools::agent_tools_tests!(common::local_world, bash);

/// Peak memory of this process (`VmHWM`, KiB).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Locally the memory claim is measurable: draining 200 MiB through the bash tool raises
/// this process's peak RSS by far less than the output size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_does_not_grow_memory() {
    let world = common::local_world().await;
    let before = peak_rss_kib();
    agent_tools::testing::bash_huge_output_is_bounded(&world).await;
    let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "peak RSS grew by {grown_mib} MiB for 200 MiB of output"
    );
}
