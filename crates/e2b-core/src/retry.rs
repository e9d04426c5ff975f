//! The retry policy of this crate: which failures are retried, how often and after how
//! long. Idempotent control-plane calls (get, list, kill, set timeout, refresh, connect)
//! and envd's unary reads (`Stat`, `ListDir`, `Remove`, the `/files` download handshake)
//! go through [`RetryPolicy::run`]; create goes through [`RetryPolicy::run`] with
//! [`Idempotence::NotIfAmbiguous`] and checks by metadata before any further attempt
//! (see [`Client::create_raw`](crate::Client::create_raw)).
//!
//! | failure | kind | retried |
//! | --- | --- | --- |
//! | 429 (`Retry-After` honoured when at most [`RetryPolicy::max_retry_after`]) | not executed | yes |
//! | 503 | not executed | yes |
//! | 502, 504, envd `unavailable` | ambiguous | idempotent calls only |
//! | connection reset or refused, body cut ([`Error::Transport`]) | ambiguous | idempotent calls only |
//! | [`Error::SandboxNotFound`] (also the proxy's 502 for a missing or paused sandbox) | final | no |
//! | our own timeouts, 4xx, everything else | final | no |
//!
//! Delays grow exponentially from [`RetryPolicy::min_delay`] to
//! [`RetryPolicy::max_delay`] with random jitter (the `backon` crate's exponential
//! backoff), and the sum of delays is capped by [`RetryPolicy::max_total_delay`], so a
//! failure that persists (a paused sandbox answering 502) costs a handful of attempts
//! over a few seconds, never more.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBuilder};

use crate::disposition::Disposition;
use crate::error::Error;

/// How a failure bears on retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// The server refused before doing anything (429, 503): safe to retry any call.
    NotExecuted {
        /// The server's `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// The request may or may not have taken effect (reset, 502, 504): safe to retry an
    /// idempotent call only.
    Ambiguous,
    /// Retrying cannot help.
    Final,
}

/// Classifies `err` for retrying: [`Error::disposition`] read for a retry loop.
///
/// ```
/// use e2b_core::retry::{RetryClass, classify};
/// use e2b_core::{Error, Surface};
/// let reset = Error::Transport { surface: Surface::Control, message: "connection reset".into() };
/// assert_eq!(classify(&reset), RetryClass::Ambiguous);
/// ```
pub fn classify(err: &Error) -> RetryClass {
    match err.disposition() {
        Disposition::Temporary {
            maybe_executed: false,
            retry_after,
        } => RetryClass::NotExecuted { retry_after },
        Disposition::Temporary {
            maybe_executed: true,
            ..
        } => RetryClass::Ambiguous,
        Disposition::Gone | Disposition::Unroutable | Disposition::Final => RetryClass::Final,
    }
}

/// Whether a call may be repeated after an ambiguous failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotence {
    /// Repeating the call has the effect of doing it once.
    Idempotent,
    /// Only failures that certainly did nothing ([`RetryClass::NotExecuted`]) are retried;
    /// an ambiguous one is returned to the caller (create checks before retrying).
    NotIfAmbiguous,
}

/// Capped, jittered exponential backoff.
///
/// ```
/// use std::time::Duration;
/// let p = e2b_core::retry::RetryPolicy::default().max_attempts(3);
/// assert_eq!(p.attempts(), 3);
/// assert!(p.total_delay_cap() <= Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    min_delay: Duration,
    max_delay: Duration,
    max_total_delay: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, delays from 100 ms doubling to at most 2 s (plus up to as much
    /// jitter), at most 8 s of delay in all; a `Retry-After` of up to 8 s is honoured.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
            max_total_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// No retries at all: every call is made once.
    pub fn none() -> Self {
        RetryPolicy::default().max_attempts(1)
    }

    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// First delay (later ones double).
    pub fn min_delay(mut self, d: Duration) -> Self {
        self.min_delay = d;
        self
    }

    /// Largest delay before jitter.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Cap on the sum of all delays of one call.
    pub fn max_total_delay(mut self, d: Duration) -> Self {
        self.max_total_delay = d;
        self
    }

    /// Longest `Retry-After` waited for; a longer one ends the retries.
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// Attempts in all.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Cap on the sum of all delays of one call.
    pub fn total_delay_cap(&self) -> Duration {
        self.max_total_delay
    }

    /// The delays between attempts (jittered; at most `max_attempts - 1` of them, summing
    /// to at most the total cap).
    fn delays(&self) -> impl Iterator<Item = Duration> {
        ExponentialBuilder::default()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .with_total_delay(Some(self.max_total_delay))
            .build()
    }

    /// Runs `op` (given the attempt number, from 1) until it succeeds, fails for good, or
    /// the attempts or the delay budget run out; returns the last error then. `what`
    /// names the call in the log.
    pub async fn run<T, F, Fut>(
        &self,
        what: &str,
        idempotence: Idempotence,
        op: F,
    ) -> Result<T, Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.run_also(what, idempotence, |_| false, op).await
    }

    /// [`RetryPolicy::run`] that also retries the failures `also` accepts (e.g. a 409
    /// while a resume is in flight), on the same delays and caps: the one loop for every
    /// caller that waits on the control plane.
    pub async fn run_also<T, F, Fut>(
        &self,
        what: &str,
        idempotence: Idempotence,
        also: impl Fn(&Error) -> bool,
        mut op: F,
    ) -> Result<T, Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut delays = self.delays();
        let mut waited = Duration::ZERO;
        let mut attempt = 1;
        loop {
            let err = match op(attempt).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let retry_after = match (classify(&err), idempotence) {
                (RetryClass::NotExecuted { retry_after }, _) => retry_after,
                (RetryClass::Ambiguous, Idempotence::Idempotent) => None,
                _ if also(&err) => None,
                _ => return Err(err),
            };
            let Some(mut delay) = delays.next() else {
                return Err(err);
            };
            if let Some(ra) = retry_after {
                if ra > self.max_retry_after || waited + ra > self.max_total_delay {
                    return Err(err);
                }
                delay = delay.max(ra);
            }
            waited += delay;
            tracing::debug!(what, attempt, ?delay, error = %err, "retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Surface;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn server(status: u16) -> Error {
        Error::Server {
            surface: Surface::Control,
            status,
            error_code: None,
            message: String::new(),
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy::default()
            .min_delay(Duration::from_millis(1))
            .max_delay(Duration::from_millis(2))
    }

    #[test]
    fn classification() {
        assert_eq!(
            classify(&server(503)),
            RetryClass::NotExecuted { retry_after: None }
        );
        assert_eq!(classify(&server(502)), RetryClass::Ambiguous);
        assert_eq!(classify(&server(500)), RetryClass::Final);
        let limited = Error::RateLimited {
            surface: Surface::Control,
            retry_after: Some(Duration::from_secs(1)),
            message: String::new(),
        };
        assert_eq!(
            classify(&limited),
            RetryClass::NotExecuted {
                retry_after: Some(Duration::from_secs(1))
            }
        );
        let gone = Error::SandboxNotFound {
            surface: Surface::Envd,
            status: 502,
            message: String::new(),
        };
        assert_eq!(classify(&gone), RetryClass::Final);
        let late = Error::Timeout {
            what: "x",
            after: Duration::from_secs(1),
        };
        assert_eq!(classify(&late), RetryClass::Final);
    }

    #[test]
    fn delays_are_capped_in_number_and_sum() {
        let p = RetryPolicy::default();
        for _ in 0..100 {
            let d: Vec<Duration> = p.delays().collect();
            assert!(d.len() <= 3);
            assert!(d.iter().sum::<Duration>() <= p.max_total_delay);
            assert!(d.iter().all(|x| *x <= p.max_delay * 2));
        }
    }

    #[tokio::test]
    async fn attempts_are_counted_and_capped() {
        let n = AtomicU32::new(0);
        let r: Result<(), Error> = fast()
            .run("t", Idempotence::Idempotent, |_| async {
                n.fetch_add(1, Ordering::SeqCst);
                Err(server(502))
            })
            .await;
        assert!(matches!(r, Err(Error::Server { status: 502, .. })));
        assert_eq!(n.load(Ordering::SeqCst), 4);

        // Ambiguous failures of a non-idempotent call are returned at once.
        n.store(0, Ordering::SeqCst);
        let r: Result<(), Error> = fast()
            .run("t", Idempotence::NotIfAmbiguous, |_| async {
                n.fetch_add(1, Ordering::SeqCst);
                Err(server(504))
            })
            .await;
        assert!(r.is_err());
        assert_eq!(n.load(Ordering::SeqCst), 1);

        // A success after two refusals.
        n.store(0, Ordering::SeqCst);
        let nr = &n;
        let r = fast()
            .run("t", Idempotence::NotIfAmbiguous, |attempt| async move {
                nr.fetch_add(1, Ordering::SeqCst);
                if attempt < 3 {
                    Err(server(503))
                } else {
                    Ok(attempt)
                }
            })
            .await;
        assert_eq!(r.ok(), Some(3));
    }

    #[tokio::test]
    async fn a_long_retry_after_ends_the_retries() {
        let n = AtomicU32::new(0);
        let r: Result<(), Error> = fast()
            .run("t", Idempotence::Idempotent, |_| async {
                n.fetch_add(1, Ordering::SeqCst);
                Err(Error::RateLimited {
                    surface: Surface::Control,
                    retry_after: Some(Duration::from_secs(3600)),
                    message: String::new(),
                })
            })
            .await;
        assert!(matches!(r, Err(Error::RateLimited { .. })));
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}
