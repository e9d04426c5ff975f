//! A small system tree made of the host's own programs, for the tests of
//! `--template-root NAME=DIR` (`e2b-local`, `e2bx`): the host's top-level links, some
//! programs in `/usr/bin` with the libraries `ldd` names, an `/etc` with a marker, a file
//! owned by uid 1000 and a skeleton. Test support: panics on any failure.
//!
//! ```no_run
//! let tree = emulator_fixture::system_tree::template_tree(&[]);
//! assert!(tree.0.join("usr/bin/sh").exists());
//! ```

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory removed on drop.
#[derive(Debug)]
pub struct Dir(pub PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The programs of the test's tree (`sh` and `nice` are what the emulator needs, `sleep`
/// its init, `bash` the template's shell, the rest what the commands below use).
pub const PROGRAMS: [&str; 10] = [
    "sh", "bash", "nice", "sleep", "cat", "ls", "stat", "id", "touch", "echo",
];

/// A fresh directory under the temporary directory, named for `name`, removed on drop.
pub fn fresh_dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!(
        "template-root-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("system tree")
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).expect("system tree");
    Dir(d)
}

/// Copy host file `host` (links followed) to `tree` + `at`, keeping its mode.
pub fn copy_in(tree: &Path, host: &Path, at: &Path) {
    let dst = tree.join(at.strip_prefix("/").unwrap_or(at));
    if dst.exists() {
        return;
    }
    std::fs::create_dir_all(dst.parent().expect("system tree")).expect("system tree");
    std::fs::copy(host, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", host.display()));
}

/// The host path of program `name`.
pub fn host_program(name: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("the host has no {name}"))
}

/// The shared libraries `ldd` names for `bin`, as the paths the loader asks for.
pub fn libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("ldd runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A small system tree: the host's top-level links (`bin -> /usr/bin` on a merged-/usr
/// host, made absolute so they must resolve inside the tree), [`PROGRAMS`] in `/usr/bin`
/// with their libraries, an `/etc` with a marker, a file owned by uid 1000 and a skeleton.
pub fn template_tree(extra: &[&str]) -> Dir {
    let d = fresh_dir("tree");
    let tree = &d.0;
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        if let Ok(target) = std::fs::read_link(Path::new("/").join(top)) {
            std::os::unix::fs::symlink(Path::new("/").join(target), tree.join(top))
                .expect("system tree");
        }
    }
    for name in PROGRAMS.iter().chain(extra) {
        let host = host_program(name);
        let real = std::fs::canonicalize(&host).expect("system tree");
        copy_in(tree, &real, &Path::new("/usr/bin").join(name));
        for lib in libraries(&real) {
            // Through the host's directory links, as the tree has them too.
            let dir =
                std::fs::canonicalize(lib.parent().expect("system tree")).expect("system tree");
            let real_lib = std::fs::canonicalize(&lib).expect("system tree");
            copy_in(
                tree,
                &real_lib,
                &dir.join(lib.file_name().expect("system tree")),
            );
        }
    }
    for dir in ["etc/skel", "home", "tmp", "root", "usr/share"] {
        std::fs::create_dir_all(tree.join(dir)).expect("system tree");
    }
    std::fs::write(tree.join("etc/template-marker"), "from the template\n").expect("system tree");
    std::fs::write(tree.join("etc/skel/.template-profile"), "# skel\n").expect("system tree");
    let theirs = tree.join("etc/owned-by-1000");
    std::fs::write(&theirs, "x\n").expect("system tree");
    std::os::unix::fs::chown(&theirs, Some(1000), Some(1000)).expect("system tree");
    std::fs::set_permissions(tree.join("tmp"), std::fs::Permissions::from_mode(0o1777))
        .expect("system tree");
    d
}

/// Copy host paths (files or whole directories, modes kept) into `tree`, plus the
/// libraries of every shared object among them.
pub fn copy_tree_in(tree: &Path, paths: &[&str]) {
    for p in paths {
        let host = Path::new(p);
        if !host.exists() {
            continue;
        }
        let dst = tree.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().expect("system tree")).expect("system tree");
        let ok = Command::new("cp")
            .arg("-aLT")
            .arg(host)
            .arg(&dst)
            .status()
            .expect("system tree")
            .success();
        assert!(ok, "cp {p}");
        let mut objects = vec![dst.clone()];
        while let Some(o) = objects.pop() {
            if o.is_dir() {
                objects.extend(
                    std::fs::read_dir(&o)
                        .expect("system tree")
                        .map(|e| e.expect("system tree").path()),
                );
            } else if o.to_string_lossy().contains(".so") {
                for lib in libraries(&o) {
                    let dir = std::fs::canonicalize(lib.parent().expect("system tree"))
                        .expect("system tree");
                    let real = std::fs::canonicalize(&lib).expect("system tree");
                    copy_in(
                        tree,
                        &real,
                        &dir.join(lib.file_name().expect("system tree")),
                    );
                }
            }
        }
    }
}
