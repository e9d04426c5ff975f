//! The conformance suite run against LocalFs and LocalSubprocess.

#![cfg(feature = "conformance")]

use std::sync::Arc;

use exec_world::conformance::World;
use exec_world::{LocalFs, LocalSubprocess, WorldPath};

/// Removes the scratch directory when the test ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn world() -> World {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "exec-world-conformance-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let scratch = WorldPath::new(dir.to_str().expect("utf-8 temp dir")).expect("path");
    let fs = LocalFs::new().expect("LocalFs");
    let proc = LocalSubprocess::new().expect("LocalSubprocess");
    World::new(Arc::new(fs), Arc::new(proc), scratch).with_guard(Scratch(dir))
}

exec_world::fs_conformance_tests!(world);
exec_world::proc_conformance_tests!(world);
exec_world::terminal_conformance_tests!(world);
