//! e2b-core's control-plane client against the emulator: every lifecycle call, listing
//! with filters and pagination, the v2 → v1 fallback, and the mapping of each error status.

use crate::e2b_core_support;

use std::time::Duration;

use e2b_core::proto::control::SandboxState;
use e2b_core::{
    Client, ConnectOptions, CreateOptions, EnvdApi, Error, ListQuery, PauseOptions, Sandbox,
    StartProcess, Surface,
};
use e2b_core_support::{client, config, emulator, sandbox};
use futures::StreamExt as _;
use testing_fake::{FaultAction, FaultRule, Plane};

#[tokio::test]
async fn lifecycle_create_get_timeout_refresh_pause_connect_kill() {
    let emu = emulator().await;
    // Without retries: each injected fault below maps to one error (retries are proven
    // in crates/e2b-core/tests/it/e2b_core_retry.rs).
    let c = client(&emu).with_retry_policy(e2b_core::retry::RetryPolicy::none());
    let sb = c
        .create(
            &CreateOptions::new("base")
                .timeout(Duration::from_secs(120))
                .metadata("suite", "lifecycle")
                .env_var("GREETING", "hello")
                .auto_pause(false),
        )
        .await
        .expect("create");
    assert!(!sb.id().is_empty());
    assert!(sb.access_token().is_some(), "secure by default");
    assert!(!sb.was_resumed());
    assert_eq!(
        emu.counters().get_on(Plane::Control, "POST /v2/sandboxes"),
        1
    );
    assert_eq!(emu.counters().get_on(Plane::Control, "POST /sandboxes"), 0);

    let detail = c.get(sb.id()).await.expect("get");
    assert_eq!(detail.listed.sandbox_id, sb.id());
    assert_eq!(detail.listed.state, SandboxState::Running);
    assert_eq!(
        detail
            .listed
            .metadata
            .as_ref()
            .and_then(|m| m.get("suite"))
            .map(String::as_str),
        Some("lifecycle")
    );

    // global env vars reach processes
    let out = sb
        .start_process(e2b_core::StartProcess::shell("printf %s \"$GREETING\""))
        .await
        .expect("start")
        .wait_output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"hello");

    let end_before = detail.listed.end_at.clone();
    c.set_timeout(sb.id(), Duration::from_secs(600))
        .await
        .expect("set timeout");
    let end_after = c.get(sb.id()).await.expect("get").listed.end_at;
    assert_ne!(end_before, end_after, "set_timeout moves endAt");
    c.refresh(sb.id(), Some(Duration::from_secs(30)))
        .await
        .expect("refresh");
    c.refresh(sb.id(), None).await.expect("refresh default");

    c.pause(sb.id(), PauseOptions::default())
        .await
        .expect("pause");
    assert_eq!(
        c.get(sb.id()).await.expect("get paused").listed.state,
        SandboxState::Paused
    );
    // double pause: 409
    let err = c.pause(sb.id(), PauseOptions::default()).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(err.status(), Some(409));

    let resumed = c
        .connect(
            sb.id(),
            ConnectOptions::with_timeout(Duration::from_secs(60)),
        )
        .await
        .expect("connect resumes");
    assert!(resumed.was_resumed());
    resumed.health().await.expect("envd healthy after resume");
    let again = c
        .connect(sb.id(), ConnectOptions::default())
        .await
        .expect("connect running");
    assert!(!again.was_resumed());
    assert_eq!(
        emu.counters()
            .get_on(Plane::Control, "POST /v2/sandboxes/{sandboxID}/connect"),
        2
    );

    assert!(c.kill(sb.id()).await.expect("kill"));
    assert!(!c.kill(sb.id()).await.expect("kill twice"));
    let err = c.get(sb.id()).await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    let err = c
        .connect(sb.id(), ConnectOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    // envd of a killed sandbox: the proxy's 502 "sandbox was not found"
    let err = sb.health().await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    let err = sb.stat("/home/user", None).await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    // a connection dropped on the way to a dead sandbox: the /health probe says "gone"
    let health_before = emu.counters().get_on(Plane::Envd, "GET /health");
    // (a read met by a reset is sent once more, as after a dropped pooled connection:
    // both attempts are reset)
    emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Envd)
            .path_prefix("/filesystem.Filesystem/Stat")
            .times(2),
    );
    let err = sb.stat("/home/user", None).await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    assert_eq!(
        emu.counters().get_on(Plane::Envd, "GET /health"),
        health_before + 1,
        "the reset was followed by one /health probe"
    );
    emu.shutdown().await;
}

/// Pauses sandbox `id` without memory and connects it again: a cold boot (every process
/// ends, files stay).
async fn cold_boot(c: &Client, id: &str) -> Sandbox {
    c.pause(id, PauseOptions { memory: false })
        .await
        .expect("pause without memory");
    c.connect(
        id,
        ConnectOptions {
            timeout: Duration::from_secs(60),
            memory: Some(false),
        },
    )
    .await
    .expect("cold connect")
}

#[tokio::test]
async fn pause_without_memory_then_cold_connect() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    let back = cold_boot(&c, sb.id()).await;
    assert!(back.was_resumed());
    back.health().await.expect("healthy");
    c.kill(sb.id()).await.expect("kill");
    emu.shutdown().await;
}

#[tokio::test]
async fn a_cold_boot_keeps_the_workspace_the_users() {
    // The conversation template's /workspace is a template path owned by `sandbox`; a
    // cold boot lays the tree out again and must not give it back to root.
    let emu = emulator().await;
    let c = client(&emu);
    let sb = c
        .create(&CreateOptions::new("conversation"))
        .await
        .expect("create");
    let write = |sb: Sandbox, name: &'static str| async move {
        sb.run(StartProcess::shell(format!("echo x > /workspace/{name}")).user("sandbox"))
            .await
            .expect("run")
            .end
            .exit_code
    };
    assert_eq!(write(sb.clone(), "before").await, 0);
    let back = cold_boot(&c, sb.id()).await;
    assert_eq!(
        write(back, "after").await,
        0,
        "the user writes after a cold boot"
    );
    c.kill(sb.id()).await.expect("kill");
    emu.shutdown().await;
}

#[tokio::test]
async fn list_filters_and_pages() {
    let emu = emulator().await;
    let c = client(&emu);
    let mut ids = Vec::new();
    for i in 0..3 {
        let sb = c
            .create(
                &CreateOptions::new("base")
                    .metadata("group", "g 1&x=y")
                    .metadata("n", i.to_string()),
            )
            .await
            .expect("create");
        ids.push(sb.id().to_owned());
    }
    let other = c
        .create(&CreateOptions::new("base").metadata("group", "other"))
        .await
        .expect("create other");
    c.pause(&ids[0], PauseOptions::default())
        .await
        .expect("pause");

    let q = ListQuery::new().metadata("group", "g 1&x=y").limit(1);
    let page = c.list_page(&q, None).await.expect("page 1");
    assert_eq!(page.sandboxes.len(), 1);
    assert!(page.next_token.is_some(), "more pages");

    let mut all: Vec<String> = c
        .list_all(q.clone())
        .await
        .expect("list all")
        .into_iter()
        .map(|s| s.sandbox_id)
        .collect();
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want);
    assert!(!all.contains(&other.id().to_owned()));
    assert!(emu.counters().get_on(Plane::Control, "GET /v2/sandboxes") >= 4);

    let running: Vec<_> = c
        .list(q.clone().states([SandboxState::Running]))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(|r| r.expect("item"))
        .collect();
    assert_eq!(running.len(), 2);
    assert!(running.iter().all(|s| s.state == SandboxState::Running));
    let paused = c
        .list_all(q.clone().states([SandboxState::Paused]))
        .await
        .expect("paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].sandbox_id, ids[0]);
    let by_template = c
        .list_all(q.clone().template("base"))
        .await
        .expect("by template");
    assert_eq!(by_template.len(), 3);
    let both = c
        .list_all(q.states([SandboxState::Running, SandboxState::Paused]))
        .await
        .expect("both");
    assert_eq!(both.len(), 3);
    emu.shutdown().await;
}

#[tokio::test]
async fn v2_bare_404_falls_back_to_v1() {
    let emu = emulator().await;
    let bare = |prefix: &str| {
        FaultRule::new(FaultAction::Status {
            status: 404,
            body: "404 page not found".into(),
            content_type: "text/plain; charset=utf-8".into(),
        })
        .surface(Plane::Control)
        .method("POST")
        .path_prefix(prefix)
    };
    emu.faults().add(bare("/v2/sandboxes"));
    let c = client(&emu);
    let sb = sandbox(&c).await;
    assert_eq!(emu.counters().get_on(Plane::Control, "POST /sandboxes"), 1);
    // the fallback is remembered: connect goes to v1 at once
    let again = c
        .connect(sb.id(), ConnectOptions::default())
        .await
        .expect("connect v1");
    assert!(!again.was_resumed());
    assert_eq!(
        emu.counters()
            .get_on(Plane::Control, "POST /v2/sandboxes/{sandboxID}/connect"),
        0
    );
    assert_eq!(
        emu.counters()
            .get_on(Plane::Control, "POST /sandboxes/{sandboxID}/connect"),
        1
    );

    // a fresh client falls back on connect too
    let fresh = client(&emu);
    fresh
        .connect(sb.id(), ConnectOptions::default())
        .await
        .expect("connect fallback");
    assert_eq!(
        emu.counters()
            .get_on(Plane::Control, "POST /sandboxes/{sandboxID}/connect"),
        2
    );

    // an E2B-format 404 on v2 connect means "gone": no fallback
    emu.faults().clear();
    let fresh = client(&emu);
    let err = fresh
        .connect("iunknown0000000000000", ConnectOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    assert_eq!(
        emu.counters()
            .get_on(Plane::Control, "POST /sandboxes/{sandboxID}/connect"),
        2
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn e2b_404_and_bare_404_are_distinct() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    let err = c.get("inope00000000000000000").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::SandboxNotFound {
                surface: Surface::Control,
                status: 404,
                ..
            }
        ),
        "{err:?}"
    );
    emu.faults().add(
        FaultRule::new(FaultAction::Status {
            status: 404,
            body: "<html>not here</html>".into(),
            content_type: "text/html".into(),
        })
        .surface(Plane::Control)
        .method("GET")
        .path_prefix("/sandboxes/")
        .times(1),
    );
    let err = c.get(sb.id()).await.unwrap_err();
    assert!(matches!(err, Error::EndpointNotFound { .. }), "{err:?}");
    emu.faults().add(
        FaultRule::new(FaultAction::json(
            404,
            serde_json::json!({"code": 404, "message": "Sandbox gone"}),
        ))
        .surface(Plane::Control)
        .path_prefix("/sandboxes/")
        .times(1),
    );
    let err = c.get(sb.id()).await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");
    // and it exists really
    c.get(sb.id()).await.expect("get after faults");
    let err = c
        .create(&CreateOptions::new("no-such-template"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TemplateNotFound { .. }), "{err:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn wrong_key_is_401_and_never_printed() {
    let emu = emulator().await;
    let wrong_key = "e2b_00000000000000000000deadbeefdeadbeef";
    let c = Client::new(config(&emu).with_api_key(wrong_key)).expect("client");
    let err = c.list_all(ListQuery::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unauthorized {
                surface: Surface::Control,
                ..
            }
        ),
        "{err:?}"
    );
    let err2 = c.create(&CreateOptions::default()).await.unwrap_err();
    assert!(err2.is_unauthorized(), "{err2:?}");
    for e in [&err, &err2] {
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(wrong_key), "{shown}");
        assert!(!shown.contains(emu.api_key()), "{shown}");
    }
    assert!(!format!("{c:?}").contains(wrong_key));
    assert!(
        Client::new(e2b_core::Config::new()).is_err(),
        "no key, no client"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn rate_limit_conflict_server_error_reset_and_timeout() {
    let emu = emulator().await;
    // Single faults and how each maps: without retries (they are proven in
    // crates/e2b-core/tests/it/e2b_core_retry.rs).
    let c = client(&emu).with_retry_policy(e2b_core::retry::RetryPolicy::none());
    let sb = sandbox(&c).await;
    let on_get = |action: FaultAction| {
        FaultRule::new(action)
            .surface(Plane::Control)
            .method("GET")
            .path_prefix("/sandboxes/")
            .times(1)
    };
    emu.faults().add(on_get(FaultAction::json(
        429,
        serde_json::json!({"code": 429, "message": "Rate limit exceeded"}),
    )));
    let err = c.get(sb.id()).await.unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
    assert!(err.is_retryable());

    emu.faults().add(on_get(FaultAction::json(
        503,
        serde_json::json!({"code": 503, "message": "no capacity", "error_code": "sandbox_capacity_unavailable"}),
    )));
    match c.get(sb.id()).await.unwrap_err() {
        Error::Server {
            status, error_code, ..
        } => {
            assert_eq!(status, 503);
            assert_eq!(error_code.as_deref(), Some("sandbox_capacity_unavailable"));
        }
        other => panic!("{other:?}"),
    }

    emu.faults().add(on_get(FaultAction::json(
        409,
        serde_json::json!({"code": 409, "message": "sandbox is pausing"}),
    )));
    assert!(c.get(sb.id()).await.unwrap_err().is_conflict());

    // A GET met by a reset is sent once more (as after a dropped pooled connection):
    // both attempts are reset.
    emu.faults().add(on_get(FaultAction::Reset).times(2));
    let err = c.get(sb.id()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Transport {
                surface: Surface::Control,
                ..
            }
        ),
        "{err:?}"
    );

    emu.faults()
        .add(on_get(FaultAction::Delay(Duration::from_secs(5))));
    let impatient =
        Client::new(config(&emu).with_request_timeout(Duration::from_millis(200))).expect("client");
    let err = impatient.get(sb.id()).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    // every fault has fired once; the real answer is back
    c.get(sb.id()).await.expect("get");
    emu.shutdown().await;
}
