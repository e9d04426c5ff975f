//! `Rooted` over LocalFs: the fs conformance suite unchanged inside a virtual root, and
//! the escapes a hostile agent would try (`..`, absolute paths, absolute and relative
//! symlinks, a symlinked parent, link loops), each reaching nothing outside the root,
//! also when a directory is swapped for a link to the outside while the calls run.

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
    let inner = LocalFs::beneath(wp(root)).expect("LocalFs beneath the root");
    Rooted::new(Arc::new(inner), wp(root)).expect("rooted")
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

/// A directory swapped for a link to the outside (`renameat2(RENAME_EXCHANGE)`, as fast
/// as a thread can) while writes, reads, listings, mkdirs, renames and removes go through
/// it: none of them reaches the outside. Rooted checks each component, and the kernel
/// (`LocalFs::beneath`) refuses a link that appears between that check and the call.
/// (Over `LocalFs::new` instead, a read returns the outside's secret within milliseconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_link_mid_call_never_leads_outside() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_g, root, outside) = tree();
    std::fs::create_dir(root.join("d")).expect("d");
    std::os::unix::fs::symlink(&outside, root.join("e")).expect("link");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    root.join("d"),
                    rustix::fs::CWD,
                    root.join("e"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .expect("exchange");
                n += 1;
            }
            n
        })
    };
    let fs = rooted(&root);
    let mut refused = 0;
    for i in 0..1500 {
        let f = v(&format!("/d/f{i}"));
        if fs
            .write(
                &f,
                bytes_stream(Bytes::from_static(b"x")),
                Default::default(),
            )
            .await
            .is_err()
        {
            refused += 1;
        }
        if let Ok(b) = fs.read(&v("/d/secret.txt"), 100).await {
            assert_ne!(&b[..], b"host secret", "read through the swapped link");
        }
        if let Ok(list) = fs.read_dir(&v("/d")).await {
            assert!(
                list.iter().all(|e| e.name != "secret.txt"),
                "listed the outside: {list:?}"
            );
        }
        let _ = fs.mkdir(&v(&format!("/d/m{i}/n")), true).await;
        let _ = fs.rename(&f, &v(&format!("/d/g{i}"))).await;
        let _ = fs.remove(&v(&format!("/d/g{i}")), false).await;
        let _ = fs
            .create_if_absent(&v(&format!("/d/c{i}")), Bytes::from_static(b"c"))
            .await;
        let _ = fs.remove(&v("/d/secret.txt"), false).await;
    }
    stop.store(true, Ordering::Relaxed);
    let n = swaps.join().expect("swapper");
    let mut left: Vec<String> = std::fs::read_dir(&outside)
        .expect("outside")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["secret.txt"],
        "the outside was changed ({n} swaps, {refused} writes refused)"
    );
    assert_eq!(
        std::fs::read(outside.join("secret.txt")).expect("secret"),
        b"host secret"
    );
}
