//! Snapshots, fork and volumes through the official SDKs (PyPI and npm `e2b`, pinned in
//! `tests/sdk/versions.txt`) against the emulator (`tests/sdk/snapshots.cjs` runs a
//! shorter JS version of the same): `tests/sdk/snapshots.py` creates a sandbox, writes files,
//! snapshots it (unnamed and named), lists the snapshots page by page, creates sandboxes
//! from both, deletes a snapshot in use, forks two and lets them diverge; then a volume
//! is written through the content API and by one sandbox, read by a second one running at
//! the same time, and read again by a sandbox of a restarted emulator on the same `--root`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use testing_fake::{Emulator, EmulatorConfig};

use crate::sdk_support::{install_js, install_py, run_on};

async fn start(root: Option<&Path>, key: &str) -> Emulator {
    Emulator::start(EmulatorConfig {
        root: root.map(Path::to_path_buf),
        api_key: Some(key.to_owned()),
        ..Default::default()
    })
    .await
    .expect("emulator starts")
}

/// Run `tests/sdk/snapshots.py [arg]`; it must exit 0 and print `marker`. Returns stdout.
async fn run(emu: &Emulator, py_path: &Path, arg: &str, marker: &str) -> String {
    let args: &[&str] = if arg.is_empty() { &[] } else { &[arg] };
    run_on(
        emu,
        ("python3", "snapshots.py"),
        ("PYTHONPATH", py_path),
        args,
        marker,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_snapshot_and_fork() {
    let py = install_py().await;
    let emu = start(None, "e2b_snapshots_test_key").await;
    run(&emu, &py, "", "SNAPSHOTS OK").await;
    let c = emu.counters();
    for (key, n) in [
        ("POST /sandboxes/{sandboxID}/snapshots", 2),
        ("GET /snapshots", 3),
        ("POST /sandboxes/{sandboxID}/fork", 2),
    ] {
        assert!(
            c.get_on(testing_fake::Plane::Control, key) >= n,
            "expected ≥{n} × {key}: {:?}",
            c.snapshot()
        );
    }
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_volume_survives_an_emulator_restart() {
    let py = install_py().await;
    let root = tempfile::tempdir().unwrap();
    let emu = start(Some(root.path()), "e2b_volumes_test_key").await;
    run(&emu, &py, "phase1", "VOLUME PHASE1 OK").await;
    emu.shutdown().await;
    let emu = start(Some(root.path()), "e2b_volumes_test_key").await;
    run(&emu, &py, "phase2", "VOLUME PHASE2 OK").await;
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_snapshot_fork_and_volume() {
    let node = install_js().await;
    let emu = start(None, "e2b_js_snapshots_test_key").await;
    run_on(
        &emu,
        ("node", "snapshots.cjs"),
        ("NODE_PATH", &node),
        &[],
        "JS SNAPSHOTS OK",
    )
    .await;
    emu.shutdown().await;
}
