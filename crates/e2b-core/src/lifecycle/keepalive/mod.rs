//! Opt-in keep-alive: tops a sandbox's timeout up while real work goes on, never blindly.
//!
//! * Off unless asked for: without a [`KeepAlive`] nothing here runs and no request is sent.
//! * Top-up, not extension: the known end of life is tracked locally (from the create,
//!   connect and renewal answers, as a lower bound). An activity costs no request while at
//!   least `idle_timeout - slack` is left; otherwise one renewal brings the remaining life
//!   back to `idle_timeout`. With the default `slack = idle_timeout / 2` that is at most
//!   one control-plane request per `idle_timeout / 2` of activity, and after the last
//!   activity the sandbox lives between `idle_timeout / 2` and `idle_timeout` more.
//! * Never shortens: renewals use `connect` with the new timeout, which the control plane
//!   applies only when it ends later (a paused sandbox is resumed by it: activity on a
//!   paused sandbox means someone wants it back).
//! * Never beyond the plan's hard cap ([`Plan`]: 1 h Hobby, 24 h Pro, or custom), counted
//!   from the lease's start (the create or connect request; for a sandbox that was
//!   already running the control plane's own refusal, HTTP 400, stops renewals with
//!   [`StopReason::Refused`]); asking for more is [`LifecycleError::CapExceeded`].
//! * One classification: a renewal is one `connect` through the client's
//!   [`RetryPolicy`](crate::retry::RetryPolicy); when that gives up, the table of
//!   [`Error::disposition`](crate::Error::disposition) decides: gone stops
//!   ([`StopReason::Gone`]), a final answer stops ([`StopReason::Refused`]), anything
//!   else (temporary, our own timeout) is asked again after a back-off of a quarter of
//!   the slack (0.1–5 s), so the next try still lands before the known end.
//! * Driven by activity: point activities ([`KeepAlive::touch`], every call through
//!   [`LeasedApi`](super::LeasedApi)) and turns ([`KeepAlive::activity`] guards) that are
//!   renewed in the background while they stay open. A turn older than `max_turn` stops
//!   renewing (and, while only stale turns are open, point activities do not renew
//!   either), and an approval budget (`max_renewals`, `max_total_extension`) ends
//!   renewals for good, so a stuck turn lets the sandbox time out (pause or kill) normally.
//! * An `on_renew` observer sees each renewal (old end, new end, reason).
//!
//! # The timeout mismatch
//!
//! The `idle_timeout` must equal the sandbox's create/connect timeout. When they differ,
//! either the first renewals come too late (create timeout shorter: the sandbox may die
//! before the first top-up of a schedule derived from `idle_timeout`) or the idle life
//! silently differs from what the sandbox was created with. Construction therefore
//! returns [`LifecycleError::TimeoutMismatch`] unless [`KeepAliveConfig::allow_mismatch`]
//! was set, which downgrades it to a logged warning. Leaving `idle_timeout` unset uses
//! the sandbox timeout.
//!
//! # Time
//!
//! Every decision reads tokio's clock ([`tokio::time::Instant`]), and renewals go through
//! one seam (`state::Renewer`, the client's `connect` in production), so the timing is
//! tested on tokio's paused clock with a recording renewer (`tests.rs`): windows of
//! minutes take no real time.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::Client;
use crate::lifecycle::error::LifecycleError;
use crate::sandbox::EnvdApi;
mod config;
mod state;
mod task;
#[cfg(test)]
mod tests;

pub use config::{KeepAliveConfig, Plan, Renewal, StopReason};
use state::{Inner, State, Turn};
use task::run;

/// A snapshot of a keep-alive's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepAliveStats {
    /// Renewals done.
    pub renewals: u32,
    /// Life added by them.
    pub total_extension: Duration,
    /// Known remaining life (a lower bound).
    pub remaining: Duration,
    /// Open turns.
    pub open_turns: usize,
    /// Why renewals stopped, if they did.
    pub stopped: Option<StopReason>,
    /// The last renewal error, if the last attempt failed.
    pub last_error: Option<String>,
}

/// Cancels the renewal task when the last [`KeepAlive`] clone is dropped.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A running keep-alive for one sandbox. Cheap to clone; the background renewal task
/// ends with [`KeepAlive::close`] or when the last clone is dropped.
#[derive(Clone)]
pub struct KeepAlive {
    inner: Arc<Inner>,
    _stop: Arc<StopOnDrop>,
}

impl fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepAlive")
            .field("sandbox_id", &self.inner.sandbox_id)
            .field("idle", &self.inner.idle)
            .field("slack", &self.inner.slack)
            .field("stats", &self.stats())
            .finish()
    }
}

impl KeepAlive {
    /// Start a keep-alive for `sandbox_id`, whose create/connect timeout is
    /// `sandbox_timeout` and whose end of life is known to be no earlier than `known_end`
    /// (`None`: unknown, the first activity renews). Must run inside a tokio runtime.
    pub fn new(
        client: Client,
        sandbox_id: impl Into<String>,
        sandbox_timeout: Duration,
        known_end: Option<std::time::Instant>,
        cfg: KeepAliveConfig,
    ) -> Result<KeepAlive, LifecycleError> {
        KeepAlive::with_renewer(
            Box::new(client),
            sandbox_id,
            sandbox_timeout,
            known_end.map(Instant::from_std),
            cfg,
        )
    }

    /// [`KeepAlive::new`] with the renewal seam given (tests: a recording renewer).
    pub(crate) fn with_renewer(
        client: Box<dyn state::Renewer>,
        sandbox_id: impl Into<String>,
        sandbox_timeout: Duration,
        known_end: Option<Instant>,
        cfg: KeepAliveConfig,
    ) -> Result<KeepAlive, LifecycleError> {
        let idle = cfg.check(sandbox_timeout)?;
        let now = Instant::now();
        // The lease's life starts when the create/connect request went out, when known.
        let life_start = known_end
            .and_then(|e| e.checked_sub(sandbox_timeout))
            .map_or(now, |s| s.min(now));
        let inner = Arc::new(Inner {
            client,
            sandbox_id: sandbox_id.into(),
            idle,
            slack: cfg.slack.unwrap_or(idle / 2),
            cap: cfg.cap,
            max_turn: cfg.max_turn,
            max_renewals: cfg.max_renewals,
            max_total_extension: cfg.max_total_extension,
            on_renew: cfg.on_renew,
            state: Mutex::new(State {
                known_end: known_end.unwrap_or(now),
                life_start,
                renewals: 0,
                extended: Duration::ZERO,
                turns: BTreeMap::new(),
                next_turn: 0,
                pending: None,
                stopped: None,
                last_error: None,
                retry_at: None,
            }),
            wake: Notify::new(),
            cancel: CancellationToken::new(),
        });
        tokio::spawn(run(inner.clone()));
        let stop = Arc::new(StopOnDrop(inner.cancel.clone()));
        Ok(KeepAlive { inner, _stop: stop })
    }

    /// The sandbox this keep-alive renews.
    pub fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// The idle timeout in effect.
    pub fn idle_timeout(&self) -> Duration {
        self.inner.idle
    }

    /// Open a turn: while the guard lives (and is younger than `max_turn`), the sandbox is
    /// kept alive in the background. Also a point activity.
    pub fn activity(&self, reason: impl Into<String>) -> ActivityGuard {
        let reason = reason.into();
        let id = {
            let mut st = self.inner.lock();
            let id = st.next_turn;
            st.next_turn += 1;
            st.turns.insert(
                id,
                Turn {
                    start: Instant::now(),
                    reason: reason.clone(),
                },
            );
            id
        };
        self.inner.wake.notify_one();
        ActivityGuard {
            inner: self.inner.clone(),
            id,
        }
    }

    /// A point activity. Costs a mutex and a clock read while enough life is left;
    /// otherwise it asks the background task for one renewal (never blocks on the network).
    pub fn touch(&self, reason: &str) {
        self.inner.touch(reason);
    }

    /// Make sure at least `min_remaining` of life is left, renewing now if needed (one
    /// request at most; `Ok(false)` when enough was left). Asking beyond the plan's cap is
    /// [`LifecycleError::CapExceeded`]. Ignores the turn limits and the budget (an
    /// explicit request), but counts as a renewal.
    pub async fn ensure(&self, min_remaining: Duration) -> Result<bool, LifecycleError> {
        let cap = self.inner.cap;
        if min_remaining > cap {
            return Err(LifecycleError::CapExceeded {
                asked: min_remaining,
                cap,
            });
        }
        // Whole seconds, rounded up, so that at least `min_remaining` is left.
        let timeout = Duration::from_secs(
            min_remaining.as_secs() + u64::from(min_remaining.subsec_nanos() > 0),
        );
        {
            let st = self.inner.lock();
            let now = Instant::now();
            if st.known_end >= now + min_remaining {
                return Ok(false);
            }
            let life = (now + timeout).saturating_duration_since(st.life_start);
            if timeout > cap || life > cap {
                return Err(LifecycleError::CapExceeded { asked: life, cap });
            }
        }
        self.inner.renew("ensure".into(), timeout).await?;
        Ok(true)
    }

    /// Reconnect now (one `connect` with the idle timeout, within the budget and the
    /// plan's cap): a paused sandbox resumes, a running one gets at least that much life,
    /// a gone one is [`LifecycleError`] (and stops this keep-alive). `Ok(false)`: not
    /// tried, the sandbox is already known to be gone. What a lease does once after envd's
    /// proxy answered 502 ([`Error::is_unroutable`](crate::Error::is_unroutable)).
    pub async fn reconnect(&self) -> Result<bool, LifecycleError> {
        let timeout = {
            let mut st = self.inner.lock();
            match st.stopped {
                Some(StopReason::Gone) => return Ok(false),
                Some(_) => None,
                None => self.inner.renewal_timeout(&mut st, Instant::now()),
            }
        };
        let timeout = timeout.unwrap_or(self.inner.idle);
        self.inner
            .renew("reconnect after the proxy's 502".into(), timeout)
            .await?;
        Ok(true)
    }

    /// Known remaining life (a lower bound; zero when unknown or past).
    pub fn remaining(&self) -> Duration {
        self.inner
            .lock()
            .known_end
            .saturating_duration_since(Instant::now())
    }

    /// Counters and state.
    pub fn stats(&self) -> KeepAliveStats {
        let st = self.inner.lock();
        KeepAliveStats {
            renewals: st.renewals,
            total_extension: st.extended,
            remaining: st.known_end.saturating_duration_since(Instant::now()),
            open_turns: st.turns.len(),
            stopped: st.stopped,
            last_error: st.last_error.clone(),
        }
    }

    /// Stop renewing for good (the owner calls this at shutdown).
    pub fn close(&self) {
        {
            let mut st = self.inner.lock();
            st.stopped.get_or_insert(StopReason::Closed);
        }
        self.inner.cancel.cancel();
    }

    /// Decorate `api` so every call through it is a point activity (see
    /// [`LeasedApi`](super::LeasedApi)).
    pub fn wrap(&self, api: Arc<dyn EnvdApi>) -> Arc<dyn EnvdApi> {
        Arc::new(super::LeasedApi::new(api, self.clone()))
    }
}

/// An open turn of a [`KeepAlive`]; dropping it ends the turn.
#[must_use = "the turn ends when the guard is dropped"]
pub struct ActivityGuard {
    inner: Arc<Inner>,
    id: u64,
}

impl fmt::Debug for ActivityGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivityGuard")
            .field("turn", &self.id)
            .finish()
    }
}

impl ActivityGuard {
    /// A point activity within this turn.
    pub fn touch(&self) {
        let reason = self
            .inner
            .lock()
            .turns
            .get(&self.id)
            .map(|t| t.reason.clone())
            .unwrap_or_default();
        self.inner.touch(&reason);
    }
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.inner.lock().turns.remove(&self.id);
        self.inner.wake.notify_one();
    }
}
