//! A sandbox's CPU, memory and process-count limits, from its template (as E2B sizes the
//! VM): `cpu_count` CPUs, `memory_mb` of memory, [`PIDS_MAX`] processes.
//!
//! Applied with the cgroup v1 controllers `cpu`, `memory` and `pids` where the host mounts
//! them (`/sys/fs/cgroup/<controller>`): one group per sandbox below the emulator's own,
//! joined by the sandbox's holder and by the emulator's threads that fork its processes
//! (through `tasks`, moving one thread: no RCU grace period to wait for, unlike
//! `cgroup.procs`), so every process is born in it; removed once the sandbox is gone. A controller the host does not offer this
//! way is tried with cgroup v2 on the sandbox's subtree
//! ([`SandboxCgroup::apply_limits`](super::cgroup::SandboxCgroup::apply_limits): `cpu.max`,
//! `memory.max`, `pids.max`, the emulator moving into a leaf of its group so the group can
//! delegate them); one neither gives is named once in a warning and in
//! [`Limits::missing`]. The cgroup v2 path is not exercised on the hybrid (v1 controllers)
//! hosts these tests run on.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Processes (threads included) a sandbox may have at once.
pub(crate) const PIDS_MAX: u32 = 1024;

const PREFIX: &str = "e2b-local-";

/// What a sandbox's memory group reports (see [`Limits::memory_use`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryUse {
    /// The most bytes held since the previous reading (page cache included).
    pub(crate) peak: u64,
    /// Bytes of page cache now.
    pub(crate) cache: u64,
}

/// One sandbox's groups.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    dirs: Vec<PathBuf>,
    procs: Vec<OwnedFd>,
    /// The memory group, where there is one (its use is the sandbox's metrics).
    memory: Option<PathBuf>,
    /// Controllers that could not be applied.
    pub(crate) missing: Vec<&'static str>,
}

/// Move the calling thread into the groups whose `tasks` files `fds` are (one write of
/// `0` each; raw syscalls only: callable in a forked child).
pub(crate) fn join_tasks(fds: impl IntoIterator<Item = std::os::fd::RawFd>) -> std::io::Result<()> {
    for fd in fds {
        // SAFETY: one byte from a static buffer to a descriptor the caller keeps open.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// This process's group of v1 `controller`, from `/proc/self/cgroup`.
fn own_group(controller: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let _id = f.next()?;
        let ctrls = f.next()?;
        let path = f.next()?;
        ctrls
            .split(',')
            .any(|c| c == controller)
            .then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

fn make(
    controller: &str,
    n: u64,
    settings: &[(&str, String)],
) -> std::io::Result<(PathBuf, OwnedFd)> {
    let mount = Path::new("/sys/fs/cgroup").join(controller);
    if !mount.join("cgroup.procs").exists() {
        return Err(std::io::Error::other(format!(
            "no cgroup v1 {controller} hierarchy at {}",
            mount.display()
        )));
    }
    let own = own_group(controller)
        .ok_or_else(|| std::io::Error::other(format!("not in a {controller} cgroup")))?;
    let dir = mount
        .join(own)
        .join(format!("{PREFIX}{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)?;
    let result = (|| {
        for (file, value) in settings {
            std::fs::write(dir.join(file), value)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{file}: {e}")))?;
        }
        // `tasks`: a process joins by moving its one thread, which (unlike moving a whole
        // process through `cgroup.procs`) does not wait for an RCU grace period.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("tasks"))
    })();
    match result {
        Ok(f) => Ok((dir, f.into())),
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
    }
}

impl Limits {
    /// The groups for a sandbox of `cpus` CPUs and `memory_mb` of memory.
    pub(crate) fn create(cpus: u32, memory_mb: u32) -> Limits {
        static N: AtomicU64 = AtomicU64::new(0);
        static WARNED: std::sync::Once = std::sync::Once::new();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let period = 100_000u64;
        let wanted: [(&'static str, Vec<(&str, String)>); 3] = [
            (
                "cpu",
                vec![
                    ("cpu.cfs_period_us", period.to_string()),
                    (
                        "cpu.cfs_quota_us",
                        (period * u64::from(cpus.max(1))).to_string(),
                    ),
                ],
            ),
            (
                "memory",
                vec![(
                    "memory.limit_in_bytes",
                    (u64::from(memory_mb.max(64)) << 20).to_string(),
                )],
            ),
            ("pids", vec![("pids.max", PIDS_MAX.to_string())]),
        ];
        let mut out = Limits::default();
        let mut why = Vec::new();
        // Tests simulate a host without a controller (`E2B_LOCAL_DENY_LIMIT=memory,…`), as
        // `E2B_LOCAL_DENY_STEP` does for the boundary's steps.
        let denied = std::env::var("E2B_LOCAL_DENY_LIMIT").unwrap_or_default();
        for (ctrl, settings) in wanted {
            if denied.split(',').any(|d| d.trim() == ctrl) {
                out.missing.push(ctrl);
                why.push(format!("{ctrl}: denied by E2B_LOCAL_DENY_LIMIT"));
                continue;
            }
            match make(ctrl, n, &settings) {
                Ok((dir, fd)) => {
                    if ctrl == "memory" {
                        out.memory = Some(dir.clone());
                    }
                    out.dirs.push(dir);
                    out.procs.push(fd);
                }
                Err(e) => {
                    out.missing.push(ctrl);
                    why.push(format!("{ctrl}: {e}"));
                }
            }
        }
        if !why.is_empty() {
            WARNED.call_once(|| {
                tracing::warn!(
                    "sandboxes run without these limits of their template (cgroup controllers not available): {}",
                    why.join("; ")
                );
            });
        }
        out
    }

    /// The groups' `tasks` descriptors (see [`Limits::join_self`]).
    pub(crate) fn tasks_fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.procs.iter().map(|fd| fd.as_raw_fd())
    }

    /// Move the calling thread into every group (raw syscalls only: also in a forked
    /// child, whose one thread is the process).
    pub(crate) fn join_self(&self) -> std::io::Result<()> {
        join_tasks(self.tasks_fds())
    }

    /// The memory the sandbox's group held at most since the last call (its high-water
    /// mark, reset here: an out-of-memory kill between two samples shows as a peak at
    /// the limit) and its page cache now; `None` without a memory group.
    pub(crate) fn memory_use(&self) -> Option<MemoryUse> {
        let dir = self.memory.as_ref()?;
        let mark = dir.join("memory.max_usage_in_bytes");
        let peak = std::fs::read_to_string(&mark).ok()?.trim().parse().ok()?;
        let _ = std::fs::write(&mark, "0");
        let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
        let cache = stat
            .lines()
            .find_map(|l| l.strip_prefix("total_cache "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Some(MemoryUse { peak, cache })
    }

    /// Remove the groups once their processes are gone (retries while they exit).
    pub(crate) fn remove(&self) {
        for dir in &self.dirs {
            for _ in 0..250 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        }
    }
}

/// Groups of emulators that are gone, below this process's groups (their sandboxes died
/// with them): removed at the first sandbox.
pub(crate) fn sweep_stale() {
    for ctrl in ["cpu", "memory", "pids"] {
        let Some(own) = own_group(ctrl) else { continue };
        let dir = Path::new("/sys/fs/cgroup").join(ctrl).join(own);
        for d in exec_world_sys::mounts::orphaned_dirs(&dir, PREFIX) {
            let _ = std::fs::remove_dir(d);
        }
    }
}
