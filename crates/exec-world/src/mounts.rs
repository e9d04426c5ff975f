//! Reading this process's view of mounts and cgroups from `/proc/self`: where its cgroup
//! v2 directory is (the local cgroup per spawn, the emulator's per-sandbox subtree) and
//! how `/proc/self/mountinfo` escapes paths.

use std::path::{Path, PathBuf};

/// A `/proc/self/mountinfo` path field with its octal escapes (`\040` for a space, `\011`,
/// `\012`, `\134`) decoded.
///
/// ```
/// assert_eq!(exec_world::mounts::unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
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
/// if let Some(dir) = exec_world::mounts::own_cgroup_dir() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_octal_and_keeps_the_rest() {
        assert_eq!(unescape_mountinfo(r"/a\040b\011c"), "/a b\tc");
        assert_eq!(unescape_mountinfo(r"/trailing\04"), r"/trailing\04");
        assert_eq!(unescape_mountinfo(r"/not\9990"), r"/not\9990");
    }
}
