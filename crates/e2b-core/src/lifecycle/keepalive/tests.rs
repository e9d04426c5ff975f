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
            .api_key("e2b_test")
            .api_url(format!("http://127.0.0.1:{port}"))
            .request_timeout(Duration::from_secs(2)),
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
        Some(Instant::now() + t),
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
