//! e2b-core's lifecycle owner against the emulator: setup (workdir, 0700 state dir), the
//! shared handle, each setup failure path, shutdown (in flight, gone sandbox), bring your
//! own sandbox, and the API key never reaching the sandbox.

use crate::e2b_core_support;

use std::sync::Arc;
use std::time::Duration;

use e2b_core::lifecycle::{
    KeepAliveConfig, LifecycleError, OwnerOptions, Ownership, PathKind, SandboxOwner,
    ShutdownOutcome,
};
use e2b_core::{CreateOptions, EnvdApi, Error, StartProcess};
use e2b_core_support::{client, emulator, within};
use testing_fake::{FaultAction, FaultRule, Plane};

const DELETE: &str = "DELETE /sandboxes/{sandboxID}";

async fn sh(api: &Arc<dyn EnvdApi>, script: &str) -> String {
    let out = api
        .run(StartProcess::shell(script))
        .await
        .expect("run command");
    assert_eq!(
        out.end.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

#[tokio::test]
async fn lifecycle_setup_prepares_workdir_and_private_state_dir() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = within(
        "create",
        SandboxOwner::create(
            &c,
            OwnerOptions::new(CreateOptions::new("base")).workdir("/home/user//workspace/"),
        ),
    )
    .await
    .expect("create owner");
    assert_eq!(owner.ownership(), Ownership::Owned);
    let h = within("handle", owner.handle()).await.expect("handle");
    let h2 = owner.handle().await.expect("second handle");
    assert!(Arc::ptr_eq(&h.api(), &h2.api()), "one shared handle");
    assert_eq!(h.workdir(), "/home/user/workspace");
    assert_eq!(h.state_dir(), "/home/user/workspace/.e2b-state");
    assert_eq!(h.sandbox_id(), owner.sandbox_id());

    let shell = h.trusted_shell();
    assert!(
        shell.home().starts_with("/.e2b-control-"),
        "{}",
        shell.home()
    );
    let out = shell
        .run_ok(
            r#"stat -c '%F %U %a' -- "$1" "$2"; printf '%s\n' "$HOME""#,
            &[h.workdir(), h.state_dir()],
        )
        .await
        .expect("stat");
    let text = out.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "directory user 755", "{text}");
    assert_eq!(lines[1], "directory root 700", "{text}");
    assert_eq!(lines[2], shell.home());

    // the default user works in the workdir and cannot look into the state dir
    let api = h.api();
    assert_eq!(
        sh(&api, "cd /home/user/workspace && touch a && pwd && id -un").await,
        "/home/user/workspace\nuser"
    );
    let denied = api
        .run(StartProcess::shell("ls /home/user/workspace/.e2b-state"))
        .await
        .expect("run");
    assert_ne!(denied.end.exit_code, 0);

    // no login profile of the user's mutable home runs before shell commands
    sh(
        &api,
        "for f in .profile .bashrc .bash_profile; do echo 'touch /tmp/profile-ran' > /home/user/$f; done",
    )
    .await;
    shell.run_ok("true", &[]).await.expect("shell command");

    // setup again on the same sandbox is idempotent (reconnect by id)
    let again = SandboxOwner::connect(
        &c,
        owner.sandbox_id(),
        OwnerOptions::default(),
        Ownership::Borrowed,
    )
    .await
    .expect("connect");
    again.handle().await.expect("setup again");
    assert_eq!(
        again.shutdown().await.expect("release"),
        ShutdownOutcome::Released
    );
    let ran = api
        .run(StartProcess::new("/bin/sh").args(["-c", "test -e /tmp/profile-ran"]))
        .await
        .expect("run");
    assert_ne!(ran.end.exit_code, 0, "a login profile ran");

    assert_eq!(
        owner.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Deleted
    );
    assert!(matches!(
        owner.handle().await,
        Err(LifecycleError::ShuttingDown)
    ));
    assert!(
        c.get(owner.sandbox_id())
            .await
            .is_err_and(|e| e.is_sandbox_not_found())
    );
    // idempotent, no second delete
    assert_eq!(
        owner.shutdown().await.expect("again"),
        ShutdownOutcome::Deleted
    );
    assert_eq!(emu.counters().get_on(Plane::Control, DELETE), 1);
}

#[tokio::test]
async fn lifecycle_invalid_workdir_fails_before_any_request() {
    let emu = emulator().await;
    let c = client(&emu);
    for bad in ["workspace", "", "/home/user/../etc", "/"] {
        let err = SandboxOwner::create(&c, OwnerOptions::default().workdir(bad))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, LifecycleError::InvalidWorkdir { .. }),
            "{bad:?}: {err}"
        );
    }
    let err = SandboxOwner::create(&c, OwnerOptions::default().state_dir_name("a/b"))
        .await
        .expect_err("refused");
    assert!(matches!(err, LifecycleError::InvalidOption(_)), "{err}");
    let err = SandboxOwner::connect_by_name(
        &c,
        "x",
        OwnerOptions::default().workdir("rel"),
        Ownership::Owned,
    )
    .await
    .expect_err("refused");
    assert!(matches!(err, LifecycleError::InvalidWorkdir { .. }));
    assert_eq!(emu.counters().total(), 0, "no request at all");
}

#[tokio::test]
async fn lifecycle_symlinked_reserved_dir_is_refused_and_the_sandbox_deleted() {
    let emu = emulator().await;
    let c = client(&emu);

    // create path: /proc/self is a symlink in every Linux sandbox
    let owner = SandboxOwner::create(&c, OwnerOptions::default().workdir("/proc/self/ws"))
        .await
        .expect("created");
    let err = within("handle", owner.handle()).await.expect_err("refused");
    match &err {
        LifecycleError::ReservedPath { path, kind } => {
            assert_eq!(path, "/proc/self");
            assert_eq!(*kind, PathKind::Symlink);
        }
        other => panic!("unexpected {other}"),
    }
    // every waiter sees the same original error
    let again = owner.handle().await.expect_err("same error");
    assert_eq!(again.to_string(), err.to_string());
    assert!(
        c.get(owner.sandbox_id())
            .await
            .is_err_and(|e| e.is_sandbox_not_found())
    );
    assert_eq!(emu.counters().get_on(Plane::Control, DELETE), 1);
    assert_eq!(
        owner.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Deleted
    );
    assert_eq!(
        emu.counters().get_on(Plane::Control, DELETE),
        1,
        "setup's cleanup is not repeated"
    );

    // owned reconnect of a sandbox whose workdir was replaced by a symlink
    let raw = c.create(&CreateOptions::new("base")).await.expect("create");
    let api = raw.clone().into_api();
    sh(
        &api,
        "mkdir -p /tmp/elsewhere && ln -s /tmp/elsewhere /home/user/workspace",
    )
    .await;
    let owner = SandboxOwner::connect(&c, raw.id(), OwnerOptions::default(), Ownership::Owned)
        .await
        .expect("connect");
    let err = owner.handle().await.expect_err("refused");
    assert!(
        matches!(&err, LifecycleError::ReservedPath { path, kind: PathKind::Symlink } if path == "/home/user/workspace"),
        "{err}"
    );
    assert!(
        c.get(raw.id())
            .await
            .is_err_and(|e| e.is_sandbox_not_found())
    );

    // bring your own: a symlinked state dir and a file as workdir are refused, never deleted
    let raw = c.create(&CreateOptions::new("base")).await.expect("create");
    let api = raw.clone().into_api();
    sh(
        &api,
        "mkdir -p /home/user/workspace /tmp/t && ln -s /tmp/t /home/user/workspace/.e2b-state && touch /home/user/file",
    )
    .await;
    let byo = SandboxOwner::attach_api(api.clone(), None, OwnerOptions::default()).expect("attach");
    let err = byo.handle().await.expect_err("refused");
    assert!(
        matches!(&err, LifecycleError::ReservedPath { path, kind: PathKind::Symlink } if path == "/home/user/workspace/.e2b-state"),
        "{err}"
    );
    let byo = SandboxOwner::attach_api(
        api.clone(),
        Some(c.clone()),
        OwnerOptions::default().workdir("/home/user/file/ws"),
    )
    .expect("attach");
    let err = byo.handle().await.expect_err("refused");
    assert!(
        matches!(&err, LifecycleError::ReservedPath { path, kind: PathKind::NotADirectory } if path == "/home/user/file"),
        "{err}"
    );
    assert_eq!(
        byo.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Released
    );
    c.get(raw.id()).await.expect("still there");
    c.kill(raw.id()).await.expect("kill");
}

#[tokio::test]
async fn lifecycle_shutdown_waits_for_in_flight_setup_then_deletes() {
    let emu = emulator().await;
    let c = client(&emu);
    emu.faults().add(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(1500)))
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let owner = SandboxOwner::create(&c, OwnerOptions::default())
        .await
        .expect("create");
    let waiter = {
        let o = owner.clone();
        tokio::spawn(async move { o.handle().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        emu.counters().get_on(Plane::Control, DELETE),
        0,
        "setup still held"
    );
    let outcome = within("shutdown", owner.shutdown())
        .await
        .expect("shutdown");
    assert_eq!(outcome, ShutdownOutcome::Deleted);
    // setup ran to its end against a live sandbox: the delete came after it
    owner.setup_status().await.expect("setup succeeded");
    assert_eq!(
        emu.counters()
            .get_on(Plane::Envd, "POST /process.Process/Start"),
        1
    );
    assert!(matches!(
        owner.handle().await,
        Err(LifecycleError::ShuttingDown)
    ));
    let waited = waiter.await.expect("join");
    assert!(
        matches!(waited, Err(LifecycleError::ShuttingDown)),
        "{waited:?}"
    );
    assert!(
        c.get(owner.sandbox_id())
            .await
            .is_err_and(|e| e.is_sandbox_not_found())
    );
}

#[tokio::test]
async fn lifecycle_shutdown_of_a_gone_sandbox_is_silent() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = SandboxOwner::create(&c, OwnerOptions::default())
        .await
        .expect("create");
    owner.handle().await.expect("handle");
    assert!(
        c.kill(owner.sandbox_id())
            .await
            .expect("kill behind its back")
    );
    assert_eq!(
        owner.shutdown().await.expect("silent"),
        ShutdownOutcome::AlreadyGone
    );
    // a non-E2B 404 (wrong URL) is not mistaken for a gone sandbox
    let owner = SandboxOwner::create(&c, OwnerOptions::default())
        .await
        .expect("create");
    owner.handle().await.expect("handle");
    emu.faults().add(
        FaultRule::new(FaultAction::Status {
            status: 404,
            body: "404 page not found".into(),
            content_type: "text/plain".into(),
        })
        .surface(Plane::Control)
        .method("DELETE")
        .times(1),
    );
    let err = owner.shutdown().await.expect_err("bare 404 is an error");
    assert!(
        matches!(err.api_error(), Some(Error::EndpointNotFound { .. })),
        "{err}"
    );
    assert_eq!(
        owner.shutdown().await.expect("retry"),
        ShutdownOutcome::Deleted
    );
}

#[tokio::test]
async fn lifecycle_bring_your_own_sandbox_is_never_created_nor_deleted() {
    let emu = emulator().await;
    let c = client(&emu);
    let raw = c.create(&CreateOptions::new("base")).await.expect("create");
    let creates = emu.counters().get_on(Plane::Control, "POST /v2/sandboxes");

    let by_id = SandboxOwner::attach_id(&c, raw.id(), OwnerOptions::default())
        .await
        .expect("attach by id");
    assert_eq!(by_id.ownership(), Ownership::Borrowed);
    let h = by_id.handle().await.expect("handle");
    assert_eq!(h.sandbox_id(), raw.id());
    sh(&h.api(), "echo hi > /home/user/workspace/byo.txt").await;

    let by_handle = SandboxOwner::attach_sandbox(raw.clone(), None, OwnerOptions::default())
        .expect("attach handle");
    let h2 = by_handle.handle().await.expect("handle");
    assert_eq!(
        sh(&h2.api(), "cat /home/user/workspace/byo.txt").await,
        "hi"
    );

    // keep-alive needs a client
    let err = SandboxOwner::attach_api(
        raw.clone().into_api(),
        None,
        OwnerOptions::default().keepalive(KeepAliveConfig::new()),
    )
    .expect_err("no client");
    assert!(matches!(err, LifecycleError::NoClient));

    assert_eq!(
        by_id.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Released
    );
    assert_eq!(
        by_handle.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Released
    );
    assert_eq!(emu.counters().get_on(Plane::Control, DELETE), 0);
    assert_eq!(
        emu.counters().get_on(Plane::Control, "POST /v2/sandboxes"),
        creates
    );
    c.get(raw.id()).await.expect("still running");
}

#[tokio::test]
async fn lifecycle_api_key_never_reaches_the_sandbox() {
    let emu = emulator().await;
    let c = client(&emu);
    let key = emu.api_key().to_owned();
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::new(
            CreateOptions::new("base")
                .env_var("APP_MODE", "test")
                .metadata("suite", "lifecycle"),
        )
        .keepalive(KeepAliveConfig::new()),
    )
    .await
    .expect("create");
    let h = owner.handle().await.expect("handle");
    let api = h.api();
    let env = sh(&api, "env; cat /proc/self/environ | tr '\\0' '\\n'").await;
    assert!(env.contains("APP_MODE=test"), "{env}");
    assert!(!env.contains(&key), "API key in the sandbox env");
    let root_env = h
        .trusted_shell()
        .run_ok("env", &[])
        .await
        .expect("root env")
        .stdout_text();
    assert!(!root_env.contains(&key));
    // the sandbox's record (envVars, metadata) holds no key either
    let detail = c.get(owner.sandbox_id()).await.expect("get");
    let json = serde_json::to_string(&detail).expect("json");
    assert!(!json.contains(&key));
    assert!(!format!("{owner:?} {h:?}").contains(&key));
    owner.shutdown().await.expect("shutdown");
}
