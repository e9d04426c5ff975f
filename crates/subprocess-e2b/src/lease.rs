//! The host lease: a command that is not durable ends within a bound once the host that
//! started it is gone, even when no kill can reach the sandbox (the host process was
//! killed, the network is cut, envd is frozen).
//!
//! # Design
//!
//! The native spawn helper already stays behind as each spawn's watching parent when it
//! is given `--kill-after` (root in contained mode, outside the spawn's cgroup, session
//! and group, so the sandbox user can neither signal nor move it). Started with
//! `--lease FILE SECS` it also watches `FILE` and ends the spawn's cgroup (plain mode:
//! its process group) once `FILE` stopped changing for `SECS` (`helper/lease.rs`: the
//! watcher measures on its own monotonic clock when the file last changed, so neither
//! clock steps nor the host's clock matter, and the spawn ends at most `SECS` after the
//! last renewal).
//!
//! `FILE` is `lease` in the adapter's root-owned helper directory: one lease per adapter,
//! renewed by the host with one envd request (`POST /files` as root, a few bytes) every
//! quarter of the bound, and only while at least one leased spawn of the adapter runs:
//! the request count is one per adapter and interval, never per command, and an idle
//! adapter sends none (after one last renewal following the last spawn's end, which
//! lets the helper's reaper know the host saw that end). Nothing is added to a spawn's critical path: the lease costs the
//! spawn two more helper arguments and, in the sandbox, the watcher's `fork`. The
//! watcher counts its own start as a renewal, so the first renewal may come a whole
//! interval after the spawn. With the watcher being envd's process, `signal(TERM|KILL)`
//! goes through the trusted shell (as with [`kill_after`](crate::E2bSubprocessOptions)).
//!
//! Why a lease file and not the watcher noticing that envd's stream went away: envd keeps
//! a process running when the client's stream ends (that is how `Connect` works), and
//! the process's pipes go to envd, not to the host, so nothing in the sandbox sees the
//! host leave; and a frozen envd looks, from inside, exactly like a quiet one. Only a
//! renewal that has to cross the same path as the host's requests tells the sandbox that
//! the host is still there and still reaches it.
//!
//! Durable spawns pass no `--lease` and outlive their host (`Launch::lease` is `None`
//! for them). Terminals (always the `sh` helper) and piped spawns through the `sh` helper
//! (no native helper in this build, a `noexec` `/tmp`, another architecture) have no
//! lease: a `sh` watcher would cost a `stat` and a `sleep` process per look and per
//! command, and one left running in the spawn's cgroup would change what the tree kill
//! and the cgroup reuse see. There only [`kill_after`](crate::E2bSubprocessOptions)
//! bounds a spawn in the sandbox (`timeout -s KILL` in front of the program, its process
//! group only), and the adapter says so once (a warning) when a lease was asked for.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use e2b_core::EnvdApi;

/// Default host lease bound: a non-durable command outlives a lost host by at most 2
/// minutes.
pub const DEFAULT_HOST_LEASE: Duration = Duration::from_secs(120);

/// Name of the lease file in the adapter's helper directory.
const LEASE_FILE: &str = "lease";

/// One adapter's lease: its bound, its file once the helper directory is known, and how
/// many leased spawns run.
pub(crate) struct HostLease {
    /// The bound, in whole seconds (at least 1).
    secs: u64,
    state: Mutex<State>,
    /// Set once the missing native helper was reported (see [`HostLease::unavailable`]).
    warned: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    /// Leased spawns running.
    live: usize,
    /// Leased spawns whose stream ended, waiting for one more renewal: it tells their
    /// reapers (`helper/lease.rs`) that the host is alive and saw the end.
    draining: usize,
    /// True while the renewal task runs.
    renewing: bool,
    /// Renewals sent so far (the file's content; only its change matters).
    sent: u64,
}

/// Held by a leased spawn while its stream runs; renewals stop one renewal after the
/// last one is let go.
pub(crate) struct LeaseHold {
    lease: Arc<HostLease>,
}

impl Drop for LeaseHold {
    fn drop(&mut self) {
        let mut st = self.lease.lock();
        st.live = st.live.saturating_sub(1);
        st.draining += 1;
    }
}

impl std::fmt::Debug for HostLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostLease")
            .field("secs", &self.secs)
            .finish_non_exhaustive()
    }
}

impl HostLease {
    /// A lease of `bound` (rounded up to whole seconds, at least 1 s).
    pub(crate) fn new(bound: Duration) -> Arc<HostLease> {
        let secs = bound
            .as_secs()
            .saturating_add(u64::from(bound.subsec_nanos() > 0))
            .clamp(1, crate::session::MAX_KILL_AFTER_SECS);
        Arc::new(HostLease {
            secs,
            state: Mutex::new(State::default()),
            warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The bound in whole seconds (the helper's `--lease FILE SECS`).
    pub(crate) fn secs(&self) -> u64 {
        self.secs
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How often the host renews: a quarter of the bound (at least 250 ms), so two
    /// renewals may be lost or late before the watcher (which allows three quarters of
    /// the bound without a change, `helper/lease.rs`) ends anything.
    fn interval(&self) -> Duration {
        Duration::from_millis((self.secs * 1000 / 4).max(250))
    }

    /// A piped spawn runs through the `sh` helper, which has no lease: said once per
    /// adapter (a warning), since only `kill_after` then bounds what outlives a lost host.
    pub(crate) fn unavailable(&self) {
        if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                bound_secs = self.secs,
                "host lease unavailable: spawns use the sh helper (no native helper here); \
                 set kill_after to bound what outlives a lost host"
            );
        }
    }

    /// Takes a hold for a spawn of the adapter whose helper directory is `dir` (starting
    /// the renewals if they were idle) and returns it with the helper arguments
    /// `--lease FILE SECS`. Must be called within a tokio runtime.
    pub(crate) fn hold(
        self: &Arc<Self>,
        api: &Arc<dyn EnvdApi>,
        dir: &str,
    ) -> (LeaseHold, [String; 3]) {
        let file = format!("{dir}/{LEASE_FILE}");
        let start = {
            let mut st = self.lock();
            st.live += 1;
            !std::mem::replace(&mut st.renewing, true)
        };
        if start {
            let api = api.clone();
            let me = Arc::downgrade(self);
            let every = self.interval();
            tokio::spawn(renew(api, file.clone(), every, me));
        }
        let hold = LeaseHold {
            lease: self.clone(),
        };
        (hold, ["--lease".to_owned(), file, self.secs.to_string()])
    }
}

/// The renewal task: every `every`, while a hold is taken or an ended spawn waits for
/// its last renewal, rewrites `file` as root (one request, bounded by `every`); ends
/// when neither is left (the next hold starts it again) or the adapter is gone.
async fn renew(api: Arc<dyn EnvdApi>, file: String, every: Duration, lease: Weak<HostLease>) {
    loop {
        tokio::time::sleep(every).await;
        let (n, drained) = {
            let Some(lease) = lease.upgrade() else {
                return;
            };
            let mut st = lease.lock();
            if st.live == 0 && st.draining == 0 {
                st.renewing = false;
                return;
            }
            st.sent += 1;
            (st.sent, st.draining)
        };
        let body = Bytes::from(format!("{n}\n"));
        match tokio::time::timeout(every, api.upload_bytes(&file, Some("root"), body)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "host lease renewal failed"),
            Err(_) => tracing::debug!("host lease renewal timed out"),
        }
        // Ended spawns are let go after one renewal attempt: when it failed, their
        // reapers see the lease expire and end what the spawns left, the safe side.
        if let Some(lease) = lease.upgrade() {
            let mut st = lease.lock();
            st.draining = st.draining.saturating_sub(drained);
        }
    }
}
