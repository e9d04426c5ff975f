//! Snapshots kept by the emulator: each is a copy of a sandbox's filesystem state (its
//! template-mounted tree `fs/`, the writable root overlay's upper layer and the first-boot
//! marker) taken while the sandbox's processes were frozen, so the copy is one instant.
//! A sandbox created from a snapshot (or a fork) gets a copy of that state before it boots,
//! then boots cold: files carried, no process, no memory.
//!
//! Layout under the emulator root: `snapshots/<templateID>/<tag>/{fs,upper,template}`.
//! Copies use `cp -a --reflink=auto` (xattrs and the overlay's whiteout devices kept,
//! extents shared where the filesystem can).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use time::OffsetDateTime;

use crate::template::Template;

/// The team namespace of the emulator's named snapshots (`local/<name>:<tag>`).
pub(crate) const TEAM_SLUG: &str = "local";
/// Tag of a snapshot made without one.
pub(crate) const DEFAULT_TAG: &str = "default";

/// One snapshot build.
pub(crate) struct Snapshot {
    /// The snapshot template's id.
    pub template_id: String,
    /// Its name without namespace, when it was given one.
    pub alias: Option<String>,
    /// Tag of this build.
    pub tag: String,
    /// The sandbox it was taken from.
    pub source_sandbox: String,
    /// The template sandboxes made from it report (the source's, under the snapshot id).
    pub template: Template,
    /// Where the copied state lives.
    pub dir: PathBuf,
    /// When it was taken.
    pub created: OffsetDateTime,
}

impl Snapshot {
    /// `local/<alias>:<tag>` when named, else `<templateID>:<tag>`.
    pub fn snapshot_id(&self) -> String {
        match &self.alias {
            Some(a) => format!("{TEAM_SLUG}/{a}:{}", self.tag),
            None => format!("{}:{}", self.template_id, self.tag),
        }
    }

    /// Full names (`local/<alias>`), empty when unnamed.
    pub fn names(&self) -> Vec<String> {
        self.alias
            .iter()
            .map(|a| format!("{TEAM_SLUG}/{a}"))
            .collect()
    }
}

/// A snapshot reference split E2B's way: `[namespace/]identifier[:tag]`.
pub(crate) struct Reference<'a> {
    pub namespace: Option<&'a str>,
    pub identifier: &'a str,
    pub tag: Option<&'a str>,
}

/// Split `[namespace/]identifier[:tag]`; `None` when a part is empty or malformed.
pub(crate) fn parse_reference(s: &str) -> Option<Reference<'_>> {
    let (rest, tag) = match s.rsplit_once(':') {
        Some((r, t)) => (r, Some(t)),
        None => (s, None),
    };
    let (namespace, identifier) = match rest.split_once('/') {
        Some((n, i)) => (Some(n), i),
        None => (None, rest),
    };
    let ok = |p: &str| {
        p.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !ok(identifier) || namespace.is_some_and(|n| !ok(n)) || tag.is_some_and(|t| !ok(t)) {
        return None;
    }
    Some(Reference {
        namespace,
        identifier,
        tag,
    })
}

/// Every snapshot of one emulator.
pub(crate) struct Snapshots {
    dir: PathBuf,
    list: Mutex<Vec<Arc<Snapshot>>>,
}

impl Snapshots {
    pub fn new(emulator_root: &Path) -> Self {
        Snapshots {
            dir: emulator_root.join("snapshots"),
            list: Mutex::new(Vec::new()),
        }
    }

    fn list(&self) -> MutexGuard<'_, Vec<Arc<Snapshot>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory of the emulator's snapshots (hidden from sandboxes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh directory for a build being taken (`snapshots/.tmp-<rand>`).
    pub fn staging_dir(&self) -> PathBuf {
        self.dir
            .join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()))
    }

    /// The template id an existing snapshot named `alias` has (a new build reuses it).
    pub fn template_of_alias(&self, alias: &str) -> Option<String> {
        self.list()
            .iter()
            .find(|s| s.alias.as_deref() == Some(alias))
            .map(|s| s.template_id.clone())
    }

    /// Record a build whose state was copied to `staged`: it moves to its final place,
    /// replacing an earlier build of the same template and tag.
    pub fn add(
        &self,
        staged: &Path,
        template_id: String,
        alias: Option<String>,
        tag: String,
        source_sandbox: String,
        mut template: Template,
    ) -> std::io::Result<Arc<Snapshot>> {
        let parent = self.dir.join(&template_id);
        std::fs::create_dir_all(&parent)?;
        let dir = parent.join(&tag);
        let old = {
            let mut list = self.list();
            list.retain(|s| !(s.template_id == template_id && s.tag == tag));
            dir.exists()
                .then(|| parent.join(format!(".old-{}", uuid::Uuid::new_v4().simple())))
        };
        if let Some(old) = &old {
            std::fs::rename(&dir, old)?;
        }
        std::fs::rename(staged, &dir)?;
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(old);
        }
        template.id = template_id.clone();
        if let Some(a) = &alias {
            template.alias = a.clone();
        }
        let snap = Arc::new(Snapshot {
            template_id,
            alias,
            tag,
            source_sandbox,
            template,
            dir,
            created: OffsetDateTime::now_utc(),
        });
        self.list().push(snap.clone());
        Ok(snap)
    }

    /// The build a reference names (`id`, `id:tag`, `name`, `local/name:tag`).
    pub fn resolve(&self, reference: &str) -> Option<Arc<Snapshot>> {
        let r = parse_reference(reference)?;
        if r.namespace.is_some_and(|n| n != TEAM_SLUG) {
            return None;
        }
        let tag = r.tag.unwrap_or(DEFAULT_TAG);
        self.list()
            .iter()
            .find(|s| {
                s.tag == tag
                    && (s.template_id == r.identifier || s.alias.as_deref() == Some(r.identifier))
            })
            .cloned()
    }

    /// Every build, newest first.
    pub fn all(&self) -> Vec<Arc<Snapshot>> {
        let mut v = self.list().clone();
        v.sort_by_key(|s| std::cmp::Reverse(s.created));
        v
    }

    /// Delete every build of the template a reference names (the tag is ignored, as
    /// `DELETE /templates/{id}` does). False when none matched.
    pub fn delete(&self, reference: &str) -> bool {
        let Some(r) = parse_reference(reference) else {
            return false;
        };
        if r.namespace.is_some_and(|n| n != TEAM_SLUG) {
            return false;
        }
        let template_id = {
            let list = self.list();
            let Some(s) = list.iter().find(|s| {
                s.template_id == r.identifier || s.alias.as_deref() == Some(r.identifier)
            }) else {
                return false;
            };
            s.template_id.clone()
        };
        self.list().retain(|s| s.template_id != template_id);
        // Sandboxes made from it hold copies: removing the build touches none of them.
        let _ = std::fs::remove_dir_all(self.dir.join(&template_id));
        true
    }
}

/// A snapshot template id: 20 characters of `[a-z0-9]`.
pub(crate) fn new_template_id() -> String {
    let id = super::ids::new_sandbox_id();
    id.trim_start_matches('i').to_owned()
}

/// Copy `src` (a file or directory) to `dst` with `cp -a --reflink=auto`.
pub(crate) fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--no-target-directory", "--"])
        .arg(src)
        .arg(dst)
        .stdin(std::process::Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "cp -a {} {}: {}",
            src.display(),
            dst.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The parts of a sandbox root a snapshot carries: (path in the sandbox root, name in the
/// snapshot).
const PARTS: [(&str, &str); 3] = [
    ("fs", "fs"),
    (".e2b/upper", "upper"),
    (".e2b/template", "template"),
];

/// Copy a sandbox root's filesystem state into a new snapshot directory `dst`.
pub(crate) fn capture(sandbox_root: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for (from, to) in PARTS {
        let src = sandbox_root.join(from);
        if src.exists() {
            copy_tree(&src, &dst.join(to))?;
        }
    }
    Ok(())
}

/// Lay a snapshot's state into a new (not yet booted) sandbox root: copied, or moved
/// when `take` (a fork's last user of its staged copy; same filesystem).
pub(crate) fn seed(snapshot_dir: &Path, sandbox_root: &Path, take: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(sandbox_root.join(".e2b"))?;
    for (to, from) in PARTS {
        let src = snapshot_dir.join(from);
        if !src.exists() {
            continue;
        }
        if take {
            std::fs::rename(&src, sandbox_root.join(to))?;
        } else {
            copy_tree(&src, &sandbox_root.join(to))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_like_e2b() {
        let r = parse_reference("local/my-snap:v2").expect("valid");
        assert_eq!(
            (r.namespace, r.identifier, r.tag),
            (Some("local"), "my-snap", Some("v2"))
        );
        let r = parse_reference("abc").expect("valid");
        assert_eq!((r.namespace, r.identifier, r.tag), (None, "abc", None));
        assert!(parse_reference("a/b/c").is_none());
        assert!(parse_reference("x:").is_none());
        assert!(parse_reference("../x").is_none());
    }
}
