//! The lifecycle owner's one handle shared by the fs and subprocess adapters: both live in
//! the same remote tree (the prepared workdir) and process world, unchanged adapters report
//! activity through the keep-alive decorator, and a fresh lease costs no control-plane
//! request.

use bytes::Bytes;
use e2b_core::lifecycle::{KeepAliveConfig, OwnerOptions, SandboxOwner};
use emulator_fixture::{client, emulator};
use exec_world::{Fs as _, SpawnSpec, Subprocess as _, WorldPath};
use fs_e2b::{E2bFs, E2bFsOptions};
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};
use testing_fake::Plane;

#[tokio::test]
async fn lifecycle_adapters_share_one_handle_and_one_tree() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::default().keepalive(KeepAliveConfig::new()),
    )
    .await
    .expect("create");
    let h = owner.handle().await.expect("handle");
    let cwd = WorldPath::new(h.workdir()).expect("workdir");
    let fs = E2bFs::new(h.api(), E2bFsOptions::new(h.workdir())).expect("E2bFs");
    let sub =
        E2bSubprocess::new(h.api(), E2bSubprocessOptions::new(h.workdir())).expect("E2bSubprocess");
    emu.counters().reset();

    fs.create_if_absent(
        &cwd.join("a.txt").expect("path"),
        Bytes::from_static(b"from fs"),
    )
    .await
    .expect("write");
    let child = sub
        .spawn(SpawnSpec::new("/bin/sh").args(["-c", "cat a.txt > b.txt && echo $$ > pid.txt"]))
        .expect("spawn");
    assert!(child.wait().await.expect("wait").success());
    let b = fs
        .read(&cwd.join("b.txt").expect("path"), 1024)
        .await
        .expect("read");
    assert_eq!(&b[..], b"from fs");

    assert_eq!(
        emu.counters().plane_total(Plane::Control),
        0,
        "fresh lease: no control-plane request"
    );
    let ka = h.keepalive().expect("keep-alive on");
    assert_eq!(ka.stats().renewals, 0);
    assert!(emu.counters().plane_total(Plane::Envd) > 0);
    owner.shutdown().await.expect("shutdown");
}
