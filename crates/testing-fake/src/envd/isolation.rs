//! Per-sandbox isolation: the holder process and its namespaces.
//!
//! As root, a long-lived *holder* process (`sleep infinity`, started with SIGCHLD ignored
//! so the kernel reaps the orphans reparented to it, as a real init does) is the sandbox's
//! init: it is PID 1 of a new PID namespace (sandbox processes cannot see or signal host
//! processes, and when the holder dies, at the emulator's death included, the kernel kills every
//! process of the sandbox), the sandbox's own network
//! namespace ([`net`](super::net): loopback only, plus pasta's uplink for a sandbox with
//! internet access), and the sandbox's mount namespace, whose `/proc` it mounts in its
//! `pre_exec` (a procfs is of the PID namespace of whoever mounts it). The sandbox's
//! processes also share a new time namespace whose monotonic and boot clocks start at the
//! boot (`/proc/uptime` counts from the boot).
//!
//! Every process made to build the boundary (the helpers that make namespaces, the
//! mount child, the holder) runs on the emulator's memory (`CLONE_VM`) until it exits or
//! execs: none copies the emulator's page tables (see [`userns::in_new_namespaces`]).
//!
//! The parts that hold no process and no clock ([`Parts`]: the user and network
//! namespaces, pasta, the limit groups, the cgroup subtree and its namespace, and the
//! mount namespace with the root filesystem [`rootfs`](super::rootfs) builds in a
//! short-lived child before `pivot_root`) are built first, then the holder; a spare
//! sandbox ([`super::spare`]) is all of it, made ahead of its create. The holder is born
//! in the sandbox's cgroup subtree (moving a process between cgroups waits for an RCU
//! grace period on a quiet host), joins its limit groups and enters the cgroup namespace
//! made for it.
//!
//! Sandbox processes are forked ([`super::spawn`]) from an [`FsWorker`] thread. The thread
//! joined what a thread can: the sandbox's mount, network, UTS and cgroup namespaces, its
//! PID namespace for children and its limit groups (cgroup v1 groups hold threads). A
//! child is born in all of that, and in the cgroup subtree (`CLONE_INTO_CGROUP`): the
//! same cgroups as the holder's, whose cgroup set the kernel so keeps. It joins only what
//! a process sharing its memory cannot, the time and user namespaces, then drops
//! capabilities and execs. envd's own file operations run on the same worker threads, so
//! they see exactly what the processes see (absolute symlinks and `..` resolve inside the
//! sandbox's root, never on the host).
//!
//! Without root (or when the namespace cannot be built, or with `E2B_LOCAL_NO_ISOLATION`
//! set) isolation is off: a warning is logged once, template paths are mapped to host
//! paths under the sandbox root and everything else keeps working. A namespace kind the
//! kernel refuses (PID, time) degrades alone, with a warning naming it.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, Once, mpsc};

use super::cgroup::{self, SandboxCgroup};
use super::limits::Limits;
use super::net::{NetNs, Pasta};
use super::rootfs::{self, Layout};
use super::userns::{self, IdMap};

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A part of the sandbox boundary, named in the error when it cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The emulator is not root on the host.
    Root,
    /// The sandbox's user namespace (root inside is nobody on the host).
    UserNamespace,
    /// The PID namespace (the sandbox sees only its own processes).
    PidNamespace,
    /// The mount namespace and the sandbox's root filesystem.
    MountNamespace,
    /// The root filesystem's allowlist layer.
    Allowlist,
    /// The idmapped mount of the host's system files.
    IdmappedMount,
    /// The overlay holding the sandbox's writes.
    Overlay,
    /// The network namespace.
    NetworkNamespace,
    /// The UTS namespace (the sandbox's own host name, `e2b.local`).
    UtsNamespace,
    /// The user-mode network stack (pasta) of a sandbox with internet access.
    UserModeNetwork,
}

impl Step {
    /// Every step, in the order a sandbox is built.
    pub const ALL: [Step; 10] = [
        Step::Root,
        Step::UserNamespace,
        Step::PidNamespace,
        Step::MountNamespace,
        Step::Allowlist,
        Step::IdmappedMount,
        Step::Overlay,
        Step::NetworkNamespace,
        Step::UtsNamespace,
        Step::UserModeNetwork,
    ];

    /// The short name (`user-namespace`, …), as `E2B_LOCAL_DENY_STEP` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Root => "root",
            Step::UserNamespace => "user-namespace",
            Step::PidNamespace => "pid-namespace",
            Step::MountNamespace => "mount-namespace",
            Step::Allowlist => "allowlist",
            Step::IdmappedMount => "idmapped-mount",
            Step::Overlay => "overlay",
            Step::NetworkNamespace => "network-namespace",
            Step::UtsNamespace => "uts-namespace",
            Step::UserModeNetwork => "user-mode-network",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Step::Root => "the emulator is not root on the host",
            Step::UserNamespace => "no user namespace for the sandbox",
            Step::PidNamespace => "no PID namespace for the sandbox",
            Step::MountNamespace => "no mount namespace (or root filesystem) for the sandbox",
            Step::Allowlist => "the root filesystem's allowlist layer could not be written",
            Step::IdmappedMount => "no idmapped mount of the host's system files",
            Step::Overlay => "no overlay for the sandbox's writable root",
            Step::NetworkNamespace => "no network namespace for the sandbox",
            Step::UtsNamespace => "no UTS namespace for the sandbox (its own host name)",
            Step::UserModeNetwork => {
                "no user-mode network stack (pasta) for a sandbox with internet access"
            }
        }
    }

    fn how(self) -> &'static str {
        match self {
            Step::Root => {
                "run e2b-local as root (namespaces and mounts need it; sandbox root is still nobody on the host)"
            }
            Step::UserNamespace => {
                "user namespaces must be enabled (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone is not needed as root); in a container, allow unshare(CLONE_NEWUSER) in its seccomp profile"
            }
            Step::PidNamespace
            | Step::MountNamespace
            | Step::NetworkNamespace
            | Step::UtsNamespace => {
                "run e2b-local as root on the host or in a container allowed to create namespaces (CAP_SYS_ADMIN, unshare not blocked by seccomp)"
            }
            Step::Allowlist => {
                "the emulator's state directory must be on a filesystem that takes device nodes and trusted xattrs (ext4, xfs, btrfs, tmpfs)"
            }
            Step::IdmappedMount => {
                "needs Linux 5.12 or later and a root filesystem with idmapped mounts (ext4, xfs, btrfs)"
            }
            Step::Overlay => {
                "needs overlayfs (modprobe overlay) and a state directory whose path has no ',', ':' or '\\'"
            }
            Step::UserModeNetwork => {
                "install Debian's passt package (apt-get install passt, which provides pasta; or point E2B_LOCAL_PASTA at the binary) on a host with an IPv4 default route, or create the sandbox with allow_internet_access: false"
            }
        }
    }
}

/// A part of the sandbox boundary could not be built: what, why, and how to get it.
#[derive(Debug)]
pub struct BoundaryError {
    step: Step,
    source: std::io::Error,
    /// What to do, when not the step's usual cure ([`Step::how`]).
    how: Option<&'static str>,
}

impl BoundaryError {
    pub(crate) fn new(step: Step, source: std::io::Error) -> BoundaryError {
        BoundaryError {
            step,
            source,
            how: None,
        }
    }

    /// A failure with a cure of its own instead of the step's usual one.
    pub(crate) fn with_how(mut self, how: &'static str) -> BoundaryError {
        self.how = Some(how);
        self
    }

    /// The part that is missing.
    pub fn step(&self) -> Step {
        self.step
    }
}

impl std::fmt::Display for BoundaryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot build the sandbox boundary ({}): {}: {}; {}; or run without the boundary (sandboxes as plain host processes) with e2b-local --no-isolation or E2B_LOCAL_NO_ISOLATION=1",
            self.step.name(),
            self.step.what(),
            self.source,
            self.how.unwrap_or(self.step.how())
        )
    }
}

impl std::error::Error for BoundaryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Fails `step` when `E2B_LOCAL_DENY_STEP` names it (a comma-separated list of
/// [`Step::name`]s): how tests see that a boundary the kernel refuses is not built.
fn check_denied(step: Step) -> Result<(), BoundaryError> {
    let denied = std::env::var("E2B_LOCAL_DENY_STEP").unwrap_or_default();
    if denied.split(',').any(|d| d.trim() == step.name()) {
        return Err(BoundaryError::new(
            step,
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "denied by E2B_LOCAL_DENY_STEP",
            ),
        ));
    }
    Ok(())
}

/// The host name of every sandbox, as on E2B (`uname -n`, `hostname`); `/etc/hosts`
/// and `/etc/hostname` of a fresh sandbox name it.
pub const HOSTNAME: &str = "e2b.local";

/// What one sandbox's isolation is made of (see [`Layout`]), plus its network.
pub(crate) struct Spec {
    /// The root filesystem.
    pub layout: Layout,
    /// No internet access: the sandbox's network namespace keeps only loopback (else
    /// pasta gives it an uplink, see [`net`](super::net)).
    pub offline: bool,
    /// The sandbox's ids on the host: with [`IdMap::SANDBOX`] a user namespace maps
    /// them and the host's root is idmapped into the sandbox.
    pub ids: IdMap,
    /// The template's `(cpu_count, memory_mb)`: the sandbox's limits.
    pub limits: (u32, u32),
}

/// The parts of a sandbox's boundary that hold no process and no clock: its user
/// namespace, its network namespace (with pasta's uplink for a sandbox with internet
/// access), its limit groups, its cgroup subtree and, once [`Parts::mount`]ed, its mount
/// namespace with the root filesystem but for `/proc`. Built by
/// [`Isolation::start`] before the holder; dropped unused (a step after them failed),
/// they leave nothing behind (pasta is stopped, the groups removed).
pub(crate) struct Parts {
    user: Option<OwnedFd>,
    netns: Option<NetNs>,
    uplink: Option<Pasta>,
    limits: Option<Limits>,
    cg: Option<Arc<SandboxCgroup>>,
    /// A cgroup namespace rooted at the subtree ([`SandboxCgroup::namespace`]).
    cgroup_ns: Option<OwnedFd>,
    /// Limits cgroup v2 set on the subtree (what cgroup v1 could not).
    v2_applied: Vec<&'static str>,
    /// The sandbox's mount namespace, its root built ([`Parts::mount`]) but for `/proc`.
    mnt: Option<OwnedFd>,
}

impl Parts {
    /// The parts of a sandbox with `ids`, the template's `(cpus, memory_mb)` and
    /// internet access unless `offline`; an error names the step that failed.
    pub(crate) fn build(
        offline: bool,
        ids: IdMap,
        (cpus, memory_mb): (u32, u32),
    ) -> Result<Parts, BoundaryError> {
        static SWEPT: Once = Once::new();
        SWEPT.call_once(super::limits::sweep_stale);
        // Dropped on an error below: what was made so far is undone.
        let mut parts = Parts {
            user: None,
            netns: None,
            uplink: None,
            limits: Some(Limits::create(cpus, memory_mb)),
            cg: None,
            cgroup_ns: None,
            v2_applied: Vec::new(),
            mnt: None,
        };
        if ids != IdMap::IDENTITY {
            check_denied(Step::UserNamespace)?;
            parts.user =
                Some(userns::create(ids).map_err(|e| BoundaryError::new(Step::UserNamespace, e))?);
        }
        check_denied(Step::NetworkNamespace)?;
        let new_netns =
            || NetNs::create().map_err(|e| BoundaryError::new(Step::NetworkNamespace, e));
        if offline {
            parts.netns = Some(new_netns()?);
        } else {
            check_denied(Step::UserModeNetwork)?;
            match super::uplink_pool::take() {
                // Made ahead, configured: nothing to wait for.
                Some(u) => {
                    parts.netns = Some(u.netns);
                    parts.uplink = Some(u.pasta);
                }
                None => {
                    let netns = new_netns()?;
                    // Configures the namespace while the rest is built; awaited at the end
                    // of the holder's start.
                    let pasta = Pasta::spawn(&netns)
                        .map_err(|e| BoundaryError::new(Step::UserModeNetwork, e))?;
                    parts.netns = Some(netns);
                    parts.uplink = Some(pasta);
                }
            }
        }
        parts.cg = SandboxCgroup::create(ids.host_id(0)).map(Arc::new);
        parts.cgroup_ns = parts.cg.as_ref().and_then(|cg| cg.namespace().ok());
        // What cgroup v1 could not limit, cgroup v2 may (a host with its controllers there).
        if let (Some(cg), Some(limits)) = (&parts.cg, &mut parts.limits)
            && !limits.missing.is_empty()
        {
            parts.v2_applied = cg.apply_limits(cpus, memory_mb, &limits.missing);
            limits.missing.retain(|c| !parts.v2_applied.contains(c));
        }
        Ok(parts)
    }

    /// Build the sandbox's mount namespace and its root filesystem as `layout` describes it
    /// (all but `/proc`, which its init mounts at the create), in a short-lived child;
    /// an error names the step that failed.
    pub(crate) fn mount(&mut self, layout: &Layout) -> Result<(), BoundaryError> {
        check_overlay(layout)?;
        check_denied(Step::MountNamespace)?;
        check_denied(Step::IdmappedMount)?;
        let mount_err = |e| BoundaryError::new(Step::MountNamespace, e);
        std::fs::create_dir_all(&layout.newroot).map_err(mount_err)?;
        if let Some(lower) = &layout.idmapped_lower {
            std::fs::create_dir_all(lower).map_err(mount_err)?;
        }
        let plan = rootfs::plan(&Layout {
            cgroup2: self.cgroup_ns.is_some(),
            ..layout.clone()
        })
        .map_err(|e| BoundaryError::new(Step::Overlay, e))?;
        let ops = &plan;
        let nr = rootfs::cstr(&layout.newroot);
        let read_only = layout.overlay.is_none();
        let user_raw = self.user.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let cgroup_ns_raw = self.cgroup_ns.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        // The child reports the step that failed here (one byte) and its errno.
        let (fail_r, fail_w) = failure_pipe().map_err(mount_err)?;
        let fail_w_raw = fail_w.as_raw_fd();
        let built = userns::in_new_namespaces(
            libc::CLONE_NEWNS,
            // SAFETY: raw syscalls in the helper on data prepared before the clone.
            &move || unsafe {
                // The cgroup namespace rooted at the sandbox's subtree (for the cgroup2
                // mount only: the child ends once the root is built).
                let cgroup_ns =
                    cgroup_ns_raw >= 0 && libc::setns(cgroup_ns_raw, libc::CLONE_NEWCGROUP) == 0;
                match rootfs::execute(ops, &nr, read_only, cgroup_ns, user_raw) {
                    Ok(()) => 0,
                    Err((step, e, op)) => {
                        let e = report(fail_w_raw, step, op, e);
                        e.raw_os_error().unwrap_or(libc::EIO)
                    }
                }
            },
            |pid| {
                Ok(OwnedFd::from(std::fs::File::open(format!(
                    "/proc/{pid}/ns/mnt"
                ))?))
            },
        );
        drop(fail_w);
        self.mnt = Some(built.map_err(|e| {
            let (step, op) = read_failure(&fail_r).unwrap_or((Step::MountNamespace, None));
            // The path the failing step acts on, as the sandbox names it.
            match op.and_then(|i| ops.get(i)) {
                Some(op) if e.raw_os_error() == Some(libc::ELOOP) => BoundaryError::new(
                    step,
                    std::io::Error::new(
                        e.kind(),
                        format!(
                            "{}: a symbolic link lies on the way",
                            rootfs::op_path(op, &layout.newroot)
                        ),
                    ),
                )
                .with_how(
                    "a sandbox made that link in its own files or in a volume, and the boundary builds through none: remove it where it was made (a running sandbox with the same volume), or mount at another path",
                ),
                Some(op) => BoundaryError::new(
                    step,
                    std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", rootfs::op_path(op, &layout.newroot)),
                    ),
                ),
                None => BoundaryError::new(step, e),
            }
        })?);
        Ok(())
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        // Only what no holder took: the holder's thread removes the groups it was given.
        if let Some(cg) = self.cg.take() {
            cgroup::remove(&cg.dir);
        }
        if let Some(limits) = self.limits.take() {
            limits.remove();
        }
    }
}

/// The overlay step: denied, or a layout without an upper layer.
fn check_overlay(layout: &Layout) -> Result<(), BoundaryError> {
    check_denied(Step::Overlay)?;
    if layout.overlay.is_none() {
        return Err(BoundaryError::new(
            Step::Overlay,
            std::io::Error::other("the sandbox has no upper layer"),
        ));
    }
    Ok(())
}

/// The namespaces of a sandbox, opened from the holder's `/proc/<pid>/ns`.
pub(crate) struct NsFds {
    mnt: OwnedFd,
    /// `None` when the kernel refused a PID namespace.
    pid: Option<OwnedFd>,
    /// The sandbox's own network namespace ([`net`](super::net)).
    net: OwnedFd,
    /// The sandbox's UTS namespace: its host name is [`HOSTNAME`].
    uts: OwnedFd,
    /// `None` when the kernel has no time namespaces.
    time: Option<OwnedFd>,
    /// The sandbox's cgroup subtree and its cgroup namespace: a process joins the subtree,
    /// then the namespace (`None` without a usable cgroup2 on the host).
    cgroup: Option<(Arc<SandboxCgroup>, OwnedFd)>,
    /// The sandbox's user namespace ([`userns`]), joined last.
    user: Option<OwnedFd>,
    /// The sandbox's CPU, memory and process-count groups, joined first.
    limits: Arc<Limits>,
    /// Limits set with cgroup v2 on a subtree the sandbox's processes do not join.
    unlimited: Vec<&'static str>,
    /// The sandbox's `/dev/null`, opened once: a command's null stdio is a copy of it
    /// (opened in the emulator's own mount namespace, the sandbox would see it under
    /// another name).
    dev_null: Option<OwnedFd>,
}

/// The descriptors of a sandbox's namespaces and limit groups, raw (-1: none), as a
/// process joins them: in a forked child, or sent to the starters' maker
/// ([`zygote`](super::zygote)) that joins them for a new starter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawNs {
    pub(crate) mnt: RawFd,
    pub(crate) pid: RawFd,
    pub(crate) net: RawFd,
    pub(crate) uts: RawFd,
    pub(crate) cgroup_ns: RawFd,
    pub(crate) time: RawFd,
    pub(crate) user: RawFd,
    /// The cgroup v1 limit groups' `tasks` files.
    pub(crate) tasks: [RawFd; RawNs::MAX_TASKS],
}

impl RawNs {
    /// The most limit groups a sandbox has (CPU, memory, process count).
    pub(crate) const MAX_TASKS: usize = 3;

    /// Join what a thread may: the mount, network, UTS and cgroup namespaces, the PID
    /// namespace of the processes the caller forks, and the limit groups (cgroup v1
    /// groups hold single threads: the caller's thread moves). Raw system calls only:
    /// callable in a forked child. The caller must not share its fs context (a thread:
    /// `unshare(CLONE_FS)` first).
    pub(crate) fn join_shared(&self) -> std::io::Result<()> {
        // SAFETY: setns on descriptors the caller keeps open; each affects only the
        // calling thread (its namespaces, the PID namespace of its future children).
        unsafe {
            if libc::setns(self.mnt, libc::CLONE_NEWNS) != 0
                || (self.pid >= 0 && libc::setns(self.pid, libc::CLONE_NEWPID) != 0)
                || libc::setns(self.net, libc::CLONE_NEWNET) != 0
                || libc::setns(self.uts, libc::CLONE_NEWUTS) != 0
                || (self.cgroup_ns >= 0 && libc::setns(self.cgroup_ns, libc::CLONE_NEWCGROUP) != 0)
            {
                return Err(errno());
            }
        }
        super::limits::join_tasks(self.tasks.into_iter().filter(|fd| *fd >= 0))
    }

    /// What only a process may join, after [`RawNs::join_shared`]: the time namespace,
    /// then the user namespace, then [`DROPPED_CAPS`] dropped from the bounding set (a
    /// joined user namespace resets it). Raw system calls only, in a single-threaded
    /// process with memory of its own.
    pub(crate) fn join_rest(&self) -> std::io::Result<()> {
        // SAFETY: setns and prctl on this (forked, single-threaded) process only.
        unsafe {
            if self.time >= 0 && libc::setns(self.time, libc::CLONE_NEWTIME) != 0 {
                return Err(errno());
            }
            // Last: from here on the process's capabilities are the sandbox's only.
            if self.user >= 0 && libc::setns(self.user, libc::CLONE_NEWUSER) != 0 {
                return Err(errno());
            }
            for cap in DROPPED_CAPS {
                // EINVAL: a capability this kernel does not know, nothing to drop.
                let rc = libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                if rc != 0 && errno().raw_os_error() != Some(libc::EINVAL) {
                    return Err(errno());
                }
            }
        }
        Ok(())
    }
}

impl NsFds {
    /// The raw descriptors, for a forked child or the starters' maker (valid while
    /// `self` lives).
    pub(crate) fn raw(&self) -> RawNs {
        let fd = |f: Option<&OwnedFd>| f.map_or(-1, |f| f.as_raw_fd());
        let mut tasks = [-1; RawNs::MAX_TASKS];
        for (slot, t) in tasks.iter_mut().zip(self.limits.tasks_fds()) {
            *slot = t;
        }
        RawNs {
            mnt: self.mnt.as_raw_fd(),
            pid: fd(self.pid.as_ref()),
            net: self.net.as_raw_fd(),
            uts: self.uts.as_raw_fd(),
            cgroup_ns: fd(self.cgroup.as_ref().map(|(_, f)| f)),
            time: fd(self.time.as_ref()),
            user: fd(self.user.as_ref()),
            tasks,
        }
    }

    /// The sandbox's `/dev/null` (`None`: open it inside the sandbox's mount namespace).
    pub(crate) fn dev_null(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.dev_null.as_ref().map(|fd| fd.as_fd())
    }

    /// The sandbox's cgroup subtree, for a child to be born in (`None` without one).
    pub(crate) fn cgroup_dir(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.cgroup.as_ref().map(|(cg, _)| cg.dir_fd())
    }

    /// A TCP connection to `port` on the sandbox's loopback (the port proxy's way in).
    pub(crate) fn connect_tcp(&self, port: u16) -> std::io::Result<std::net::TcpStream> {
        super::net::connect_tcp(&self.net, port)
    }
}

/// The holder process: a pidfd (signals never hit a recycled pid) and its reaper thread.
struct Holder {
    pidfd: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The isolation of one sandbox.
pub(crate) struct Isolation {
    holder: Mutex<Option<Holder>>,
    /// The uplink of a sandbox with internet access.
    uplink: Option<Pasta>,
    holder_pid: Option<u32>,
    ns: Option<Arc<NsFds>>,
    ns_ino: Option<u64>,
    writable_root: bool,
    /// The sandbox's starter: commands start through it (`None`: they fork).
    zygote: Option<Arc<super::zygote::Zygote>>,
}

impl std::fmt::Debug for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolation")
            .field("holder_pid", &self.holder_pid)
            .field("writable_root", &self.writable_root)
            .finish_non_exhaustive()
    }
}

static DEGRADED: Once = Once::new();
static NO_TIMENS: Once = Once::new();

/// True when `E2B_LOCAL_NO_ISOLATION` is set (non-empty, not `0`).
pub(crate) fn opted_out() -> bool {
    std::env::var_os("E2B_LOCAL_NO_ISOLATION").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The boundary needs the host's root (namespaces, mounts, the id maps).
pub(crate) fn require_root() -> Result<(), BoundaryError> {
    check_denied(Step::Root)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(BoundaryError::new(
            Step::Root,
            std::io::Error::from_raw_os_error(libc::EPERM),
        ));
    }
    Ok(())
}

/// The `/dev/null` of the sandbox whose init is `holder`, as its root shows it: no link
/// followed at its end, never blocking nor becoming a controlling terminal, and only the
/// null device (1:3) is taken.
fn open_dev_null(holder: u32) -> Option<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/{holder}/root/dev/null"))
        .ok()?;
    let md = f.metadata().ok()?;
    (md.file_type().is_char_device() && md.rdev() == libc::makedev(1, 3)).then(|| f.into())
}

/// The inode of this process's namespace `kind` (`pid`, `net`, …).
fn own_ns(kind: &str) -> Option<u64> {
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// `monotonic -S N\nboottime -S N\n`: the clocks of a new time namespace start at zero
/// now (the negative offset of the current reading, as whole seconds plus nanoseconds).
fn time_offsets() -> Option<CString> {
    own_ns("time")?;
    let offset = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        if ts.tv_nsec == 0 {
            format!("-{} 0", ts.tv_sec)
        } else {
            format!("-{} {}", ts.tv_sec + 1, 1_000_000_000 - ts.tv_nsec)
        }
    };
    let text = format!(
        "monotonic {}\nboottime {}\n",
        offset(libc::CLOCK_MONOTONIC),
        offset(libc::CLOCK_BOOTTIME)
    );
    CString::new(text).ok()
}

/// A new time namespace whose clocks start at zero now, made by a short-lived helper
/// that `unshare`s it for its children: the emulator writes its offsets (before any
/// process entered it, as the kernel requires) and keeps it open. `None` (the caller
/// warns that the sandbox has the host's clocks) when the kernel has no time namespace.
/// The holder does not enter it (a process sharing our memory may not, and the holder
/// reads no clock); the sandbox's processes do, and see the holder's start (in
/// `/proc/1/stat`, shifted by their offsets) a moment after their clocks' zero.
fn new_time_ns() -> Option<OwnedFd> {
    let offsets = time_offsets()?;
    userns::in_new_namespaces(
        0,
        // SAFETY: one raw syscall in the helper.
        &|| unsafe {
            if libc::unshare(libc::CLONE_NEWTIME) != 0 {
                *libc::__errno_location()
            } else {
                0
            }
        },
        |pid| {
            std::fs::write(format!("/proc/{pid}/timens_offsets"), offsets.as_bytes())?;
            Ok(OwnedFd::from(std::fs::File::open(format!(
                "/proc/{pid}/ns/time_for_children"
            ))?))
        },
    )
    .ok()
}

/// A pipe on which the holder's `pre_exec` reports the [`Step`] that failed.
fn failure_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into an array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(errno());
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In a forked child building the boundary: write `step`'s index to the failure pipe,
/// then the index of the failing [`rootfs::Op`] when there is one; return `e`.
fn report(fd: libc::c_int, step: Step, op: Option<usize>, e: std::io::Error) -> std::io::Error {
    let mut msg = [0u8; 5];
    msg[0] = Step::ALL.iter().position(|s| *s == step).unwrap_or(0) as u8;
    let len = match op.and_then(|i| u32::try_from(i).ok()) {
        Some(i) => {
            msg[1..].copy_from_slice(&i.to_le_bytes());
            5
        }
        None => 1,
    };
    // SAFETY: bytes from a local to an fd opened before fork.
    unsafe { libc::write(fd, msg.as_ptr().cast(), len) };
    e
}

/// The step a forked child reported, if any, and the index of its failing op.
fn read_failure(fd: &OwnedFd) -> Option<(Step, Option<usize>)> {
    let mut msg = [0u8; 5];
    // SAFETY: reading into a local from a non-blocking pipe.
    let n = unsafe { libc::read(fd.as_raw_fd(), msg.as_mut_ptr().cast(), msg.len()) };
    if n < 1 {
        return None;
    }
    let step = Step::ALL.get(usize::from(msg[0])).copied()?;
    let op = (n == 5).then(|| u32::from_le_bytes([msg[1], msg[2], msg[3], msg[4]]) as usize);
    Some((step, op))
}

impl Isolation {
    /// No isolation (the explicit opt-out only): template paths are mapped under the
    /// sandbox root on the host.
    pub(crate) fn off() -> Isolation {
        DEGRADED.call_once(|| {
            tracing::warn!(
                "SANDBOX ISOLATION IS OFF (E2B_LOCAL_NO_ISOLATION / --no-isolation): sandboxes run as plain host processes with the emulator's rights; the host is not protected"
            );
        });
        Isolation {
            holder: Mutex::new(None),
            uplink: None,
            holder_pid: None,
            ns: None,
            ns_ino: None,
            writable_root: false,
            zygote: None,
        }
    }

    /// Create the holder process and its namespaces, or say which part of the boundary
    /// could not be built.
    pub(crate) fn start(spec: Spec) -> Result<Isolation, BoundaryError> {
        let Spec {
            layout,
            offline,
            ids,
            limits,
        } = spec;
        check_overlay(&layout)?;
        let parts = Parts::build(offline, ids, limits)?;
        Isolation::start_with(&layout, parts)
    }

    fn start_with(layout: &Layout, mut parts: Parts) -> Result<Isolation, BoundaryError> {
        if parts.mnt.is_none() {
            parts.mount(layout)?;
        }
        let mount_err = |e| BoundaryError::new(Step::MountNamespace, e);
        check_denied(Step::PidNamespace)?;
        check_denied(Step::UtsNamespace)?;
        // This boot's id, as a detached mount the holder attaches in the sandbox's /proc.
        // (Made before the parts are taken apart: an error here leaves nothing behind.)
        let boot_id = layout
            .boot_id
            .as_deref()
            .map(rootfs::detached_clone)
            .transpose()
            .map_err(mount_err)?;
        let proc_ops = rootfs::plan_proc(boot_id.as_ref().map(|fd| fd.as_raw_fd()));
        // The holder's pre_exec reports the step that failed here (one byte).
        let (fail_r, fail_w) = failure_pipe().map_err(mount_err)?;
        let fail_w_raw = fail_w.as_raw_fd();
        let missing = |what: &str| {
            BoundaryError::new(
                Step::NetworkNamespace,
                std::io::Error::other(format!("the parts lost their {what}")),
            )
        };
        let netns = parts
            .netns
            .take()
            .ok_or_else(|| missing("network namespace"))?;
        let mnt = parts.mnt.take().ok_or_else(|| missing("mount namespace"))?;
        let user = parts.user.take();
        let uplink = parts.uplink.take();
        let limits = Arc::new(parts.limits.take().ok_or_else(|| missing("limits"))?);
        let cg = parts.cg.take();
        let cgroup_ns = parts.cgroup_ns.take();
        let v2_applied = std::mem::take(&mut parts.v2_applied);
        let net_raw = netns.net.as_raw_fd();
        let mnt_raw = mnt.as_raw_fd();
        let cgroup_ns_raw = cgroup_ns.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let writable = layout.overlay.is_some();
        let time = new_time_ns();
        let parent = std::process::id();
        let holder_limits = limits.clone();
        let holder_cg = cg.clone();
        // The holder is spawned and reaped by a thread of its own, so PR_SET_PDEATHSIG
        // (which fires when the forking *thread* ends) kills it exactly when the emulator
        // dies, never earlier. The thread's PID namespace for children is a new one, so the
        // holder is its init.
        let (tx, rx) = mpsc::channel::<Result<(u32, OwnedFd), BoundaryError>>();
        let thread = std::thread::Builder::new()
            .name("envd-holder".into())
            .spawn(move || {
                let drop_cg = || {
                    if let Some(cg) = &holder_cg {
                        cgroup::remove(&cg.dir);
                    }
                    holder_limits.remove();
                };
                // SAFETY: unshare affects only this thread's PID namespace for children.
                if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
                    drop_cg();
                    let _ = tx.send(Err(BoundaryError::new(Step::PidNamespace, errno())));
                    return;
                }
                let cmd = super::spawn::Spawn {
                    argv: vec!["/bin/sleep".into(), "infinity".into()],
                    env: Vec::new(),
                    stdio: [
                        super::spawn::Io::Null,
                        super::spawn::Io::Null,
                        super::spawn::Io::Null,
                    ],
                };
                // Raw syscalls only, on data prepared before the clone.
                let setup = |join_cgroup: bool| -> std::io::Result<()> {
                    // SAFETY: raw syscalls in the forked child.
                    unsafe {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(errno());
                        }
                        // As init, reap like a real one: with SIGCHLD ignored (kept across
                        // exec) the kernel reaps every child of the holder at once, so the
                        // orphans reparented to it (escapees whose parent exited)
                        // do not stay zombies for the sandbox's life.
                        if libc::signal(libc::SIGCHLD, libc::SIG_IGN) == libc::SIG_ERR {
                            return Err(errno());
                        }
                        // The usual priority, whatever the thread that made the spare
                        // ran at (`spare::BACKGROUND_NICE`).
                        libc::setpriority(libc::PRIO_PROCESS, 0, 0);
                        // In a new PID namespace the parent is outside it: ppid reads 0.
                        let ppid = libc::getppid();
                        if !(ppid as u32 == parent || ppid == 0) {
                            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                        }
                        // The holder is in the groups its sandbox's processes are born
                        // in (the limit groups through `tasks`, the subtree from birth),
                        // so the kernel keeps their cgroup set while the sandbox lives
                        // and a command's start finds it instead of building it. Best
                        // effort: the limits hold on the processes either way (their
                        // worker threads joined the groups, or the sandbox has none).
                        let _ = holder_limits.join_self();
                        if join_cgroup && let Some(cg) = &holder_cg {
                            let _ = cg.join_self();
                        }
                        // Never the out-of-memory killer's pick when the memory group is
                        // full (as a real init): with only init left in the group, the
                        // sandbox would lose everything. Best effort: lowering it takes
                        // CAP_SYS_RESOURCE, which a root without it (some containers) lacks.
                        let adj = libc::open(
                            c"/proc/self/oom_score_adj".as_ptr(),
                            libc::O_WRONLY | libc::O_CLOEXEC,
                        );
                        if adj >= 0 {
                            libc::write(adj, c"-1000".as_ptr().cast(), 5);
                            libc::close(adj);
                        }
                        if libc::setns(net_raw, libc::CLONE_NEWNET) != 0 {
                            return Err(report(fail_w_raw, Step::NetworkNamespace, None, errno()));
                        }
                        // Its own host name, E2B's; owned by the host's user namespace
                        // like the others, so the sandbox's root cannot rename the host.
                        if libc::unshare(libc::CLONE_NEWUTS) != 0
                            || libc::sethostname(HOSTNAME.as_ptr().cast(), HOSTNAME.len()) != 0
                        {
                            return Err(report(fail_w_raw, Step::UtsNamespace, None, errno()));
                        }
                        // The cgroup namespace rooted at the sandbox's subtree.
                        if cgroup_ns_raw >= 0 {
                            libc::setns(cgroup_ns_raw, libc::CLONE_NEWCGROUP);
                        }
                        // The sandbox's root (built ahead, Parts::mount), and its /proc:
                        // a procfs is of the PID namespace of whoever mounts it.
                        if libc::setns(mnt_raw, libc::CLONE_NEWNS) != 0
                            || libc::chdir(c"/".as_ptr()) != 0
                        {
                            return Err(report(fail_w_raw, Step::MountNamespace, None, errno()));
                        }
                        rootfs::run(&proc_ops, None, true, -1)
                            .map_err(|(step, e, _)| report(fail_w_raw, step, None, e))
                    }
                };
                let born_in = holder_cg.as_ref().map(|cg| cg.dir_fd());
                // On our memory (`CLONE_VM | CLONE_VFORK`): no copy of the emulator's
                // page tables at every boot. Its setup joins no user or time namespace.
                let spawned = cmd
                    .prepare(None)
                    .and_then(|p| p.start(super::spawn::Via::SharedMemory, born_in, &setup))
                    .and_then(|child| {
                        let pidfd = child.pidfd()?;
                        Ok((child, pidfd))
                    });
                drop(fail_w);
                let (child, pidfd) = match spawned {
                    Ok(c) => c,
                    Err(e) => {
                        drop_cg();
                        let step = read_failure(&fail_r).map_or(Step::MountNamespace, |(s, _)| s);
                        let _ = tx.send(Err(BoundaryError::new(step, e)));
                        return;
                    }
                };
                let _ = tx.send(Ok((child.id(), pidfd)));
                let _ = child.wait_blocking();
                // The sandbox is gone: whatever is left in its subtree goes with it.
                drop_cg();
            })
            .map_err(|e| BoundaryError::new(Step::PidNamespace, e))?;
        let (pid, pidfd) = rx.recv().map_err(|_| {
            BoundaryError::new(
                Step::PidNamespace,
                std::io::Error::other("holder thread died"),
            )
        })??;
        // Attached in the holder's namespace by now (or the holder failed).
        drop(boot_id);
        let holder = Holder {
            pidfd,
            thread: Some(thread),
        };
        // Dropped on an error below: the holder is killed.
        let mut iso = Isolation {
            holder: Mutex::new(Some(holder)),
            uplink,
            holder_pid: Some(pid),
            ns: None,
            ns_ino: None,
            writable_root: writable,
            zygote: None,
        };
        // A namespace of the holder that differs from ours is the sandbox's own.
        let open = |kind: &str| -> std::io::Result<Option<(OwnedFd, u64)>> {
            let path = format!("/proc/{pid}/ns/{kind}");
            let ino = std::fs::metadata(&path)?.ino();
            if Some(ino) == own_ns(kind) {
                return Ok(None);
            }
            Ok(Some((OwnedFd::from(std::fs::File::open(&path)?), ino)))
        };
        let step = |s: Step| move |e| BoundaryError::new(s, e);
        let (mnt, ino) = open("mnt")
            .map_err(step(Step::MountNamespace))?
            .ok_or_else(|| {
                BoundaryError::new(Step::MountNamespace, std::io::Error::other("not entered"))
            })?;
        let pid_ns = Some(
            open("pid")
                .map_err(step(Step::PidNamespace))?
                .ok_or_else(|| {
                    BoundaryError::new(Step::PidNamespace, std::io::Error::other("not entered"))
                })?
                .0,
        );
        let entered = open("net").map_err(step(Step::NetworkNamespace))?;
        let want = std::fs::metadata(format!("/proc/self/fd/{net_raw}"))
            .map(|m| m.ino())
            .map_err(step(Step::NetworkNamespace))?;
        if entered.map(|(_, ino)| ino) != Some(want) {
            return Err(BoundaryError::new(
                Step::NetworkNamespace,
                std::io::Error::other("not entered"),
            ));
        }
        let net = netns.net;
        let (uts, _) = open("uts")
            .map_err(step(Step::UtsNamespace))?
            .ok_or_else(|| {
                BoundaryError::new(Step::UtsNamespace, std::io::Error::other("not entered"))
            })?;
        // Only when the holder really entered a cgroup namespace of its own (the subtree).
        let cgroup = match (cg, open("cgroup").ok().flatten()) {
            (Some(cg), Some((fd, _))) => Some((cg, fd)),
            _ => None,
        };
        // Sandbox processes join the subtree only with its namespace: without it, the
        // limits cgroup v2 set there do not hold.
        let unlimited = if cgroup.is_none() {
            v2_applied
        } else {
            Vec::new()
        };
        if time.is_none() {
            NO_TIMENS.call_once(|| {
                tracing::warn!(
                    "sandboxes share the host's clocks: no time namespace, uptime is the host's"
                );
            });
        }
        if let Some(p) = &iso.uplink {
            p.ready()
                .map_err(|e| BoundaryError::new(Step::UserModeNetwork, e))?;
        }
        let dev_null = open_dev_null(pid);
        let ns = Arc::new(NsFds {
            mnt,
            pid: pid_ns,
            net,
            uts,
            time,
            cgroup,
            user,
            limits,
            unlimited,
            dev_null,
        });
        // Best effort: without a starter, commands fork the emulator (slower, the same
        // boundary).
        iso.zygote = match super::zygote::Zygote::start(&ns) {
            Ok(z) => Some(Arc::new(z)),
            Err(e) => {
                tracing::debug!("sandbox starter not made ({e}); commands fork");
                None
            }
        };
        iso.ns = Some(ns);
        iso.ns_ino = Some(ino);
        Ok(iso)
    }

    /// False once a part died (the holder, the uplink's pasta): a spare not to be used.
    pub(crate) fn whole(&self) -> bool {
        let holder = self.holder.lock().ok().is_some_and(|h| {
            h.as_ref().is_none_or(|h| {
                exec_world_sys::supervise::pidfd_signal(h.pidfd.as_fd(), 0).unwrap_or(false)
            })
        });
        holder && self.uplink.as_ref().is_none_or(Pasta::running)
    }

    /// True when processes and file operations run in the private namespace.
    pub(crate) fn enabled(&self) -> bool {
        self.ns.is_some()
    }

    /// The sandbox's memory group's use (see [`Limits::memory_use`]); `None` without
    /// isolation or a memory group.
    pub(crate) fn memory_use(&self) -> Option<super::limits::MemoryUse> {
        self.ns.as_ref()?.limits.memory_use()
    }

    /// The CPU time the sandbox's processes used (its cgroup subtree's), in
    /// microseconds; `None` without isolation or a subtree.
    pub(crate) fn cpu_usage_usec(&self) -> Option<u64> {
        self.ns.as_ref()?.cgroup.as_ref()?.0.cpu_usage_usec()
    }

    /// The template limits the host could not apply (`cpu`, `memory`, `pids`).
    pub(crate) fn missing_limits(&self) -> Vec<&'static str> {
        self.ns
            .as_ref()
            .map(|ns| {
                let mut m = ns.limits.missing.clone();
                m.extend(ns.unlimited.iter().copied());
                m
            })
            .unwrap_or_else(|| vec!["cpu", "memory", "pids"])
    }

    /// True when the sandbox's root is the writable overlay.
    pub(crate) fn writable_root(&self) -> bool {
        self.writable_root
    }

    /// The namespaces processes join.
    pub(crate) fn ns_fds(&self) -> Option<Arc<NsFds>> {
        self.ns.clone()
    }

    /// The sandbox's starter, when it has one.
    pub(crate) fn zygote(&self) -> Option<Arc<super::zygote::Zygote>> {
        self.zygote.clone()
    }

    /// Pids of every process living in the namespace except the holder.
    pub(crate) fn members(&self) -> Vec<i32> {
        let Some(ino) = self.ns_ino else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me
                || Some(pid) == self.holder_pid
                || self.zygote.as_ref().is_some_and(|z| z.pid() == pid)
            {
                continue;
            }
            if let Ok(md) = std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
                && md.ino() == ino
            {
                out.push(pid as i32);
            }
        }
        out
    }

    /// Kill the holder: as init of the PID namespace its death kills every sandbox
    /// process. Not awaited: the dying init waits until the emulator has reaped its own
    /// children of the namespace, which needs the caller's runtime to keep running; the
    /// holder's thread reaps it.
    pub(crate) fn shutdown(&self) {
        let holder = self.holder.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = holder {
            let _ = exec_world_sys::supervise::pidfd_signal(h.pidfd.as_fd(), libc::SIGKILL);
            drop(h.thread);
        }
        if let Some(z) = &self.zygote {
            z.stop();
        }
        if let Some(p) = &self.uplink {
            p.stop();
        }
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Capabilities no sandbox process keeps, root and `sudo` included: with them root in the
/// sandbox could reach the host anyway (mount a fresh filesystem and `mknod` the host's
/// disk, load a kernel module, open host files by handle, set the host's clock, change the
/// host's network, use raw I/O, BPF or the kernel log).
const DROPPED_CAPS: [libc::c_int; 13] = [
    21, // CAP_SYS_ADMIN
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    27, // CAP_MKNOD
    2,  // CAP_DAC_READ_SEARCH (open_by_handle_at)
    25, // CAP_SYS_TIME
    12, // CAP_NET_ADMIN
    22, // CAP_SYS_BOOT
    33, // CAP_MAC_ADMIN
    32, // CAP_MAC_OVERRIDE
    34, // CAP_SYSLOG
    38, // CAP_PERFMON
    39, // CAP_BPF
];

/// In a forked child: join the sandbox's cgroup subtree (when `join_cgroup`: a child not
/// born there, see [`NsFds::cgroup_dir`]), then [`RawNs::join_rest`] (its time and user
/// namespaces, the bounding set). The rest (limit groups, mount, PID, network, UTS and
/// cgroup namespaces) the child has from the forking [`FsWorker`] thread.
pub(crate) fn join_in_child(ns: &NsFds, join_cgroup: bool) -> std::io::Result<()> {
    if let Some((cg, _)) = &ns.cgroup {
        if join_cgroup {
            cg.join_self()?;
        }
    }
    ns.raw().join_rest()
}

/// The pid of host process `host_pid` in its innermost PID namespace (the sandbox's), from
/// the `NSpid` line of its status; `host_pid` itself outside a namespace or once it is gone.
pub(crate) fn ns_pid(host_pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{host_pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|v| v.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(host_pid)
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads that run envd's own file operations inside the sandbox's namespace.
pub(crate) struct FsWorker {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
}

impl std::fmt::Debug for FsWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FsWorker")
    }
}

impl FsWorker {
    /// Start `n` threads; with `ns` they first join its mount, network, UTS and cgroup
    /// namespaces and its limit groups, and make its PID namespace the one of the
    /// processes they fork (see [`join_in_child`] for the rest). A thread counts in the
    /// sandbox's process limit and its CPU time is the sandbox's. Of memory, only kernel
    /// objects it allocates (file operations on the sandbox's behalf) are charged to the
    /// sandbox: cgroup v1 charges a process's pages to its leader's group, and the
    /// out-of-memory killer of a group picks among the leaders in it, never a thread of
    /// the emulator.
    pub(crate) fn start(ns: Option<Arc<NsFds>>, n: usize) -> std::io::Result<FsWorker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n {
            let rx = rx.clone();
            let ns = ns.clone();
            let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
            std::thread::Builder::new()
                .name(format!("envd-fs-{i}"))
                .spawn(move || {
                    // The usual priority, whatever the thread that made this one (a
                    // spare's builder) ran at: the sandbox's processes it forks keep it.
                    // SAFETY: setpriority on this thread only.
                    unsafe {
                        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 0)
                    };
                    if let Some(ns) = ns {
                        // SAFETY: unshare affects only this thread's fs context, which
                        // `join_shared` then moves; the thread stays in the host's user
                        // namespace, with the host root's rights.
                        let r = if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
                            Err(errno())
                        } else {
                            ns.raw().join_shared()
                        };
                        let failed = r.is_err();
                        let _ = ready_tx.send(r);
                        if failed {
                            return;
                        }
                    } else {
                        let _ = ready_tx.send(Ok(()));
                    }
                    loop {
                        let job = match rx.lock() {
                            Ok(guard) => guard.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })?;
            ready_rx
                .recv()
                .map_err(|_| std::io::Error::other("fs worker thread died"))??;
        }
        Ok(FsWorker {
            tx: Mutex::new(Some(tx)),
        })
    }

    /// Run `f` on a worker thread and await its result.
    pub(crate) async fn run<R, F>(&self, f: F) -> std::io::Result<R>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        {
            let guard = self
                .tx
                .lock()
                .map_err(|_| std::io::Error::other("fs worker poisoned"))?;
            let sender = guard
                .as_ref()
                .ok_or_else(|| std::io::Error::other("sandbox is gone"))?;
            sender
                .send(job)
                .map_err(|_| std::io::Error::other("fs worker stopped"))?;
        }
        rx.await
            .map_err(|_| std::io::Error::other("fs worker dropped the job"))
    }

    /// Stop the threads once their queue is drained.
    pub(crate) fn shutdown(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
    }
}
