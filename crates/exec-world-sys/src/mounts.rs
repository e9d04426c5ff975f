//! Reading this process's view of mounts and cgroups from `/proc/self`: where its cgroup
//! v2 directory is (the local cgroup per spawn, the emulator's per-sandbox subtree) and
//! how `/proc/self/mountinfo` escapes paths.

use std::path::{Path, PathBuf};

/// A `/proc/self/mountinfo` path field with its octal escapes (`\040` for a space, `\011`,
/// `\012`, `\134`) decoded.
///
/// ```
/// assert_eq!(exec_world_sys::mounts::unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
/// ```
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(v) = s
                .get(i + 1..i + 4)
                .and_then(|oct| u8::from_str_radix(oct, 8).ok())
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup v2 directory: the host's cgroup2 mount (from
/// `/proc/self/mountinfo`; hybrid hosts have it at `/sys/fs/cgroup/unified`) joined with
/// the `0::` line of `/proc/self/cgroup`. `None` without a cgroup2 mount.
///
/// ```no_run
/// if let Some(dir) = exec_world_sys::mounts::own_cgroup_dir() {
///     println!("{}", dir.join("cgroup.procs").display());
/// }
/// ```
pub fn own_cgroup_dir() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next() == Some("cgroup2")).then_some(())?;
        let mut f = left.split_whitespace();
        let root = unescape_mountinfo(f.nth(3)?);
        Some((root, unescape_mountinfo(f.next()?)))
    })?;
    let rel = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(own);
    Some(Path::new(&mount).join(rel.trim_start_matches('/')))
}

/// The entries of `dir` named `<prefix><pid>` or `<prefix><pid>-<anything>` whose process
/// is gone (not this process, no `/proc/<pid>`): what processes that died left behind (a
/// process cannot remove its own cgroup directory at exit).
///
/// ```no_run
/// # let own = std::path::Path::new("/sys/fs/cgroup");
/// for dir in exec_world_sys::mounts::orphaned_dirs(own, "exec-world-") {
///     let _ = std::fs::remove_dir(dir);
/// }
/// ```
pub fn orphaned_dirs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            pid.is_some_and(|pid| {
                pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
            })
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_octal_and_keeps_the_rest() {
        assert_eq!(unescape_mountinfo(r"/a\040b\011c"), "/a b\tc");
        assert_eq!(unescape_mountinfo(r"/trailing\04"), r"/trailing\04");
        assert_eq!(unescape_mountinfo(r"/not\9990"), r"/not\9990");
    }

    #[test]
    fn orphaned_dirs_are_those_of_gone_processes() {
        let dir = std::env::temp_dir().join(format!("mounts-test-{}", std::process::id()));
        let me = std::process::id();
        // pid_max is at most 2^22: this pid never exists.
        for name in [
            format!("x-{me}"),
            format!("x-{me}-1"),
            "x-99999999-2".into(),
            "y-99999999".into(),
        ] {
            std::fs::create_dir_all(dir.join(name)).expect("mkdir");
        }
        let found = orphaned_dirs(&dir, "x-");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, vec![dir.join("x-99999999-2")]);
    }
}
