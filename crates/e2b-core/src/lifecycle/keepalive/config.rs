//! Keep-alive configuration: the plan's cap, the renewal record an observer sees, why
//! renewals stop, and [`KeepAliveConfig`] with its checks.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::lifecycle::error::LifecycleError;

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
    /// The control plane refused a renewal for good: invalid (HTTP 400, e.g. past the
    /// plan's maximum instance length counted from the sandbox's real start), or not
    /// allowed (401, 403) — any answer the classification table calls final.
    Refused,
}

pub(crate) type Observer = Arc<dyn Fn(&Renewal) + Send + Sync>;

/// Keep-alive settings. See the [module docs](crate::lifecycle::keepalive) for the semantics.
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
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) slack: Option<Duration>,
    pub(crate) cap: Duration,
    pub(crate) max_turn: Option<Duration>,
    pub(crate) max_renewals: Option<u32>,
    pub(crate) max_total_extension: Option<Duration>,
    pub(crate) allow_mismatch: bool,
    pub(crate) on_renew: Option<Observer>,
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
