//! The kernel-enforced root of [`LocalFs::beneath`](super::LocalFs::beneath): every path
//! below the root is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` from a descriptor of the root, so a directory or file swapped
//! for a symlink at any moment (before or during a call) makes the operation fail with
//! `ELOOP` instead of redirecting it outside the root.
//!
//! Operations that name an entry (create, rename, remove, link) pin its parent directory
//! as a descriptor and act on `/proc/self/fd/<parent>/<name>`: the kernel resolves the
//! magic link to the pinned directory itself, never again through the path, and the last
//! component is created, renamed or removed without being followed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::error::{Error, ErrorKind};
use crate::path::WorldPath;

/// The resolve flags of every open below the root.
fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// A root directory held open.
#[derive(Debug)]
pub(crate) struct Anchor {
    root: WorldPath,
    fd: OwnedFd,
}

/// A place to act on: a path that reaches the object through a pinned descriptor, and
/// that descriptor (kept open while the path is used).
#[derive(Debug)]
pub(crate) struct Pinned {
    path: PathBuf,
    dir: Option<OwnedFd>,
}

impl Pinned {
    /// The path to hand to path-based calls.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The pinned parent directory's own path (`/proc/self/fd/<n>`).
    pub(crate) fn dir_path(&self) -> PathBuf {
        match &self.dir {
            Some(fd) => fd_path(fd),
            None => self.path.parent().map(PathBuf::from).unwrap_or_default(),
        }
    }
}

/// The magic-link path of an open descriptor.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// An `openat2` failure as our error: `ELOOP` (a link below the root) and `EXDEV` (a path
/// leaving it) say so; the rest keep their errno's kind.
fn open_error(abs: &WorldPath, op: &str, e: rustix::io::Errno) -> Error {
    match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => Error::new(ErrorKind::InvalidPath)
            .with_detail("a symbolic link below the root was refused (it appeared during the call)")
            .with_op(op.to_owned())
            .with_path(abs),
        // A socket cannot be opened at all.
        rustix::io::Errno::NXIO => Error::other(super::fs::NOT_REGULAR)
            .with_op(op.to_owned())
            .with_path(abs),
        rustix::io::Errno::NOSYS => Error::new(ErrorKind::Unsupported)
            .with_detail(
                "openat2 is missing (Linux 5.6 or newer is needed for a kernel-enforced root)",
            )
            .with_op(op.to_owned())
            .with_path(abs),
        e => Error::from_io(abs, op, std::io::Error::from_raw_os_error(e.raw_os_error())),
    }
}

impl Anchor {
    /// Opens `root` (absolute, trusted: the host chose it).
    pub(crate) fn open(root: WorldPath) -> Result<Anchor, Error> {
        let fd = rustix::fs::open(
            root.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| open_error(&root, "open the root", e))?;
        // Probe openat2 once, so a kernel without it refuses here, not on first use.
        rustix::fs::openat2(
            &fd,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
        .map_err(|e| open_error(&root, "open the root", e))?;
        Ok(Anchor { root, fd })
    }

    /// The root.
    pub(crate) fn root(&self) -> &WorldPath {
        &self.root
    }

    /// `abs` relative to the root (`"."` for the root itself); a path outside it is refused.
    fn relative(&self, abs: &WorldPath, op: &str) -> Result<String, Error> {
        let root = self.root.as_str().trim_end_matches('/');
        let rest = if root.is_empty() {
            Some(abs.as_str())
        } else {
            abs.as_str().strip_prefix(root)
        };
        match rest {
            Some("") | Some("/") => Ok(".".to_owned()),
            Some(r) if r.starts_with('/') => Ok(r.trim_start_matches('/').to_owned()),
            _ => {
                Err(Error::invalid_path(abs, "outside the file system's root")
                    .with_op(op.to_owned()))
            }
        }
    }

    /// Opens `abs` itself with `flags` (no link followed anywhere below the root).
    pub(crate) fn open_at(
        &self,
        abs: &WorldPath,
        op: &str,
        flags: OFlags,
    ) -> Result<OwnedFd, Error> {
        let rel = self.relative(abs, op)?;
        rustix::fs::openat2(
            &self.fd,
            rel.as_str(),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
        .map_err(|e| open_error(abs, op, e))
    }

    /// `abs` itself, pinned (`O_PATH`): for calls that follow the last component.
    pub(crate) fn pin(&self, abs: &WorldPath, op: &str) -> Result<Pinned, Error> {
        let fd = self.open_at(abs, op, OFlags::PATH)?;
        Ok(Pinned {
            path: fd_path(&fd),
            dir: Some(fd),
        })
    }

    /// `abs` as `<pinned parent>/<name>`: for calls that create, rename or remove the
    /// entry itself. The root has no entry of its own to act on.
    pub(crate) fn pin_entry(&self, abs: &WorldPath, op: &str) -> Result<Pinned, Error> {
        let (parent, name) = match (abs.parent(), abs.file_name()) {
            (Some(p), Some(n)) if self.relative(abs, op)? != "." => (p, n.to_owned()),
            _ => {
                return Err(
                    Error::invalid_path(abs, "the root itself cannot be changed")
                        .with_op(op.to_owned()),
                );
            }
        };
        let dir = self.open_at(&parent, op, OFlags::PATH | OFlags::DIRECTORY)?;
        Ok(Pinned {
            path: fd_path(&dir).join(name),
            dir: Some(dir),
        })
    }
}

impl Pinned {
    /// The plain path of an unanchored file system.
    pub(crate) fn plain(abs: &WorldPath) -> Pinned {
        Pinned {
            path: PathBuf::from(abs.as_str()),
            dir: None,
        }
    }
}
