//! Shared by the tests that drive the official E2B SDKs: install the npm / PyPI `e2b`
//! package into a cache under the target directory's `sdk-cache/` (`CARGO_TARGET_DIR` when
//! set, else the workspace `target/`; once, under a file lock, since several test
//! processes may ask at the same time; `E2B_SDK_REFRESH=1` reinstalls the newest) and run a
//! script from `tests/sdk/` against a fresh in-process emulator (the script prints its
//! marker, e.g. `SMOKE OK`, when every check holds).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use testing_fake::{Emulator, EmulatorConfig};
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

/// Holds an exclusive `flock` on `<cache>/.install.lock` while alive, so concurrent test
/// processes (and tests of one process) install into the cache one at a time; the second
/// finds the package installed.
struct InstallLock(#[allow(dead_code)] std::fs::File);

async fn install_lock() -> InstallLock {
    let path = cache(".install.lock");
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(path.parent().expect("cache dir")).expect("cache dir");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .expect("lock file");
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        InstallLock(f)
    })
    .await
    .expect("lock task")
}

pub async fn install_js() -> PathBuf {
    let _lock = install_lock().await;
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

pub async fn install_py() -> PathBuf {
    let _lock = install_lock().await;
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
pub async fn run_script(
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
