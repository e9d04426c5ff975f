//! A cgroup v2 per local spawn, where this process may create them (root, or a delegated
//! subtree): the spawn is born in a fresh cgroup (`clone3` with `CLONE_INTO_CGROUP`,
//! `launch.rs`), or where it cannot be, joins it before it execs, so every process it
//! ever starts stays in it, whatever it does (`setsid`, `env -i`, double forks, a lost
//! parent); `cgroup.kill` then ends them all at once. Where cgroups are unavailable
//! (no cgroup2 mount, no `cgroup.kill`, no permission) the marker scan of `tree.rs` is the
//! whole story, and it stays the fallback alongside the cgroup in any case.
//!
//! Layout: `<this process's cgroup>/exec-world-<pid>/<marker>`. Once a spawn's members
//! are gone its directory is kept as a spare (up to [`SPARE_MAX`]) for a later spawn
//! instead of removed: a cgroup's `mkdir` and `rmdir` cost more than all the rest of a
//! spawn's bookkeeping. Only an empty cgroup becomes a spare, and one spawn at a time uses
//! it, so its name still identifies one live spawn. Spares of a process that has exited are
//! removed by the next one's sweep, like its `exec-world-<pid>` directory.

use std::io::Write as _;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rustix::fs::{Mode, OFlags};

/// Separates a spawn's marker from its group label in its cgroup's name
/// (`<marker>--<label>`); markers never contain it.
pub const GROUP_SEPARATOR: &str = "--";

/// At most this many empty spawn cgroups are kept for reuse.
pub const SPARE_MAX: usize = 64;

/// Empty spawn cgroups ready for the next spawns.
static SPARES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A spare cgroup, if one is kept.
fn take_spare() -> Option<PathBuf> {
    SPARES.lock().ok()?.pop()
}

/// Where this process's spawns get their cgroups (created once), if it can.
pub(crate) fn parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            let own = crate::mounts::own_cgroup_dir()?;
            sweep_stale(&own);
            let dir = own.join(format!("exec-world-{}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    tracing::debug!(error = %e, dir = %dir.display(), "no cgroup per spawn");
                    return None;
                }
            }
            if !dir.join("cgroup.kill").exists() {
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
            Some(dir)
        })
        .as_deref()
}

/// Removes the empty `exec-world-<pid>` directories of processes that are gone (a
/// process cannot remove its own at exit). Populated ones stay (rmdir refuses them).
fn sweep_stale(own: &Path) {
    for dir in crate::mounts::orphaned_dirs(own, "exec-world-") {
        if let Ok(spawns) = std::fs::read_dir(&dir) {
            for s in spawns.flatten() {
                if s.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir(s.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

/// True when spawns get a cgroup of their own here.
pub fn available() -> bool {
    parent().is_some()
}

/// One spawn's cgroup, before and after its process joined.
#[derive(Debug)]
pub struct SpawnCgroup {
    /// The cgroup directory.
    pub dir: PathBuf,
    /// The directory, open: `clone3` starts the child in it (`CLONE_INTO_CGROUP`).
    fd: OwnedFd,
    /// A spare (used by an earlier spawn), not made for this one.
    pub reused: bool,
}

impl SpawnCgroup {
    /// A fresh cgroup for the spawn `marker`, or `None` where cgroups are unavailable.
    /// A spare one is reused when there is one.
    pub fn create(marker: &str) -> Option<SpawnCgroup> {
        match take_spare() {
            Some(d) => SpawnCgroup::open(d, true),
            None => SpawnCgroup::create_new(marker),
        }
    }

    /// A fresh cgroup for the spawn `marker` labeled `group` (`<marker>--<group>`, never
    /// a spare, never kept as one: its name says whose it is), or [`SpawnCgroup::create`]
    /// without a label. `None` where cgroups are unavailable.
    pub fn create_in_group(marker: &str, group: Option<&str>) -> Option<SpawnCgroup> {
        match group {
            Some(g) => SpawnCgroup::create_new(&format!("{marker}{GROUP_SEPARATOR}{g}")),
            None => SpawnCgroup::create(marker),
        }
    }

    /// A new cgroup for the spawn `marker` (never a spare), or `None`.
    pub fn create_new(marker: &str) -> Option<SpawnCgroup> {
        let d = parent()?.join(marker);
        std::fs::create_dir(&d).ok()?;
        SpawnCgroup::open(d, false)
    }

    /// The empty cgroup `dir`, opened (removed again when it cannot be).
    fn open(dir: PathBuf, reused: bool) -> Option<SpawnCgroup> {
        match rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Some(SpawnCgroup { dir, fd, reused }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// The open cgroup directory.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Its `cgroup.procs`, open for a forked child to write `0` (itself) before it execs
    /// (`join_self`), for spawns that cannot be born in the cgroup.
    pub fn open_procs(&self) -> Option<OwnedFd> {
        rustix::fs::openat(
            &self.fd,
            "cgroup.procs",
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    }
}

/// Spawns `cmd` through std (a full fork): in the child, `first` (a new session, or one
/// with its controlling terminal), then the join of `cg`'s cgroup, then exec. When the
/// spawn fails the cgroup is removed. Returns the child and its cgroup directory.
///
/// # Safety
/// `first` runs in the forked child: it must be async-signal-safe (raw system calls).
pub unsafe fn spawn_joined(
    cmd: &mut tokio::process::Command,
    cg: Option<SpawnCgroup>,
    first: fn() -> std::io::Result<()>,
) -> std::io::Result<(tokio::process::Child, Option<PathBuf>)> {
    let procs = cg.as_ref().and_then(SpawnCgroup::open_procs);
    let cg_fd = procs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: `first` is async-signal-safe (the caller's contract) and so is
    // `join_self` (one write(2)); `procs` stays open until `spawn` returned.
    unsafe {
        cmd.pre_exec(move || {
            first()?;
            if let Some(fd) = cg_fd {
                join_self(fd);
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    drop(procs);
    let dir = cg.map(|c| c.dir);
    match spawned {
        Ok(child) => Ok((child, dir)),
        Err(e) => {
            if let Some(dir) = &dir {
                remove(dir);
            }
            Err(e)
        }
    }
}

/// In the forked child, before exec: moves the calling process into the cgroup of `fd`.
/// Only a raw `write(2)` (async-signal-safe). A failure leaves the child where it was
/// (the marker scan still finds it), so it is not fatal.
fn join_self(fd: i32) {
    // SAFETY: writes 1 byte from a static buffer to a descriptor the parent opened.
    let _ = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
}

/// True when `pid` (alive, or a zombie not yet reaped) is in the cgroup `dir`: listed in
/// its `cgroup.procs` (one short file), or else (a zombie is not listed) its
/// `/proc/<pid>/cgroup` v2 line ends with the last two components of `dir`
/// (`exec-world-<our pid>/<marker>`, unique to the spawn).
pub fn holds(dir: &Path, pid: u32) -> bool {
    if members(dir).contains(&pid) {
        return true;
    }
    let (Some(spawn), Some(ours)) = (
        dir.file_name().and_then(|n| n.to_str()),
        dir.parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str()),
    ) else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|p| p.trim_end().strip_suffix(spawn))
        .and_then(|p| p.strip_suffix('/'))
        .is_some_and(|p| p.ends_with(&format!("/{ours}")))
}

/// The pids in the cgroup `dir` (empty when it is gone).
pub fn members(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// SIGKILLs every process in the cgroup `dir` at once (`cgroup.kill`), including those
/// forked while the kill runs.
pub fn kill(dir: &Path) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
    {
        let _ = f.write_all(b"1");
    }
}

/// Done with the cgroup `dir` for good: removed, never kept as a spare (a killed one, or
/// one that refused a child).
pub fn discard(dir: &Path) {
    let _ = std::fs::remove_dir(dir);
}

/// Done with the cgroup `dir`: kept as a spare when it is empty, unlabeled and there is
/// room, else removed (an error while members remain is ignored).
pub fn remove(dir: &Path) {
    let labeled = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(GROUP_SEPARATOR));
    if !labeled
        && members(dir).is_empty()
        && let Ok(mut spares) = SPARES.lock()
        && spares.len() < SPARE_MAX
    {
        if !spares.iter().any(|d| d == dir) {
            spares.push(dir.to_path_buf());
        }
        return;
    }
    let _ = std::fs::remove_dir(dir);
}
