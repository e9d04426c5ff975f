//! The official SDK contenders: the npm `e2b` package run by `tests/sdk/bench.cjs` with
//! node, the PyPI `e2b` package run by `tests/sdk/bench.py` with python3. Installed as the
//! SDK interop tests install them (`emulator_fixture::sdk_install`: the versions pinned in
//! `tests/sdk/versions.txt`, under `sdk-cache/` of the target directory this binary was
//! built in).

use std::path::{Path, PathBuf};
use std::process::Command;

use emulator_fixture::sdk_install::{self, Registry};

use super::child::AnyError;

/// The target directory: `<target>/<profile>/world-bench`.
fn target() -> Result<PathBuf, AnyError> {
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("world-bench is not inside a target directory")?;
    Ok(target.to_path_buf())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk").join(name)
}

/// `node bench.cjs` with `NODE_PATH` at the installed JS SDK (installed if missing).
pub fn js_command() -> Result<Command, AnyError> {
    let node_path = sdk_install::install(&target()?, Registry::Npm, "e2b")?;
    let mut c = Command::new("node");
    c.arg(script("bench.cjs")).env("NODE_PATH", node_path);
    Ok(c)
}

/// `python3 bench.py` with `PYTHONPATH` at the installed Python SDK (installed if missing).
pub fn py_command() -> Result<Command, AnyError> {
    let site = sdk_install::install(&target()?, Registry::PyPi, "e2b")?;
    let mut c = Command::new("python3");
    c.arg(script("bench.py")).env("PYTHONPATH", site);
    Ok(c)
}
