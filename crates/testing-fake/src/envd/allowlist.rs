//! The allowlist of the sandbox's root filesystem: which parts of the host's root a
//! sandbox sees (the operating system a Debian-like template needs), as an overlayfs
//! *mask* layer laid over the host's root.
//!
//! The mask holds a whiteout for every host entry that is not on the list (at the top
//! level, under `/var` and `/var/lib`, and the host's keys under `/etc`) and an empty
//! opaque directory for the places a system has but where a host keeps its data
//! (`/home`, `/root`, `/srv`, `/mnt`, `/media`, `/opt`, `/run`, `/boot`, logs, mail,
//! spools). It is written afresh at every boot, from what the host holds then; host
//! entries made later under a directory the mask does not shadow (top level, `/var`,
//! `/var/lib`) stay invisible only if they are on no list: the lists below name what is
//! *allowed* and everything else is whited out at boot.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::userns::IdMap;

/// Top-level entries of the host's root the sandbox sees as they are.
const SYSTEM: [&str; 11] = [
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "var", "dev", "proc",
];
/// Top-level directories the sandbox has, empty (the host's content is hidden).
const EMPTY: [&str; 10] = [
    "home", "root", "srv", "mnt", "media", "opt", "run", "boot", "tmp", "sys",
];
/// Entries of `/var` the sandbox sees (`lib` filtered by [`VAR_LIB`]).
const VAR: [&str; 5] = ["cache", "lib", "local", "opt", "tmp"];
/// Directories of `/var` the sandbox has, empty.
const VAR_EMPTY: [&str; 4] = ["log", "mail", "spool", "backups"];
/// Entries of `/var/lib` the sandbox sees: the package managers' state.
const VAR_LIB: [&str; 7] = ["apt", "dpkg", "ucf", "pam", "misc", "sudo", "python"];
/// Host keys and credentials under `/etc` (whited out when present).
const ETC_SECRETS: [&str; 6] = [
    "ssh",
    "ssl/private",
    "shadow-",
    "gshadow-",
    "sudoers.d",
    "credstore",
];

/// One entry of the mask layer, relative to its root (`""` is the root itself).
#[derive(Debug, Clone)]
pub(crate) enum MaskEntry {
    /// A directory with these attributes (the topmost layer's directory gives the merged
    /// one its attributes); `opaque` hides what the layers below hold in it.
    Dir {
        rel: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
        opaque: bool,
    },
    /// An overlayfs whiteout (a 0/0 character device): hides the name below.
    Whiteout(PathBuf),
}

/// A directory entry like the host's `host`, owner shifted by `ids`.
fn dir_like(out: &mut Vec<MaskEntry>, rel: &Path, host: &Path, ids: IdMap, opaque: bool) {
    let (mode, uid, gid) =
        std::fs::metadata(host).map_or((0o755, 0, 0), |m| (m.mode() & 0o7777, m.uid(), m.gid()));
    out.push(MaskEntry::Dir {
        rel: rel.to_path_buf(),
        mode,
        uid: ids.host_id(uid),
        gid: ids.host_id(gid),
        opaque,
    });
}

/// Mask `host` directory's entries (mask path `rel`): `allowed` ones pass, `empty` ones
/// become empty directories, everything else is whited out.
fn filter(
    out: &mut Vec<MaskEntry>,
    host: &Path,
    rel: &Path,
    allowed: &[&str],
    empty: &[&str],
    ids: IdMap,
) -> std::io::Result<()> {
    for e in std::fs::read_dir(host)?.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else {
            out.push(MaskEntry::Whiteout(rel.join(&name)));
            continue;
        };
        if allowed.contains(&n) {
            continue;
        }
        if empty.contains(&n) && e.file_type().is_ok_and(|t| t.is_dir()) {
            dir_like(out, &rel.join(n), &host.join(n), ids, true);
        } else {
            out.push(MaskEntry::Whiteout(rel.join(n)));
        }
    }
    // Places a system has even where the host lacks them.
    for n in empty {
        if std::fs::symlink_metadata(host.join(n)).is_err() {
            dir_like(out, &rel.join(n), Path::new("/nonexistent"), ids, true);
        }
    }
    Ok(())
}

/// The mask layer for the host's current root, parents before children.
pub(crate) fn mask(ids: IdMap) -> std::io::Result<Vec<MaskEntry>> {
    let ctx = |what: &str, e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!("building the root filesystem allowlist (reading {what}): {e}"),
        )
    };
    let mut out = Vec::new();
    let root = Path::new("/");
    dir_like(&mut out, Path::new(""), root, ids, false);
    filter(&mut out, root, Path::new(""), &SYSTEM, &EMPTY, ids).map_err(|e| ctx("/", e))?;
    let var = Path::new("/var");
    if var.is_dir() {
        dir_like(&mut out, Path::new("var"), var, ids, false);
        filter(&mut out, var, Path::new("var"), &VAR, &VAR_EMPTY, ids)
            .map_err(|e| ctx("/var", e))?;
        let lib = var.join("lib");
        if lib.is_dir() {
            dir_like(&mut out, Path::new("var/lib"), &lib, ids, false);
            filter(&mut out, &lib, Path::new("var/lib"), &VAR_LIB, &[], ids)
                .map_err(|e| ctx("/var/lib", e))?;
        }
    }
    let etc = Path::new("/etc");
    let mut made: Vec<PathBuf> = Vec::new();
    for secret in ETC_SECRETS {
        let host = etc.join(secret);
        if std::fs::symlink_metadata(&host).is_err() {
            continue;
        }
        // Parents in the mask mirror the host's (attributes included).
        let mut anc = Vec::new();
        let mut p = host.parent();
        while let Some(d) = p {
            if d == root {
                break;
            }
            anc.push(d.to_path_buf());
            p = d.parent();
        }
        for d in anc.iter().rev() {
            let rel = d.strip_prefix(root).unwrap_or(d).to_path_buf();
            if !made.contains(&rel) {
                dir_like(&mut out, &rel, d, ids, false);
                made.push(rel);
            }
        }
        out.push(MaskEntry::Whiteout(Path::new("etc").join(secret)));
    }
    Ok(out)
}
