//! The official E2B SDKs (npm `e2b`, PyPI `e2b`, at the versions pinned in
//! `tests/sdk/versions.txt`; `E2B_SDK_LATEST=1` for the newest) against the emulator.
//!
//! Each test installs its SDK into a cache under the target directory's `sdk-cache/`
//! (`CARGO_TARGET_DIR` when set, else the workspace `target/`; once), starts the emulator in-process, and runs a
//! script from `tests/sdk/` in a child `node` / `python3` with `E2B_API_URL`,
//! `E2B_SANDBOX_URL` and `E2B_API_KEY` set. The script creates a sandbox, runs commands
//! (stdout, stderr, a non-zero exit surfaced as the SDK's exit error), writes, reads and lists
//! files, checks health and listing, sets the timeout, pauses, connects (memory restore, then
//! reboot: processes end, files stay), and kills it. The test then checks, with the emulator's
//! counters, that those calls really reached the control plane and envd.
//!
//! The `*_fidelity` tests run `tests/sdk/fidelity.*`: the places where the SDKs' own test
//! suites look and the emulator once differed from E2B (a paused sandbox answers 502, a
//! kill cuts running commands, metrics by range, refused uploads, signed URLs, `nice`,
//! `SendSignal` without a selector, `/health`'s headers, sandbox ports).
//!
//! An install failure (registry unreachable, no `npm` / `python3`) fails the test loudly: CI
//! installs the SDKs, so a skipped smoke test would hide a broken emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sdk_support;

use sdk_support::{install_js, install_py, run_script};
use testing_fake::{Emulator, Plane};

fn assert_reached(emu: &Emulator, create: &str, connect: &str) {
    let c = emu.counters();
    let snap = c.snapshot();
    let at_least = |surface: Plane, key: &str, n: u64| {
        assert!(
            c.get_on(surface, key) >= n,
            "expected ≥{n} × {key} on {}, counters: {snap:?}",
            surface.as_str()
        );
    };
    at_least(Plane::Control, create, 1);
    at_least(Plane::Control, "DELETE /sandboxes/{sandboxID}", 2);
    at_least(Plane::Control, "GET /v2/sandboxes", 1);
    at_least(Plane::Envd, "POST /process.Process/Start", 2);
    at_least(Plane::Envd, "POST /files", 1);
    at_least(Plane::Envd, "GET /files", 1);
    at_least(Plane::Envd, "POST /filesystem.Filesystem/ListDir", 1);
    at_least(Plane::Envd, "GET /health", 1);
    at_least(Plane::Control, "POST /sandboxes/{sandboxID}/pause", 3);
    at_least(Plane::Control, "POST /sandboxes/{sandboxID}/timeout", 1);
    at_least(Plane::Control, "GET /sandboxes/{sandboxID}", 2);
    at_least(Plane::Control, connect, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_js_sdk() {
    let node_path = install_js().await;
    let emu = run_script("node", "smoke.cjs", ("NODE_PATH", &node_path), "SMOKE OK").await;
    assert_reached(
        &emu,
        "POST /v2/sandboxes",
        "POST /v2/sandboxes/{sandboxID}/connect",
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk() {
    let py_path = install_py().await;
    let emu = run_script("python3", "smoke.py", ("PYTHONPATH", &py_path), "SMOKE OK").await;
    assert_reached(
        &emu,
        "POST /v2/sandboxes",
        "POST /v2/sandboxes/{sandboxID}/connect",
    );
    emu.shutdown().await;
}

/// Issue 12's causes through the JS SDK: paused/missing → 502 (`isRunning()` false), kill
/// cuts a running command (`TimeoutError`), metrics by range, a refused upload answers,
/// signed URLs without routing headers, `nice`, `SendSignal` without a selector, `/health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_js_sdk_fidelity() {
    let node_path = install_js().await;
    let emu = run_script(
        "node",
        "fidelity.cjs",
        ("NODE_PATH", &node_path),
        "FIDELITY OK",
    )
    .await;
    let c = emu.counters();
    assert!(
        c.get_on(Plane::Envd, "GET /files") >= 3,
        "signed downloads reached envd: {:?}",
        c.snapshot()
    );
    emu.shutdown().await;
}

/// The same causes through the Python SDK (paused/missing, kill, metrics, signed URLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_fidelity() {
    let py_path = install_py().await;
    let emu = run_script(
        "python3",
        "fidelity.py",
        ("PYTHONPATH", &py_path),
        "FIDELITY OK",
    )
    .await;
    emu.shutdown().await;
}
