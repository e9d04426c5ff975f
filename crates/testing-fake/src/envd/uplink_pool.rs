//! Network namespaces with pasta already up, made ahead of the sandboxes that will need
//! one: pasta takes about 10 ms to configure a namespace, the largest part of creating a
//! sandbox with internet access, so a create takes a ready one and another is made in the
//! background for the next.
//!
//! An uplink is generic until taken (a fresh network namespace owned by a user namespace
//! of its own, loopback up, pasta's `eth0` and default route; nothing of a sandbox), so
//! handing one out changes nothing a sandbox sees. One whose pasta has ended meanwhile is
//! dropped, never handed out. `E2B_LOCAL_UPLINK_POOL` sets how many are kept ready
//! (default 1; `0` turns the pool off); each idle one costs a pasta process (about
//! 21 MB resident). A create that finds none builds its own, as without the pool, and
//! reports its own failures.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::net::{NetNs, Pasta};

/// A network namespace and the pasta that serves it, configured.
pub(crate) struct Uplink {
    pub(crate) netns: NetNs,
    pub(crate) pasta: Pasta,
}

/// Ready uplinks, and how many are being made.
struct Pool {
    ready: Vec<Uplink>,
    making: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ready: Vec::new(),
    making: 0,
});

/// Uplinks kept beyond [`target`] while spare sandboxes are made for a create storm
/// ([`set_burst`]).
static BURST: AtomicUsize = AtomicUsize::new(0);

/// How many uplinks to keep ready (`E2B_LOCAL_UPLINK_POOL`, default 1), plus the burst.
fn target() -> usize {
    let base = std::env::var("E2B_LOCAL_UPLINK_POOL")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1);
    match base {
        0 => 0,
        n => n + BURST.load(Ordering::Relaxed),
    }
}

/// Keep `n` uplinks beyond the configured number, as many as the spare sandboxes made
/// beyond theirs for a create storm ([`super::spare`]); back to 0, the ready ones beyond
/// the configured number are dropped (each holds a pasta process).
pub(crate) fn set_burst(n: usize) {
    BURST.store(n, Ordering::Relaxed);
    if n == 0 {
        let extra = match POOL.lock() {
            Ok(mut pool) => {
                let keep = target();
                if pool.ready.len() > keep {
                    pool.ready.split_off(keep)
                } else {
                    Vec::new()
                }
            }
            Err(_) => Vec::new(),
        };
        drop(extra);
    }
}

/// A ready uplink whose pasta still runs, if the pool has one; the pool is refilled in
/// the background either way.
pub(crate) fn take() -> Option<Uplink> {
    let mut found = None;
    if let Ok(mut pool) = POOL.lock() {
        while let Some(u) = pool.ready.pop() {
            if u.pasta.running() {
                found = Some(u);
                break;
            }
        }
    }
    refill();
    found
}

/// Start making uplinks until the pool holds [`target`] (ready or being made).
fn refill() {
    let want = target();
    let missing = match POOL.lock() {
        Ok(mut pool) => {
            let n = want.saturating_sub(pool.ready.len() + pool.making);
            pool.making += n;
            n
        }
        Err(_) => 0,
    };
    for _ in 0..missing {
        let spawned = std::thread::Builder::new()
            .name("envd-uplink-pool".into())
            .spawn(|| {
                let made = make();
                // One made for a burst that ended meanwhile is not kept.
                let mut late = None;
                if let Ok(mut pool) = POOL.lock() {
                    pool.making -= 1;
                    if let Some(u) = made {
                        if pool.ready.len() < target() {
                            pool.ready.push(u);
                        } else {
                            late = Some(u);
                        }
                    }
                }
                drop(late);
            });
        if spawned.is_err()
            && let Ok(mut pool) = POOL.lock()
        {
            pool.making -= 1;
        }
    }
}

/// One uplink, configured; `None` when it could not be made (the create that needs one
/// then builds its own and says why).
fn make() -> Option<Uplink> {
    let netns = NetNs::create().ok()?;
    let pasta = Pasta::spawn(&netns).ok()?;
    pasta.ready().ok()?;
    Some(Uplink { netns, pasta })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root and pasta (the sandbox boundary's own requirements).
    #[test]
    fn a_taken_uplink_is_configured_and_a_dead_one_is_never_handed_out() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || super::super::net::pasta_available().is_err() {
            eprintln!("SKIPPED: needs root and pasta");
            return;
        }
        // Fill the pool and wait for it.
        let _ = take();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while POOL.lock().map(|p| p.ready.is_empty()).unwrap_or(true) {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool never filled"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let u = take().expect("a ready uplink");
        assert!(u.pasta.running());
        assert!(
            super::super::net::has_default_route(&u.netns).expect("enter the namespace"),
            "the taken namespace is configured"
        );
        drop(u);
        // A pooled uplink whose pasta died is dropped, not handed out.
        while POOL.lock().map(|p| p.ready.is_empty()).unwrap_or(true) {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool never refilled"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if let Ok(pool) = POOL.lock() {
            for u in &pool.ready {
                u.pasta.stop();
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while POOL
            .lock()
            .map(|p| p.ready.iter().any(|u| u.pasta.running()))
            .unwrap_or(false)
        {
            assert!(std::time::Instant::now() < deadline, "pasta did not end");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if let Some(u) = take() {
            assert!(u.pasta.running(), "a dead uplink was handed out");
        }
    }
}
