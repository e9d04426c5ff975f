//! The sandbox's root filesystem: planned in the emulator, built in a fresh mount
//! namespace by a short-lived child ([`execute`]), then `pivot_root`ed into; the sandbox's
//! init mounts its `/proc` ([`plan_proc`]) when it joins that namespace (a procfs belongs
//! to the PID namespace of whoever mounts it).
//!
//! Writable mode (the default as root): an overlay of the host's root filesystem (under
//! the allowlist mask) or of the template's own root (`e2b-local --template-root`, no
//! mask: the tree is the whole system) with the sandbox's own upper layer, so writes
//! anywhere land in that sandbox only and vanish with it. The host's other mounts (`/sys`, …) are bound read-only on top, the template's
//! paths (`/home`, `/tmp`, …) come from the sandbox tree, `/dev` is a private tmpfs with
//! the harmless device nodes only and a devpts instance of its own, `/proc` is a fresh procfs of the sandbox's PID namespace
//! (`/proc/sys` read-only, the per-boot `boot_id` bound over the host's, the host-wide
//! knobs masked), and the emulator's own state directory is hidden.
//!
//! Read-only mode (fallback when the overlay cannot be mounted, e.g. the sandbox root lies
//! on a filesystem overlayfs refuses as an upper layer): a tmpfs root with every host
//! entry bound read-only, as before the overlay existed.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::allowlist::MaskEntry;
use super::isolation::Step;

/// One step of building the new root, executed in the holder's `pre_exec`.
pub(crate) enum Op {
    Overlay(CString, CString),
    /// An overlayfs whiteout (a 0/0 character device).
    Whiteout(CString),
    /// Mark a directory opaque for overlayfs.
    Opaque(CString),
    /// chown a path.
    Chown(CString, libc::uid_t, libc::gid_t),
    /// A read-only, idmapped (with the sandbox's user namespace) clone of the mount at
    /// the first path (the host's root, or a template's root tree; not the mounts below
    /// it), attached at the second: the system files, host uid 0's owned by root inside.
    IdmappedTree(CString, CString),
    Tmpfs(CString, &'static CStr),
    Proc(CString),
    /// Attach a detached mount (an fd of [`detached_clone`], opened before fork) at a path.
    Attach(libc::c_int, CString),
    Devpts(CString),
    Mkdir(CString),
    Touch(CString),
    Symlink(CString, CString),
    Bind(CString, CString),
    RemountRo(CString, libc::c_ulong),
    Chmod(CString, libc::mode_t),
    /// An empty tmpfs over a directory when it exists (hides host data).
    Hide(CString),
    /// `/dev/null` bound over a file when it exists (masks a host-wide knob).
    Mask(CString),
    /// A cgroup2 mount (the holder's cgroup namespace: the sandbox's subtree), made only
    /// when the holder entered that namespace.
    Cgroup2(CString),
}

/// What the new root is made of.
#[derive(Clone)]
pub(crate) struct Layout {
    /// Mount point of the new root on the host (an empty directory).
    pub newroot: PathBuf,
    /// (sandbox path, host source) of the paths backed by the sandbox tree.
    pub mapped: Vec<(PathBuf, PathBuf)>,
    /// `(upper, work)` of the writable overlay; `None` = read-only tmpfs mode.
    pub overlay: Option<(PathBuf, PathBuf)>,
    /// The overlay's lower layers, top first: the allowlist mask
    /// ([`super::allowlist`]; `None` for a template's own root), then the mount point of the idmapped host root
    /// ([`Op::IdmappedTree`] of [`Layout::lower_source`]; that source itself when `None`,
    /// without a user namespace).
    pub mask: Option<(PathBuf, Vec<MaskEntry>)>,
    /// Mount point of the idmapped host root (see [`Layout::mask`]).
    pub idmapped_lower: Option<PathBuf>,
    /// What the idmapped lower layer is a clone of: `/` (the host's root) or the
    /// template's root tree ([`crate::TemplateRoot`]).
    pub lower_source: PathBuf,
    /// A file the sandbox's init binds over `/proc/sys/kernel/random/boot_id`
    /// ([`plan_proc`]).
    pub boot_id: Option<PathBuf>,
    /// Host directories hidden behind an empty tmpfs (the emulator's state).
    pub hide: Vec<PathBuf>,
    /// Mount the sandbox's cgroup subtree writable at `/sys/fs/cgroup`.
    pub cgroup2: bool,
}

/// The only host mounts (besides the root filesystem's allowlist) a writable root shows,
/// read-only: the kernel's view of devices and cgroups, as any Linux system has it.
const HOST_MOUNTS: [&str; 1] = ["/sys"];

/// Device nodes a sandbox gets (bound from the host's `/dev`).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Host-wide `/proc` files no sandbox may read or write (as container runtimes mask them).
const MASKED_PROC: [&str; 5] = [
    "/proc/kcore",
    "/proc/keys",
    "/proc/sysrq-trigger",
    "/proc/timer_list",
    "/proc/kmsg",
];

/// A mount point of the host with the flags a read-only remount must keep.
struct HostMount {
    id: u64,
    parent: u64,
    path: PathBuf,
    flags: libc::c_ulong,
}

fn host_mounts() -> Vec<HostMount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let id = fields.first()?.parse().ok()?;
            let parent = fields.get(1)?.parse().ok()?;
            let path = exec_world_sys::mounts::unescape_mountinfo(fields.get(4)?);
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
                id,
                parent,
                path: PathBuf::from(path),
                flags,
            })
        })
        .collect()
}

pub(super) fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// `/proc` and `/dev` get a sandbox-private replacement instead of the host's.
fn is_replaced(p: &Path) -> bool {
    p.starts_with("/proc") || p.starts_with("/dev")
}

struct Planner<'a> {
    newroot: PathBuf,
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

    /// Read-only tmpfs mode: mirror the host root entry by entry.
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
            if is_replaced(&child) {
                self.ops.push(Op::Mkdir(cstr(&self.nr(&child))));
                continue;
            }
            if self.mapped.iter().any(|(m, _)| *m == child) {
                // A mount point for the sandbox tree, bound later.
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

    /// Writable mode: the overlay holds the root filesystem; bind the host's
    /// [`HOST_MOUNTS`] read-only on top of it (no other host mount: data lives there).
    fn host_submounts(&mut self) {
        let Some(root_id) = self
            .mounts
            .iter()
            .rev()
            .find(|m| m.path == Path::new("/"))
            .map(|m| m.id)
        else {
            return;
        };
        let mut tops: Vec<PathBuf> = self
            .mounts
            .iter()
            .filter(|m| m.parent == root_id && HOST_MOUNTS.iter().any(|h| m.path == Path::new(h)))
            .map(|m| m.path.clone())
            .collect();
        tops.sort();
        tops.dedup();
        for top in tops {
            match std::fs::metadata(&top) {
                Ok(md) => self.bind_ro(&top, md.is_dir()),
                Err(_) => continue,
            }
        }
    }

    /// The allowlist's mask layer on a tmpfs of its own at `dir` (outside the lower
    /// layer's filesystem: overlayfs refuses overlapping layers).
    fn mask(&mut self, dir: &Path, entries: &[MaskEntry]) {
        self.ops.push(Op::Mkdir(cstr(dir)));
        self.ops.push(Op::Tmpfs(cstr(dir), c"mode=0755,size=1m"));
        for e in entries {
            match e {
                MaskEntry::Dir {
                    rel,
                    mode,
                    uid,
                    gid,
                    opaque,
                } => {
                    let p = cstr(&dir.join(rel));
                    self.ops.push(Op::Mkdir(p.clone()));
                    self.ops.push(Op::Chmod(p.clone(), *mode as libc::mode_t));
                    self.ops.push(Op::Chown(p.clone(), *uid, *gid));
                    if *opaque {
                        self.ops.push(Op::Opaque(p));
                    }
                }
                MaskEntry::Whiteout(rel) => self.ops.push(Op::Whiteout(cstr(&dir.join(rel)))),
            }
        }
    }

    /// The template's paths from the sandbox tree, parents first.
    fn sandbox_binds(&mut self) {
        let mut sorted: Vec<(PathBuf, PathBuf)> = self.mapped.to_vec();
        sorted.sort_by_key(|(m, _)| m.components().count());
        for (m, src) in sorted {
            let target = cstr(&self.nr(&m));
            self.ops.push(if src.is_file() {
                Op::Touch(target.clone())
            } else {
                Op::Mkdir(target.clone())
            });
            self.ops.push(Op::Bind(cstr(&src), target));
        }
    }

    /// A private `/dev`: tmpfs with the harmless nodes bound from the host, the host's
    /// devpts (for terminals), a private `/dev/shm`.
    fn dev(&mut self) {
        let dev = self.nr(Path::new("/dev"));
        self.ops.push(Op::Mkdir(cstr(&dev)));
        self.ops.push(Op::Tmpfs(cstr(&dev), c"mode=0755"));
        for name in DEVICES {
            let host = Path::new("/dev").join(name);
            if host.exists() {
                let target = cstr(&dev.join(name));
                self.ops.push(Op::Touch(target.clone()));
                self.ops.push(Op::Bind(cstr(&host), target));
            }
        }
        // A devpts instance of the sandbox's own: its terminals, never the host's.
        let pts = cstr(&dev.join("pts"));
        self.ops.push(Op::Mkdir(pts.clone()));
        self.ops.push(Op::Devpts(pts));
        self.ops
            .push(Op::Symlink(c"pts/ptmx".into(), cstr(&dev.join("ptmx"))));
        let shm = cstr(&dev.join("shm"));
        self.ops.push(Op::Mkdir(shm.clone()));
        self.ops.push(Op::Tmpfs(shm, c"mode=1777"));
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.ops
                .push(Op::Symlink(cstr(Path::new(target)), cstr(&dev.join(name))));
        }
    }
}

/// The sandbox's `/proc`, mounted by its init once it joined the sandbox's mount namespace
/// (paths are the sandbox's): a fresh procfs of its PID namespace, `/proc/sys` read-only,
/// `boot_id` (a [`detached_clone`] of this boot's file) over the kernel's boot id, the
/// host-wide knobs masked.
pub(super) fn plan_proc(boot_id: Option<libc::c_int>) -> Vec<Op> {
    let mut ops = vec![
        Op::Proc(c"/proc".into()),
        Op::Bind(c"/proc/sys".into(), c"/proc/sys".into()),
        Op::RemountRo(
            c"/proc/sys".into(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        ),
    ];
    if let Some(fd) = boot_id {
        ops.push(Op::Attach(fd, c"/proc/sys/kernel/random/boot_id".into()));
    }
    for masked in MASKED_PROC {
        ops.push(Op::Mask(cstr(Path::new(masked))));
    }
    ops
}

/// A detached clone of the mount of `path` (a file or directory), to be attached in
/// another mount namespace ([`Op::Attach`]).
pub(super) fn detached_clone(path: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let p = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: open_tree on a NUL-terminated path; the fd is ours on success.
    let fd = unsafe { open_tree_clone(&p) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `open_tree(path, OPEN_TREE_CLONE)`: a detached clone of the mount at `path` (not its
/// submounts), as a close-on-exec fd; -1 with errno set on failure.
///
/// # Safety
/// A raw syscall on a NUL-terminated string.
unsafe fn open_tree_clone(path: &CStr) -> libc::c_int {
    // SAFETY: see the function's contract.
    unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        ) as libc::c_int
    }
}

/// `move_mount` of the detached mount `fd` onto the file `target` is open on (an
/// `O_PATH` fd); 0, or -1 with errno set.
///
/// # Safety
/// A raw syscall on fds.
unsafe fn attach_at(fd: libc::c_int, target: libc::c_int) -> libc::c_int {
    // SAFETY: see the function's contract.
    unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        ) as libc::c_int
    }
}

/// `move_mount` of the detached mount `fd` onto `target`; 0, or -1 with errno set.
///
/// # Safety
/// A raw syscall on a NUL-terminated string.
unsafe fn attach(fd: libc::c_int, target: &CStr) -> libc::c_int {
    // SAFETY: see the function's contract.
    unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ) as libc::c_int
    }
}

/// The steps that build the new root described by `l` (all but `/proc`: [`plan_proc`]).
pub(super) fn plan(l: &Layout) -> std::io::Result<Vec<Op>> {
    let mut p = Planner {
        newroot: l.newroot.clone(),
        mapped: &l.mapped,
        mounts: host_mounts(),
        ops: Vec::new(),
    };
    let nr = cstr(&l.newroot);
    match &l.overlay {
        Some((upper, work)) => {
            let mut lowers: Vec<&Path> = Vec::new();
            if let Some((dir, entries)) = &l.mask {
                p.mask(dir, entries);
                lowers.push(dir);
            }
            match &l.idmapped_lower {
                Some(lower) => {
                    p.ops
                        .push(Op::IdmappedTree(cstr(&l.lower_source), cstr(lower)));
                    lowers.push(lower);
                }
                None => lowers.push(&l.lower_source),
            }
            let opts = overlay_options(&lowers, upper, work)?;
            p.ops.push(Op::Overlay(nr.clone(), opts));
            p.host_submounts();
        }
        None => {
            p.ops.push(Op::Tmpfs(nr.clone(), c"mode=0755"));
            p.build(Path::new("/"));
        }
    }
    // Hidden first: a template path below (or equal to) a hidden one is bound on top.
    for h in &l.hide {
        if !l.mapped.iter().any(|(m, _)| m.starts_with(h)) {
            // Without the host's links on the way (the new root refuses links below it).
            let h = std::fs::canonicalize(h).unwrap_or_else(|_| h.clone());
            p.ops.push(Op::Hide(cstr(&p.nr(&h))));
        }
    }
    p.sandbox_binds();
    p.dev();
    // The mount point of the sandbox's /proc (mounted by its init, see plan_proc).
    p.ops.push(Op::Mkdir(cstr(&p.nr(Path::new("/proc")))));
    if l.cgroup2 {
        let cg = p.nr(Path::new("/sys/fs/cgroup"));
        p.ops.push(Op::Mkdir(cstr(&cg)));
        p.ops.push(Op::Cgroup2(cstr(&cg)));
    }
    p.ops.push(Op::Chmod(nr, 0o755));
    Ok(p.ops)
}

/// `lowerdir=A:B,upperdir=…,workdir=…`; paths with a separator of the option syntax are
/// refused.
fn overlay_options(lowers: &[&Path], upper: &Path, work: &Path) -> std::io::Result<CString> {
    let bad = |p: &Path| p.as_os_str().as_bytes().iter().any(|b| b",:\\".contains(b));
    if bad(upper) || bad(work) || lowers.iter().any(|p| bad(p)) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "overlay layer path has ',', ':' or '\\': {}",
                upper.display()
            ),
        ));
    }
    let mut s = b"lowerdir=".to_vec();
    for (i, l) in lowers.iter().enumerate() {
        if i > 0 {
            s.push(b':');
        }
        s.extend_from_slice(l.as_os_str().as_bytes());
    }
    s.extend_from_slice(b",upperdir=");
    s.extend_from_slice(upper.as_os_str().as_bytes());
    s.extend_from_slice(b",workdir=");
    s.extend_from_slice(work.as_os_str().as_bytes());
    s.extend_from_slice(b",index=off");
    CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn last_errno() -> libc::c_int {
    // SAFETY: reading the thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Run the plan in a forked child that just unshared its mount namespace (raw syscalls
/// only, no allocation), then `pivot_root` into the new root.
/// `read_only_root` remounts the new root read-only before the pivot (tmpfs mode);
/// `cgroup_ns` says the child is in the sandbox's own cgroup namespace (else the
/// cgroup2 mount is skipped: it would show the host's whole hierarchy).
pub(super) fn execute(
    ops: &[Op],
    newroot: &CString,
    read_only_root: bool,
    cgroup_ns: bool,
    userns: libc::c_int,
) -> Result<(), Failed> {
    let ns = |e| (Step::MountNamespace, e, None);
    // SAFETY: plain syscalls on NUL-terminated strings prepared before fork.
    unsafe {
        let root = c"/";
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(ns(errno()));
        }
        run(ops, Some(newroot), cgroup_ns, userns)?;
        if read_only_root
            && libc::mount(
                std::ptr::null(),
                newroot.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                std::ptr::null(),
            ) != 0
        {
            return Err(ns(errno()));
        }
        if libc::chdir(newroot.as_ptr()) != 0 {
            return Err(ns(errno()));
        }
        let dot = c".";
        if libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) != 0 {
            return Err(ns(errno()));
        }
        if libc::umount2(dot.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(ns(errno()));
        }
        if libc::chdir(root.as_ptr()) != 0 {
            return Err(ns(errno()));
        }
    }
    Ok(())
}

/// A step of a plan that failed: the part of the boundary it builds, its error, and the
/// index of its [`Op`] when one failed (see [`op_path`]).
pub(super) type Failed = (Step, std::io::Error, Option<usize>);

/// Run `ops` (raw syscalls only, no allocation); a failure names its [`Step`] and op.
/// `cgroup_ns` and `userns`: see [`execute`].
///
/// With `below` (the new root, before `pivot_root`), an op whose path lies below it acts
/// on what `openat2` resolves there with no symbolic link on the way
/// (`RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`): the op gets the resolved file itself (an
/// fd, or its `/proc/self/fd` path), or the resolved parent directory of the name it
/// creates. Those directories are the sandbox's own (its upper layer, its tree, a volume
/// another sandbox may share and change at any moment), and a link planted there, before
/// or during the boot, would point the host's root at a host path (a cold boot once
/// created a directory on the host that way, through a volume mounted below `/home`).
/// A link on the way fails the op with `ELOOP`.
pub(super) fn run(
    ops: &[Op],
    below: Option<&CStr>,
    cgroup_ns: bool,
    userns: libc::c_int,
) -> Result<(), Failed> {
    // The new root, open: reopened after an op on the root itself (a mount there).
    let mut rootfd = -1;
    for (i, op) in ops.iter().enumerate() {
        if matches!(op, Op::Cgroup2(_)) && !cgroup_ns {
            continue;
        }
        let rel = below.and_then(|root| beneath(target(op), root.to_bytes()));
        // SAFETY: raw syscalls on the op's NUL-terminated strings and fds.
        let rc = unsafe {
            match (below, rel) {
                (Some(root), Some(rel)) => {
                    if rootfd < 0 {
                        rootfd = libc::open(
                            root.as_ptr(),
                            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                        );
                    }
                    if rootfd < 0 {
                        -1
                    } else {
                        run_op_beneath(op, rootfd, rel, userns)
                    }
                }
                _ => {
                    close_all(&[rootfd]);
                    rootfd = -1;
                    run_op(op, None, userns)
                }
            }
        };
        if rc != 0 && !tolerated(op, last_errno()) {
            close_all(&[rootfd]);
            let step = match op {
                Op::Overlay(..) => Step::Overlay,
                Op::IdmappedTree(..) => Step::IdmappedMount,
                _ => Step::MountNamespace,
            };
            return Err((step, errno(), Some(i)));
        }
    }
    close_all(&[rootfd]);
    Ok(())
}

/// The path `op` acts on (the mount point, the file, or the name it creates).
fn target(op: &Op) -> &CStr {
    match op {
        Op::Overlay(p, _)
        | Op::Whiteout(p)
        | Op::Opaque(p)
        | Op::Chown(p, ..)
        | Op::IdmappedTree(_, p)
        | Op::Tmpfs(p, _)
        | Op::Proc(p)
        | Op::Attach(_, p)
        | Op::Devpts(p)
        | Op::Mkdir(p)
        | Op::Touch(p)
        | Op::Symlink(_, p)
        | Op::Bind(_, p)
        | Op::RemountRo(p, _)
        | Op::Chmod(p, _)
        | Op::Hide(p)
        | Op::Mask(p)
        | Op::Cgroup2(p) => p.as_c_str(),
    }
}

/// Where `op` acts, as the sandbox names it (`root`, the new root, taken off): for an
/// error.
pub(super) fn op_path(op: &Op, root: &Path) -> String {
    let p = Path::new(std::ffi::OsStr::from_bytes(target(op).to_bytes()));
    match p.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel).display().to_string(),
        Err(_) => p.display().to_string(),
    }
}

/// `path` below `root` (a prefix of it, ending before a `/`), without the `/`s that
/// follow the root: `None` for the root itself or a path outside it.
fn beneath<'a>(path: &'a CStr, root: &[u8]) -> Option<&'a [u8]> {
    let bytes = path.to_bytes();
    let rest = bytes.strip_prefix(root)?.strip_prefix(b"/")?;
    let start = rest.iter().position(|b| *b != b'/')?;
    Some(&rest[start..])
}

/// What an op tolerates as done (errno of its last system call).
fn tolerated(op: &Op, errno: libc::c_int) -> bool {
    match op {
        Op::Mkdir(_) | Op::Symlink(..) => errno == libc::EEXIST,
        // Already there (a device node or a read-only mount point).
        Op::Touch(_) => matches!(errno, libc::EEXIST | libc::EISDIR | libc::EROFS),
        // Mounts hidden below a sandbox path or vanished: nothing to protect.
        Op::RemountRo(..) | Op::Mask(_) => errno == libc::ENOENT,
        Op::Hide(_) => matches!(errno, libc::ENOENT | libc::ENOTDIR),
        _ => false,
    }
}

/// A NUL-terminated copy of `bytes` in `buf`; `None` when it does not fit.
fn nul_terminated<'b>(bytes: &[u8], buf: &'b mut [u8]) -> Option<&'b CStr> {
    if bytes.len() >= buf.len() || bytes.contains(&0) {
        return None;
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    buf[bytes.len()] = 0;
    CStr::from_bytes_with_nul(&buf[..=bytes.len()]).ok()
}

/// `openat2(dirfd, path, flags | O_CLOEXEC)` with no symbolic link (nor magic link) on
/// the way and nothing above `dirfd`; the fd, or -1 with errno set. No allocation (the
/// path is a `CStr`).
///
/// # Safety
/// `dirfd` is an open fd.
unsafe fn open_beneath(dirfd: libc::c_int, path: &CStr, flags: libc::c_int) -> libc::c_int {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::os::fd::{BorrowedFd, IntoRawFd};
    // SAFETY: see the function's contract.
    let dir = unsafe { BorrowedFd::borrow_raw(dirfd) };
    let opened = rustix::fs::openat2(
        dir,
        path,
        OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    );
    match opened {
        Ok(fd) => fd.into_raw_fd(),
        Err(e) => {
            // SAFETY: writing the thread's errno.
            unsafe { *libc::__errno_location() = e.raw_os_error() };
            -1
        }
    }
}

/// `/proc/self/fd/<fd>` in `buf`: a path the kernel resolves to that very file.
fn fd_path(fd: libc::c_int, buf: &mut [u8; 32]) -> &CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let len = exec_world_sys::supervise::fmt_num(&mut buf[PREFIX.len()..], i64::from(fd));
    buf[PREFIX.len() + len] = 0;
    CStr::from_bytes_with_nul(&buf[..=PREFIX.len() + len]).unwrap_or(c"/proc/self/fd/-1")
}

/// Close `fds` (the negative ones are not), keeping errno.
fn close_all(fds: &[libc::c_int]) {
    let saved = last_errno();
    for &fd in fds {
        if fd >= 0 {
            // SAFETY: closing fds this module opened.
            unsafe { libc::close(fd) };
        }
    }
    // SAFETY: writing the thread's errno.
    unsafe { *libc::__errno_location() = saved };
}

/// [`run`]'s step for an op at `rel` below the root `rootfd` is open on (opened after
/// the last mount on the root itself): resolved by [`open_beneath`], the name an op
/// creates made in its resolved parent, any other op given the resolved file. 0 on
/// success (errno set otherwise).
///
/// # Safety
/// Raw syscalls on NUL-terminated strings and the op's fds.
unsafe fn run_op_beneath(
    op: &Op,
    rootfd: libc::c_int,
    rel: &[u8],
    userns: libc::c_int,
) -> libc::c_int {
    let fail = |e: libc::c_int| {
        // SAFETY: writing the thread's errno.
        unsafe { *libc::__errno_location() = e };
        -1
    };
    let mut rel_buf = [0u8; 4096];
    let Some(rel_c) = nul_terminated(rel, &mut rel_buf) else {
        return fail(libc::ENAMETOOLONG);
    };
    // SAFETY: see the function's contract.
    unsafe {
        if matches!(
            op,
            Op::Mkdir(_) | Op::Touch(_) | Op::Symlink(..) | Op::Whiteout(_)
        ) {
            let trimmed = rel_c.to_bytes();
            let trimmed = &trimmed[..trimmed
                .iter()
                .rposition(|b| *b != b'/')
                .map_or(0, |i| i + 1)];
            let (parent, name) = match trimmed.iter().rposition(|b| *b == b'/') {
                Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
                None => (&b""[..], trimmed),
            };
            let mut parent_buf = [0u8; 4096];
            let mut name_buf = [0u8; 256];
            let (Some(parent_c), Some(name_c)) = (
                nul_terminated(
                    if parent.is_empty() { b"." } else { parent },
                    &mut parent_buf,
                ),
                nul_terminated(name, &mut name_buf),
            ) else {
                return fail(libc::ENAMETOOLONG);
            };
            let dir = open_beneath(rootfd, parent_c, libc::O_PATH | libc::O_DIRECTORY);
            if dir < 0 {
                return -1;
            }
            let rc = match op {
                Op::Mkdir(_) => libc::mkdirat(dir, name_c.as_ptr(), 0o755),
                Op::Touch(_) => {
                    // Never a planted FIFO's open that waits for a reader, nor a link.
                    let fd = libc::openat(
                        dir,
                        name_c.as_ptr(),
                        libc::O_CREAT
                            | libc::O_WRONLY
                            | libc::O_NOFOLLOW
                            | libc::O_NONBLOCK
                            | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                        0
                    } else {
                        -1
                    }
                }
                Op::Symlink(t, _) => libc::symlinkat(t.as_ptr(), dir, name_c.as_ptr()),
                _ => libc::mknodat(dir, name_c.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)),
            };
            close_all(&[dir]);
            return rc;
        }
        let fd = open_beneath(rootfd, rel_c, libc::O_PATH);
        if fd < 0 {
            return -1;
        }
        // By fd where the call by path would not follow the `/proc/self/fd` link to the
        // file (`move_mount` without `MOVE_MOUNT_T_SYMLINKS`, `lchown`); the rest by it.
        let rc = match op {
            Op::Attach(detached, _) => attach_at(*detached, fd),
            Op::IdmappedTree(src, _) => {
                let detached = idmapped_clone(src, userns);
                if detached < 0 {
                    -1
                } else {
                    let rc = attach_at(detached, fd);
                    close_all(&[detached]);
                    rc
                }
            }
            Op::Chown(_, uid, gid) => {
                libc::fchownat(fd, c"".as_ptr(), *uid, *gid, libc::AT_EMPTY_PATH)
            }
            _ => {
                let mut buf = [0u8; 32];
                run_op(op, Some(fd_path(fd, &mut buf)), userns)
            }
        };
        close_all(&[fd]);
        rc
    }
}

/// One step, at its own path or at `at` (the `/proc/self/fd` path of what
/// [`run_op_beneath`] resolved); 0 on success (errno set otherwise; [`tolerated`] says
/// which errors are none).
///
/// # Safety
/// Raw syscalls on the op's NUL-terminated strings.
unsafe fn run_op(op: &Op, at: Option<&CStr>, userns: libc::c_int) -> libc::c_int {
    let tmpfs = c"tmpfs";
    let none = std::ptr::null::<libc::c_char>();
    let p = at.unwrap_or(target(op)).as_ptr();
    // SAFETY: see the function's contract.
    unsafe {
        match op {
            Op::Overlay(_, opts) => libc::mount(
                c"overlay".as_ptr(),
                p,
                c"overlay".as_ptr(),
                0,
                opts.as_ptr().cast(),
            ),
            Op::IdmappedTree(src, _) => {
                let fd = idmapped_clone(src, userns);
                if fd < 0 {
                    return -1;
                }
                let rc = attach(fd, CStr::from_ptr(p));
                close_all(&[fd]);
                rc
            }
            Op::Tmpfs(_, opts) => libc::mount(
                tmpfs.as_ptr(),
                p,
                tmpfs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            ),
            Op::Proc(_) => libc::mount(
                c"proc".as_ptr(),
                p,
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ),
            Op::Attach(fd, _) => attach(*fd, CStr::from_ptr(p)),
            Op::Devpts(_) => libc::mount(
                c"devpts".as_ptr(),
                p,
                c"devpts".as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                c"newinstance,ptmxmode=0666,mode=0620".as_ptr().cast(),
            ),
            Op::Mkdir(_) => libc::mkdir(p, 0o755),
            Op::Touch(_) => {
                let fd = libc::open(
                    p,
                    libc::O_CREAT | libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                    0
                } else {
                    fd
                }
            }
            Op::Symlink(t, _) => libc::symlink(t.as_ptr(), p),
            Op::Bind(src, _) => libc::mount(
                src.as_ptr(),
                p,
                none,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ),
            Op::RemountRo(_, flags) => libc::mount(
                none,
                p,
                none,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
                std::ptr::null(),
            ),
            Op::Chmod(_, mode) => libc::chmod(p, *mode),
            Op::Chown(_, uid, gid) => libc::lchown(p, *uid, *gid),
            Op::Whiteout(_) => libc::mknod(p, libc::S_IFCHR, libc::makedev(0, 0)),
            Op::Opaque(_) => libc::setxattr(
                p,
                c"trusted.overlay.opaque".as_ptr(),
                b"y".as_ptr().cast(),
                1,
                0,
            ),
            Op::Hide(_) => libc::mount(
                tmpfs.as_ptr(),
                p,
                tmpfs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"mode=0755,size=4k".as_ptr().cast(),
            ),
            Op::Cgroup2(_) => libc::mount(
                c"cgroup2".as_ptr(),
                p,
                c"cgroup2".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ),
            Op::Mask(_) => libc::mount(
                c"/dev/null".as_ptr(),
                p,
                none,
                libc::MS_BIND,
                std::ptr::null(),
            ),
        }
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// [`Op::IdmappedTree`]'s detached mount: a clone of the mount at `source` (not its
/// submounts), idmapped with the user namespace `userns`, read-only; its fd, or -1 with
/// errno set.
///
/// # Safety
/// Raw syscalls on a NUL-terminated string.
unsafe fn idmapped_clone(source: &CStr, userns: libc::c_int) -> libc::c_int {
    if userns < 0 {
        // SAFETY: writing the thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    // SAFETY: see the function's contract.
    unsafe {
        let fd = open_tree_clone(source);
        if fd < 0 {
            return -1;
        }
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: userns as u64,
        };
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        if rc != 0 {
            close_all(&[fd]);
            return -1;
        }
        fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_link_below_the_root_is_never_followed_on_the_way_nor_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("newroot");
        let outside = dir.path().join("host");
        std::fs::create_dir_all(root.join("home/user")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("planted")).unwrap();
        let nr = cstr(&root);
        let at = |rel: &str| cstr(&root.join(rel));
        let run1 =
            |op: Op| run(&[op], Some(&nr), false, -1).map_err(|(_, e, i)| (e.raw_os_error(), i));
        // The sandbox's own paths resolve; a made name is made there.
        assert_eq!(run1(Op::Mkdir(at("home/user/vol"))), Ok(()));
        assert!(root.join("home/user/vol").is_dir());
        assert_eq!(
            run1(Op::Symlink(c"vol".into(), at("home/user/link"))),
            Ok(())
        );
        assert_eq!(run1(Op::Touch(at("home/user/file"))), Ok(()));
        // A link on the way, or at the end of a path an op acts on: ELOOP, nothing done
        // outside, and the failing op is named.
        let mkdir = Op::Mkdir(at("planted/vol"));
        assert_eq!(op_path(&mkdir, &root), "/planted/vol");
        assert_eq!(run1(mkdir), Err((Some(libc::ELOOP), Some(0))));
        assert_eq!(
            run1(Op::Chmod(at("planted"), 0o777)),
            Err((Some(libc::ELOOP), Some(0)))
        );
        assert_eq!(
            run1(Op::Touch(at("planted/f"))),
            Err((Some(libc::ELOOP), Some(0)))
        );
        assert_eq!(
            run1(Op::Chmod(at("home/user/link"), 0o777)),
            Err((Some(libc::ELOOP), Some(0)))
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert_eq!(std::fs::metadata(&outside).unwrap().mode() & 0o777, 0o700);
        // A planted FIFO where a file is touched fails at once (no reader to wait for).
        let fifo = cstr(&root.join("home/user/fifo"));
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert_eq!(run1(Op::Touch(fifo)), Err((Some(libc::ENXIO), Some(0))));
        // The root itself and paths outside it are the emulator's: not resolved beneath.
        assert_eq!(beneath(&nr, nr.to_bytes()), None);
        assert_eq!(beneath(c"/proc/self/cwd", nr.to_bytes()), None);
        let doubled = cstr(Path::new(&format!("{}//a", root.display())));
        assert_eq!(beneath(&doubled, nr.to_bytes()), Some(&b"a"[..]));
    }

    /// Another sandbox sharing a volume swaps a directory of it for a link to the host,
    /// back and forth, while a boot makes directories through it: not one lands outside.
    #[test]
    fn a_directory_swapped_for_a_link_during_the_steps_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("newroot");
        let outside = dir.path().join("host");
        let shared = root.join("vol/a");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, shared, outside) = (stop.clone(), shared.clone(), outside.clone());
            let aside = root.join("vol/a.aside");
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if std::fs::rename(&shared, &aside).is_ok() {
                        let _ = std::os::unix::fs::symlink(&outside, &shared);
                        let _ = std::fs::remove_file(&shared);
                        let _ = std::fs::rename(&aside, &shared);
                    }
                }
            })
        };
        let nr = cstr(&root);
        for i in 0..3000 {
            let op = Op::Mkdir(cstr(&shared.join(format!("d{i}"))));
            let _ = run(&[op], Some(&nr), false, -1);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        let landed: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
        assert!(
            landed.is_empty(),
            "{} directories made on the host",
            landed.len()
        );
        // The directories that were made are the shared directory's.
        assert!(std::fs::read_dir(&shared).unwrap().count() > 0);
    }
}
