//! Request counters: every request that reaches the emulator is counted per surface
//! (control plane or envd) and per route key `"METHOD /route/{template}"`.
//!
//! Keys use route templates so that tests can assert on them without knowing sandbox ids:
//! `POST /v2/sandboxes`, `GET /sandboxes/{sandboxID}`, `POST /process.Process/Start`,
//! `GET /files`. The emulator's own `/_emulator/*` endpoints are never counted.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Which HTTP surface a request was addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    /// The control-plane REST API (`X-API-KEY`).
    Control,
    /// envd, reached through the shared sandbox host (`E2b-Sandbox-Id`).
    Envd,
}

impl Plane {
    /// Wire name (`control` / `envd`).
    pub fn as_str(self) -> &'static str {
        match self {
            Plane::Control => "control",
            Plane::Envd => "envd",
        }
    }
}

/// A point-in-time copy of every counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Every counted request.
    pub total: u64,
    /// Control-plane requests per route key.
    pub control: BTreeMap<String, u64>,
    /// envd requests per route key.
    pub envd: BTreeMap<String, u64>,
}

impl CounterSnapshot {
    /// Requests with this route key on either surface.
    pub fn get(&self, key: &str) -> u64 {
        self.control.get(key).copied().unwrap_or(0) + self.envd.get(key).copied().unwrap_or(0)
    }

    /// Requests with this route key on one surface.
    pub fn get_on(&self, surface: Plane, key: &str) -> u64 {
        let map = match surface {
            Plane::Control => &self.control,
            Plane::Envd => &self.envd,
        };
        map.get(key).copied().unwrap_or(0)
    }

    /// All requests on one surface.
    pub fn plane_total(&self, surface: Plane) -> u64 {
        match surface {
            Plane::Control => self.control.values().sum(),
            Plane::Envd => self.envd.values().sum(),
        }
    }
}

/// The emulator's request counters (shared, cheap to update).
#[derive(Debug, Default)]
pub struct Counters {
    inner: Mutex<CounterSnapshot>,
    /// TCP connections accepted (either plane: they share the listener).
    connections: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn lock(&self) -> std::sync::MutexGuard<'_, CounterSnapshot> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count one request.
    pub(crate) fn record(&self, surface: Plane, key: &str) {
        let mut s = self.lock();
        s.total += 1;
        let map = match surface {
            Plane::Control => &mut s.control,
            Plane::Envd => &mut s.envd,
        };
        *map.entry(key.to_owned()).or_insert(0) += 1;
    }

    /// Every counted request since start or the last [`Counters::reset`].
    pub fn total(&self) -> u64 {
        self.lock().total
    }

    /// Requests on one surface.
    pub fn plane_total(&self, surface: Plane) -> u64 {
        self.lock().plane_total(surface)
    }

    /// Requests with this route key (`"POST /v2/sandboxes"`) on either surface.
    pub fn get(&self, key: &str) -> u64 {
        self.lock().get(key)
    }

    /// Requests with this route key on one surface (`GET /health` exists on both).
    pub fn get_on(&self, surface: Plane, key: &str) -> u64 {
        self.lock().get_on(surface, key)
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        self.lock().clone()
    }

    /// Set every counter back to zero.
    pub fn reset(&self) {
        *self.lock() = CounterSnapshot::default();
        self.connections
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count one accepted TCP connection.
    pub(crate) fn connection(&self) {
        self.connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// TCP connections accepted since start or the last [`Counters::reset`]: what a
    /// client that keeps its connections costs (a new one is a round trip more on a
    /// real link).
    ///
    /// ```
    /// let c = testing_fake::Counters::default();
    /// assert_eq!(c.connections(), 0);
    /// ```
    pub fn connections(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The route key of a request: `"METHOD /path"` with sandbox ids (and other ids in control
/// paths) replaced by their `{name}` templates.
pub(crate) fn route_key(surface: Plane, method: &http::Method, path: &str) -> String {
    let path = match surface {
        Plane::Envd => path.to_owned(),
        Plane::Control => control_template(path),
    };
    format!("{} {}", method.as_str(), path)
}

fn control_template(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').collect();
    // segs[0] is "" for an absolute path.
    let mut out: Vec<String> = segs.iter().map(|s| (*s).to_owned()).collect();
    let id_after = |name: &str, idx: usize, out: &mut Vec<String>, placeholder: &str| {
        if segs.get(idx).copied() == Some(name) && segs.len() > idx + 1 {
            let next = segs[idx + 1];
            // `/sandboxes/metrics` is a route of its own.
            if !(next.is_empty() || (name == "sandboxes" && next == "metrics")) {
                out[idx + 1] = placeholder.to_owned();
            }
        }
    };
    id_after("sandboxes", 1, &mut out, "{sandboxID}");
    if segs.get(1).copied() == Some("v2") {
        id_after("sandboxes", 2, &mut out, "{sandboxID}");
    }
    id_after("templates", 1, &mut out, "{templateID}");
    out.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_keys_use_templates() {
        let m = http::Method::POST;
        assert_eq!(
            route_key(Plane::Control, &m, "/sandboxes/iabc/pause"),
            "POST /sandboxes/{sandboxID}/pause"
        );
        assert_eq!(
            route_key(Plane::Control, &m, "/v2/sandboxes/iabc/connect"),
            "POST /v2/sandboxes/{sandboxID}/connect"
        );
        assert_eq!(
            route_key(Plane::Control, &m, "/v2/sandboxes"),
            "POST /v2/sandboxes"
        );
        assert_eq!(
            route_key(Plane::Control, &http::Method::GET, "/sandboxes/metrics"),
            "GET /sandboxes/metrics"
        );
        assert_eq!(
            route_key(Plane::Envd, &m, "/process.Process/Start"),
            "POST /process.Process/Start"
        );
    }

    #[test]
    fn snapshot_and_reset() {
        let c = Counters::default();
        c.record(Plane::Control, "GET /health");
        c.record(Plane::Envd, "GET /health");
        c.record(Plane::Envd, "GET /files");
        assert_eq!(c.total(), 3);
        assert_eq!(c.get("GET /health"), 2);
        assert_eq!(c.get_on(Plane::Envd, "GET /health"), 1);
        assert_eq!(c.plane_total(Plane::Envd), 2);
        c.reset();
        assert_eq!(c.total(), 0);
        assert_eq!(c.snapshot(), CounterSnapshot::default());
    }
}
