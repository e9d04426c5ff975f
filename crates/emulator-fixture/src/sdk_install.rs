//! Installs the official clients that the interop tests and world-bench drive (E2B's SDKs,
//! the MCP SDKs), at the versions pinned in `tests/sdk/versions.txt` (one place), into `sdk-cache/` of a target directory:
//! once, under an exclusive `flock`, since several test processes may ask at the same time.
//! `E2B_SDK_LATEST=1` installs the newest releases instead, into `sdk-cache/latest/`, so a
//! release elsewhere never changes what a plain run installs.
//!
//! ```no_run
//! # fn demo(target: &std::path::Path) -> Result<(), String> {
//! use emulator_fixture::sdk_install::{install, Registry};
//! let node_modules = install(target, Registry::Npm, "e2b")?; // NODE_PATH for `node`
//! let site = install(target, Registry::PyPi, "e2b")?; // PYTHONPATH for `python3`
//! # let _ = (node_modules, site); Ok(()) }
//! ```

use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a package comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// The npm registry, installed with `npm install --prefix`.
    Npm,
    /// PyPI, installed with `pip install --target`.
    PyPi,
}

impl Registry {
    fn key(self) -> &'static str {
        match self {
            Registry::Npm => "npm",
            Registry::PyPi => "pypi",
        }
    }
}

const VERSIONS: &str = include_str!("../../../tests/sdk/versions.txt");

/// The version `versions.txt` pins for `name` on `registry`.
///
/// ```
/// use emulator_fixture::sdk_install::{pinned, Registry};
/// assert!(pinned(Registry::Npm, "e2b").is_some());
/// assert_eq!(pinned(Registry::Npm, "no-such-package"), None);
/// ```
pub fn pinned(registry: Registry, name: &str) -> Option<&'static str> {
    VERSIONS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            match (parts.next(), parts.next(), parts.next()) {
                (Some(r), Some(n), Some(v)) if r == registry.key() && n == name => Some(v),
                _ => None,
            }
        })
}

/// True when `E2B_SDK_LATEST=1`: install the newest releases, not the pinned ones.
pub fn latest() -> bool {
    std::env::var("E2B_SDK_LATEST").is_ok_and(|v| v == "1")
}

/// Installs `name` from `registry` under `<target>/sdk-cache/` unless that version is
/// there already, and returns the directory to put on `NODE_PATH` (npm: its
/// `node_modules`) or `PYTHONPATH` (PyPI). Errors name the package and the installer's
/// output.
pub fn install(target: &Path, registry: Registry, name: &str) -> Result<PathBuf, String> {
    let version = if latest() {
        None
    } else {
        Some(pinned(registry, name).ok_or_else(|| {
            format!(
                "install {name}: no {} version pinned in tests/sdk/versions.txt",
                registry.key()
            )
        })?)
    };
    let cache = target.join("sdk-cache");
    let root = match version {
        Some(v) => cache.join(registry.key()).join(format!("{name}@{v}")),
        None => cache.join("latest").join(registry.key()).join(name),
    };
    std::fs::create_dir_all(&cache).map_err(|e| format!("install {name}: {e}"))?;
    let _lock = lock(&cache.join(".install.lock"))?;
    let done = root.join(".installed");
    let path = match registry {
        Registry::Npm => root.join("node_modules"),
        Registry::PyPi => root.clone(),
    };
    if done.exists() && !latest() {
        return Ok(path);
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("install {name}: {e}"))?;
    let spec = match (registry, version) {
        (Registry::Npm, Some(v)) => format!("{name}@{v}"),
        (Registry::Npm, None) => format!("{name}@latest"),
        (Registry::PyPi, Some(v)) => format!("{name}=={v}"),
        (Registry::PyPi, None) => name.to_owned(),
    };
    let mut cmd = match registry {
        Registry::Npm => {
            let mut c = Command::new("npm");
            c.arg("install").arg("--prefix").arg(&root).args([
                spec.as_str(),
                "--no-audit",
                "--no-fund",
                "--no-save",
            ]);
            c
        }
        Registry::PyPi => {
            let mut c = Command::new("python3");
            c.args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
                .arg(&root)
                .arg(&spec);
            c
        }
    };
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("install {spec}: cannot run the installer: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "install {spec}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(&done, spec.as_bytes()).map_err(|e| format!("install {spec}: {e}"))?;
    Ok(path)
}

/// An exclusive `flock` held while the value lives.
struct Lock(#[allow(dead_code)] std::fs::File);

fn lock(path: &Path) -> Result<Lock, String> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    // SAFETY: flock(2) on a descriptor this function owns; released when `f` closes.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "flock {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(Lock(f))
}
