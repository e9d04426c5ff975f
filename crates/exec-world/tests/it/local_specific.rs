//! Local-adapter behaviour beyond the shared suite.

use std::os::unix::fs::MetadataExt;

use exec_world::{ErrorKind, Fs, LocalFs, SpawnSpec, Subprocess, WorldPath, bytes_stream};

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("exec-world-local-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// As root, a replaced file keeps its owner (the temp file is chowned before the rename).
#[tokio::test]
async fn write_keeps_owner_when_root() {
    let dir = scratch("owner");
    let f = dir.join("owned.txt");
    std::fs::write(&f, b"old").expect("seed");
    if std::os::unix::fs::chown(&f, Some(4321), Some(4321)).is_err() {
        let _ = std::fs::remove_dir_all(&dir);
        return; // not root: nothing to check
    }
    let fs = LocalFs::new().expect("fs");
    let p = WorldPath::new(f.to_str().expect("utf-8")).expect("path");
    fs.write(&p, bytes_stream(&b"new"[..]), Default::default())
        .await
        .expect("write");
    let m = std::fs::metadata(&f).expect("stat");
    assert_eq!((m.uid(), m.gid()), (4321, 4321));
    assert_eq!(std::fs::read(&f).expect("read"), b"new");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NUL byte in an argument is an invalid spec, not a panic.
#[tokio::test]
async fn nul_in_argument_is_invalid_spec() {
    let proc = exec_world::LocalSubprocess::new().expect("proc");
    let r = proc.spawn(SpawnSpec::new("echo").arg("a\0b"));
    assert!(
        matches!(r, Err(ref e) if e.kind() == ErrorKind::InvalidSpec),
        "{r:?}"
    );
}

/// Spawning outside a tokio runtime is an error, not a panic.
#[test]
fn spawn_outside_runtime_is_an_error() {
    let proc = exec_world::LocalSubprocess::new().expect("proc");
    assert!(proc.spawn(SpawnSpec::new("true")).is_err());
}
