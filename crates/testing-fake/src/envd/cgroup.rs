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
use std::os::unix::fs::OpenOptionsExt;
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
    /// The directory itself, open: a sandbox process is born in it (`CLONE_INTO_CGROUP`).
    dirfd: OwnedFd,
}

/// The emulator's cgroup2 directory as it was at the first sandbox: the parent of every
/// sandbox subtree, even after [`enable_controllers`] moved the emulator into a leaf below.
fn base_dir() -> Option<PathBuf> {
    static BASE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BASE.get_or_init(exec_world_sys::mounts::own_cgroup_dir)
        .clone()
}

/// The cgroup v2 controllers among `wanted` that the sandbox subtrees below `base` can use,
/// enabled once in `base/cgroup.subtree_control`. cgroup v2 lets a group hand controllers
/// to its children only while it holds no process itself: when `base` holds the emulator
/// (and nothing else of ours), the emulator moves into a leaf of its own below it,
/// `e2b-local-<pid>-emulator`, first. A controller the host does not delegate to `base`
/// (a hybrid host binds them to v1) is not offered.
fn enable_controllers(base: &Path, wanted: &[&'static str]) -> Vec<&'static str> {
    static ENABLED: std::sync::Mutex<Option<Vec<&'static str>>> = std::sync::Mutex::new(None);
    let mut enabled = ENABLED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(done) = enabled.as_ref() {
        return wanted
            .iter()
            .copied()
            .filter(|c| done.contains(c))
            .collect();
    }
    let words = |file: &str| -> Vec<String> {
        std::fs::read_to_string(base.join(file))
            .map(|t| t.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let available = words("cgroup.controllers");
    let offered: Vec<&'static str> = ["cpu", "memory", "pids"]
        .into_iter()
        .filter(|c| available.iter().any(|a| a == c))
        .collect();
    let mut done: Vec<&'static str> = Vec::new();
    if !offered.is_empty() {
        let line = offered
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        let control = base.join("cgroup.subtree_control");
        let mut ok = std::fs::write(&control, &line).is_ok();
        if !ok {
            // EBUSY: `base` holds processes (the emulator). Move the emulator below it.
            let leaf = base.join(format!("{PREFIX}{}-emulator", std::process::id()));
            ok = (std::fs::create_dir(&leaf).is_ok() || leaf.is_dir())
                && std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
                    .is_ok()
                && std::fs::write(&control, &line).is_ok();
        }
        let now = words("cgroup.subtree_control");
        done = offered
            .into_iter()
            .filter(|c| now.iter().any(|n| n == c))
            .collect();
        if !ok && done.is_empty() {
            tracing::warn!(
                dir = %base.display(),
                "cgroup v2: the emulator's group cannot delegate cpu/memory/pids to sandboxes (it holds other processes, or they are not delegated to it)"
            );
        }
    }
    let got = wanted
        .iter()
        .copied()
        .filter(|c| done.contains(c))
        .collect();
    *enabled = Some(done);
    got
}

/// The cgroup v2 files and values of a sandbox of `cpus` CPUs and `memory_mb` of memory,
/// for the controllers in `which`: `cpu.max` (quota and period), `memory.max` (with
/// `memory.swap.max` 0, as a VM without swap), `pids.max`.
fn v2_limits(which: &[&'static str], cpus: u32, memory_mb: u32) -> Vec<(&'static str, String)> {
    let period = 100_000u64;
    let mut out = Vec::new();
    for c in which {
        match *c {
            "cpu" => out.push((
                "cpu.max",
                format!("{} {period}", period * u64::from(cpus.max(1))),
            )),
            "memory" => {
                out.push((
                    "memory.max",
                    (u64::from(memory_mb.max(64)) << 20).to_string(),
                ));
                out.push(("memory.swap.max", "0".to_owned()));
            }
            "pids" => out.push(("pids.max", super::limits::PIDS_MAX.to_string())),
            _ => {}
        }
    }
    out
}

impl SandboxCgroup {
    /// Apply the template's limits to the subtree with cgroup v2 for the controllers in
    /// `missing` (those cgroup v1 could not give): the ones applied are returned. The
    /// limit files stay the host root's: the sandbox's root, owner of the subtree's
    /// `cgroup.procs` and `cgroup.subtree_control`, cannot raise them. Only hosts whose
    /// controllers are on cgroup v2 get here (on a hybrid host they are bound to v1).
    pub(crate) fn apply_limits(
        &self,
        cpus: u32,
        memory_mb: u32,
        missing: &[&'static str],
    ) -> Vec<&'static str> {
        let Some(base) = base_dir() else {
            return Vec::new();
        };
        let usable = enable_controllers(&base, missing);
        let mut applied = Vec::new();
        for ctrl in usable {
            let files = v2_limits(&[ctrl], cpus, memory_mb);
            // memory.swap.max is absent without swap accounting: memory.max is the limit.
            let ok = files.iter().all(|(file, value)| {
                std::fs::write(self.dir.join(file), value).is_ok()
                    || (*file == "memory.swap.max" && !self.dir.join(file).exists())
            });
            if ok {
                applied.push(ctrl);
            }
        }
        applied
    }

    /// A fresh subtree delegated to host uid `owner` (the sandbox's root: it may make
    /// cgroups below it and move its processes), or `None` where the host has no usable
    /// cgroup2 (logged once).
    pub(crate) fn create(owner: u32) -> Option<SandboxCgroup> {
        static N: AtomicU64 = AtomicU64::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let own = base_dir()?;
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
        let made = made.and_then(|procs| {
            let dirfd = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&dir)?;
            Ok((procs, dirfd))
        });
        match made {
            Ok((procs, dirfd)) => Some(SandboxCgroup {
                dir,
                procs: procs.into(),
                dirfd: dirfd.into(),
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

impl SandboxCgroup {
    /// The CPU time the subtree's processes used, in microseconds (`cpu.stat`'s
    /// `usage_usec`, kept in cgroup v2 with or without the cpu controller).
    pub(crate) fn cpu_usage_usec(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The subtree's directory, open (for `CLONE_INTO_CGROUP`).
    pub(crate) fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.dirfd.as_fd()
    }

    /// A cgroup namespace rooted at the subtree, made by a short-lived child born in it
    /// that unshares, with the rest of [`super::isolation::Parts`] (ahead of the create for
    /// a spare sandbox): the holder enters it with `setns` and joins no group itself (a
    /// move between cgroups waits for an RCU grace period, several milliseconds on a
    /// quiet host, once the previous move is that long past).
    pub(crate) fn namespace(&self) -> std::io::Result<OwnedFd> {
        let open = |pid| {
            Ok(OwnedFd::from(std::fs::File::open(format!(
                "/proc/{pid}/ns/cgroup"
            ))?))
        };
        // Born in the subtree; a child killed at birth (a cgroup.kill quirk, see
        // exec_world_sys::launch::Outcome::Unborn) is redone joining it by a write.
        let born = super::userns::in_new_namespaces_born_in(
            Some(self.dir_fd()),
            libc::CLONE_NEWCGROUP,
            &|| 0,
            open,
        );
        if born.is_ok() {
            return born;
        }
        let procs = self.procs.as_raw_fd();
        super::userns::in_new_namespaces(
            0,
            // SAFETY: raw syscalls in the helper on a descriptor opened before the clone:
            // into the subtree, then a cgroup namespace rooted there.
            &move || unsafe {
                if libc::write(procs, b"0".as_ptr().cast(), 1) != 1
                    || libc::unshare(libc::CLONE_NEWCGROUP) != 0
                {
                    *libc::__errno_location()
                } else {
                    0
                }
            },
            open,
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_limits_are_the_templates() {
        let all = v2_limits(&["cpu", "memory", "pids"], 2, 512);
        assert_eq!(
            all,
            vec![
                ("cpu.max", "200000 100000".to_owned()),
                ("memory.max", (512u64 << 20).to_string()),
                ("memory.swap.max", "0".to_owned()),
                ("pids.max", super::super::limits::PIDS_MAX.to_string()),
            ]
        );
        assert_eq!(v2_limits(&["pids"], 2, 512).len(), 1);
    }
}
