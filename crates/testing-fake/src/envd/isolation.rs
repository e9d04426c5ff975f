//! Per-sandbox isolation: a private mount namespace that shows the sandbox tree at the
//! template's paths, the template's `/etc/passwd` and `/etc/group`, and the rest of the host
//! read-only.
//!
//! As root, a long-lived *holder* process (`sleep infinity`) is created in a new mount
//! namespace; in its `pre_exec` it builds a new root on a tmpfs (host entries bind-mounted
//! read-only, the template's paths bind-mounted from the sandbox tree), `pivot_root`s into
//! it and drops the old root. Sandbox processes join with `setns` on
//! `/proc/<holder>/ns/mnt`; envd's own file operations run on [`FsWorker`] threads that
//! joined the same namespace, so they see exactly what the processes see (absolute
//! symlinks included). Without root (or when the namespace cannot be built, or with
//! `E2B_LOCAL_NO_ISOLATION` set) isolation is off: a warning is logged once, template paths
//! are mapped to host paths under the sandbox root and everything else keeps working.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Once, mpsc};

/// One step of building the new root, executed in the holder's `pre_exec`.
enum Op {
    Tmpfs(CString, &'static std::ffi::CStr),
    Mkdir(CString),
    Touch(CString),
    Symlink(CString, CString),
    Bind(CString, CString),
    RemountRo(CString, libc::c_ulong),
    Chmod(CString, libc::mode_t),
}

/// A mount point of the host with the flags a read-only remount must keep.
struct HostMount {
    path: PathBuf,
    flags: libc::c_ulong,
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &s[i + 1..i + 4];
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn host_mounts() -> Vec<HostMount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let path = unescape_mountinfo(fields.get(4)?);
            let opts = fields.get(5)?;
            let mut flags = 0;
            for o in opts.split(',') {
                flags |= match o {
                    "nosuid" => libc::MS_NOSUID,
                    "nodev" => libc::MS_NODEV,
                    "noexec" => libc::MS_NOEXEC,
                    "noatime" => libc::MS_NOATIME,
                    "nodiratime" => libc::MS_NODIRATIME,
                    "relatime" => libc::MS_RELATIME,
                    _ => 0,
                };
            }
            Some(HostMount {
                path: PathBuf::from(path),
                flags,
            })
        })
        .collect()
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Paths whose host mounts stay writable (process info and devices; `/proc/sys` is made
/// read-only separately, `/dev/shm` gets a private tmpfs).
fn is_special(p: &Path) -> bool {
    ["/proc", "/dev"].iter().any(|s| p == Path::new(s))
}

struct Planner<'a> {
    newroot: PathBuf,
    /// (sandbox path, host source) of the sandbox-backed paths.
    mapped: &'a [(PathBuf, PathBuf)],
    mounts: Vec<HostMount>,
    ops: Vec<Op>,
}

impl Planner<'_> {
    fn nr(&self, p: &Path) -> PathBuf {
        self.newroot.join(p.strip_prefix("/").unwrap_or(p))
    }

    /// True when a mapped path lies strictly below `dir` and is missing on the host, so
    /// `dir` cannot be bound wholesale.
    fn must_split(&self, dir: &Path) -> bool {
        self.mapped
            .iter()
            .any(|(m, _)| m.starts_with(dir) && m != dir && std::fs::symlink_metadata(m).is_err())
    }

    fn bind_ro(&mut self, host: &Path, is_dir: bool) {
        let target = self.nr(host);
        if is_dir {
            self.ops.push(Op::Mkdir(cstr(&target)));
        } else {
            self.ops.push(Op::Touch(cstr(&target)));
        }
        self.ops.push(Op::Bind(cstr(host), cstr(&target)));
        if is_special(host) {
            return;
        }
        // Read-only: the bound mount and every host mount below it.
        let subs: Vec<(PathBuf, libc::c_ulong)> = self
            .mounts
            .iter()
            .filter(|m| m.path.starts_with(host))
            .map(|m| (self.nr(&m.path), m.flags))
            .collect();
        let own_flags = self
            .mounts
            .iter()
            .filter(|m| host.starts_with(&m.path))
            .max_by_key(|m| m.path.as_os_str().len())
            .map_or(0, |m| m.flags);
        self.ops.push(Op::RemountRo(cstr(&target), own_flags));
        for (sub, flags) in subs {
            if sub != target {
                self.ops.push(Op::RemountRo(cstr(&sub), flags));
            }
        }
    }

    fn build(&mut self, dir: &Path) {
        let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        // Mapped paths (or their missing ancestors) directly below `dir`.
        for (m, _) in self.mapped {
            if let Ok(rest) = m.strip_prefix(dir)
                && let Some(first) = rest.components().next()
            {
                let child = dir.join(first);
                if !children.contains(&child) {
                    children.push(child);
                }
            }
        }
        children.sort();
        for child in children {
            if self.mapped.iter().any(|(m, _)| *m == child) {
                // A mount point for the sandbox tree, bound later.
                let is_file = std::fs::metadata(
                    self.mapped
                        .iter()
                        .find(|(m, _)| *m == child)
                        .map(|(_, src)| src.clone())
                        .unwrap_or_default(),
                )
                .map(|m| m.is_file())
                .unwrap_or(false);
                let target = cstr(&self.nr(&child));
                self.ops.push(if is_file {
                    Op::Touch(target)
                } else {
                    Op::Mkdir(target)
                });
                continue;
            }
            match std::fs::symlink_metadata(&child) {
                Ok(md) if md.file_type().is_symlink() => {
                    if let Ok(t) = std::fs::read_link(&child) {
                        self.ops.push(Op::Symlink(cstr(&t), cstr(&self.nr(&child))));
                    }
                }
                Ok(md) if md.is_dir() => {
                    if self.must_split(&child) {
                        self.ops.push(Op::Mkdir(cstr(&self.nr(&child))));
                        self.build(&child);
                    } else {
                        self.bind_ro(&child, true);
                    }
                }
                Ok(_) => self.bind_ro(&child, false),
                Err(_) => {
                    // Missing on the host: an intermediate directory of a mapped path.
                    self.ops.push(Op::Mkdir(cstr(&self.nr(&child))));
                    self.build(&child);
                }
            }
        }
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Run the plan. Called in the holder's `pre_exec`: raw syscalls only, no allocation.
fn execute(ops: &[Op], newroot: &CString) -> std::io::Result<()> {
    // SAFETY: plain syscalls on NUL-terminated strings prepared before fork.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(errno());
        }
        let root = c"/";
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(errno());
        }
        let tmpfs = c"tmpfs";
        for op in ops {
            let rc = match op {
                Op::Tmpfs(p, opts) => libc::mount(
                    tmpfs.as_ptr(),
                    p.as_ptr(),
                    tmpfs.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ),
                Op::Mkdir(p) => {
                    let rc = libc::mkdir(p.as_ptr(), 0o755);
                    if rc != 0 && *libc::__errno_location() == libc::EEXIST {
                        0
                    } else {
                        rc
                    }
                }
                Op::Touch(p) => {
                    let fd = libc::open(
                        p.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                        0
                    } else if *libc::__errno_location() == libc::EEXIST {
                        0
                    } else {
                        fd
                    }
                }
                Op::Symlink(t, p) => libc::symlink(t.as_ptr(), p.as_ptr()),
                Op::Bind(src, dst) => libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ),
                Op::RemountRo(p, flags) => {
                    let rc = libc::mount(
                        std::ptr::null(),
                        p.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
                        std::ptr::null(),
                    );
                    // Mounts hidden below a sandbox path or vanished: nothing to protect.
                    if rc != 0 && *libc::__errno_location() == libc::ENOENT {
                        0
                    } else {
                        rc
                    }
                }
                Op::Chmod(p, mode) => libc::chmod(p.as_ptr(), *mode),
            };
            if rc != 0 {
                return Err(errno());
            }
        }
        // The tmpfs root itself becomes read-only, then it replaces `/`.
        if libc::mount(
            std::ptr::null(),
            newroot.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ) != 0
        {
            return Err(errno());
        }
        if libc::chdir(newroot.as_ptr()) != 0 {
            return Err(errno());
        }
        let dot = c".";
        if libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) != 0 {
            return Err(errno());
        }
        if libc::umount2(dot.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(errno());
        }
        if libc::chdir(root.as_ptr()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
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
    ns_fd: Option<Arc<OwnedFd>>,
    ns_ino: Option<u64>,
}

impl std::fmt::Debug for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolation")
            .field("holder_pid", &self.holder_pid)
            .finish_non_exhaustive()
    }
}

static DEGRADED: Once = Once::new();

/// True when this process may create mount namespaces (root with CAP_SYS_ADMIN).
pub(crate) fn can_isolate() -> bool {
    if std::env::var_os("E2B_LOCAL_NO_ISOLATION").is_some() {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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
            ns_fd: None,
            ns_ino: None,
        }
    }

    /// Create the holder process and its namespace. `mapped` = (sandbox path, host source).
    pub(crate) fn start(
        newroot: &Path,
        mapped: &[(PathBuf, PathBuf)],
    ) -> std::io::Result<Isolation> {
        std::fs::create_dir_all(newroot)?;
        let mut planner = Planner {
            newroot: newroot.to_path_buf(),
            mapped,
            mounts: host_mounts(),
            ops: Vec::new(),
        };
        planner.ops.push(Op::Tmpfs(cstr(newroot), c"mode=0755"));
        planner.build(Path::new("/"));
        let mut sorted: Vec<&(PathBuf, PathBuf)> = mapped.iter().collect();
        sorted.sort_by_key(|(m, _)| m.components().count());
        for (m, src) in sorted {
            planner.ops.push(Op::Bind(cstr(src), cstr(&planner.nr(m))));
        }
        // Kernel knobs read-only, shared memory private, like a container runtime does.
        let proc_sys = planner.nr(Path::new("/proc/sys"));
        if Path::new("/proc/sys").is_dir() {
            planner.ops.push(Op::Bind(cstr(&proc_sys), cstr(&proc_sys)));
            planner.ops.push(Op::RemountRo(
                cstr(&proc_sys),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            ));
        }
        if Path::new("/dev/shm").is_dir() {
            planner.ops.push(Op::Tmpfs(
                cstr(&planner.nr(Path::new("/dev/shm"))),
                c"mode=1777",
            ));
        }
        planner.ops.push(Op::Chmod(cstr(newroot), 0o755));
        let ops = planner.ops;
        let nr = cstr(newroot);
        let parent = std::process::id();
        // The holder is spawned and reaped by a thread of its own, so PR_SET_PDEATHSIG
        // (which fires when the forking *thread* ends) kills it exactly when the emulator
        // dies, never earlier.
        let (tx, rx) = mpsc::channel::<std::io::Result<(u32, OwnedFd)>>();
        let thread = std::thread::Builder::new()
            .name("envd-holder".into())
            .spawn(move || {
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
                        if libc::getppid() as u32 != parent {
                            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                        }
                        execute(&ops, &nr)
                    });
                }
                let mut child: Child = match cmd.spawn() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let pid = child.id();
                // SAFETY: pidfd_open on our own unreaped child.
                let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
                if raw < 0 {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = tx.send(Err(errno()));
                    return;
                }
                // SAFETY: a fresh fd we own.
                let pidfd = unsafe { OwnedFd::from_raw_fd(raw as libc::c_int) };
                let _ = tx.send(Ok((pid, pidfd)));
                let _ = child.wait();
            })?;
        let (pid, pidfd) = rx
            .recv()
            .map_err(|_| std::io::Error::other("holder thread died"))??;
        let holder = Mutex::new(Some(Holder {
            pidfd,
            thread: Some(thread),
        }));
        let ns_path = format!("/proc/{pid}/ns/mnt");
        let file = std::fs::File::open(&ns_path)?;
        let ino = std::fs::metadata(&ns_path).map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        })?;
        Ok(Isolation {
            holder,
            holder_pid: Some(pid),
            ns_fd: Some(Arc::new(OwnedFd::from(file))),
            ns_ino: Some(ino),
        })
    }

    /// True when processes and file operations run in the private namespace.
    pub(crate) fn enabled(&self) -> bool {
        self.ns_fd.is_some()
    }

    /// The namespace fd processes join.
    pub(crate) fn ns_fd(&self) -> Option<Arc<OwnedFd>> {
        self.ns_fd.clone()
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
            use std::os::unix::fs::MetadataExt;
            if let Ok(md) = std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
                && md.ino() == ino
            {
                out.push(pid as i32);
            }
        }
        out
    }

    /// Kill the holder (the namespace disappears with its last member).
    pub(crate) fn shutdown(&self) {
        let holder = self.holder.lock().ok().and_then(|mut h| h.take());
        if let Some(mut h) = holder {
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
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Join the namespace in a child's `pre_exec` (raw syscalls only).
pub(crate) fn join_in_child(ns_fd: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns on an fd opened before fork.
    if unsafe { libc::setns(ns_fd, libc::CLONE_NEWNS) } != 0 {
        return Err(errno());
    }
    Ok(())
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
    /// Start `n` threads; with `ns` they first join that mount namespace.
    pub(crate) fn start(ns: Option<Arc<OwnedFd>>, n: usize) -> std::io::Result<FsWorker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n {
            let rx = rx.clone();
            let ns = ns.clone();
            let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
            std::thread::Builder::new()
                .name(format!("envd-fs-{i}"))
                .spawn(move || {
                    if let Some(fd) = ns {
                        // SAFETY: unshare/setns affect only this thread's fs context.
                        let r = unsafe {
                            if libc::unshare(libc::CLONE_FS) != 0
                                || libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNS) != 0
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
