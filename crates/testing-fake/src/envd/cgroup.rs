//! A cgroup v2 subtree per sandbox, as a real E2B VM has one (root in the VM owns its
//! cgroup2 hierarchy): `<the emulator's cgroup>/e2b-local-<pid>-<n>`, joined by the holder
//! and by every sandbox process before they enter the sandbox's cgroup namespace, and
//! mounted writable at `/sys/fs/cgroup` inside the sandbox (rooted at that subtree, so
//! sandbox root can create cgroups below it and nothing else). Removed once the sandbox
//! is killed; subtrees of emulators that died are swept at the next start.
//!
//! Without a cgroup2 mount on the host (or without `cgroup.kill`, kernel < 5.14, or
//! without permission) there is no subtree and sandboxes keep the host's read-only `/sys`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Name prefix of the per-sandbox subtrees (`e2b-local-<emulator pid>-<n>`).
const PREFIX: &str = "e2b-local-";

/// Removes the subtrees of emulators that are gone (their sandboxes died with them).
fn sweep_stale(own: &Path) {
    for dir in exec_world_sys::mounts::orphaned_dirs(own, PREFIX) {
        remove(&dir);
    }
}

/// One sandbox's subtree.
#[derive(Debug)]
pub(crate) struct SandboxCgroup {
    /// The subtree's directory on the host.
    pub(crate) dir: PathBuf,
    /// Its `cgroup.procs`, open for writing: a forked child writes `0` to join.
    procs: OwnedFd,
}

impl SandboxCgroup {
    /// A fresh subtree delegated to host uid `owner` (the sandbox's root: it may make
    /// cgroups below it and move its processes), or `None` where the host has no usable
    /// cgroup2 (logged once).
    pub(crate) fn create(owner: u32) -> Option<SandboxCgroup> {
        static N: AtomicU64 = AtomicU64::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let own = exec_world_sys::mounts::own_cgroup_dir()?;
        SWEPT.call_once(|| sweep_stale(&own));
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = own.join(format!("{PREFIX}{}-{n}", std::process::id()));
        let made = std::fs::create_dir(&dir).and_then(|()| {
            if !dir.join("cgroup.kill").exists() {
                return Err(std::io::Error::other("no cgroup.kill (kernel < 5.14)"));
            }
            for f in [
                "",
                "cgroup.procs",
                "cgroup.threads",
                "cgroup.subtree_control",
            ] {
                let p = dir.join(f);
                if owner != 0 && p.exists() {
                    std::os::unix::fs::chown(&p, Some(owner), Some(owner))?;
                }
            }
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        });
        match made {
            Ok(procs) => Some(SandboxCgroup {
                dir,
                procs: procs.into(),
            }),
            Err(e) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        dir = %dir.display(),
                        error = %e,
                        "sandboxes get no cgroup subtree: /sys/fs/cgroup stays the host's, read-only"
                    );
                });
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// In a forked child (raw syscalls only): moves the calling process into the subtree.
    pub(crate) fn join_self(&self) -> std::io::Result<()> {
        // SAFETY: writes one byte from a static buffer to a descriptor opened before fork.
        if unsafe { libc::write(self.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Kills every process left in the subtree `dir` (`cgroup.kill`) and removes it, cgroups
/// the sandbox made below it first; retries for a while as dying members leave.
pub(crate) fn remove(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    for _ in 0..250 {
        if remove_tree(dir) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tracing::warn!(dir = %dir.display(), "sandbox cgroup subtree still populated; left behind");
}

/// Depth-first `rmdir` of a cgroup tree; true once `dir` is gone.
fn remove_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}
