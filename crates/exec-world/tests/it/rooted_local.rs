//! `Rooted` over LocalFs: the fs conformance suite unchanged inside a virtual root, and
//! the escapes a hostile agent would try (`..`, absolute paths, absolute and relative
//! symlinks, a symlinked parent, link loops), each reaching nothing outside the root.

use std::sync::Arc;

use bytes::Bytes;
use exec_world::{ErrorKind, Fs, LocalFs, LocalSubprocess, Rooted, WorldPath, bytes_stream};
use exec_world_conformance::World;

/// A real directory holding `root/` (the anchor) and `outside/secret.txt`; removed at
/// the end.
struct Tree(std::path::PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tree() -> (Tree, std::path::PathBuf, std::path::PathBuf) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "exec-world-rooted-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let root = dir.join("root");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret.txt"), b"host secret").expect("secret");
    (Tree(dir), root, outside)
}

fn wp(p: &std::path::Path) -> WorldPath {
    WorldPath::new(p.to_str().expect("utf-8")).expect("path")
}

fn v(s: &str) -> WorldPath {
    WorldPath::new(s).expect("path")
}

fn rooted(root: &std::path::Path) -> Rooted {
    Rooted::new(Arc::new(LocalFs::new().expect("LocalFs")), wp(root)).expect("rooted")
}

async fn world() -> World {
    let (guard, root, _) = tree();
    std::fs::create_dir(root.join("scratch")).expect("scratch");
    let fs = rooted(&root);
    let proc = LocalSubprocess::new().expect("LocalSubprocess");
    World::new(Arc::new(fs), Arc::new(proc), v("/scratch"))
        .with_proc_root(wp(&root))
        .with_guard(guard)
}

exec_world_conformance::fs_conformance_tests!(world);

mod watch {
    use super::world;
    exec_world_conformance::watch_conformance_tests!(world);
}

mod tree {
    use super::world;
    exec_world_conformance::tree_conformance_tests!(world);
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_stay_inside() {
    let (_g, root, _) = tree();
    std::fs::write(root.join("inside.txt"), b"inside").expect("write");
    let fs = rooted(&root);
    for p in [
        "/../outside/secret.txt",
        "../../outside/secret.txt",
        "/outside/secret.txt",
    ] {
        let r = fs.read(&v(p), 1 << 20).await;
        assert!(
            matches!(r, Err(ref e) if e.kind() == ErrorKind::NotFound),
            "{p}: {r:?} (must not reach the real outside/)"
        );
    }
    assert_eq!(
        fs.read(&v("/../../inside.txt"), 100).await.expect("read"),
        Bytes::from_static(b"inside")
    );
    // A relative cwd view keeps the same root.
    let sub = fs.with_cwd(&v("/a/b"));
    assert_eq!(
        sub.read(&v("../../../../inside.txt"), 100)
            .await
            .expect("read"),
        Bytes::from_static(b"inside")
    );
}

#[tokio::test]
async fn symlinks_resolve_inside_the_root() {
    let (_g, root, outside) = tree();
    std::fs::create_dir(root.join("etc")).expect("etc");
    std::fs::write(root.join("etc/passwd"), b"the root's passwd").expect("write");
    let link = |target: &std::path::Path, at: &str| {
        std::os::unix::fs::symlink(target, root.join(at)).expect("symlink")
    };
    // absolute link text: re-anchored at the root, never the host's /etc
    link(std::path::Path::new("/etc/passwd"), "abs");
    // a link to the real outside directory by its real path: re-anchored, so missing
    link(&outside, "out");
    // relative escape: clamped at the root
    link(
        std::path::Path::new("../../../../outside/secret.txt"),
        "rel",
    );
    // a symlinked parent directory
    link(std::path::Path::new("/etc"), "etcdir");
    // a loop
    link(std::path::Path::new("loop2"), "loop1");
    link(std::path::Path::new("loop1"), "loop2");
    let fs = rooted(&root);
    assert_eq!(
        fs.read(&v("/abs"), 100).await.expect("abs"),
        Bytes::from_static(b"the root's passwd")
    );
    assert_eq!(
        fs.read(&v("/etcdir/passwd"), 100).await.expect("etcdir"),
        Bytes::from_static(b"the root's passwd")
    );
    for p in ["/out/secret.txt", "/rel"] {
        let r = fs.read(&v(p), 100).await;
        assert!(
            matches!(r, Err(ref e) if e.kind() == ErrorKind::NotFound),
            "{p}: {r:?}"
        );
    }
    let r = fs.stat(&v("/loop1")).await;
    assert!(
        matches!(r, Err(ref e) if e.kind() == ErrorKind::InvalidPath),
        "loop: {r:?}"
    );
    // Writes through a link to the outside land inside the root, or nowhere.
    fs.write(
        &v("/out/planted.txt"),
        bytes_stream(Bytes::from_static(b"x")),
        exec_world::WriteOptions::default().create_parents(true),
    )
    .await
    .expect("write lands inside");
    assert!(!outside.join("planted.txt").exists(), "escaped the root");
    assert!(
        root.join(outside.strip_prefix("/").expect("abs"))
            .join("planted.txt")
            .exists()
    );
    // Listings and errors name virtual paths only.
    let entries = fs.read_dir(&v("/etcdir")).await.expect("list");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].path.as_str(), "/etc/passwd");
    let missing = fs.stat(&v("/etcdir/nope")).await.expect_err("missing");
    let shown = missing.to_string();
    assert!(!shown.contains(root.to_str().expect("utf-8")), "{shown}");
    assert!(shown.contains("/etc/nope"), "{shown}");
}

#[tokio::test]
async fn the_root_itself_cannot_be_removed_or_renamed() {
    let (_g, root, _) = tree();
    let fs = rooted(&root);
    assert!(matches!(
        fs.remove(&v("/.."), true).await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
    assert!(matches!(
        fs.rename(&v("/"), &v("/x")).await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
    fs.mkdir(&v("/"), true)
        .await
        .expect("recursive mkdir of / is a no-op");
    assert!(root.is_dir());
}
