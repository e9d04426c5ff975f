//! The official SDK contenders: the npm `e2b` package run by `tests/sdk/bench.cjs` with
//! node, the PyPI `e2b` package run by `tests/sdk/bench.py` with python3. Installed as the
//! SDK interop tests install them (`tests/tests/it/sdk_support`): into `sdk-cache/` of the
//! target directory this binary was built in, once, under a file lock.

use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::child::AnyError;

/// The target directory: `<target>/<profile>/world-bench`.
fn cache(sub: &str) -> Result<PathBuf, AnyError> {
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("world-bench is not inside a target directory")?;
    Ok(target.join("sdk-cache").join(sub))
}

fn run_install(cmd: &mut Command, what: &str) -> Result<(), AnyError> {
    let out = cmd.stdin(std::process::Stdio::null()).output()?;
    if !out.status.success() {
        return Err(format!(
            "installing {what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// Installs one SDK unless `marker` exists, holding `sdk-cache/.install.lock`.
fn install(sub: &str, marker: &Path, cmd: impl FnOnce(&Path) -> Command) -> Result<(), AnyError> {
    let lock_path = cache(".install.lock")?;
    if let Some(p) = lock_path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    // SAFETY: flock(2) on a descriptor we own; released when `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "flock {}: {}",
            lock_path.display(),
            std::io::Error::last_os_error()
        )
        .into());
    }
    if !marker.exists() {
        let dir = cache(sub)?;
        std::fs::create_dir_all(&dir)?;
        run_install(&mut cmd(&dir), sub)?;
    }
    drop(lock);
    Ok(())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk").join(name)
}

/// `node bench.cjs` with `NODE_PATH` at the installed JS SDK (installed if missing).
pub fn js_command() -> Result<Command, AnyError> {
    let dir = cache("node")?;
    let marker = dir.join("node_modules/e2b/package.json");
    install("node", &marker, |d| {
        let mut c = Command::new("npm");
        c.arg("install").arg("--prefix").arg(d).args([
            "e2b@latest",
            "--no-audit",
            "--no-fund",
            "--no-save",
        ]);
        c
    })?;
    let mut c = Command::new("node");
    c.arg(script("bench.cjs"))
        .env("NODE_PATH", dir.join("node_modules"));
    Ok(c)
}

/// `python3 bench.py` with `PYTHONPATH` at the installed Python SDK (installed if missing).
pub fn py_command() -> Result<Command, AnyError> {
    let dir = cache("py")?;
    let marker = dir.join("e2b/__init__.py");
    install("py", &marker, |d| {
        let mut c = Command::new("python3");
        c.args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
            .arg(d)
            .arg("e2b");
        c
    })?;
    let mut c = Command::new("python3");
    c.arg(script("bench.py")).env("PYTHONPATH", &dir);
    Ok(c)
}
