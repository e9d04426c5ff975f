//! Keep-alive decisions on tokio's paused clock (a recording renewer, no network: the
//! clock only moves when every task waits on it), plus two checks through a real client
//! whose control plane refuses connections.

use super::*;
use crate::config::Config;

/// A client whose control plane refuses connections: any renewal attempt shows up as
/// `last_error`, and none can succeed.
fn dead_client() -> Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9);
    Client::new(
        Config::new()
            .with_api_key("e2b_test")
            .with_api_url(format!("http://127.0.0.1:{port}"))
            .with_request_timeout(Duration::from_secs(2)),
    )
    .unwrap_or_else(|e| panic!("client: {e}"))
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(150)).await;
}

#[test]
fn config_checks() {
    let t = Duration::from_secs(300);
    assert_eq!(KeepAliveConfig::new().check(t).ok(), Some(t));
    let mismatch = KeepAliveConfig::new().idle_timeout(Duration::from_secs(60));
    assert!(matches!(
        mismatch.check(t),
        Err(LifecycleError::TimeoutMismatch { .. })
    ));
    assert_eq!(
        mismatch.allow_mismatch().check(t).ok(),
        Some(Duration::from_secs(60))
    );
    assert!(matches!(
        KeepAliveConfig::new().check(Duration::from_secs(3601)),
        Err(LifecycleError::CapExceeded { .. })
    ));
    assert!(
        KeepAliveConfig::new()
            .plan(Plan::Pro)
            .check(Duration::from_secs(3601))
            .is_ok()
    );
    assert!(matches!(
        KeepAliveConfig::new().slack(t).check(t),
        Err(LifecycleError::InvalidOption(_))
    ));
    assert!(matches!(
        KeepAliveConfig::new().check(Duration::from_millis(500)),
        Err(LifecycleError::InvalidOption(_))
    ));
}

#[tokio::test]
async fn fresh_lease_costs_nothing() {
    let t = Duration::from_secs(300);
    let ka = KeepAlive::new(
        dead_client(),
        "iabc",
        t,
        Some(std::time::Instant::now() + t),
        KeepAliveConfig::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..10_000 {
        ka.touch("exec");
    }
    let g = ka.activity("turn");
    g.touch();
    settle().await;
    let s = ka.stats();
    assert_eq!((s.renewals, s.last_error.as_deref()), (0, None));
    assert_eq!(s.open_turns, 1);
    drop(g);
    assert_eq!(ka.stats().open_turns, 0);
    // explicit ensure within what is known: no request either
    assert!(!ka.ensure(Duration::from_secs(100)).await.unwrap_or(true));
    assert!(matches!(
        ka.ensure(Duration::from_secs(7200)).await,
        Err(LifecycleError::CapExceeded { .. })
    ));
    assert_eq!(ka.stats().last_error, None);
}

#[tokio::test]
async fn stale_turns_block_renewals_and_point_touches_ask_for_one() {
    let ka = KeepAlive::new(
        dead_client(),
        "iabc",
        Duration::from_secs(10),
        None,
        KeepAliveConfig::new().max_turn(Duration::ZERO),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // end unknown, but the only open turn is stale: nothing is attempted
    let g = ka.activity("stuck");
    ka.touch("exec");
    settle().await;
    assert_eq!(ka.stats().last_error, None);
    // no turn open: a point activity asks for a renewal (which fails here)
    drop(g);
    ka.touch("exec");
    let mut attempted = false;
    for _ in 0..100 {
        if ka.stats().last_error.is_some() {
            attempted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(attempted, "{:?}", ka.stats());
    assert_eq!(ka.stats().renewals, 0);
    ka.close();
    assert_eq!(ka.stats().stopped, Some(StopReason::Closed));
}

/// A renewer that records each request's virtual time and timeout, and answers at once:
/// success, or a temporary failure while `fail` is set.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(Instant, Duration)>>,
    fail: std::sync::atomic::AtomicBool,
    /// When set, the failure to answer instead of a 503.
    failure: Mutex<Option<fn() -> crate::error::Error>>,
}

impl state::Renewer for Arc<Recorder> {
    fn renew<'a>(
        &'a self,
        _sandbox_id: &'a str,
        timeout: Duration,
    ) -> futures::future::BoxFuture<'a, Result<(), crate::error::Error>> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((Instant::now(), timeout));
        let fail = self.fail.load(std::sync::atomic::Ordering::SeqCst);
        let failure = *self.failure.lock().unwrap_or_else(|p| p.into_inner());
        Box::pin(async move {
            if let Some(make) = failure.filter(|_| fail) {
                Err(make())
            } else if fail {
                Err(crate::error::Error::Server {
                    surface: crate::error::Surface::Control,
                    status: 503,
                    error_code: None,
                    message: "unavailable".into(),
                })
            } else {
                Ok(())
            }
        })
    }
}

impl Recorder {
    fn calls(&self) -> Vec<(Instant, Duration)> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A keep-alive for a sandbox created now with `timeout`, renewing through `rec`.
fn recorded(rec: &Arc<Recorder>, timeout: Duration, cfg: KeepAliveConfig) -> KeepAlive {
    KeepAlive::with_renewer(
        Box::new(rec.clone()),
        "iabc",
        timeout,
        Some(Instant::now() + timeout),
        cfg,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Lets the background task run without moving the paused clock.
async fn yield_now() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn tops_up_only_below_the_threshold_and_once() {
    let rec = Arc::new(Recorder::default());
    let t0 = Instant::now();
    // 8 s of life, threshold (idle - slack) 4 s: a top-up is due 4 s after create.
    let ka = recorded(&rec, Duration::from_secs(8), KeepAliveConfig::new());
    for _ in 0..1000 {
        ka.touch("exec");
    }
    tokio::time::advance(Duration::from_millis(3900)).await;
    ka.touch("exec");
    yield_now().await;
    assert!(rec.calls().is_empty(), "fresh: activity costs nothing");
    tokio::time::advance(Duration::from_millis(400)).await;
    for _ in 0..1000 {
        ka.touch("exec");
        yield_now().await;
    }
    let calls = rec.calls();
    assert_eq!(calls.len(), 1, "one top-up for many activities: {calls:?}");
    assert_eq!(calls[0].1, Duration::from_secs(8));
    assert_eq!(calls[0].0 - t0, Duration::from_millis(4300));
    assert_eq!(ka.stats().renewals, 1);
    assert_eq!(ka.remaining(), Duration::from_secs(8));
    // No activity: no renewal, however long the quiet.
    tokio::time::advance(Duration::from_secs(3600)).await;
    yield_now().await;
    assert_eq!(rec.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_open_turn_renews_until_max_turn_then_never() {
    let rec = Arc::new(Recorder::default());
    let ka = recorded(
        &rec,
        Duration::from_secs(4),
        KeepAliveConfig::new().max_turn(Duration::from_secs(10)),
    );
    let t0 = Instant::now();
    let turn = ka.activity("turn");
    // Renewals come in the background every 2 s (threshold) while the turn is fresh.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = rec.calls();
    let at: Vec<u128> = calls.iter().map(|(t, _)| (*t - t0).as_millis()).collect();
    assert_eq!(at, [2000, 4000, 6000, 8000], "{at:?}");
    // Past max_turn the stuck turn renews no more, and point activities do not either.
    ka.touch("exec");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(rec.calls().len(), 4);
    assert_eq!(ka.stats().open_turns, 1);
    assert_eq!(
        ka.remaining(),
        Duration::ZERO,
        "the sandbox may now time out"
    );
    // Once the stuck turn is gone, an activity renews again.
    drop(turn);
    ka.touch("exec");
    yield_now().await;
    assert_eq!(rec.calls().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn the_budget_ends_renewals_for_good() {
    let rec = Arc::new(Recorder::default());
    let ka = recorded(
        &rec,
        Duration::from_secs(2),
        KeepAliveConfig::new().max_renewals(1),
    );
    let _turn = ka.activity("long turn");
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(rec.calls().len(), 1);
    assert_eq!(ka.stats().stopped, Some(StopReason::Budget));
    assert_eq!(ka.stats().renewals, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_control_plane_is_retried_after_a_back_off_not_in_a_loop() {
    let rec = Arc::new(Recorder::default());
    rec.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    // 8 s idle, slack 4 s: back-off slack / 4 = 1 s between attempts.
    let ka = recorded(&rec, Duration::from_secs(8), KeepAliveConfig::new());
    let _turn = ka.activity("turn");
    tokio::time::sleep(Duration::from_secs(14)).await;
    let n = rec.calls().len();
    assert!(
        (9..=11).contains(&n),
        "attempts from 4 s to 14 s, 1 s apart: {n}"
    );
    assert!(ka.stats().last_error.is_some());
    rec.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = ka.stats();
    assert_eq!((s.renewals, s.last_error), (1, None), "recovered");
}

#[tokio::test(start_paused = true)]
async fn final_answers_stop_the_keep_alive_and_a_timeout_does_not() {
    use crate::error::{Error, Surface};
    type Case = (fn() -> Error, Option<StopReason>);
    let cases: [Case; 6] = [
        (
            || Error::BadRequest {
                surface: Surface::Control,
                message: "past the maximum length".into(),
            },
            Some(StopReason::Refused),
        ),
        (
            || Error::Unauthorized {
                surface: Surface::Control,
                message: "invalid API key".into(),
            },
            Some(StopReason::Refused),
        ),
        (
            || Error::Forbidden {
                surface: Surface::Control,
                message: "forbidden".into(),
            },
            Some(StopReason::Refused),
        ),
        (
            || Error::SandboxNotFound {
                surface: Surface::Control,
                status: 404,
                message: "not found".into(),
            },
            Some(StopReason::Gone),
        ),
        (
            || Error::Timeout {
                what: "connect",
                after: Duration::from_secs(10),
            },
            None,
        ),
        (
            || Error::Transport {
                surface: Surface::Control,
                message: "connection reset".into(),
            },
            None,
        ),
    ];
    for (make, stop) in cases {
        assert_eq!(state::stop_after(&make()), stop, "{}", make());
        let rec = Arc::new(Recorder::default());
        *rec.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(make);
        rec.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let ka = recorded(&rec, Duration::from_secs(8), KeepAliveConfig::new());
        let _turn = ka.activity("turn");
        tokio::time::sleep(Duration::from_secs(8)).await;
        let n = rec.calls().len();
        assert_eq!(ka.stats().stopped, stop, "{}", make());
        if stop.is_some() {
            assert_eq!(n, 1, "one attempt, then stopped: {}", make());
        } else {
            assert!(n >= 3, "tried again after the back-off: {n}, {}", make());
        }
    }
}
