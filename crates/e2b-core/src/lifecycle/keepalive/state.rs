//! The shared state of one keep-alive: the known end of life, open turns, the budget,
//! and the decision of when to renew.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{Observer, Renewal, StopReason};
use super::task::wall;
use crate::Disposition;
use crate::api::{Client, ConnectOptions};
use crate::error::Error;
use crate::lifecycle::error::LifecycleError;

pub(super) struct Turn {
    pub(super) start: Instant,
    pub(super) reason: String,
}

pub(super) struct State {
    pub(super) known_end: Instant,
    pub(super) life_start: Instant,
    pub(super) renewals: u32,
    pub(super) extended: Duration,
    pub(super) turns: BTreeMap<u64, Turn>,
    pub(super) next_turn: u64,
    pub(super) pending: Option<String>,
    pub(super) stopped: Option<StopReason>,
    pub(super) last_error: Option<String>,
    pub(super) retry_at: Option<Instant>,
}

/// The one request a renewal makes: `connect` with a timeout (the client in production,
/// a recording fake on tokio's paused clock in the tests).
pub(crate) trait Renewer: Send + Sync {
    /// Asks the control plane for at least `timeout` more life for `sandbox_id`.
    fn renew<'a>(
        &'a self,
        sandbox_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), crate::error::Error>>;
}

impl Renewer for Client {
    fn renew<'a>(
        &'a self,
        sandbox_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), crate::error::Error>> {
        Box::pin(async move {
            self.connect(sandbox_id, ConnectOptions::with_timeout(timeout))
                .await
                .map(|_| ())
        })
    }
}

/// Whether a renewal that failed (after its request's own [`RetryPolicy`] loop) ends the
/// keep-alive, read from [`Error::disposition`]: gone ends it; a final answer of the
/// control plane (400, 401, 403, …) ends it as refused, since asking again cannot help;
/// a temporary failure, an unroutable answer and our own timeout (a renewal has a
/// budget of its own, the next one a fresh one) leave it to try again after the back-off.
///
/// [`RetryPolicy`]: crate::retry::RetryPolicy
pub(super) fn stop_after(e: &Error) -> Option<StopReason> {
    match e.disposition() {
        Disposition::Gone => Some(StopReason::Gone),
        Disposition::Final if !matches!(e, Error::Timeout { .. }) => Some(StopReason::Refused),
        Disposition::Final | Disposition::Temporary { .. } | Disposition::Unroutable => None,
    }
}

pub(super) struct Inner {
    pub(super) client: Box<dyn Renewer>,
    pub(super) sandbox_id: String,
    pub(super) idle: Duration,
    pub(super) slack: Duration,
    pub(super) cap: Duration,
    pub(super) max_turn: Option<Duration>,
    pub(super) max_renewals: Option<u32>,
    pub(super) max_total_extension: Option<Duration>,
    pub(super) on_renew: Option<Observer>,
    pub(super) state: Mutex<State>,
    pub(super) wake: Notify,
    pub(super) cancel: CancellationToken,
}

pub(super) enum Step {
    Wait(Option<Instant>),
    Renew { reason: String, timeout: Duration },
}

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn threshold(&self) -> Duration {
        self.idle.saturating_sub(self.slack)
    }

    pub(super) fn is_stale(&self, turn: &Turn, now: Instant) -> bool {
        self.max_turn
            .is_some_and(|m| now.saturating_duration_since(turn.start) >= m)
    }

    /// The reason of a fresh open turn, if any.
    pub(super) fn fresh_turn(&self, st: &State, now: Instant) -> Option<String> {
        st.turns
            .values()
            .find(|t| !self.is_stale(t, now))
            .map(|t| t.reason.clone())
    }

    pub(super) fn touch(&self, reason: &str) {
        {
            let mut st = self.lock();
            let now = Instant::now();
            if st.stopped.is_some()
                || st.known_end.saturating_duration_since(now) >= self.threshold()
            {
                return;
            }
            // Only stale turns open: a stuck turn's calls do not renew.
            if !st.turns.is_empty() && self.fresh_turn(&st, now).is_none() {
                return;
            }
            if st.pending.is_none() {
                st.pending = Some(reason.to_owned());
            }
        }
        self.wake.notify_one();
    }

    /// The timeout (whole seconds, rounded down) a renewal now would ask for, within the
    /// cap and the budget; `None` (and `stopped` set) when nothing can be gained any more.
    pub(super) fn renewal_timeout(&self, st: &mut State, now: Instant) -> Option<Duration> {
        if let Some(max) = self.max_renewals {
            if st.renewals >= max {
                st.stopped = Some(StopReason::Budget);
                return None;
            }
        }
        let mut timeout = self.idle;
        if let Some(max) = self.max_total_extension {
            let left = max.saturating_sub(st.extended);
            if left.is_zero() {
                st.stopped = Some(StopReason::Budget);
                return None;
            }
            let reach = (st.known_end.max(now) + left).saturating_duration_since(now);
            timeout = timeout.min(reach);
        }
        let cap_end = st.life_start + self.cap;
        let to_cap = cap_end.saturating_duration_since(now);
        if timeout >= to_cap {
            timeout = to_cap;
            if st.known_end + Duration::from_secs(1) >= cap_end {
                st.stopped = Some(StopReason::HardCap);
                return None;
            }
        }
        let timeout = Duration::from_secs(timeout.as_secs());
        if timeout.is_zero() {
            st.stopped = Some(StopReason::HardCap);
            return None;
        }
        Some(timeout)
    }

    pub(super) fn next_step(&self) -> Step {
        let mut st = self.lock();
        let now = Instant::now();
        if st.stopped.is_some() {
            return Step::Wait(None);
        }
        let due_at = st.known_end.checked_sub(self.threshold()).unwrap_or(now);
        let fresh = self.fresh_turn(&st, now);
        if now < due_at {
            st.pending = None;
            return Step::Wait(fresh.map(|_| due_at));
        }
        let reason = match (st.pending.take(), fresh) {
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => return Step::Wait(None),
        };
        if let Some(at) = st.retry_at.filter(|at| *at > now) {
            st.pending = Some(reason);
            return Step::Wait(Some(at));
        }
        match self.renewal_timeout(&mut st, now) {
            Some(timeout) => Step::Renew { reason, timeout },
            None => Step::Wait(None),
        }
    }

    /// One renewal request: `connect` with `timeout` (whole seconds).
    pub(super) async fn renew(
        &self,
        reason: String,
        timeout: Duration,
    ) -> Result<(), LifecycleError> {
        let start = Instant::now();
        if timeout.is_zero() {
            return Ok(());
        }
        let res = self.client.renew(&self.sandbox_id, timeout).await;
        let renewal = {
            let mut st = self.lock();
            match res {
                Ok(_) => {
                    let old = st.known_end;
                    let new = old.max(start + timeout);
                    st.known_end = new;
                    st.renewals += 1;
                    st.extended += new.saturating_duration_since(old);
                    st.last_error = None;
                    st.retry_at = None;
                    Renewal {
                        old_end: wall(old),
                        new_end: wall(new),
                        reason,
                        number: st.renewals,
                    }
                }
                Err(e) => {
                    // The request already went through RetryPolicy; what is left is
                    // whether a later renewal can help, read from the one table.
                    match stop_after(&e) {
                        Some(reason) => st.stopped = Some(reason),
                        None => {
                            let back_off = (self.slack / 4)
                                .clamp(Duration::from_millis(100), Duration::from_secs(5));
                            st.retry_at = Some(Instant::now() + back_off);
                        }
                    }
                    st.last_error = Some(e.to_string());
                    tracing::warn!(sandbox = %self.sandbox_id, error = %e, "keep-alive renewal failed");
                    return Err(e.into());
                }
            }
        };
        tracing::debug!(sandbox = %self.sandbox_id, reason = %renewal.reason, "keep-alive renewed");
        if let Some(f) = &self.on_renew {
            f(&renewal);
        }
        Ok(())
    }
}
