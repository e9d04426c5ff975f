//! Snapshots, fork and volumes through the official SDKs (PyPI and npm `e2b`, newest)
//! against the emulator (`tests/sdk/snapshots.cjs` runs a shorter JS version of the same): `tests/sdk/snapshots.py` creates a sandbox, writes files,
//! snapshots it (unnamed and named), lists the snapshots page by page, creates sandboxes
//! from both, deletes a snapshot in use, forks two and lets them diverge; then a volume
//! is written through the content API and by one sandbox, read by a second one running at
//! the same time, and read again by a sandbox of a restarted emulator on the same `--root`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use testing_fake::{Emulator, EmulatorConfig};
use tokio::process::Command;

use crate::sdk_support::{install_js, install_py};

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
    run_script(
        emu,
        ("python3", "snapshots.py"),
        ("PYTHONPATH", py_path),
        arg,
        marker,
    )
    .await
}

/// Run one SDK script of `tests/sdk/` against `emu`.
async fn run_script(
    emu: &Emulator,
    (program, script): (&str, &str),
    (path_var, path): (&str, &Path),
    arg: &str,
    marker: &str,
) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sdk")
        .join(script);
    let mut cmd = Command::new(program);
    cmd.arg(&script)
        .args((!arg.is_empty()).then_some(arg))
        .env("E2B_API_URL", emu.api_url())
        .env("E2B_VOLUME_API_URL", emu.api_url())
        .env("E2B_SANDBOX_URL", emu.sandbox_url())
        .env("E2B_API_KEY", emu.api_key())
        .env(path_var, path)
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_ACCESS_TOKEN")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(240), cmd.output())
        .await
        .expect("the SDK script finishes")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(marker),
        "{} {arg} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\ncounters: {:?}",
        script.display(),
        out.status,
        emu.counters().snapshot()
    );
    stdout
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
    run_script(
        &emu,
        ("node", "snapshots.cjs"),
        ("NODE_PATH", &node),
        "",
        "JS SNAPSHOTS OK",
    )
    .await;
    emu.shutdown().await;
}
