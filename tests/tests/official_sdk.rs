//! The official E2B SDKs (npm `e2b`, PyPI `e2b`, newest) against the emulator.
//!
//! Each test installs its SDK into a cache under the target directory's `sdk-cache/`
//! (`CARGO_TARGET_DIR` when set, else the workspace `target/`; once; set
//! `E2B_SDK_REFRESH=1` to reinstall the newest), starts the emulator in-process, and runs a
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

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use testing_fake::{Emulator, EmulatorConfig, Surface};
use tokio::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn cache(sub: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                workspace().join(t)
            }
        })
        .unwrap_or_else(|| workspace().join("target"));
    target.join("sdk-cache").join(sub)
}

fn refresh() -> bool {
    std::env::var("E2B_SDK_REFRESH").is_ok_and(|v| v == "1")
}

async fn run_install(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run the {what} installer: {e}"));
    assert!(
        out.status.success(),
        "installing {what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn install_js() -> PathBuf {
    let dir = cache("node");
    let marker = dir.join("node_modules").join("e2b").join("package.json");
    if refresh() || !marker.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        run_install(
            Command::new("npm")
                .arg("install")
                .arg("--prefix")
                .arg(&dir)
                .args(["e2b@latest", "--no-audit", "--no-fund", "--no-save"]),
            "the npm package e2b",
        )
        .await;
    }
    assert!(
        marker.exists(),
        "npm did not install e2b into {}",
        dir.display()
    );
    dir.join("node_modules")
}

async fn install_py() -> PathBuf {
    let dir = cache("py");
    let marker = dir.join("e2b").join("__init__.py");
    if refresh() || !marker.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        run_install(
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
                .arg(&dir)
                .arg("e2b"),
            "the PyPI package e2b",
        )
        .await;
    }
    assert!(
        marker.exists(),
        "pip did not install e2b into {}",
        dir.display()
    );
    dir
}

/// Run one SDK script against a fresh emulator; it must exit 0 and print `marker`.
/// Returns the emulator for counter checks.
async fn run_script(
    program: &str,
    script: &str,
    path_var: (&str, &Path),
    marker: &str,
) -> Emulator {
    let emu = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let script = workspace().join("tests").join("sdk").join(script);
    let mut cmd = Command::new(program);
    cmd.arg(&script)
        .env("E2B_API_URL", emu.api_url())
        .env("E2B_SANDBOX_URL", emu.sandbox_url())
        .env("E2B_API_KEY", emu.api_key())
        .env(path_var.0, path_var.1)
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
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{program} {} timed out", script.display()))
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(marker),
        "{program} {} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\ncounters: {:?}",
        script.display(),
        out.status,
        emu.counters().snapshot()
    );
    emu
}

fn assert_reached(emu: &Emulator, create: &str, connect: &str) {
    let c = emu.counters();
    let snap = c.snapshot();
    let at_least = |surface: Surface, key: &str, n: u64| {
        assert!(
            c.get_on(surface, key) >= n,
            "expected ≥{n} × {key} on {}, counters: {snap:?}",
            surface.as_str()
        );
    };
    at_least(Surface::Control, create, 1);
    at_least(Surface::Control, "DELETE /sandboxes/{sandboxID}", 2);
    at_least(Surface::Control, "GET /v2/sandboxes", 1);
    at_least(Surface::Envd, "POST /process.Process/Start", 2);
    at_least(Surface::Envd, "POST /files", 1);
    at_least(Surface::Envd, "GET /files", 1);
    at_least(Surface::Envd, "POST /filesystem.Filesystem/ListDir", 1);
    at_least(Surface::Envd, "GET /health", 1);
    at_least(Surface::Control, "POST /sandboxes/{sandboxID}/pause", 3);
    at_least(Surface::Control, "POST /sandboxes/{sandboxID}/timeout", 1);
    at_least(Surface::Control, "GET /sandboxes/{sandboxID}", 2);
    at_least(Surface::Control, connect, 2);
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
        c.get_on(Surface::Envd, "GET /files") >= 3,
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
