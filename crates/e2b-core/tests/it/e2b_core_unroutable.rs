//! Our client against a sandbox the proxy cannot route to (E2B answers 502 for a paused and
//! for a missing sandbox alike): the error is classified as unroutable, a lease reconnects
//! once (a paused sandbox resumes and the call succeeds), and a killed sandbox's running
//! process stream ends with `SandboxNotFound` after one `/health` check, never a hang.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::e2b_core_support;

use std::time::{Duration, Instant};

use e2b_core::lifecycle::{KeepAlive, KeepAliveConfig};
use e2b_core::proto::control::SandboxState;
use e2b_core::{EnvdApi, Error, PauseOptions, StartProcess};
use e2b_core_support::{client, emulator, sandbox, within};
use futures::StreamExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_sandbox_is_unroutable_and_a_lease_resumes_it() {
    let emu = emulator().await;
    let c = client(&emu);
    let sbx = sandbox(&c).await;
    sbx.make_dir("/home/user/kept", None).await.expect("mkdir");
    c.pause(sbx.id(), PauseOptions::default())
        .await
        .expect("pause");

    // Directly: the proxy's 502, classified as unroutable (gone or paused), not retryable.
    let err = within(
        "stat on a paused sandbox",
        sbx.stat("/home/user/kept", None),
    )
    .await
    .expect_err("a paused sandbox cannot be reached");
    assert!(err.is_unroutable(), "{err:?}");
    assert!(err.is_sandbox_not_found(), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    let err = sbx.health().await.expect_err("health of a paused sandbox");
    assert!(err.is_unroutable(), "{err:?}");

    // Through a lease: one reconnect resumes it and the call is repeated.
    let ka = KeepAlive::new(
        c.clone(),
        sbx.id(),
        Duration::from_secs(300),
        Some(Instant::now() + Duration::from_secs(300)),
        KeepAliveConfig::new(),
    )
    .expect("keep-alive");
    let leased = ka.wrap(sbx.clone().into_api());
    let info = within("leased stat", leased.stat("/home/user/kept", None))
        .await
        .expect("the lease resumes the paused sandbox");
    assert_eq!(info.name, "kept");
    assert_eq!(
        c.get(sbx.id()).await.expect("info").listed.state,
        SandboxState::Running
    );
    assert_eq!(ka.stats().renewals, 1, "exactly one reconnect");

    // Killed: the lease's one reconnect is refused (404) and the 502 stands.
    assert!(c.kill(sbx.id()).await.expect("kill"));
    let err = within(
        "leased stat after kill",
        leased.stat("/home/user/kept", None),
    )
    .await
    .expect_err("gone");
    assert!(err.is_unroutable(), "{err:?}");
    emu.shutdown().await;
}

/// Start a long process, let `stop` end the sandbox's run, and return the stream's last item.
async fn cut_by(stop: &str) -> Error {
    let emu = emulator().await;
    let c = client(&emu);
    let sbx = sandbox(&c).await;
    let mut stream = sbx
        .start_process(StartProcess::shell("echo started; sleep 60"))
        .await
        .expect("start");
    // Wait until the process runs (its first output).
    let first = within("first output", stream.next())
        .await
        .expect("an event")
        .expect("not an error");
    assert!(
        format!("{first:?}").contains("Stdout"),
        "first event: {first:?}"
    );
    match stop {
        "kill" => assert!(c.kill(sbx.id()).await.expect("kill")),
        _ => c
            .pause(sbx.id(), PauseOptions::default())
            .await
            .expect("pause"),
    }
    let mut last = None;
    while let Some(ev) = within("the cut stream ends", stream.next()).await {
        match ev {
            Ok(ev) => assert!(
                !format!("{ev:?}").starts_with("End"),
                "a {stop} must not send a clean end event: {ev:?}"
            ),
            Err(e) => last = Some(e),
        }
    }
    emu.shutdown().await;
    last.expect("the stream ends with an error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_sandbox_cuts_its_process_streams_to_sandbox_not_found() {
    let err = cut_by("kill").await;
    assert!(
        matches!(err, Error::SandboxNotFound { status: 502, .. }),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_sandbox_cuts_its_process_streams_too() {
    let err = cut_by("pause").await;
    assert!(err.is_unroutable(), "{err:?}");
}
