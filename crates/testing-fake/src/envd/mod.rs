//! envd: the daemon that runs inside every sandbox (processes, filesystem, /files).
//!
//! [`Envd::boot`] lays out (or reopens) a sandbox tree, sets up isolation, and
//! [`Envd::router`] serves every envd route: `/health`, `/files`, `/envs`, `/metrics`, the
//! reserved internal routes, and the Connect services `process.Process` and
//! `filesystem.Filesystem`.
//!
//! Layout of `cfg.root`: `fs/` is the sandbox tree (`fs/home/user`, `fs/tmp`, …, one
//! directory per template mount), `.e2b/` holds the private `passwd`/`group`, the upper
//! and work directories of the writable root overlay (`upper/`, `work/`), the boot id of
//! the current boot and the mount point of the namespace's new root.

// Handlers return a ready `Response` as the error of early exits; boxing it buys nothing.
mod allowlist;
#[allow(clippy::result_large_err)]
mod auth;
mod cgroup;
#[allow(clippy::result_large_err)]
mod connect;
mod cors;
mod cpu_meter;
#[allow(clippy::result_large_err)]
mod files;
mod filesystem;
mod isolation;
mod limits;
mod net;
mod paths;
mod process;
mod pty;
mod rootfs;
pub(crate) mod spare;
mod spawn;
mod uplink_pool;
mod userns;
mod watch;
mod zygote;

pub(crate) use auth::json_error;
pub(crate) use files::{has_signature, signed_with};
pub use isolation::{BoundaryError, Step};

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use crate::template::{Template, TemplateUser};
use userns::IdMap;

/// The `PATH` envd gives every process (the standard one of E2B images).
pub(crate) const SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What one sandbox's envd needs to know.
#[derive(Debug, Clone)]
pub struct EnvdConfig {
    /// The sandbox id (`E2B_SANDBOX_ID`).
    pub sandbox_id: String,
    /// The template the sandbox was created from.
    pub template: crate::template::Template,
    /// Host directory that holds this sandbox's tree (created if missing).
    pub root: PathBuf,
    /// `None` = unsecured sandbox: nothing checked.
    pub access_token: Option<String>,
    /// Global env vars from create (`envVars`).
    pub env_vars: BTreeMap<String, String>,
    /// Every isolated sandbox has a network namespace of its own; `true` gives it an
    /// uplink through pasta (the sandbox is not created when pasta cannot run), `false`
    /// keeps only loopback (`allowInternetAccess: false` or a deny-all egress rule).
    pub allow_internet: bool,
    /// Volumes bound into the sandbox: (absolute sandbox path, host directory). Needs
    /// isolation: without it the sandbox refuses to boot.
    pub volumes: Vec<(PathBuf, PathBuf)>,
    /// Host directories hidden from the sandbox besides the other sandboxes' trees.
    pub hidden: Vec<PathBuf>,
}

/// Why envd could not boot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvdError {
    /// A filesystem or process operation on the host failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The template is inconsistent (e.g. a directory owned by an unknown user).
    #[error("invalid template: {0}")]
    Template(String),
    /// A part of the sandbox boundary could not be built: the sandbox is not created
    /// (the emulator never runs one without it unless told to, see
    /// [`isolation_opted_out`]).
    #[error("{0}")]
    Boundary(#[from] isolation::BoundaryError),
}

/// True when the person running the emulator opted out of the sandbox boundary
/// (`E2B_LOCAL_NO_ISOLATION` set to anything but empty or `0`; `e2b-local
/// --no-isolation` sets it): sandboxes then run as plain host processes, and the emulator
/// says so loudly at every start.
///
/// ```
/// // Unset in a normal environment: every sandbox is isolated or not created.
/// let _ = testing_fake::envd::isolation_opted_out();
/// ```
pub fn isolation_opted_out() -> bool {
    isolation::opted_out()
}

/// What `e2b-local` and `e2bx` print on stderr at every start when
/// [`isolation_opted_out`] holds.
pub const NO_ISOLATION_BANNER: &str = "WARNING: E2B emulator sandbox isolation is OFF (--no-isolation / E2B_LOCAL_NO_ISOLATION): sandboxes run as plain host processes with this process's rights and can read, change and reach everything it can. Only run code you trust.";

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvdError {
    let context = context.into();
    move |source| EnvdError::Io { context, source }
}

/// One sandbox's envd.
pub struct Envd {
    cfg: EnvdConfig,
    /// The sandbox tree on the host (`root/fs`).
    tree: PathBuf,
    iso: isolation::Isolation,
    fs: Arc<isolation::FsWorker>,
    fsctx: filesystem::FsCtx,
    procs: Arc<process::Table>,
    watchers: watch::Watchers,
    /// CPU use since the control plane's previous metrics sample.
    cpu_sampled: cpu_meter::CpuMeter,
    /// CPU use since the previous `GET /metrics` of envd.
    cpu_scraped: cpu_meter::CpuMeter,
    /// Global environment (`envVars` plus the `E2B_*` variables).
    globals: BTreeMap<String, String>,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd")
            .field("sandbox_id", &self.cfg.sandbox_id)
            .field("isolated", &self.iso.enabled())
            .finish_non_exhaustive()
    }
}

fn chown_path(p: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::chown(p, Some(uid), Some(gid))
}

/// Lay out the sandbox tree from the template (first boot only); ids are stored on the
/// host shifted by `ids`.
/// `sysroot` is the system the sandbox runs (`/`, or the template's root tree): its
/// `/etc/skel` fills the homes and its directories' modes are kept.
fn lay_out(
    cfg: &EnvdConfig,
    tree: &Path,
    private: &Path,
    ids: IdMap,
    sysroot: &Path,
) -> Result<(), EnvdError> {
    use std::os::unix::fs::PermissionsExt;
    let t = &cfg.template;
    let marker = private.join("template");
    let first = !marker.exists();
    std::fs::create_dir_all(private).map_err(io_err(format!("creating {}", private.display())))?;
    std::fs::write(private.join("passwd"), t.passwd()).map_err(io_err("writing passwd"))?;
    std::fs::write(private.join("group"), t.group()).map_err(io_err("writing group"))?;
    let shadow = private.join("shadow");
    std::fs::write(&shadow, t.shadow()).map_err(io_err("writing shadow"))?;
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o640))
        .map_err(io_err("chmod shadow"))?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    std::fs::create_dir_all(tree).map_err(io_err(format!("creating {}", tree.display())))?;
    // The mount points (and the directories between) are root's inside, as laid out at
    // the first boot; a later boot (cold boot, a sandbox from a snapshot) keeps the owners
    // the template and the sandbox gave them (`/workspace` is the user's). The tree is the
    // sandbox's own files (a nested mount point lies in another's): walked link-free.
    let chown_all = first && root && ids != IdMap::IDENTITY;
    let sandbox_root = ids.host_id(0);
    let chown_fd = |dir: &OwnedFd, p: &Path, uid: u32, gid: u32| {
        rustix::fs::fchown(
            dir,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(|e| io_err(format!("chown {}", p.display()))(e.into()))
    };
    if chown_all {
        let top = rustix::fs::open(
            tree,
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_err(format!("opening {}", tree.display()))(e.into()))?;
        chown_fd(&top, Path::new("/"), sandbox_root, sandbox_root)?;
    }
    for m in &t.mounts {
        let rel = Path::new(m.trim_start_matches('/'));
        dirs_beneath(tree, rel, 0o755, |dir, walked, _| {
            if chown_all {
                chown_fd(dir, &in_sandbox(walked), sandbox_root, sandbox_root)?;
            }
            Ok(())
        })?;
    }
    if !first {
        return Ok(());
    }
    for d in &t.dirs {
        let owner = t
            .user(&d.owner)
            .ok_or_else(|| EnvdError::Template(format!("{}: unknown owner {}", d.path, d.owner)))?;
        let p = in_sandbox(Path::new(d.path.trim_start_matches('/')));
        let dir = dirs_beneath(
            tree,
            Path::new(d.path.trim_start_matches('/')),
            0o755,
            |_, _, _| Ok(()),
        )?;
        rustix::fs::fchmod(&dir, rustix::fs::Mode::from_raw_mode(d.mode))
            .map_err(|e| io_err(format!("chmod {}", p.display()))(e.into()))?;
        if root {
            chown_fd(&dir, &p, ids.host_id(owner.uid), ids.host_id(owner.gid))?;
        }
    }
    // Homes get the skeleton files `useradd -m` copies (`.bashrc`, `.profile`, …), from
    // the system's own `/etc/skel` (a link out of a template's tree is not followed).
    let skel = std::fs::canonicalize(sysroot.join("etc/skel"))
        .ok()
        .filter(|p| p.starts_with(sysroot));
    for u in &t.users {
        let home = tree.join(u.home.trim_start_matches('/'));
        if let Some(skel) = &skel
            && home.is_dir()
        {
            copy_skel(
                skel,
                &home,
                root.then_some((ids.host_id(u.uid), ids.host_id(u.gid))),
            );
        }
    }
    if root {
        seed_upper(t, &private.join(UPPER), ids, sysroot)?;
    }
    std::fs::write(&marker, format!("{}\n", t.id)).map_err(io_err("writing marker"))?;
    Ok(())
}

/// The per-sandbox writable upper layer of the root filesystem, under the sandbox's
/// private directory: everything the sandbox writes outside its template paths lands
/// here (a snapshot copies it with the sandbox tree).
pub(crate) const UPPER: &str = "upper";

/// The writable root's upper layer of a fresh sandbox: the template's accounts
/// (`/etc/passwd`, `/etc/group`, `/etc/shadow`, `/etc/gshadow`, never the host's), its
/// passwordless sudoers and its `/etc/hostname` and `/etc/hosts`, owned by the sandbox's
/// root. Directories copy the mode of the
/// directory of `sysroot` (the host's root or the template's tree) they merge with.
fn seed_upper(t: &Template, upper: &Path, ids: IdMap, sysroot: &Path) -> Result<(), EnvdError> {
    use std::os::unix::fs::PermissionsExt;
    let root_id = ids.host_id(0);
    let mkdir = |rel: &str, default_mode: u32| {
        upper_dir(upper, sysroot, Path::new(rel), default_mode, root_id)
    };
    mkdir("", 0o755)?;
    let etc = mkdir("etc", 0o755)?;
    let host = isolation::HOSTNAME;
    let mut files = vec![
        // Its own host name and hosts file: never the host's (whose names they would
        // show), and `sudo` resolves the name.
        (etc.join("hostname"), format!("{host}\n"), 0o644),
        (
            etc.join("hosts"),
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{host}\n"
            ),
            0o644,
        ),
        (etc.join("passwd"), t.passwd(), 0o644),
        (etc.join("group"), t.group(), 0o644),
        (etc.join("shadow"), t.shadow(), 0o640),
        (etc.join("gshadow"), t.gshadow(), 0o640),
    ];
    if let Some(sudoers) = t.sudoers() {
        let dir = mkdir("etc/sudoers.d", 0o750)?;
        files.push((dir.join("90-e2b-template"), sudoers, 0o440));
    }
    for (p, text, mode) in files {
        std::fs::write(&p, text).map_err(io_err(format!("writing {}", p.display())))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(io_err(format!("chmod {}", p.display())))?;
        chown_path(&p, root_id, root_id).map_err(io_err(format!("chown {}", p.display())))?;
    }
    Ok(())
}

/// The directory `rel` of the upper layer (made with its parents), with the mode of the
/// `sysroot` directory it merges with (`default_mode` where there is none) and owned by
/// the sandbox's root (`root_id` on the host): an overlay shows a merged directory with
/// its upper half's owner and mode.
fn upper_dir(
    upper: &Path,
    sysroot: &Path,
    rel: &Path,
    default_mode: u32,
    root_id: u32,
) -> Result<PathBuf, EnvdError> {
    use std::os::unix::fs::PermissionsExt;
    let p = upper.join(rel);
    std::fs::create_dir_all(&p).map_err(io_err(format!("creating {}", p.display())))?;
    let mode = sysroot_mode(sysroot, rel, default_mode);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
        .map_err(io_err(format!("chmod {}", p.display())))?;
    chown_path(&p, root_id, root_id).map_err(io_err(format!("chown {}", p.display())))?;
    Ok(p)
}

/// The mode of `sysroot`'s `rel` (what an upper-layer directory merging with it copies),
/// `default` where `sysroot` has none.
fn sysroot_mode(sysroot: &Path, rel: &Path, default: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(sysroot.join(rel)).map_or(default, |m| m.mode() & 0o7777)
}

/// The parents of every mount point (template paths, volumes) that `sysroot` (the host's
/// root or the template's tree) lacks, made in the sandbox's upper layer before the overlay
/// is mounted, owned by the sandbox's root (the mount point itself is made when it is
/// bound). The directories above them that `sysroot` has are made in the upper layer too
/// where they are not yet (`/srv` of `/srv/deep/vol`), with `sysroot`'s mode, so the
/// missing one has a place to go.
///
/// This runs at every boot, and the upper layer holds what the sandbox wrote: the walk
/// goes one directory handle at a time and never follows a link (a sandbox that swapped
/// `/srv` for a link to `/` gets an error naming the path, never a directory made on the
/// host).
fn mount_point_parents(
    points: &[(PathBuf, PathBuf)],
    upper: &Path,
    sysroot: &Path,
    root_id: u32,
) -> Result<(), EnvdError> {
    if !upper.is_dir() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for (at, _) in points {
        let rel = at.strip_prefix("/").unwrap_or(at);
        let Some(parents) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
            continue;
        };
        if std::fs::symlink_metadata(sysroot.join(parents)).is_ok() {
            continue;
        }
        dirs_beneath(upper, parents, 0o700, |dir, walked, made| {
            if !made {
                return Ok(());
            }
            let p = in_sandbox(walked);
            let os = |what: &str| {
                let context = format!("{what} {}", p.display());
                move |e: rustix::io::Errno| io_err(context)(e.into())
            };
            let mode = sysroot_mode(sysroot, walked, 0o755);
            rustix::fs::fchmod(dir, rustix::fs::Mode::from_raw_mode(mode)).map_err(os("chmod"))?;
            if root {
                let id = Some(rustix::fs::Uid::from_raw(root_id));
                rustix::fs::fchown(dir, id, Some(rustix::fs::Gid::from_raw(root_id)))
                    .map_err(os("chown"))?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// `rel` (relative to the sandbox's `/`: its tree, its upper layer) as the sandbox names it,
/// for errors: never the host's path of the emulator's state.
fn in_sandbox(rel: &Path) -> PathBuf {
    Path::new("/").join(rel)
}

/// Make the directories of `rel` below `base` (new ones with `mode`), one directory
/// handle at a time and never following a link: a link or a non-directory on the way is
/// an error naming the path, and nothing is made past it. `each(dir, walked, made)` runs
/// for every directory on the way (`walked` relative to `base`; `made`: it was made
/// here). The last directory's handle is returned.
///
/// What it walks may be the sandbox's own files (its tree, its upper layer): a sandbox
/// that swapped a directory for a link to the host's `/` gets an error, never a directory
/// made or changed on the host.
fn dirs_beneath(
    base: &Path,
    rel: &Path,
    mode: u32,
    mut each: impl FnMut(&OwnedFd, &Path, bool) -> Result<(), EnvdError>,
) -> Result<OwnedFd, EnvdError> {
    use rustix::fs::{Mode, OFlags};
    let dir_flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
    let os = |context: String| move |e: rustix::io::Errno| io_err(context)(e.into());
    let mut dir = rustix::fs::open(base, dir_flags, Mode::empty())
        .map_err(os(format!("opening {}", base.display())))?;
    let mut walked = PathBuf::new();
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Err(EnvdError::Template(format!(
                "{}: not a plain relative path",
                rel.display()
            )));
        };
        walked.push(name);
        let p = in_sandbox(&walked);
        let made = match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => {
                return Err(os(format!(
                    "creating {} in the sandbox's files",
                    p.display()
                ))(e));
            }
        };
        dir = rustix::fs::openat(&dir, name, dir_flags, Mode::empty()).map_err(os(format!(
            "opening {} in the sandbox's files (a link or not a directory?)",
            p.display()
        )))?;
        each(&dir, &walked, made)?;
    }
    Ok(dir)
}

/// A fresh `/proc/sys/kernel/random/boot_id` for this boot, written next to the old one
/// and renamed over it (a running namespace keeps the inode it bound).
fn new_boot_id(private: &Path) -> Result<PathBuf, EnvdError> {
    let path = private.join("boot_id");
    let tmp = private.join("boot_id.new");
    std::fs::write(&tmp, format!("{}\n", uuid::Uuid::new_v4()))
        .map_err(io_err("writing the boot id"))?;
    std::fs::rename(&tmp, &path).map_err(io_err("writing the boot id"))?;
    Ok(path)
}

/// Copy the regular files and directories of `skel` into `home` (never overwriting).
fn copy_skel(skel: &Path, home: &Path, owner: Option<(u32, u32)>) {
    let Ok(rd) = std::fs::read_dir(skel) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let dst = home.join(e.file_name());
        if dst.exists() {
            continue;
        }
        if ft.is_dir() {
            if std::fs::create_dir(&dst).is_ok() {
                copy_skel(&e.path(), &dst, owner);
            }
        } else if ft.is_file() {
            if std::fs::copy(e.path(), &dst).is_err() {
                continue;
            }
        } else {
            continue;
        }
        if let Some((uid, gid)) = owner {
            let _ = chown_path(&dst, uid, gid);
        }
    }
}

/// The host side of a boot, before the boundary: the sandbox's tree laid out (first boot)
/// and, with isolation, its upper layer's mount points and the allowlist. It depends on the
/// template, the volumes and the sandbox's root directory only, so a spare sandbox
/// ([`spare`]) does it ahead and is renamed to its sandbox's root when taken.
#[derive(Clone)]
struct Prepared {
    /// The system the sandbox runs: `/` (allowlisted) or the template's own tree.
    sysroot: PathBuf,
    /// The allowlist's mask layer (`None` without isolation or for a template's own tree).
    mask: Option<Vec<allowlist::MaskEntry>>,
}

/// Lay out `root` for `cfg` (see [`Prepared`]).
fn prepare(cfg: &EnvdConfig, root: &Path) -> Result<Prepared, EnvdError> {
    let tree = root.join("fs");
    let private = root.join(".e2b");
    let opted_out = isolation::opted_out();
    let ids = if opted_out {
        IdMap::IDENTITY
    } else {
        IdMap::SANDBOX
    };
    // The system the sandbox runs: the host's (allowlisted) root, or the template's
    // own tree, checked again (it may have gone since the emulator started).
    let sysroot = match &cfg.template.root_fs {
        None => PathBuf::from("/"),
        Some(_) if opted_out => {
            return Err(EnvdError::Template(
                crate::TemplateRootError::NeedsIsolation.to_string(),
            ));
        }
        Some(dir) => {
            crate::TemplateRoot::check_dir(dir).map_err(|e| EnvdError::Template(e.to_string()))?
        }
    };
    lay_out(cfg, &tree, &private, ids, &sysroot)?;
    if opted_out {
        return Ok(Prepared {
            sysroot,
            mask: None,
        });
    }
    isolation::require_root()?;
    let upper = private.join(UPPER);
    mount_point_parents(&mapped(cfg, &tree), &upper, &sysroot, ids.host_id(0))?;
    let work = private.join("work");
    std::fs::create_dir_all(&work).map_err(io_err(format!("creating {}", work.display())))?;
    // A template's own tree is the whole system: no allowlist over it.
    let mask = match cfg.template.root_fs {
        Some(_) => None,
        None => Some(
            allowlist::mask(ids)
                .map_err(|e| isolation::BoundaryError::new(isolation::Step::Allowlist, e))?,
        ),
    };
    Ok(Prepared { sysroot, mask })
}

/// The sandbox paths backed by host directories: the template's paths from the tree,
/// then the volumes.
fn mapped(cfg: &EnvdConfig, tree: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut mapped: Vec<(PathBuf, PathBuf)> = cfg
        .template
        .mounts
        .iter()
        .map(|m| (PathBuf::from(m), tree.join(m.trim_start_matches('/'))))
        .collect();
    mapped.extend(cfg.volumes.iter().cloned());
    mapped
}

/// What the root filesystem of the sandbox at `root` is made of; `boot_id`: the file
/// its init binds over the kernel's boot id.
fn layout(
    cfg: &EnvdConfig,
    root: &Path,
    prepared: Prepared,
    boot_id: Option<PathBuf>,
) -> rootfs::Layout {
    let private = root.join(".e2b");
    let upper = private.join(UPPER);
    rootfs::Layout {
        newroot: private.join("newroot"),
        mapped: mapped(cfg, &root.join("fs")),
        overlay: upper.is_dir().then(|| (upper, private.join("work"))),
        mask: prepared.mask.map(|m| (private.join("mask"), m)),
        idmapped_lower: Some(private.join("lower")),
        lower_source: prepared.sysroot,
        boot_id,
        // The emulator's state (every sandbox's tree) is not for the sandbox.
        hide: root
            .parent()
            .map(Path::to_path_buf)
            .into_iter()
            .chain(cfg.hidden.iter().cloned())
            .collect(),
        cgroup2: false,
    }
}

/// The sandbox's boundary on a prepared `root`.
fn isolate(
    cfg: &EnvdConfig,
    root: &Path,
    prepared: Prepared,
) -> Result<isolation::Isolation, EnvdError> {
    let boot_id = new_boot_id(&root.join(".e2b"))?;
    Ok(isolation::Isolation::start(isolation::Spec {
        layout: layout(cfg, root, prepared, Some(boot_id)),
        offline: !cfg.allow_internet,
        ids: IdMap::SANDBOX,
        limits: (cfg.template.cpu_count, cfg.template.memory_mb),
    })?)
}

/// A booted sandbox's isolation and the threads that run envd's file operations in it.
pub(crate) struct Booted {
    iso: isolation::Isolation,
    fs: isolation::FsWorker,
}

impl Booted {
    /// False once a part died (the holder, pasta): not to be used.
    pub(crate) fn whole(&self) -> bool {
        self.iso.whole()
    }
}

/// Boot the isolation of a prepared `root` (none with the explicit opt-out) and start its
/// file workers.
fn boot_isolation(cfg: &EnvdConfig, root: &Path, prepared: Prepared) -> Result<Booted, EnvdError> {
    let iso = if isolation::opted_out() {
        isolation::Isolation::off()
    } else {
        isolate(cfg, root, prepared)?
    };
    if !cfg.volumes.is_empty() && !iso.enabled() {
        iso.shutdown();
        return Err(EnvdError::Template(
            "volume mounts need the emulator's sandbox isolation (run it as root)".into(),
        ));
    }
    match isolation::FsWorker::start(iso.ns_fds(), 2) {
        Ok(fs) => Ok(Booted { iso, fs }),
        Err(e) => {
            iso.shutdown();
            Err(EnvdError::Io {
                context: "starting the filesystem workers in the sandbox namespace".into(),
                source: e,
            })
        }
    }
}

impl Envd {
    /// Boot envd: the first boot lays out the tree from the template; a later boot on an
    /// existing root (cold boot) keeps the files.
    pub async fn boot(cfg: EnvdConfig) -> Result<Arc<Envd>, EnvdError> {
        Envd::boot_from(cfg, None).await
    }

    /// [`Envd::boot`], on a spare sandbox booted ahead for this kind of sandbox when one
    /// is given (its root is renamed to `cfg.root`; a spare that cannot be is dropped
    /// and the boot is the usual one).
    pub(crate) async fn boot_from(
        cfg: EnvdConfig,
        spare: Option<spare::Spare>,
    ) -> Result<Arc<Envd>, EnvdError> {
        let spare = spare.and_then(|s| s.move_to(&cfg.root));
        std::fs::create_dir_all(&cfg.root)
            .map_err(io_err(format!("creating {}", cfg.root.display())))?;
        let root = std::fs::canonicalize(&cfg.root)
            .map_err(io_err(format!("resolving {}", cfg.root.display())))?;
        let tree = root.join("fs");
        let ids = if isolation::opted_out() {
            IdMap::IDENTITY
        } else {
            IdMap::SANDBOX
        };
        // A spare comes booted (with the boundary) or laid out (without it).
        let Booted { iso, fs } = match spare {
            Some((_, Some(booted))) => booted,
            Some((prepared, None)) => boot_isolation(&cfg, &root, prepared)?,
            None => boot_isolation(&cfg, &root, prepare(&cfg, &root)?)?,
        };

        let mut globals = BTreeMap::new();
        globals.insert("E2B_SANDBOX".to_string(), "true".to_string());
        globals.insert("E2B_SANDBOX_ID".to_string(), cfg.sandbox_id.clone());
        globals.insert("E2B_TEMPLATE_ID".to_string(), cfg.template.id.clone());
        for (k, v) in &cfg.env_vars {
            globals.insert(k.clone(), v.clone());
        }
        let fsctx = filesystem::FsCtx {
            tree: tree.clone(),
            isolated: iso.enabled(),
            ids,
            template: Arc::new(cfg.template.clone()),
        };
        Ok(Arc::new(Envd {
            cfg,
            tree,
            iso,
            fs: Arc::new(fs),
            fsctx,
            procs: Arc::new(process::Table::default()),
            watchers: watch::Watchers::default(),
            cpu_sampled: cpu_meter::CpuMeter::default(),
            cpu_scraped: cpu_meter::CpuMeter::default(),
            globals,
        }))
    }

    /// Drop `trigger` once this sandbox's first process ended, or with the sandbox.
    pub(crate) fn on_first_end(&self, trigger: spare::Trigger) {
        self.procs.on_first_end(trigger);
    }

    /// Every envd route.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/health", get(health))
            .route("/files", get(files::download).post(files::upload))
            .route("/envs", get(envs))
            .route("/metrics", get(metrics))
            .route("/process.Process/{method}", any(process::dispatch))
            .route("/filesystem.Filesystem/{method}", any(filesystem::dispatch))
            .fallback(not_found)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                auth::middleware,
            ))
            .layer(axum::middleware::from_fn(cors::middleware))
            .with_state(self.clone())
    }

    /// Pause with memory: SIGSTOP every process of the sandbox.
    /// Returns once every process is stopped (or after about a second).
    pub async fn freeze(&self) {
        let pids = self.all_pids();
        for pid in &pids {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGSTOP) };
        }
        for _ in 0..100 {
            let running = pids.iter().any(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        s.rfind(')')
                            .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
                    })
                    .is_some_and(|state| {
                        state != "T" && state != "t" && state != "Z" && state != "X"
                    })
            });
            if !running {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Processes started while freezing are caught by a second pass.
        for pid in self.all_pids() {
            if !pids.contains(&pid) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
            }
        }
    }

    /// Resume after [`Envd::freeze`]: SIGCONT every process of the sandbox.
    pub async fn thaw(&self) {
        for pid in self.all_pids() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }

    /// SIGKILL every process of the sandbox and wait for them.
    pub async fn stop_all(&self) {
        self.watchers.clear();
        self.kill_everything();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.procs.is_empty() && tokio::time::Instant::now() < deadline {
            self.kill_everything();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// [`Envd::stop_all`], then remove the sandbox tree.
    pub async fn destroy(&self) {
        self.stop_all().await;
        self.fs.shutdown();
        self.iso.shutdown();
        let root = self.cfg.root.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
    }

    /// The template limits (`cpu`, `memory`, `pids`) this host could not apply to the
    /// sandbox (empty when all hold).
    ///
    /// ```no_run
    /// # fn f(envd: &testing_fake::envd::Envd) {
    /// if !envd.missing_limits().is_empty() {
    ///     eprintln!("unlimited: {:?}", envd.missing_limits());
    /// }
    /// # }
    /// ```
    pub fn missing_limits(&self) -> Vec<&'static str> {
        self.iso.missing_limits()
    }

    /// CPU use for a metrics sample: the percent of the template's CPUs the sandbox used
    /// since the previous sample ([`cpu_meter`]; 0 without isolation).
    pub(crate) fn cpu_sample(&self) -> f64 {
        self.cpu_sampled
            .percent(self.iso.cpu_usage_usec(), self.cfg.template.cpu_count)
    }

    /// Memory for a metrics sample, `(used, cache)` in bytes: from the sandbox's memory
    /// group, the most it held since the previous sample minus its page cache (so a
    /// process killed for out-of-memory in between shows as use at the limit); without
    /// one, the resident memory of the sandbox's processes now.
    pub(crate) fn memory_sample(&self) -> (u64, u64) {
        match self.iso.memory_use() {
            Some(m) => (m.peak.saturating_sub(m.cache), m.cache),
            None => (rss(&self.all_pids()), 0),
        }
    }

    /// The sandbox's starter (the process inside the sandbox's namespaces that starts
    /// its commands without forking the emulator): its host pid and how many commands
    /// it started; `None` without one (no isolation, or it could not be made or died:
    /// commands then fork the emulator).
    ///
    /// ```no_run
    /// # fn f(envd: &testing_fake::envd::Envd) {
    /// if let Some((pid, started)) = envd.starter() {
    ///     println!("starter {pid} started {started} commands");
    /// }
    /// # }
    /// ```
    pub fn starter(&self) -> Option<(u32, u64)> {
        let z = self.iso.zygote()?;
        Some((z.pid(), z.started()?))
    }

    /// True when processes and file operations run in a private mount namespace.
    pub fn is_isolated(&self) -> bool {
        self.iso.enabled()
    }

    /// The host pid of the sandbox's process `sandbox_pid` (pids reported by the process
    /// RPCs are the sandbox's, as on E2B); `None` when no live process of the sandbox has it.
    ///
    /// ```no_run
    /// # fn f(envd: &testing_fake::envd::Envd) {
    /// if let Some(host) = envd.host_pid(2) {
    ///     println!("the sandbox's pid 2 is {host} on the host");
    /// }
    /// # }
    /// ```
    pub fn host_pid(&self, sandbox_pid: u32) -> Option<u32> {
        self.all_pids()
            .into_iter()
            .filter_map(|p| u32::try_from(p).ok())
            .find(|p| isolation::ns_pid(*p) == sandbox_pid)
    }

    /// True when the sandbox's root filesystem is its own writable overlay.
    pub fn has_writable_root(&self) -> bool {
        self.iso.writable_root()
    }

    fn kill_everything(&self) {
        for pid in self.all_pids() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Every process of the sandbox: namespace members, started processes and their
    /// descendants.
    fn all_pids(&self) -> Vec<i32> {
        let mut pids = self.iso.members();
        let roots = self.procs.pids();
        for pid in descendants(&roots) {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
        pids
    }

    /// True when a process of this sandbox listens on TCP `port` (any address): a socket
    /// in `LISTEN` state on that port, held open by one of the sandbox's processes, as seen
    /// in the network namespace of those processes.
    pub(crate) async fn listens_on(&self, port: u16) -> bool {
        let pids = self.all_pids();
        tokio::task::spawn_blocking(move || listening_inodes(&pids, port))
            .await
            .unwrap_or(false)
    }

    /// A TCP connection to `port` inside the sandbox: on the loopback of its network
    /// namespace (the host's loopback only without isolation).
    pub(crate) async fn connect_port(&self, port: u16) -> std::io::Result<tokio::net::TcpStream> {
        if let Some(ns) = self.iso.ns_fds() {
            let stream = tokio::task::spawn_blocking(move || ns.connect_tcp(port))
                .await
                .map_err(std::io::Error::other)??;
            stream.set_nonblocking(true)?;
            return tokio::net::TcpStream::from_std(stream);
        }
        match tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await {
            Ok(s) => Ok(s),
            Err(_) => tokio::net::TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port)).await,
        }
    }

    /// The template user named `name`.
    fn user(&self, name: &str) -> Option<&TemplateUser> {
        self.cfg.template.user(name)
    }

    /// The default user.
    fn default_user(&self) -> Option<&TemplateUser> {
        self.user(&self.cfg.template.default_user)
    }

    fn template(&self) -> &Template {
        &self.cfg.template
    }

    /// Where a sandbox path lives on the host as seen by envd's workers and processes:
    /// the path itself when isolated, else mapped under the sandbox tree.
    pub(crate) fn host_path(&self, sandbox: &str) -> PathBuf {
        self.fsctx.host(sandbox)
    }
}

impl Drop for Envd {
    fn drop(&mut self) {
        self.watchers.clear();
        self.kill_everything();
        self.procs.kill_all_direct();
        self.fs.shutdown();
        self.iso.shutdown();
    }
}

/// True when one of `pids` holds a socket listening on TCP `port`: the `LISTEN` (state
/// `0A`) entries of `/proc/<pid>/net/tcp{,6}` on that port, matched by inode against the
/// `socket:[inode]` descriptors of `pids`.
fn listening_inodes(pids: &[i32], port: u16) -> bool {
    // The sandbox's socket tables, read through the first process that still has them: a
    // process that ended (gone, or a zombie, which has no network namespace any more) may
    // still be listed.
    let Some(tables) = pids.iter().find_map(|pid| socket_tables(*pid)) else {
        return false;
    };
    let port_hex = format!("{port:04X}");
    let mut listening: Vec<String> = Vec::new();
    for text in tables {
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            if *state == "0A" && local.rsplit(':').next() == Some(port_hex.as_str()) {
                listening.push(format!("socket:[{inode}]"));
            }
        }
    }
    if listening.is_empty() {
        return false;
    }
    pids.iter().any(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| listening.iter().any(|l| target.as_os_str() == l.as_str()))
        })
    })
}

/// The `tcp` and `tcp6` socket tables of `pid`'s network namespace, or `None` when
/// neither can be read (the process ended).
fn socket_tables(pid: i32) -> Option<Vec<String>> {
    let tables: Vec<String> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .collect();
    (!tables.is_empty()).then_some(tables)
}

/// Descendants (inclusive) of `roots`, from `/proc/*/stat` parent links.
fn descendants(roots: &[i32]) -> Vec<i32> {
    if roots.is_empty() {
        return Vec::new();
    }
    let mut parent: Vec<(i32, i32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let ppid = after
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<i32>().ok())
                .unwrap_or(0);
            parent.push((pid, ppid));
        }
    }
    let mut out: Vec<i32> = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        let cur = out[i];
        for (pid, ppid) in &parent {
            if *ppid == cur && !out.contains(pid) {
                out.push(*pid);
            }
        }
        i += 1;
    }
    out
}

/// `GET /health`: 204, `Cache-Control: no-store`, and the empty `Content-Type` header
/// envd's handler writes.
async fn health() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_TYPE, ""),
        ],
    )
        .into_response()
}

async fn envs(axum::extract::State(envd): axum::extract::State<Arc<Envd>>) -> Response {
    let body = serde_json::to_string(&envd.globals).unwrap_or_else(|_| "{}".into());
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        format!("{body}\n"),
    )
        .into_response()
}

async fn metrics(axum::extract::State(envd): axum::extract::State<Arc<Envd>>) -> Response {
    let t = envd.template();
    let mem_total: u64 = u64::from(t.memory_mb) * 1024 * 1024;
    let ts = time::OffsetDateTime::now_utc().unix_timestamp();
    let tree = envd.tree.clone();
    let pids = envd.all_pids();
    let (disk_used, mem_used) = tokio::task::spawn_blocking(move || (du(&tree), rss(&pids)))
        .await
        .unwrap_or((0, 0));
    let cpu_used_pct = envd
        .cpu_scraped
        .percent(envd.iso.cpu_usage_usec(), t.cpu_count);
    let body = serde_json::json!({
        "ts": ts,
        "cpu_count": t.cpu_count,
        "cpu_used_pct": cpu_used_pct,
        "mem_total": mem_total,
        "mem_used": mem_used,
        "mem_cache": 0,
        "mem_total_mib": t.memory_mb,
        "mem_used_mib": mem_used / 1024 / 1024,
        "disk_used": disk_used,
        "disk_total": u64::from(t.disk_size_mb) * 1024 * 1024,
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        format!("{body}\n"),
    )
        .into_response()
}

/// Resident memory of `pids`, in bytes.
fn rss(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum::<u64>()
        * 1024
}

/// Bytes used under `p` (allocated blocks).
fn du(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let mut total = md.blocks() * 512;
    if md.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        for e in rd.flatten() {
            total += du(&e.path());
        }
    }
    total
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        "404 page not found\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::listening_inodes;

    /// A listed process that ended (here a zombie: it has no network namespace any more)
    /// does not hide the listeners of the others, whatever its place in the list.
    #[test]
    fn a_zombie_in_the_list_does_not_hide_a_listener() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut child = std::process::Command::new("/bin/true")
            .spawn()
            .expect("spawn");
        let zombie = i32::try_from(child.id()).expect("pid");
        // Not reaped yet: the child stays a zombie until `wait` below.
        while !std::fs::read_to_string(format!("/proc/{zombie}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        }) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let me = i32::try_from(std::process::id()).expect("pid");
        assert!(listening_inodes(&[zombie, me], port));
        assert!(listening_inodes(&[me, zombie], port));
        assert!(!listening_inodes(&[zombie], port));
        drop(listener);
        assert!(!listening_inodes(&[zombie, me], port));
        child.wait().expect("wait");
    }
}
