//! Per-sandbox isolation: the holder process and its namespaces.
//!
//! As root, a long-lived *holder* process (`sleep infinity`, started with SIGCHLD ignored
//! so the kernel reaps the orphans reparented to it, as a real init does) is the sandbox's
//! init: it is PID 1 of a new PID namespace (sandbox processes cannot see or signal host
//! processes, and when the holder dies, at the emulator's death included, the kernel kills every
//! process of the sandbox), it has a new time namespace whose monotonic and boot clocks
//! start at the boot (`/proc/uptime` counts from the boot), for sandboxes without internet
//! access a new network namespace with only loopback up, and a new mount namespace whose
//! root [`rootfs`](super::rootfs) builds in its `pre_exec` before `pivot_root`.
//!
//! Sandbox processes are forked from an [`FsWorker`] thread whose PID namespace for
//! children is the sandbox's, and join the other namespaces with `setns` in their
//! `pre_exec`; envd's own file operations run on the same worker threads, which joined the
//! mount namespace, so they see exactly what the processes see (absolute symlinks and
//! `..` resolve inside the sandbox's root, never on the host).
//!
//! Without root (or when the namespace cannot be built, or with `E2B_LOCAL_NO_ISOLATION`
//! set) isolation is off: a warning is logged once, template paths are mapped to host
//! paths under the sandbox root and everything else keeps working. A namespace kind the
//! kernel refuses (PID, time) degrades alone, with a warning naming it.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Once, mpsc};

use super::cgroup::{self, SandboxCgroup};
use super::rootfs::{self, Layout};

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// What one sandbox's isolation is made of (see [`Layout`]), plus its network.
pub(crate) struct Spec {
    /// The root filesystem.
    pub layout: Layout,
    /// Files bound over host paths in read-only mode only (`/etc/passwd`, `/etc/group`;
    /// the writable mode has them in the upper layer).
    pub read_only_extra: Vec<(PathBuf, PathBuf)>,
    /// No internet access: a network namespace with only loopback.
    pub offline: bool,
}

/// The namespaces of a sandbox, opened from the holder's `/proc/<pid>/ns`.
pub(crate) struct NsFds {
    mnt: OwnedFd,
    /// `None` when the kernel refused a PID namespace.
    pid: Option<OwnedFd>,
    /// `None` for sandboxes with internet access (the host's network).
    net: Option<OwnedFd>,
    /// `None` when the kernel has no time namespaces.
    time: Option<OwnedFd>,
    /// The sandbox's cgroup subtree and its cgroup namespace: a process joins the subtree,
    /// then the namespace (`None` without a usable cgroup2 on the host).
    cgroup: Option<(Arc<SandboxCgroup>, OwnedFd)>,
}

/// The holder process: a pidfd (signals never hit a recycled pid) and its reaper thread.
struct Holder {
    pidfd: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The isolation of one sandbox.
pub(crate) struct Isolation {
    holder: Mutex<Option<Holder>>,
    holder_pid: Option<u32>,
    ns: Option<Arc<NsFds>>,
    ns_ino: Option<u64>,
    writable_root: bool,
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
static NO_PIDNS: Once = Once::new();
static NO_TIMENS: Once = Once::new();
static NO_OVERLAY: Once = Once::new();

/// True when this process may create mount namespaces (root with CAP_SYS_ADMIN).
pub(crate) fn can_isolate() -> bool {
    if std::env::var_os("E2B_LOCAL_NO_ISOLATION").is_some() {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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

/// In the holder's `pre_exec`: a new time namespace whose clocks start at zero. Failing
/// is not fatal (the caller sees the namespace is the host's and says so).
fn enter_new_time(offsets: &CString) {
    // SAFETY: raw syscalls in the forked child on data prepared before fork.
    unsafe {
        if libc::unshare(libc::CLONE_NEWTIME) != 0 {
            return;
        }
        let fd = libc::open(
            c"/proc/self/timens_offsets".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, offsets.as_ptr().cast(), offsets.as_bytes().len());
            libc::close(fd);
        }
    }
}

/// In the holder's `pre_exec`: a new network namespace with loopback up.
fn enter_new_net() -> std::io::Result<()> {
    // SAFETY: raw syscalls in the forked child; the ifreq lives on this stack.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(errno());
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr);
        if rc == 0 {
            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr);
        }
        let err = errno();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}

impl Isolation {
    /// No isolation: template paths are mapped under the sandbox root on the host.
    pub(crate) fn off(reason: &str) -> Isolation {
        DEGRADED.call_once(|| {
            tracing::warn!(
                "sandbox isolation is off ({reason}): template paths map to directories under each sandbox root, users are not switched and the host is not protected"
            );
        });
        Isolation {
            holder: Mutex::new(None),
            holder_pid: None,
            ns: None,
            ns_ino: None,
            writable_root: false,
        }
    }

    /// Create the holder process and its namespaces: with the writable overlay root, or
    /// (when the overlay cannot be mounted) the read-only root.
    pub(crate) fn start(spec: Spec) -> std::io::Result<Isolation> {
        let Spec {
            layout,
            read_only_extra,
            offline,
        } = spec;
        if layout.overlay.is_some() {
            match Isolation::start_with(&layout, offline) {
                Ok(iso) => return Ok(iso),
                Err(e) => NO_OVERLAY.call_once(|| {
                    tracing::warn!(
                        "sandbox roots are read-only: the overlay root could not be mounted ({e})"
                    );
                }),
            }
        }
        let mut mapped = layout.mapped;
        mapped.extend(read_only_extra);
        let ro = Layout {
            mapped,
            overlay: None,
            ..layout
        };
        Isolation::start_with(&ro, offline)
    }

    fn start_with(layout: &Layout, offline: bool) -> std::io::Result<Isolation> {
        std::fs::create_dir_all(&layout.newroot)?;
        let writable = layout.overlay.is_some();
        let nr = rootfs::cstr(&layout.newroot);
        let offsets = time_offsets();
        let parent = std::process::id();
        let layout = layout.clone();
        let cg = SandboxCgroup::create().map(Arc::new);
        let holder_cg = cg.clone();
        // The holder is spawned and reaped by a thread of its own, so PR_SET_PDEATHSIG
        // (which fires when the forking *thread* ends) kills it exactly when the emulator
        // dies, never earlier. The thread's PID namespace for children is a new one, so the
        // holder is its init.
        let (tx, rx) = mpsc::channel::<std::io::Result<(u32, OwnedFd)>>();
        let thread = std::thread::Builder::new()
            .name("envd-holder".into())
            .spawn(move || {
                // SAFETY: unshare affects only this thread's PID namespace for children.
                let fresh_proc = unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0;
                if !fresh_proc {
                    let e = errno();
                    NO_PIDNS.call_once(|| {
                        tracing::warn!(
                            "sandboxes share the host's PID namespace ({e}): sandbox root sees host processes"
                        );
                    });
                }
                let drop_cg = || {
                    if let Some(cg) = &holder_cg {
                        cgroup::remove(&cg.dir);
                    }
                };
                let ops = match rootfs::plan(&Layout {
                    fresh_proc,
                    cgroup2: holder_cg.is_some(),
                    ..layout
                }) {
                    Ok(ops) => ops,
                    Err(e) => {
                        drop_cg();
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let pre_cg = holder_cg.clone();
                let mut cmd = Command::new("/bin/sleep");
                cmd.arg("infinity")
                    .env_clear()
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // SAFETY: the closure performs only raw syscalls on data prepared before fork.
                unsafe {
                    cmd.pre_exec(move || {
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
                        // In a new PID namespace the parent is outside it: ppid reads 0.
                        let ppid = libc::getppid();
                        if !(ppid as u32 == parent || (fresh_proc && ppid == 0)) {
                            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                        }
                        if let Some(off) = &offsets {
                            enter_new_time(off);
                        }
                        if offline {
                            enter_new_net()?;
                        }
                        // The sandbox's cgroup subtree, then a cgroup namespace rooted there.
                        let cgroup_ns = pre_cg.as_ref().is_some_and(|cg| {
                            cg.join_self().is_ok() && libc::unshare(libc::CLONE_NEWCGROUP) == 0
                        });
                        rootfs::execute(&ops, &nr, !writable, cgroup_ns)
                    });
                }
                let mut child: Child = match cmd.spawn() {
                    Ok(c) => c,
                    Err(e) => {
                        drop_cg();
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let pid = child.id();
                // SAFETY: pidfd_open on our own unreaped child.
                let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
                if raw < 0 {
                    let e = errno();
                    let _ = child.kill();
                    let _ = child.wait();
                    drop_cg();
                    let _ = tx.send(Err(e));
                    return;
                }
                // SAFETY: a fresh fd we own.
                let pidfd = unsafe { OwnedFd::from_raw_fd(raw as libc::c_int) };
                let _ = tx.send(Ok((pid, pidfd)));
                let _ = child.wait();
                // The sandbox is gone: whatever is left in its subtree goes with it.
                drop_cg();
            })?;
        let (pid, pidfd) = rx
            .recv()
            .map_err(|_| std::io::Error::other("holder thread died"))??;
        let holder = Holder {
            pidfd,
            thread: Some(thread),
        };
        // Dropped on an error below: the holder is killed.
        let mut iso = Isolation {
            holder: Mutex::new(Some(holder)),
            holder_pid: Some(pid),
            ns: None,
            ns_ino: None,
            writable_root: writable,
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
        let (mnt, ino) = open("mnt")?.ok_or_else(|| std::io::Error::other("no mount namespace"))?;
        let pid_ns = open("pid")?.map(|(fd, _)| fd);
        let net = open("net")?.map(|(fd, _)| fd);
        if offline && net.is_none() {
            return Err(std::io::Error::other("no network namespace"));
        }
        let time = open("time")?.map(|(fd, _)| fd);
        // Only when the holder really entered a cgroup namespace of its own (the subtree).
        let cgroup = match (cg, open("cgroup")?) {
            (Some(cg), Some((fd, _))) => Some((cg, fd)),
            _ => None,
        };
        if time.is_none() {
            NO_TIMENS.call_once(|| {
                tracing::warn!(
                    "sandboxes share the host's clocks: no time namespace, uptime is the host's"
                );
            });
        }
        iso.ns = Some(Arc::new(NsFds {
            mnt,
            pid: pid_ns,
            net,
            time,
            cgroup,
        }));
        iso.ns_ino = Some(ino);
        Ok(iso)
    }

    /// True when processes and file operations run in the private namespace.
    pub(crate) fn enabled(&self) -> bool {
        self.ns.is_some()
    }

    /// True when the sandbox's root is the writable overlay.
    pub(crate) fn writable_root(&self) -> bool {
        self.writable_root
    }

    /// The namespaces processes join.
    pub(crate) fn ns_fds(&self) -> Option<Arc<NsFds>> {
        self.ns.clone()
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
            if pid == me || Some(pid) == self.holder_pid {
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
            // SAFETY: pidfd_send_signal on a pidfd we own.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    h.pidfd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
            drop(h.thread);
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

/// Join the sandbox's cgroup subtree and its cgroup, time, network and mount namespaces in
/// a child's `pre_exec`, then drop [`DROPPED_CAPS`] from its bounding set (raw syscalls
/// only; the PID namespace comes from the forking [`FsWorker`] thread).
pub(crate) fn join_in_child(ns: &NsFds) -> std::io::Result<()> {
    if let Some((cg, fd)) = &ns.cgroup {
        cg.join_self()?;
        // SAFETY: setns on an fd opened before fork.
        if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWCGROUP) } != 0 {
            return Err(errno());
        }
    }
    let joins = [
        (ns.time.as_ref(), libc::CLONE_NEWTIME),
        (ns.net.as_ref(), libc::CLONE_NEWNET),
        (Some(&ns.mnt), libc::CLONE_NEWNS),
    ];
    for (fd, kind) in joins {
        if let Some(fd) = fd {
            // SAFETY: setns on an fd opened before fork.
            if unsafe { libc::setns(fd.as_raw_fd(), kind) } != 0 {
                return Err(errno());
            }
        }
    }
    for cap in DROPPED_CAPS {
        // SAFETY: prctl on this (forked) process only. EINVAL: a capability this kernel
        // does not know, nothing to drop.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 && errno().raw_os_error() != Some(libc::EINVAL) {
            return Err(errno());
        }
    }
    Ok(())
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
    /// Start `n` threads; with `ns` they first join its mount namespace and make its PID
    /// namespace the one of the processes they fork ([`FsWorker::spawn`]).
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
                    if let Some(ns) = ns {
                        let pid_ns = ns.pid.as_ref().map_or(-1, |fd| fd.as_raw_fd());
                        // SAFETY: unshare/setns affect only this thread's fs context and
                        // the PID namespace of its future children.
                        let r = unsafe {
                            if libc::unshare(libc::CLONE_FS) != 0
                                || libc::setns(ns.mnt.as_raw_fd(), libc::CLONE_NEWNS) != 0
                                || (pid_ns >= 0 && libc::setns(pid_ns, libc::CLONE_NEWPID) != 0)
                            {
                                Err(errno())
                            } else {
                                Ok(())
                            }
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
