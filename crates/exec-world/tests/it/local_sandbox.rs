//! The sandbox conformance suite on `LocalSandboxes`: one directory per conversation
//! under a temp dir, two provider instances on it.

use std::sync::Arc;

use exec_world::sandbox::LocalSandboxes;
use exec_world_conformance::sandbox::SandboxWorld;

async fn world() -> SandboxWorld {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = LocalSandboxes::new(dir.path()).expect("provider");
    let b = LocalSandboxes::new(dir.path()).expect("second provider");
    SandboxWorld::new(Arc::new(a), Arc::new(b), "local").with_guard(dir)
}

exec_world_conformance::sandbox_conformance_tests!(world);

/// Local-only: links that point out of the sandbox directory (absolute host paths) are
/// resolved inside the sandbox, as `openat2(RESOLVE_IN_ROOT)` does: nothing outside is
/// read, written or seen, and the write lands inside the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_links_out_of_the_sandbox_are_refused() {
    use exec_world::sandbox::{CreateSpec, ExecSpec, SandboxProvider as _};
    let dir = tempfile::tempdir().expect("temp dir");
    let outside = tempfile::tempdir().expect("outside dir");
    std::fs::write(outside.path().join("secret"), b"s").expect("outside file");
    let p = LocalSandboxes::new(dir.path()).expect("provider");
    let h = p.create(CreateSpec::new("links")).await.expect("create");
    let o = outside.path().display();
    let r = p
        .exec(
            &h,
            ExecSpec::new(format!(
                "ln -s {o} out && ln -s {o}/secret s && ln -s sub inner && mkdir sub"
            )),
        )
        .await
        .expect("exec");
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    p.write_file(&h, "/workspace/out/new", b"x")
        .await
        .expect("write via dir link: inside the root");
    p.write_file(&h, "/workspace/s", b"y")
        .await
        .expect("write via file link: inside the root");
    let inside = p
        .dir_of(&h)
        .join(outside.path().strip_prefix("/").expect("absolute"));
    assert_eq!(std::fs::read(inside.join("new")).expect("in root"), b"x");
    assert_eq!(std::fs::read(inside.join("secret")).expect("in root"), b"y");
    std::fs::remove_file(inside.join("secret")).expect("remove");
    assert_eq!(
        p.read_file(&h, "/workspace/s", 10).await.expect("read"),
        None,
        "read via file link"
    );
    assert_eq!(
        p.stat(&h, "/workspace/out/secret").await.expect("stat"),
        None,
        "stat via dir link"
    );
    assert!(!outside.path().join("new").exists());
    assert_eq!(
        std::fs::read(outside.path().join("secret")).expect("read"),
        b"s"
    );
    // links inside the sandbox are fine
    p.write_file(&h, "/workspace/inner/f", b"in")
        .await
        .expect("write via inner link");
    let c = p.read_file(&h, "/workspace/sub/f", 10).await.expect("read");
    assert_eq!(c.map(|c| c.data), Some(b"in".to_vec()));
    p.destroy(&h).await.expect("destroy");
}
