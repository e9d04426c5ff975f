//! The `fork` test of the sandbox conformance suite (re-exported from
//! [`super::sandbox`]): the fork starts with the source's files of that instant and none
//! of its processes, diverges from it, the source keeps running untouched, and names
//! follow create's same-name replacement.

use std::time::Duration;

use exec_world::ErrorKind;
use exec_world::sandbox::{ExecSpec, ResumeOutcome, SandboxHandle, SandboxProvider};

use super::sandbox::SandboxWorld;

async fn out(p: &dyn SandboxProvider, h: &SandboxHandle, cmd: &str) -> String {
    p.exec(h, ExecSpec::new(cmd).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"))
        .stdout
}

/// Whether `tick` (rewritten every 50 ms by a ticker, when one runs there) changes.
async fn ticking(p: &dyn SandboxProvider, h: &SandboxHandle) -> bool {
    let a = out(p, h, "cat tick 2>/dev/null").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    a != out(p, h, "cat tick 2>/dev/null").await
}

/// fork: files of that instant, no process, divergence, same-name replacement.
pub async fn sb_fork(w: &SandboxWorld) {
    let p = &*w.provider;
    let src = w.create("fork-src").await;
    p.write_file(&src, "/workspace/state.txt", b"at fork")
        .await
        .expect("write");
    out(
        p,
        &src,
        "nohup bash -c 'while true; do date +%s%N > tick.new; mv tick.new tick; sleep 0.05; done' >/dev/null 2>&1 &",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let fork = p.fork(&src, &w.name("fork-dst")).await.expect("fork");
    assert_ne!(fork, src);
    assert!(
        !ticking(p, &fork).await,
        "a process of the source runs in the fork"
    );
    assert!(ticking(p, &src).await, "the source's process stopped");
    let read = |h: SandboxHandle| async move {
        p.read_file(&h, "/workspace/state.txt", 100)
            .await
            .expect("read")
            .map(|c| c.data)
    };
    assert_eq!(read(fork.clone()).await, Some(b"at fork".to_vec()));
    p.write_file(&fork, "/workspace/state.txt", b"fork's own")
        .await
        .expect("write in the fork");
    p.write_file(&src, "/workspace/only-src", b"x")
        .await
        .expect("write in the source");
    assert_eq!(read(src.clone()).await, Some(b"at fork".to_vec()));
    assert_eq!(read(fork.clone()).await, Some(b"fork's own".to_vec()));
    assert_eq!(
        p.stat(&fork, "/workspace/only-src").await.expect("stat"),
        None
    );

    // Same-name replacement: a second fork of that name replaces the first.
    let again = w
        .second
        .fork(&src, &w.name("fork-dst"))
        .await
        .expect("fork again");
    assert_ne!(again, fork);
    assert_eq!(p.resume(&fork).await.expect("resume"), ResumeOutcome::Gone);
    assert_eq!(read(again.clone()).await, Some(b"at fork".to_vec()));
    // Forking onto the source's own name would replace the source: refused.
    let e = p
        .fork(&src, &w.name("fork-src"))
        .await
        .expect_err("fork onto its own name");
    assert!(e.kind() == ErrorKind::InvalidSpec, "{e}");
    assert!(ticking(p, &src).await, "the source still runs");
    for h in [&src, &again] {
        p.destroy(h).await.expect("destroy");
    }
}
