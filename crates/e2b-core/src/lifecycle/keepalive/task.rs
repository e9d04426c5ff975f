//! The background renewal task of a keep-alive.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::state::{Inner, Step};

/// The background task: renews when a point activity asked for it or a fresh turn is
/// open and the remaining life fell below the threshold; sleeps otherwise.
pub(super) async fn run(inner: Arc<Inner>) {
    loop {
        if inner.cancel.is_cancelled() {
            return;
        }
        match inner.next_step() {
            Step::Renew { reason, timeout } => {
                let _ = inner.renew(reason, timeout).await;
            }
            Step::Wait(until) => {
                let sleep = async {
                    match until {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    () = inner.cancel.cancelled() => return,
                    () = inner.wake.notified() => {}
                    () = sleep => {}
                }
            }
        }
    }
}

/// A monotonic instant as wall-clock time (for observers and logs).
pub(super) fn wall(i: Instant) -> SystemTime {
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    if i >= now_i {
        now_s + (i - now_i)
    } else {
        now_s - (now_i - i)
    }
}
