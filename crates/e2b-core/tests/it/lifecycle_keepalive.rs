//! e2b-core's opt-in keep-alive against the emulator: no request when off, the plan's
//! hard cap and the timeout-mismatch check, an explicit top-up that reaches the control
//! plane, and the measured figure of control-plane requests for 1,000 execs on one fresh
//! lease. The timing (top-up only below the threshold, turns that stop renewing after
//! `max_turn`, the approval budget, the back-off) is tested on tokio's paused clock in
//! `crates/e2b-core/src/lifecycle/keepalive/tests.rs`, with no real waiting.

use crate::e2b_core_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2b_core::lifecycle::{KeepAliveConfig, LifecycleError, OwnerOptions, Plan, SandboxOwner};
use e2b_core::proto::control::SandboxState;
use e2b_core::{Client, EnvdApi, StartProcess};
use e2b_core_support::{client, emulator};
use testing_fake::{Emulator, Plane};

const CONNECT: &str = "POST /v2/sandboxes/{sandboxID}/connect";
const SET_TIMEOUT: &str = "POST /sandboxes/{sandboxID}/timeout";

fn renewals_seen(emu: &Emulator) -> u64 {
    emu.counters().get_on(Plane::Control, CONNECT)
        + emu.counters().get_on(Plane::Control, SET_TIMEOUT)
}

async fn exec(api: &Arc<dyn EnvdApi>) {
    let out = api.run(StartProcess::new("/bin/true")).await.expect("exec");
    assert_eq!(out.end.exit_code, 0);
}

#[tokio::test]
async fn lifecycle_keepalive_off_sends_no_control_plane_request() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = SandboxOwner::create(&c, OwnerOptions::default())
        .await
        .expect("create");
    assert!(owner.keepalive().is_none());
    let h = owner.handle().await.expect("handle");
    emu.counters().reset();
    let api = h.api();
    for i in 0..20 {
        exec(&api).await;
        api.upload_bytes(
            &format!("{}/f{i}", h.workdir()),
            None,
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .expect("upload");
        api.stat(h.workdir(), None).await.expect("stat");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        emu.counters().plane_total(Plane::Control),
        0,
        "{:?}",
        emu.counters().snapshot().control
    );
    owner.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn lifecycle_keepalive_cap_and_mismatch_are_typed_errors() {
    let emu = emulator().await;
    let c = client(&emu);
    // asked beyond the plan cap: refused before any request
    let err = SandboxOwner::create(
        &c,
        OwnerOptions::default()
            .timeout(Duration::from_secs(2 * 3600))
            .keepalive(KeepAliveConfig::new().plan(Plan::Hobby)),
    )
    .await
    .expect_err("cap");
    assert!(
        matches!(err, LifecycleError::CapExceeded { asked, cap } if asked == Duration::from_secs(7200) && cap == Duration::from_secs(3600)),
        "{err}"
    );
    let err = SandboxOwner::create(
        &c,
        OwnerOptions::default().keepalive(
            KeepAliveConfig::new()
                .idle_timeout(Duration::from_secs(60))
                .allow_mismatch()
                .plan(Plan::Custom(Duration::from_secs(30))),
        ),
    )
    .await
    .expect_err("cap");
    assert!(matches!(err, LifecycleError::CapExceeded { .. }), "{err}");
    // the classic mismatch
    let err = SandboxOwner::create(
        &c,
        OwnerOptions::default()
            .keepalive(KeepAliveConfig::new().idle_timeout(Duration::from_secs(60))),
    )
    .await
    .expect_err("mismatch");
    assert!(
        matches!(err, LifecycleError::TimeoutMismatch { timeout, idle } if timeout == Duration::from_secs(300) && idle == Duration::from_secs(60)),
        "{err}"
    );
    assert_eq!(emu.counters().total(), 0, "all refused before any request");

    // explicit ensure: nothing when enough is left, one request otherwise, cap refused
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::default().keepalive(
            KeepAliveConfig::new()
                .idle_timeout(Duration::from_secs(120))
                .allow_mismatch(),
        ),
    )
    .await
    .expect("mismatch allowed");
    let ka = owner.keepalive().expect("on").clone();
    assert!(!ka.ensure(Duration::from_secs(200)).await.expect("enough"));
    assert_eq!(renewals_seen(&emu), 0);
    assert!(ka.ensure(Duration::from_secs(900)).await.expect("top up"));
    assert_eq!(renewals_seen(&emu), 1);
    assert!(ka.remaining() >= Duration::from_secs(899));
    let err = ka.ensure(Duration::from_secs(3601)).await.expect_err("cap");
    assert!(matches!(err, LifecycleError::CapExceeded { .. }), "{err}");
    let detail = c.get(owner.sandbox_id()).await.expect("get");
    assert_eq!(detail.listed.state, SandboxState::Running);
    assert_eq!(renewals_seen(&emu), 1);
    owner.shutdown().await.expect("shutdown");
}

/// Run 1,000 execs through a fresh owner's handle; (requests, renewals, elapsed).
async fn thousand_execs(emu: &Emulator, c: &Client, timeout: Duration) -> (u64, u32, Duration) {
    let owner = SandboxOwner::create(
        c,
        OwnerOptions::default()
            .timeout(timeout)
            .keepalive(KeepAliveConfig::new()),
    )
    .await
    .expect("create");
    let h = owner.handle().await.expect("handle");
    let api = h.api();
    let before = emu.counters().plane_total(Plane::Control);
    let started = Instant::now();
    for _ in 0..1000 {
        exec(&api).await;
    }
    let elapsed = started.elapsed();
    // let a renewal asked for by the last exec land before counting
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = emu.counters().plane_total(Plane::Control) - before;
    let renewals = h
        .keepalive()
        .map(|k| k.stats().renewals)
        .unwrap_or_default();
    owner.shutdown().await.expect("shutdown");
    (requests, renewals, elapsed)
}

/// The figure for the note: control-plane requests for 1,000 execs on one fresh lease.
/// A connect-before-every-call design sends 1,000; the lease sends at most one per
/// `timeout / 2` window of activity (asserted as a count bound; the elapsed time only
/// sizes the bound).
#[tokio::test]
async fn lifecycle_keepalive_1000_execs_control_plane_requests() {
    let emu = emulator().await;
    let c = client(&emu);
    for timeout in [Duration::from_secs(300), Duration::from_secs(4)] {
        let (requests, renewals, elapsed) = thousand_execs(&emu, &c, timeout).await;
        let half = timeout / 2;
        let windows = 1 + (elapsed.as_millis() / half.as_millis()) as u64;
        println!(
            "lifecycle figure: 1000 execs on one fresh lease, timeout {}s, keep-alive on: \
             {requests} control-plane requests ({renewals} renewals) over {:.1}s; bound \
             (1 per timeout/2 window) {windows}; connect-before-every-call: 1000",
            timeout.as_secs(),
            elapsed.as_secs_f64()
        );
        assert_eq!(
            requests,
            u64::from(renewals),
            "renewals are the only requests"
        );
        assert!(requests <= windows, "{requests} > {windows}");
        if timeout == Duration::from_secs(300) {
            assert!(requests <= 1);
        }
    }
}
