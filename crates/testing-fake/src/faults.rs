//! Fault injection: rules that make matching requests fail, so clients are tested against
//! faults and not only the happy path.
//!
//! A rule matches on surface, method, path prefix and (optionally) sandbox id, and fires a
//! number of times or forever. Actions:
//!
//! * [`FaultAction::Status`]: answer at once with this status, body and content type;
//! * [`FaultAction::Delay`]: wait, then handle the request normally;
//! * [`FaultAction::Reset`]: drop the connection without any response;
//! * [`FaultAction::CutStream`]: handle normally, but pass only the first N envelopes of a
//!   streaming response and end the body without an end-of-stream frame;
//! * [`FaultAction::DropAccessToken`]: remove `X-Access-Token` before envd sees the request;
//! * [`FaultAction::CutIdle`]: handle normally, but end a streaming response (no
//!   end-of-stream frame) once no byte has passed for a while, like a proxy that drops
//!   idle connections (envd's keepalive pings are what keeps a silent stream alive);
//! * [`FaultAction::GoAway`]: handle normally, then shut the connection down gracefully
//!   (HTTP/2 `GOAWAY`, HTTP/1.1 close after the response), as a restarting server does.
//!
//! When several rules match one request they all fire: delays first, then the token drop
//! and the go-away, then the first of the terminal actions (status, reset, cut stream, cut idle).
//!
//! Over HTTP (`POST /_emulator/faults`) a rule is JSON:
//! `{"surface":"envd","method":"POST","pathPrefix":"/process.Process/Start","sandboxId":null,
//! "times":1,"action":{"kind":"cutStream","afterFrames":1}}`; other action kinds are
//! `{"kind":"status","status":503,"body":"…","contentType":"…"}`, `{"kind":"delay","ms":500}`,
//! `{"kind":"reset"}`, `{"kind":"dropAccessToken"}`, `{"kind":"cutIdle","ms":3000}` and
//! `{"kind":"goAway"}`.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::counters::Plane;

/// What a matching rule does to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Answer with this response instead of handling the request.
    Status {
        /// HTTP status.
        status: u16,
        /// Response body.
        body: String,
        /// `Content-Type` of the body.
        content_type: String,
    },
    /// Wait, then proceed normally.
    Delay(Duration),
    /// Drop the connection without a response.
    Reset,
    /// Pass `after_frames` envelopes of a streaming response, then end the body with no
    /// end-of-stream frame.
    CutStream {
        /// Envelopes passed through before the cut.
        after_frames: usize,
    },
    /// Remove `X-Access-Token` from the request before envd sees it.
    DropAccessToken,
    /// End a streaming response without an end-of-stream frame once nothing has passed
    /// for this long (an idle-dropping proxy).
    CutIdle(Duration),
    /// Handle the request, then shut its connection down gracefully (HTTP/2 `GOAWAY`).
    GoAway,
}

impl FaultAction {
    /// A JSON status answer (`application/json`).
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        FaultAction::Status {
            status,
            body: body.to_string(),
            content_type: "application/json".into(),
        }
    }
}

/// One fault rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// Plane to match; `None` = both.
    pub surface: Option<Plane>,
    /// Method to match (`"POST"`); `None` = any.
    pub method: Option<String>,
    /// The request path must start with this (`""` = every path).
    pub path_prefix: String,
    /// Only requests for this sandbox (the `E2b-Sandbox-Id` header for envd, the path id
    /// for the control plane).
    pub sandbox_id: Option<String>,
    /// What to do.
    pub action: FaultAction,
    /// Fire this many times, then retire; `None` = forever.
    pub times: Option<u32>,
}

impl FaultRule {
    /// A rule matching every request, firing forever; narrow it with the builder methods.
    pub fn new(action: FaultAction) -> Self {
        FaultRule {
            surface: None,
            method: None,
            path_prefix: String::new(),
            sandbox_id: None,
            action,
            times: None,
        }
    }

    /// Only this surface.
    pub fn surface(mut self, surface: Plane) -> Self {
        self.surface = Some(surface);
        self
    }

    /// Only this method.
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only paths starting with `prefix`.
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.path_prefix = prefix.to_owned();
        self
    }

    /// Only requests for this sandbox.
    pub fn sandbox(mut self, id: &str) -> Self {
        self.sandbox_id = Some(id.to_owned());
        self
    }

    /// Fire `n` times only.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    fn matches(&self, req: &RequestFacts<'_>) -> bool {
        self.surface.is_none_or(|s| s == req.surface)
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(req.method))
            && req.path.starts_with(&self.path_prefix)
            && self
                .sandbox_id
                .as_deref()
                .is_none_or(|id| req.sandbox_id == Some(id))
    }
}

/// Identifies a rule returned by [`Faults::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FaultId(pub u64);

/// What the dispatcher knows about a request when it consults the rules.
pub(crate) struct RequestFacts<'a> {
    pub surface: Plane,
    pub method: &'a str,
    pub path: &'a str,
    pub sandbox_id: Option<&'a str>,
}

/// The actions that fire for one request, in the order they apply.
#[derive(Debug, Default)]
pub(crate) struct Fired {
    pub delays: Vec<Duration>,
    pub drop_access_token: bool,
    pub go_away: bool,
    pub terminal: Option<FaultAction>,
}

#[derive(Debug)]
struct Entry {
    id: FaultId,
    rule: FaultRule,
    remaining: Option<u32>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    rules: Vec<Entry>,
}

/// The emulator's fault rules.
#[derive(Debug, Default)]
pub struct Faults {
    inner: Mutex<Inner>,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Add a rule; it applies to requests arriving from now on.
    pub fn add(&self, rule: FaultRule) -> FaultId {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = FaultId(inner.next_id);
        let remaining = rule.times;
        inner.rules.push(Entry {
            id,
            rule,
            remaining,
        });
        id
    }

    /// Remove one rule; false if it was not there (or already retired).
    pub fn remove(&self, id: FaultId) -> bool {
        let mut inner = self.lock();
        let before = inner.rules.len();
        inner.rules.retain(|e| e.id != id);
        inner.rules.len() != before
    }

    /// Remove every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// The active rules, with how many firings each has left (`None` = forever).
    pub fn rules(&self) -> Vec<(FaultId, FaultRule, Option<u32>)> {
        self.lock()
            .rules
            .iter()
            .map(|e| (e.id, e.rule.clone(), e.remaining))
            .collect()
    }

    /// Fire every matching rule for this request (consuming one use of each).
    pub(crate) fn fire(&self, req: &RequestFacts<'_>) -> Fired {
        let mut fired = Fired::default();
        let mut inner = self.lock();
        for e in inner.rules.iter_mut() {
            if e.remaining == Some(0) || !e.rule.matches(req) {
                continue;
            }
            if let Some(n) = e.remaining.as_mut() {
                *n -= 1;
            }
            match &e.rule.action {
                FaultAction::Delay(d) => fired.delays.push(*d),
                FaultAction::DropAccessToken => fired.drop_access_token = true,
                FaultAction::GoAway => fired.go_away = true,
                other => {
                    if fired.terminal.is_none() {
                        fired.terminal = Some(other.clone());
                    }
                }
            }
        }
        inner.rules.retain(|e| e.remaining != Some(0));
        fired
    }
}

/// JSON form of a rule (`POST /_emulator/faults`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRuleWire {
    /// `control` / `envd`; absent = both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<Plane>,
    /// HTTP method; absent = any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Path prefix; absent = every path.
    #[serde(default)]
    pub path_prefix: String,
    /// Sandbox id; absent = any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// Firings; absent = forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// The action.
    pub action: FaultActionWire,
}

/// JSON form of an action, tagged by `kind`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum FaultActionWire {
    /// See [`FaultAction::Status`].
    #[serde(rename_all = "camelCase")]
    Status {
        /// HTTP status.
        status: u16,
        /// Body (default empty).
        #[serde(default)]
        body: String,
        /// Content type (default `application/json`).
        #[serde(default = "default_content_type")]
        content_type: String,
    },
    /// See [`FaultAction::Delay`].
    Delay {
        /// Milliseconds.
        ms: u64,
    },
    /// See [`FaultAction::Reset`].
    Reset,
    /// See [`FaultAction::CutStream`].
    #[serde(rename_all = "camelCase")]
    CutStream {
        /// Envelopes passed through before the cut.
        after_frames: usize,
    },
    /// See [`FaultAction::DropAccessToken`].
    DropAccessToken,
    /// See [`FaultAction::CutIdle`].
    CutIdle {
        /// Milliseconds of silence before the cut.
        ms: u64,
    },
    /// See [`FaultAction::GoAway`].
    GoAway,
}

fn default_content_type() -> String {
    "application/json".into()
}

impl From<FaultRuleWire> for FaultRule {
    fn from(w: FaultRuleWire) -> Self {
        let action = match w.action {
            FaultActionWire::Status {
                status,
                body,
                content_type,
            } => FaultAction::Status {
                status,
                body,
                content_type,
            },
            FaultActionWire::Delay { ms } => FaultAction::Delay(Duration::from_millis(ms)),
            FaultActionWire::Reset => FaultAction::Reset,
            FaultActionWire::CutStream { after_frames } => FaultAction::CutStream { after_frames },
            FaultActionWire::DropAccessToken => FaultAction::DropAccessToken,
            FaultActionWire::CutIdle { ms } => FaultAction::CutIdle(Duration::from_millis(ms)),
            FaultActionWire::GoAway => FaultAction::GoAway,
        };
        FaultRule {
            surface: w.surface,
            method: w.method.map(|m| m.to_ascii_uppercase()),
            path_prefix: w.path_prefix,
            sandbox_id: w.sandbox_id,
            action,
            times: w.times,
        }
    }
}

impl From<&FaultRule> for FaultRuleWire {
    fn from(r: &FaultRule) -> Self {
        let action = match &r.action {
            FaultAction::Status {
                status,
                body,
                content_type,
            } => FaultActionWire::Status {
                status: *status,
                body: body.clone(),
                content_type: content_type.clone(),
            },
            FaultAction::Delay(d) => FaultActionWire::Delay {
                ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            },
            FaultAction::Reset => FaultActionWire::Reset,
            FaultAction::CutStream { after_frames } => FaultActionWire::CutStream {
                after_frames: *after_frames,
            },
            FaultAction::DropAccessToken => FaultActionWire::DropAccessToken,
            FaultAction::CutIdle(d) => FaultActionWire::CutIdle {
                ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            },
            FaultAction::GoAway => FaultActionWire::GoAway,
        };
        FaultRuleWire {
            surface: r.surface,
            method: r.method.clone(),
            path_prefix: r.path_prefix.clone(),
            sandbox_id: r.sandbox_id.clone(),
            times: r.times,
            action,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(surface: Plane, method: &'a str, path: &'a str) -> RequestFacts<'a> {
        RequestFacts {
            surface,
            method,
            path,
            sandbox_id: None,
        }
    }

    #[test]
    fn times_retire_rules() {
        let f = Faults::default();
        f.add(
            FaultRule::new(FaultAction::Reset)
                .surface(Plane::Control)
                .path_prefix("/sandboxes")
                .times(1),
        );
        let r = f.fire(&facts(Plane::Envd, "GET", "/sandboxes"));
        assert!(r.terminal.is_none());
        let r = f.fire(&facts(Plane::Control, "GET", "/sandboxes/x"));
        assert_eq!(r.terminal, Some(FaultAction::Reset));
        let r = f.fire(&facts(Plane::Control, "GET", "/sandboxes/x"));
        assert!(r.terminal.is_none());
        assert!(f.rules().is_empty());
    }

    #[test]
    fn wire_round_trip() {
        let json = r#"{"surface":"envd","method":"post","pathPrefix":"/process.Process/Start",
            "times":2,"action":{"kind":"cutStream","afterFrames":1}}"#;
        let w: FaultRuleWire = serde_json::from_str(json).unwrap();
        let rule = FaultRule::from(w);
        assert_eq!(rule.method.as_deref(), Some("POST"));
        assert_eq!(rule.action, FaultAction::CutStream { after_frames: 1 });
        let back = serde_json::to_value(FaultRuleWire::from(&rule)).unwrap();
        assert_eq!(back["action"]["kind"], "cutStream");
    }
}
