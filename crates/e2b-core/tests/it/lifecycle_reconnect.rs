//! e2b-core's lifecycle owner finding sandboxes again: by id, by the logical name kept in
//! metadata (running or paused; a paused one is resumed with its files), and
//! connect-or-create.

use crate::e2b_core_support;

use std::time::Duration;

use e2b_core::lifecycle::{
    LifecycleError, NAME_METADATA_KEY, OwnerOptions, Ownership, SandboxOwner, ShutdownOutcome,
    find_by_name,
};
use e2b_core::proto::control::SandboxState;
use e2b_core::{CreateOptions, PauseOptions, StartProcess};
use e2b_core_support::{client, emulator, within};
use testing_fake::Plane;

#[tokio::test]
async fn lifecycle_reconnect_by_name_resumes_a_paused_sandbox_with_its_files() {
    let emu = emulator().await;
    let c = client(&emu);
    let first = SandboxOwner::create(
        &c,
        OwnerOptions::new(CreateOptions::new("base").metadata("team", "a")).name("conv-7"),
    )
    .await
    .expect("create");
    let h = first.handle().await.expect("handle");
    h.api()
        .upload_bytes(
            &format!("{}/notes.txt", h.workdir()),
            None,
            bytes::Bytes::from_static(b"kept"),
        )
        .await
        .expect("write");
    let detail = c.get(first.sandbox_id()).await.expect("get");
    assert_eq!(
        detail
            .listed
            .metadata
            .as_ref()
            .and_then(|m| m.get(NAME_METADATA_KEY))
            .map(String::as_str),
        Some("conv-7")
    );

    // pause it (the first owner is dropped without shutdown: the sandbox stays)
    c.pause(first.sandbox_id(), PauseOptions::default())
        .await
        .expect("pause");
    let id = first.sandbox_id().to_owned();
    drop((h, first));
    assert_eq!(
        c.get(&id).await.expect("get").listed.state,
        SandboxState::Paused
    );
    let found = find_by_name(&c, "conv-7")
        .await
        .expect("list")
        .expect("found");
    assert_eq!(found.sandbox_id, id);
    assert_eq!(found.state, SandboxState::Paused);

    let again = within(
        "reconnect",
        SandboxOwner::connect_by_name(&c, "conv-7", OwnerOptions::default(), Ownership::Owned),
    )
    .await
    .expect("reconnect by name");
    assert_eq!(again.sandbox_id(), id);
    let h = again.handle().await.expect("handle");
    assert_eq!(
        c.get(&id).await.expect("get").listed.state,
        SandboxState::Running
    );
    let text = h
        .api()
        .download_bytes(&format!("{}/notes.txt", h.workdir()), None, 64)
        .await
        .expect("read");
    assert_eq!(text, b"kept");
    let out = h
        .api()
        .run(StartProcess::shell("echo alive").cwd(h.workdir()))
        .await
        .expect("exec");
    assert_eq!(out.stdout, b"alive\n");

    // unknown names are typed errors
    let err = SandboxOwner::connect_by_name(&c, "nope", OwnerOptions::default(), Ownership::Owned)
        .await
        .expect_err("unknown");
    assert!(
        matches!(&err, LifecycleError::NameNotFound { name } if name == "nope"),
        "{err}"
    );

    assert_eq!(
        again.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Deleted
    );
    assert!(find_by_name(&c, "conv-7").await.expect("list").is_none());
}

#[tokio::test]
async fn lifecycle_reconnect_by_id_and_connect_or_create() {
    let emu = emulator().await;
    let c = client(&emu);
    // connect_or_create: creates once, then finds the same sandbox
    let a = SandboxOwner::connect_or_create(&c, "conv-9", OwnerOptions::default())
        .await
        .expect("create");
    a.handle().await.expect("handle");
    let b = SandboxOwner::connect_or_create(&c, "conv-9", OwnerOptions::default())
        .await
        .expect("connect");
    assert_eq!(a.sandbox_id(), b.sandbox_id());
    assert_eq!(
        emu.counters().get_on(Plane::Control, "POST /v2/sandboxes"),
        1
    );
    b.handle().await.expect("handle");

    // by id, paused then resumed; a borrowed owner leaves it running
    c.pause(a.sandbox_id(), PauseOptions::default())
        .await
        .expect("pause");
    let byo = SandboxOwner::connect(
        &c,
        a.sandbox_id(),
        OwnerOptions::default().timeout(Duration::from_secs(120)),
        Ownership::Borrowed,
    )
    .await
    .expect("connect by id");
    byo.handle().await.expect("handle");
    assert_eq!(
        byo.shutdown().await.expect("release"),
        ShutdownOutcome::Released
    );
    assert_eq!(
        c.get(a.sandbox_id()).await.expect("get").listed.state,
        SandboxState::Running
    );
    assert_eq!(
        a.shutdown().await.expect("delete"),
        ShutdownOutcome::Deleted
    );
    assert_eq!(
        b.shutdown().await.expect("already gone"),
        ShutdownOutcome::AlreadyGone
    );
}
