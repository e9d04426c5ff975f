//! `Rooted` over `E2bFs` on the emulator: the fs conformance suite unchanged inside a
//! virtual `/` anchored at `/home/user` (the bring-your-own workspace's default), and
//! symlinks planted by the sandbox user that point out of the workspace resolving inside
//! it.

use crate::fs_e2b_support;

use std::sync::Arc;

use bytes::Bytes;
use exec_world::{ErrorKind, Fs, Rooted, Subprocess, WorldPath};
use exec_world_conformance::World;
use fs_e2b_support::env;

fn v(s: &str) -> WorldPath {
    WorldPath::new(s).expect("path")
}

async fn world() -> World {
    let env = env().await;
    let name = format!("scratch-{}", e2b_core::trusted_shell::random_suffix());
    let fs = Rooted::new(Arc::new(env.fs.clone()), v("/home/user")).expect("rooted");
    let scratch = v(&format!("/{name}"));
    fs.mkdir(&scratch, false).await.expect("mkdir scratch");
    let proc: Arc<dyn Subprocess> = Arc::new(
        subprocess_e2b::E2bSubprocess::new(
            env.api.clone(),
            subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
        )
        .expect("E2bSubprocess"),
    );
    World::new(Arc::new(fs), proc, scratch)
        .with_proc_root(v("/home/user"))
        .with_guard(env)
}

exec_world_conformance::fs_conformance_tests!(world);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_by_the_sandbox_user_stay_in_the_workspace() {
    let env = env().await;
    let sh = |script: &str| {
        let api = env.api.clone();
        let script = script.to_owned();
        async move {
            let out = api
                .run(e2b_core::StartProcess::new("/bin/sh").args(["-c", &script]))
                .await
                .expect("run");
            assert_eq!(out.end.exit_code, 0, "{script}: {:?}", out.stderr);
        }
    };
    sh(
        "mkdir -p /home/user/etc && echo workspace > /home/user/etc/hostname && \
        ln -s /etc/hostname /home/user/abs && ln -s ../../../etc/passwd /home/user/rel && \
        ln -s /etc /home/user/etcdir",
    )
    .await;
    let fs = Rooted::new(Arc::new(env.fs.clone()), v("/home/user")).expect("rooted");
    assert_eq!(
        fs.read(&v("/abs"), 100).await.expect("abs"),
        Bytes::from_static(b"workspace\n")
    );
    assert_eq!(
        fs.read(&v("/etcdir/hostname"), 100).await.expect("etcdir"),
        Bytes::from_static(b"workspace\n")
    );
    let r = fs.read(&v("/rel"), 100).await;
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::NotFound),
        "{r:?}"
    );
    let r = fs.read(&v("/../../etc/passwd"), 1 << 20).await;
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::NotFound),
        "{r:?}"
    );
}
