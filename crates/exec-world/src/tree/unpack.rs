//! The download side on the host: extract a tar stream that the world produced (so one an
//! adversary may have crafted) under a local destination, never writing outside it.
//!
//! Everything is extracted into a fresh staging directory beside the destination, which
//! is renamed onto the destination at the end (the destination must be absent or an
//! empty directory, and not a symlink). Each entry's path must be relative without `..`;
//! every directory on its way is checked with `lstat` inside the staging directory and
//! must be a real directory (a symlink there can only be one the archive made: refused).
//! Files are created with `O_NOFOLLOW | O_EXCL`, modes lose setuid/setgid, directory
//! modes are applied last. Hard links are made only to regular files already extracted;
//! FIFOs, sockets and devices are reported, not created. On any error the staging
//! directory is removed: nothing of the archive stays.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::{Meter, SkipReason, TreeOptions, TreeSummary};
use crate::error::Error;

/// Extracts the tar stream `archive` into the local directory `dest` (absent or empty),
/// under the limits of `opts`, reporting progress. The hostile-archive guard of
/// [`download`](super::download), public so any tar stream can be held to it.
///
/// ```no_run
/// # fn demo() -> Result<(), exec_world::Error> {
/// use exec_world::tree::{extract, TreeOptions};
/// let file = std::fs::File::open("untrusted.tar").map_err(|e| exec_world::Error::io("open", e))?;
/// let sum = extract(file, "out".as_ref(), &TreeOptions::default())?;
/// # let _ = sum; Ok(()) }
/// ```
pub fn extract(archive: impl Read, dest: &Path, opts: &TreeOptions) -> Result<TreeSummary, Error> {
    let mut meter = Meter::new(opts);
    extract_metered(archive, dest, &mut meter)
}

pub(crate) fn extract_metered(
    archive: impl Read,
    dest: &Path,
    meter: &mut Meter,
) -> Result<TreeSummary, Error> {
    let (stage, sum) = stage_archive(archive, dest, meter)?;
    finish(&stage, dest)?;
    Ok(sum)
}

/// Extracts `archive` into a fresh staging directory beside `dest` (checked first);
/// on error nothing is left. Finish with [`finish`] or [`discard`].
pub(crate) fn stage_archive(
    archive: impl Read,
    dest: &Path,
    meter: &mut Meter,
) -> Result<(PathBuf, TreeSummary), Error> {
    let dest_s = dest.display().to_string();
    check_destination(dest)?;
    let stage = make_stage(dest)?;
    match unpack_into(archive, &stage, meter) {
        Ok(sum) => Ok((stage, sum)),
        Err(e) => {
            discard(&stage);
            let e = if e.op().is_none() {
                e.with_op("download")
            } else {
                e
            };
            Err(if e.path().is_none() {
                e.with_path(&dest_s)
            } else {
                e
            })
        }
    }
}

/// Renames a complete staging directory onto `dest` (absent or empty).
pub(crate) fn finish(stage: &Path, dest: &Path) -> Result<(), Error> {
    std::fs::rename(stage, dest).map_err(|e| {
        discard(stage);
        Error::io("download: moving the tree into place", e).with_path(dest.display().to_string())
    })
}

/// Removes a staging directory (never following a link in it).
pub(crate) fn discard(stage: &Path) {
    let _ = std::fs::remove_dir_all(stage);
}

/// The destination must be absent, or an empty real directory.
fn check_destination(dest: &Path) -> Result<(), Error> {
    let shown = dest.display().to_string();
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("download", e).with_path(&shown)),
        Ok(md) if md.file_type().is_symlink() => Err(Error::invalid_path(
            &shown,
            "the destination is a symbolic link; refusing to write through it",
        )
        .with_op("download")),
        Ok(md) if !md.is_dir() => Err(Error::already_exists(&shown)
            .with_op("download")
            .with_detail("the destination exists and is not a directory")),
        Ok(_) => {
            let mut rd = std::fs::read_dir(dest).map_err(|e| Error::io("download", e))?;
            if rd.next().is_some() {
                Err(Error::not_empty(&shown)
                    .with_op("download")
                    .with_detail("the destination directory is not empty"))
            } else {
                Ok(())
            }
        }
    }
}

/// A fresh private directory beside `dest`.
fn make_stage(dest: &Path) -> Result<PathBuf, Error> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tree".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for i in 0..100u32 {
        let stage = parent.join(format!(".{name}.tree-{}-{nanos:x}-{i}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&stage) {
            Ok(()) => return Ok(stage),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Error::io("download: making the staging directory", e)
                    .with_path(parent.display().to_string()));
            }
        }
    }
    Err(Error::other("download: no free staging directory name"))
}

/// An archive path checked and split into normal components (empty: the top directory).
fn checked_parts(raw: &Path) -> Result<Vec<String>, Error> {
    let shown = raw.display().to_string();
    let refuse = |why: &str| Err(Error::invalid_path(&shown, why.to_string()).with_op("download"));
    let mut parts = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => match n.to_str() {
                Some(s) => parts.push(s.to_string()),
                None => return refuse("the archive entry's name is not UTF-8"),
            },
            Component::CurDir => {}
            Component::ParentDir => {
                return refuse("the archive entry has a `..` component: refused");
            }
            Component::RootDir | Component::Prefix(_) => {
                return refuse("the archive entry has an absolute path: refused");
            }
        }
    }
    Ok(parts)
}

/// The directory chain the previous entry's parent was verified along (entries of one
/// directory come together in an archive, so most entries skip the `lstat`s). Sound
/// because the staging directory is private and only this extraction writes in it: a
/// directory once checked stays one ([`clear`] never replaces a directory).
#[derive(Default)]
struct Verified {
    parts: Vec<String>,
}

impl Verified {
    /// `stage/parts` checked as [`parent_dir`] does, or known from the previous entry.
    fn parent_dir(
        &mut self,
        stage: &Path,
        parts: &[String],
        shown: &str,
    ) -> Result<PathBuf, Error> {
        if parts.len() <= self.parts.len() && self.parts[..parts.len()] == *parts {
            let mut at = stage.to_path_buf();
            at.extend(parts);
            return Ok(at);
        }
        let at = parent_dir(stage, parts, shown)?;
        self.parts = parts.to_vec();
        Ok(at)
    }
}

/// `stage/parts[..n]` with every component a real directory (made when missing); a
/// symlink or non-directory on the way is refused.
fn parent_dir(stage: &Path, parts: &[String], shown: &str) -> Result<PathBuf, Error> {
    let mut at = stage.to_path_buf();
    for p in parts {
        at.push(p);
        match std::fs::symlink_metadata(&at) {
            Ok(md) if md.file_type().is_symlink() => {
                return Err(Error::invalid_path(
                    shown,
                    format!(
                        "the archive entry goes through the symbolic link `{}` the archive made: refused",
                        rel_of(stage, &at)
                    ),
                )
                .with_op("download"));
            }
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::not_a_directory(shown)
                    .with_op("download")
                    .with_detail(format!("`{}` is not a directory", rel_of(stage, &at))));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .create(&at)
                    .map_err(|e| {
                        Error::io(format!("download: making {}", rel_of(stage, &at)), e)
                    })?;
            }
            Err(e) => return Err(Error::io("download", e).with_path(shown)),
        }
    }
    Ok(at)
}

fn rel_of(stage: &Path, p: &Path) -> String {
    p.strip_prefix(stage)
        .map(|r| r.display().to_string())
        .unwrap_or_default()
}

/// Clears whatever an earlier entry put at `at` (a file or link; a directory is refused).
fn clear(at: &Path, shown: &str) -> Result<(), Error> {
    match std::fs::symlink_metadata(at) {
        Ok(md) if md.is_dir() => Err(Error::is_a_directory(shown)
            .with_op("download")
            .with_detail("the archive replaces a directory with another kind of entry")),
        Ok(_) => std::fs::remove_file(at).map_err(|e| Error::io("download", e).with_path(shown)),
        Err(_) => Ok(()),
    }
}

fn unpack_into(archive: impl Read, stage: &Path, meter: &mut Meter) -> Result<TreeSummary, Error> {
    let mut ar = tar::Archive::new(archive);
    let mut sum = TreeSummary::default();
    let mut verified = Verified::default();
    let mut buf = vec![0u8; COPY_BUF];
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let rerr = |e: std::io::Error| Error::io("download: reading the archive", e);
    for entry in ar.entries().map_err(rerr)? {
        let mut entry = entry.map_err(rerr)?;
        let raw = entry.path().map_err(rerr)?.into_owned();
        let shown = raw.display().to_string();
        let parts = checked_parts(&raw)?;
        let kind = entry.header().entry_type();
        let size = if kind.is_file() || kind.is_gnu_sparse() {
            entry.size()
        } else {
            0
        };
        meter.admit(&shown, size)?;
        let mode = entry.header().mode().map_err(rerr)? & 0o1777;
        let Some((last, dirs)) = parts.split_last() else {
            // The top directory itself.
            if kind.is_dir() {
                dir_modes.push((stage.to_path_buf(), mode));
                sum.dirs += 1;
                meter.entry();
                continue;
            }
            return Err(
                Error::invalid_path(&shown, "the archive's top entry is not a directory")
                    .with_op("download"),
            );
        };
        let parent = verified.parent_dir(stage, dirs, &shown)?;
        let at = parent.join(last);
        match kind {
            k if k.is_dir() => {
                verified.parent_dir(stage, &parts, &shown)?;
                dir_modes.push((at, mode));
                sum.dirs += 1;
            }
            k if k.is_file() || k.is_gnu_sparse() || k == EntryType::Continuous => {
                let create = || {
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&at)
                };
                // Usually the name is free; an earlier entry of the same name (a file or
                // link, never a directory) is cleared first.
                let mut f = match create() {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        clear(&at, &shown)?;
                        create()
                    }
                    r => r,
                }
                .map_err(|e| Error::io("download", e).with_path(&shown))?;
                copy_counted(&mut entry, &mut f, &mut buf, meter)
                    .map_err(|e| e.with_path(&shown))?;
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(|e| Error::io("download", e).with_path(&shown))?;
                if let Ok(mtime) = entry.header().mtime() {
                    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
                    let _ = f.set_modified(t);
                }
                if k.is_gnu_sparse() {
                    sum.sparse.push(parts.join("/"));
                }
                sum.files += 1;
                sum.bytes += size;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(rerr)?
                    .ok_or_else(|| {
                        Error::invalid_path(&shown, "a symbolic link without a target")
                            .with_op("download")
                    })?
                    .into_owned();
                clear(&at, &shown)?;
                std::os::unix::fs::symlink(&target, &at)
                    .map_err(|e| Error::io("download", e).with_path(&shown))?;
                sum.symlinks += 1;
            }
            EntryType::Link => {
                let target = entry.link_name().map_err(rerr)?.ok_or_else(|| {
                    Error::invalid_path(&shown, "a hard link without a target").with_op("download")
                })?;
                let tparts = checked_parts(&target)?;
                let Some((tlast, tdirs)) = tparts.split_last() else {
                    return Err(
                        Error::invalid_path(&shown, "a hard link to the top directory")
                            .with_op("download"),
                    );
                };
                let src = parent_dir_existing(stage, tdirs, &shown)?.join(tlast);
                match std::fs::symlink_metadata(&src) {
                    Ok(md) if md.is_file() => {}
                    _ => {
                        return Err(Error::invalid_path(
                            &shown,
                            "a hard link to something that is not a file the archive made: refused",
                        )
                        .with_op("download"));
                    }
                }
                clear(&at, &shown)?;
                std::fs::hard_link(&src, &at)
                    .map_err(|e| Error::io("download", e).with_path(&shown))?;
                sum.files += 1;
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                sum.skipped.push((parts.join("/"), SkipReason::Special));
            }
            EntryType::XGlobalHeader | EntryType::XHeader => continue,
            _ => {
                sum.skipped.push((parts.join("/"), SkipReason::Unsupported));
            }
        }
        meter.entry();
    }
    // Deepest first, so a read-only directory does not stop its children's modes.
    dir_modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (p, mode) in dir_modes {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io("download: setting a directory's mode", e))?;
    }
    Ok(sum)
}

/// Like [`parent_dir`] but makes nothing: every component must exist.
fn parent_dir_existing(stage: &Path, parts: &[String], shown: &str) -> Result<PathBuf, Error> {
    let mut at = stage.to_path_buf();
    for p in parts {
        at.push(p);
        match std::fs::symlink_metadata(&at) {
            Ok(md) if md.is_dir() && !md.file_type().is_symlink() => {}
            _ => {
                return Err(Error::invalid_path(
                    shown,
                    "a hard link whose target is not below a directory the archive made: refused",
                )
                .with_op("download"));
            }
        }
    }
    Ok(at)
}

/// The copy buffer of an extraction (one, reused for every file).
const COPY_BUF: usize = 256 << 10;

/// Copies an entry's bytes into `f` through `buf`, counting progress.
fn copy_counted(
    r: &mut impl Read,
    f: &mut File,
    buf: &mut [u8],
    meter: &mut Meter,
) -> Result<(), Error> {
    loop {
        let n = match r.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("download: reading the archive", e)),
        };
        f.write_all(&buf[..n])
            .map_err(|e| Error::io("download: writing", e))?;
        meter.bytes(n as u64);
    }
}
