//! The conformance suite run against LocalFs and LocalSubprocess.

use std::sync::Arc;

use exec_world::{LocalFs, LocalSubprocess, WorldPath};
use exec_world_conformance::World;

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

exec_world_conformance::fs_conformance_tests!(world);

mod watch {
    use super::world;
    exec_world_conformance::watch_conformance_tests!(world);
}

mod tree {
    use super::world;
    exec_world_conformance::tree_conformance_tests!(world);
}
exec_world_conformance::proc_conformance_tests!(world);

/// A world whose durable records live in its own state directory (inside the scratch
/// directory), with fresh `LocalSubprocess` instances on the same state directory.
async fn durable_world() -> World {
    let w = world().await;
    let state = std::path::PathBuf::from(w.scratch.as_str()).join(".state");
    let make = {
        let state = state.clone();
        move || {
            LocalSubprocess::new()
                .expect("LocalSubprocess")
                .with_state_dir(&state)
        }
    };
    let proc: Arc<dyn exec_world::Subprocess> = Arc::new(make());
    World::new(w.fs.clone(), proc, w.scratch.clone())
        .with_fresh_proc(move || {
            let p: Arc<dyn exec_world::Subprocess> = Arc::new(make());
            Box::pin(async move { p })
        })
        .with_guard(w)
}

mod durable {
    use super::durable_world;
    exec_world_conformance::durable_conformance_tests!(durable_world);
}
exec_world_conformance::terminal_conformance_tests!(world);

/// Every `pub async fn` of the suite is in the lists the macros and `*_tests()` use.
#[test]
fn lists_cover_every_suite_function() {
    use exec_world_conformance::{durable_tests, fs_tests, proc_tests, terminal_tests};
    let sources = [
        (
            include_str!("../../../exec-world-conformance/src/fs.rs"),
            fs_tests(),
        ),
        (
            include_str!("../../../exec-world-conformance/src/proc.rs"),
            proc_tests(),
        ),
        (
            include_str!("../../../exec-world-conformance/src/terminal.rs"),
            terminal_tests(),
        ),
        (
            include_str!("../../../exec-world-conformance/src/durable.rs"),
            durable_tests(),
        ),
    ];
    for (src, list) in sources {
        let names: Vec<&str> = list.iter().map(|(n, _)| *n).collect();
        for line in src.lines() {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                let name = rest.split('(').next().unwrap_or_default();
                assert!(
                    names.contains(&name),
                    "{name} is missing from the test lists"
                );
            }
        }
    }
}

/// The `(name, fn)` lists run like the macros (one shared world, a scratch dir each).
#[tokio::test]
async fn lists_run_on_a_shared_world() {
    let world = world().await;
    for (name, test) in exec_world_conformance::fs_tests() {
        if name == "fs_large_file_streaming" {
            continue; // covered by its own test; keeps this one quick
        }
        let scratch = world.path(name);
        world.fs.mkdir(&scratch, false).await.expect("mkdir");
        let sub = World::new(world.fs.clone(), world.proc.clone(), scratch);
        test(&sub).await;
    }
}
