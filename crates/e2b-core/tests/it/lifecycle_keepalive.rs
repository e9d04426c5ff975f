//! e2b-core's opt-in keep-alive against the emulator: no request when off, top-up only
//! when needed, turns that stop renewing after `max_turn`, the approval budget, the
//! plan's hard cap and the timeout-mismatch check, and the measured figure of
//! control-plane requests for 1,000 execs on one fresh lease.

use crate::e2b_core_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2b_core::lifecycle::{
    KeepAliveConfig, LifecycleError, OwnerOptions, Plan, Renewal, SandboxOwner, StopReason,
};
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

/// Poll `f` until true or `limit` passes.
async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

async fn state(c: &Client, id: &str) -> Option<SandboxState> {
    match c.get(id).await {
        Ok(d) => Some(d.listed.state),
        Err(e) if e.is_sandbox_not_found() => None,
        Err(e) => panic!("get: {e}"),
    }
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
async fn lifecycle_keepalive_tops_up_only_when_needed() {
    let emu = emulator().await;
    let c = client(&emu);
    let seen: Arc<Mutex<Vec<Renewal>>> = Arc::default();
    let seen2 = seen.clone();
    // 8 s of life, threshold (idle - slack) 4 s: a top-up is due 4 s after create
    let created = Instant::now();
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::default()
            .timeout(Duration::from_secs(8))
            .keepalive(KeepAliveConfig::new().on_renew(move |r| {
                seen2
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(r.clone())
            })),
    )
    .await
    .expect("create");
    let h = owner.handle().await.expect("handle");
    let ka = h.keepalive().expect("on").clone();
    assert_eq!(ka.idle_timeout(), Duration::from_secs(8));
    let api = h.api();

    // fresh: activity costs nothing
    for _ in 0..10 {
        exec(&api).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        created.elapsed() < Duration::from_secs(4),
        "machine too slow for this test's window"
    );
    assert_eq!(renewals_seen(&emu), 0);
    assert_eq!(ka.stats().renewals, 0);

    // below the threshold: the next activity tops up, once
    tokio::time::sleep(
        (created + Duration::from_millis(4300)).saturating_duration_since(Instant::now()),
    )
    .await;
    exec(&api).await;
    assert!(
        eventually(Duration::from_secs(3), || ka.stats().renewals == 1).await,
        "{:?}",
        ka.stats()
    );
    for _ in 0..10 {
        exec(&api).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        emu.counters().get_on(Plane::Control, CONNECT),
        1,
        "one top-up"
    );
    assert_eq!(emu.counters().get_on(Plane::Control, SET_TIMEOUT), 0);
    let r = seen.lock().unwrap_or_else(|p| p.into_inner())[0].clone();
    assert_eq!(r.number, 1);
    assert_eq!(r.reason, "start_process");
    assert!(r.new_end > r.old_end);
    assert!(
        ka.remaining() > Duration::from_secs(5),
        "{:?}",
        ka.remaining()
    );

    // alive past its original 8 s
    tokio::time::sleep(
        (created + Duration::from_secs(9)).saturating_duration_since(Instant::now()),
    )
    .await;
    assert_eq!(
        state(&c, owner.sandbox_id()).await,
        Some(SandboxState::Running)
    );
    owner.shutdown().await.expect("shutdown");
    assert_eq!(ka.stats().stopped, Some(StopReason::Closed));
}

#[tokio::test]
async fn lifecycle_keepalive_turn_renews_until_max_turn_then_sandbox_pauses() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::default()
            .timeout(Duration::from_secs(4))
            .auto_pause(true)
            .keepalive(KeepAliveConfig::new().max_turn(Duration::from_secs(3))),
    )
    .await
    .expect("create");
    let h = owner.handle().await.expect("handle");
    let ka = h.keepalive().expect("on").clone();
    let started = Instant::now();
    let turn = ka.activity("turn");
    // the held turn renews in the background (due at ~2 s)
    assert!(
        eventually(Duration::from_secs(4), || ka.stats().renewals >= 1).await,
        "{:?}",
        ka.stats()
    );
    // past max_turn the stuck turn stops renewing, and so do its calls
    tokio::time::sleep(
        Duration::from_secs(3).saturating_sub(started.elapsed()) + Duration::from_millis(200),
    )
    .await;
    let renewals = ka.stats().renewals;
    let api = h.api();
    let _ = api.run(StartProcess::new("/bin/true")).await;
    // the sandbox times out and pauses normally
    let mut paused = false;
    for _ in 0..200 {
        if state(&c, owner.sandbox_id()).await == Some(SandboxState::Paused) {
            paused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        paused,
        "sandbox should pause after the stuck turn: {:?}",
        ka.stats()
    );
    assert_eq!(ka.stats().renewals, renewals, "no renewal after max_turn");
    assert!(renewals <= 2, "{renewals}");
    assert_eq!(ka.stats().open_turns, 1);
    drop(turn);
    owner.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn lifecycle_keepalive_budget_stops_renewals() {
    let emu = emulator().await;
    let c = client(&emu);
    let owner = SandboxOwner::create(
        &c,
        OwnerOptions::default()
            .timeout(Duration::from_secs(2))
            .keepalive(KeepAliveConfig::new().max_renewals(1)),
    )
    .await
    .expect("create");
    let ka = owner.keepalive().expect("on").clone();
    let _turn = ka.activity("long turn");
    assert!(
        eventually(Duration::from_secs(8), || ka.stats().stopped
            == Some(StopReason::Budget))
        .await,
        "{:?}",
        ka.stats()
    );
    assert_eq!(ka.stats().renewals, 1);
    assert_eq!(renewals_seen(&emu), 1);
    // the turn is still open, but the sandbox now expires normally
    let mut gone = false;
    for _ in 0..200 {
        if state(&c, owner.sandbox_id()).await.is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "expired");
    assert_eq!(renewals_seen(&emu), 1);
    assert_eq!(
        owner.shutdown().await.expect("shutdown"),
        e2b_core::lifecycle::ShutdownOutcome::AlreadyGone
    );
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
