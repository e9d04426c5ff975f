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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::{Client, ConnectOptions};
use crate::lifecycle::error::LifecycleError;
use crate::sandbox::EnvdApi;

/// The plan's hard cap on a sandbox's continuous life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Hobby: 1 hour.
    Hobby,
    /// Pro: 24 hours.
    Pro,
    /// Any other cap.
    Custom(Duration),
}

impl Plan {
    /// The cap.
    pub fn cap(self) -> Duration {
        match self {
            Plan::Hobby => Duration::from_secs(3600),
            Plan::Pro => Duration::from_secs(24 * 3600),
            Plan::Custom(d) => d,
        }
    }
}

/// One renewal, as seen by the `on_renew` observer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// End of life known before the renewal (a lower bound).
    pub old_end: SystemTime,
    /// End of life after it (a lower bound).
    pub new_end: SystemTime,
    /// The activity that asked for it (`"exec"`, `"start_process"`, ...).
    pub reason: String,
    /// 1 for the first renewal of this keep-alive, then 2, ...
    pub number: u32,
}

/// Why renewals stopped for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The approval budget (renewals or total extension) is spent.
    Budget,
    /// The plan's hard cap is reached.
    HardCap,
    /// The sandbox is gone.
    Gone,
    /// The keep-alive was closed (owner shut down).
    Closed,
    /// The control plane refused a renewal as invalid (HTTP 400, e.g. past the plan's
    /// maximum instance length counted from the sandbox's real start).
    Refused,
}

type Observer = Arc<dyn Fn(&Renewal) + Send + Sync>;

/// Keep-alive settings. See the [module docs](self) for the semantics.
///
/// ```
/// use std::time::Duration;
/// use e2b_core::lifecycle::{KeepAliveConfig, Plan};
/// let cfg = KeepAliveConfig::new()
///     .plan(Plan::Pro)
///     .max_turn(Duration::from_secs(30 * 60))
///     .max_renewals(100)
///     .on_renew(|r| eprintln!("renewal #{} for {}", r.number, r.reason));
/// # let _ = cfg;
/// ```
#[derive(Clone)]
pub struct KeepAliveConfig {
    idle_timeout: Option<Duration>,
    slack: Option<Duration>,
    cap: Duration,
    max_turn: Option<Duration>,
    max_renewals: Option<u32>,
    max_total_extension: Option<Duration>,
    allow_mismatch: bool,
    on_renew: Option<Observer>,
}

impl fmt::Debug for KeepAliveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepAliveConfig")
            .field("idle_timeout", &self.idle_timeout)
            .field("slack", &self.slack)
            .field("cap", &self.cap)
            .field("max_turn", &self.max_turn)
            .field("max_renewals", &self.max_renewals)
            .field("max_total_extension", &self.max_total_extension)
            .field("allow_mismatch", &self.allow_mismatch)
            .field("on_renew", &self.on_renew.is_some())
            .finish()
    }
}

impl Default for KeepAliveConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl KeepAliveConfig {
    /// Idle timeout = the sandbox timeout, slack = half of it, Hobby cap, no turn limit,
    /// no budget.
    pub fn new() -> Self {
        KeepAliveConfig {
            idle_timeout: None,
            slack: None,
            cap: Plan::Hobby.cap(),
            max_turn: None,
            max_renewals: None,
            max_total_extension: None,
            allow_mismatch: false,
            on_renew: None,
        }
    }

    /// Life ensured after activity (default: the sandbox's create/connect timeout).
    pub fn idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = Some(t);
        self
    }

    /// How far the remaining life may fall below `idle_timeout` before a renewal (default
    /// half of it; must be below `idle_timeout`). Zero renews on nearly every activity.
    pub fn slack(mut self, t: Duration) -> Self {
        self.slack = Some(t);
        self
    }

    /// The plan's hard cap.
    pub fn plan(mut self, plan: Plan) -> Self {
        self.cap = plan.cap();
        self
    }

    /// A turn open longer than this stops renewing.
    pub fn max_turn(mut self, t: Duration) -> Self {
        self.max_turn = Some(t);
        self
    }

    /// At most this many renewals, ever.
    pub fn max_renewals(mut self, n: u32) -> Self {
        self.max_renewals = Some(n);
        self
    }

    /// At most this much life added by renewals, in total.
    pub fn max_total_extension(mut self, t: Duration) -> Self {
        self.max_total_extension = Some(t);
        self
    }

    /// Accept an `idle_timeout` that differs from the sandbox timeout (logged as a
    /// warning instead of [`LifecycleError::TimeoutMismatch`]).
    pub fn allow_mismatch(mut self) -> Self {
        self.allow_mismatch = true;
        self
    }

    /// Called after each renewal (keep it quick; it runs on the renewal task).
    pub fn on_renew(mut self, f: impl Fn(&Renewal) + Send + Sync + 'static) -> Self {
        self.on_renew = Some(Arc::new(f));
        self
    }

    /// Check the settings against the sandbox timeout; the idle timeout in effect.
    pub(crate) fn check(&self, sandbox_timeout: Duration) -> Result<Duration, LifecycleError> {
        let idle = self.idle_timeout.unwrap_or(sandbox_timeout);
        if idle < Duration::from_secs(1) {
            return Err(LifecycleError::InvalidOption(
                "keep-alive idle_timeout must be at least 1 s".into(),
            ));
        }
        if sandbox_timeout > self.cap {
            return Err(LifecycleError::CapExceeded {
                asked: sandbox_timeout,
                cap: self.cap,
            });
        }
        if idle > self.cap {
            return Err(LifecycleError::CapExceeded {
                asked: idle,
                cap: self.cap,
            });
        }
        if self.slack.is_some_and(|s| s >= idle) {
            return Err(LifecycleError::InvalidOption(
                "keep-alive slack must be below idle_timeout".into(),
            ));
        }
        if idle != sandbox_timeout {
            if !self.allow_mismatch {
                return Err(LifecycleError::TimeoutMismatch {
                    timeout: sandbox_timeout,
                    idle,
                });
            }
            tracing::warn!(
                ?idle,
                ?sandbox_timeout,
                "keep-alive idle_timeout differs from the sandbox timeout"
            );
        }
        Ok(idle)
    }
}

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

struct Turn {
    start: Instant,
    reason: String,
}

struct State {
    known_end: Instant,
    life_start: Instant,
    renewals: u32,
    extended: Duration,
    turns: BTreeMap<u64, Turn>,
    next_turn: u64,
    pending: Option<String>,
    stopped: Option<StopReason>,
    last_error: Option<String>,
    retry_at: Option<Instant>,
}

struct Inner {
    client: Client,
    sandbox_id: String,
    idle: Duration,
    slack: Duration,
    cap: Duration,
    max_turn: Option<Duration>,
    max_renewals: Option<u32>,
    max_total_extension: Option<Duration>,
    on_renew: Option<Observer>,
    state: Mutex<State>,
    wake: Notify,
    cancel: CancellationToken,
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

enum Step {
    Wait(Option<Instant>),
    Renew { reason: String, timeout: Duration },
}

impl KeepAlive {
    /// Start a keep-alive for `sandbox_id`, whose create/connect timeout is
    /// `sandbox_timeout` and whose end of life is known to be no earlier than `known_end`
    /// (`None`: unknown, the first activity renews). Must run inside a tokio runtime.
    pub fn new(
        client: Client,
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

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn threshold(&self) -> Duration {
        self.idle.saturating_sub(self.slack)
    }

    fn is_stale(&self, turn: &Turn, now: Instant) -> bool {
        self.max_turn
            .is_some_and(|m| now.saturating_duration_since(turn.start) >= m)
    }

    /// The reason of a fresh open turn, if any.
    fn fresh_turn(&self, st: &State, now: Instant) -> Option<String> {
        st.turns
            .values()
            .find(|t| !self.is_stale(t, now))
            .map(|t| t.reason.clone())
    }

    fn touch(&self, reason: &str) {
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
    fn renewal_timeout(&self, st: &mut State, now: Instant) -> Option<Duration> {
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

    fn next_step(&self) -> Step {
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
    async fn renew(&self, reason: String, timeout: Duration) -> Result<(), LifecycleError> {
        let start = Instant::now();
        if timeout.is_zero() {
            return Ok(());
        }
        let res = self
            .client
            .connect(&self.sandbox_id, ConnectOptions::with_timeout(timeout))
            .await;
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
                    if e.is_sandbox_not_found() {
                        st.stopped = Some(StopReason::Gone);
                    } else if matches!(e, crate::error::Error::BadRequest { .. }) {
                        st.stopped = Some(StopReason::Refused);
                    } else {
                        let back_off = (self.slack / 4)
                            .clamp(Duration::from_millis(100), Duration::from_secs(5));
                        st.retry_at = Some(Instant::now() + back_off);
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

/// The background task: renews when a point activity asked for it or a fresh turn is
/// open and the remaining life fell below the threshold; sleeps otherwise.
async fn run(inner: Arc<Inner>) {
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
                        Some(at) => tokio::time::sleep_until(at.into()).await,
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
fn wall(i: Instant) -> SystemTime {
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    if i >= now_i {
        now_s + (i - now_i)
    } else {
        now_s - (now_i - i)
    }
}

#[cfg(test)]
mod tests {
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
}
