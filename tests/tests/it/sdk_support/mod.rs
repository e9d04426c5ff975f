//! Shared by the tests that drive the official E2B SDKs: install the npm / PyPI `e2b`
//! package at the version pinned in `tests/sdk/versions.txt` (`emulator_fixture::sdk_install`;
//! `E2B_SDK_LATEST=1` for the newest) under the target directory (`CARGO_TARGET_DIR` when
//! set, else the workspace `target/`) and run a script from `tests/sdk/` against a fresh
//! in-process emulator (the script prints its marker, e.g. `SMOKE OK`, when every check holds).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use emulator_fixture::sdk_install::{self, Registry};
use testing_fake::{Emulator, EmulatorConfig};
use tokio::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                workspace().join(t)
            }
        })
        .unwrap_or_else(|| workspace().join("target"))
}

async fn install(registry: Registry, name: &'static str) -> PathBuf {
    tokio::task::spawn_blocking(move || sdk_install::install(&target(), registry, name))
        .await
        .expect("install task")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The npm `e2b` package at its pinned version; returns the directory for `NODE_PATH`.
pub async fn install_js() -> PathBuf {
    install(Registry::Npm, "e2b").await
}

/// The PyPI `e2b` package at its pinned version; returns the directory for `PYTHONPATH`.
pub async fn install_py() -> PathBuf {
    install(Registry::PyPi, "e2b").await
}

/// Run one SDK script against a fresh emulator; it must exit 0 and print `marker`.
/// Returns the emulator for counter checks.
pub async fn run_script(
    program: &str,
    script: &str,
    path_var: (&str, &Path),
    marker: &str,
) -> Emulator {
    let emu = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    run_on(&emu, (program, script), path_var, &[], marker).await;
    emu
}

/// Run `program tests/sdk/<script> ARGS…` against `emu` (its URLs and key in the
/// environment, no proxy, nothing of this process's E2B settings); it must exit 0 within
/// 240 s and print `marker`. Returns its stdout.
pub async fn run_on(
    emu: &Emulator,
    (program, script): (&str, &str),
    (path_var, path): (&str, &Path),
    args: &[&str],
    marker: &str,
) -> String {
    let script = workspace().join("tests").join("sdk").join(script);
    let mut cmd = Command::new(program);
    cmd.arg(&script)
        .args(args)
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
        .unwrap_or_else(|_| panic!("{program} {} timed out", script.display()))
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(marker),
        "{program} {} {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\ncounters: {:?}",
        script.display(),
        out.status,
        emu.counters().snapshot()
    );
    stdout
}
