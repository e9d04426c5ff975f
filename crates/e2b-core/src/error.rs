//! The one error type of this crate: typed kinds a caller can act on (sandbox gone, auth,
//! rate limit, conflict, Connect codes, transport, timeout, protocol), built from HTTP
//! status/body pairs by [`Error::from_response`]. Messages hold the status and at most
//! [`BODY_SNIPPET_LIMIT`] bytes of the body, with every known secret replaced.

use std::time::Duration;

use crate::config::Secret;
use crate::proto::connect::{Code, ConnectErrorBody};

/// Most bytes of a response body kept in an error message.
pub const BODY_SNIPPET_LIMIT: usize = 512;

/// Which HTTP surface answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    /// The control-plane REST API.
    Control,
    /// envd (RPCs, `/files`, `/health`) behind the edge proxy.
    Envd,
}

impl std::fmt::Display for Surface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Surface::Control => "control plane",
            Surface::Envd => "envd",
        })
    }
}

/// Everything that can go wrong talking to E2B.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The sandbox does not exist any more (or is not ours): an E2B-format 404
    /// (`{"code":404,...}`) from the control plane, or the edge proxy's 502
    /// `The sandbox was not found` in front of envd.
    #[error("sandbox not found ({surface}, HTTP {status}): {message}")]
    SandboxNotFound {
        /// Who said so.
        surface: Surface,
        /// HTTP status (404 or 502).
        status: u16,
        /// Server message (bounded, redacted).
        message: String,
    },
    /// The template named at create does not exist (E2B-format 404 on create).
    #[error("template not found (HTTP 404): {message}")]
    TemplateNotFound {
        /// Server message.
        message: String,
    },
    /// The volume named in a call does not exist (E2B-format 404 of `/volumes/{id}`).
    #[error("volume not found (HTTP 404): {message}")]
    VolumeNotFound {
        /// Server message.
        message: String,
    },
    /// A 404 that is not in E2B's error format: a proxy, a wrong API URL, an endpoint
    /// this server does not have.
    #[error("HTTP 404 from {surface} without an E2B error body (wrong URL or endpoint?): {body}")]
    EndpointNotFound {
        /// Who answered.
        surface: Surface,
        /// Start of the body (bounded, redacted).
        body: String,
    },
    /// 401: missing or wrong API key (control plane) or access token (envd).
    #[error("unauthorized ({surface}, HTTP 401): {message}")]
    Unauthorized {
        /// Who refused.
        surface: Surface,
        /// Server message.
        message: String,
    },
    /// 403: team blocked or feature not allowed.
    #[error("forbidden ({surface}, HTTP 403): {message}")]
    Forbidden {
        /// Who refused.
        surface: Surface,
        /// Server message.
        message: String,
    },
    /// 429: rate or concurrency limit.
    #[error("rate limited ({surface}, HTTP 429{}): {message}", retry_after.map(|d| format!(", retry after {}s", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// Who refused.
        surface: Surface,
        /// `Retry-After`, when given in seconds.
        retry_after: Option<Duration>,
        /// Server message.
        message: String,
    },
    /// 409: state conflict (pause of a paused sandbox, operation while pausing/killing).
    #[error("conflict ({surface}, HTTP 409): {message}")]
    Conflict {
        /// Who refused.
        surface: Surface,
        /// Server message.
        message: String,
    },
    /// 400: the request was refused as invalid.
    #[error("bad request ({surface}, HTTP 400): {message}")]
    BadRequest {
        /// Who refused.
        surface: Surface,
        /// Server message.
        message: String,
    },
    /// 5xx from the server (capacity, placement, internal).
    #[error("server error ({surface}, HTTP {status}{}): {message}", error_code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Server {
        /// Who failed.
        surface: Surface,
        /// HTTP status.
        status: u16,
        /// Machine-readable `error_code`, when given.
        error_code: Option<String>,
        /// Server message.
        message: String,
    },
    /// Any other unexpected HTTP status.
    #[error("unexpected HTTP {status} from {surface}: {message}")]
    Http {
        /// Who answered.
        surface: Surface,
        /// HTTP status.
        status: u16,
        /// Body or message (bounded, redacted).
        message: String,
    },
    /// envd answered with a Connect error (or an HTTP error of `/files` mapped to one):
    /// `not_found`, `already_exists`, `invalid_argument`, `deadline_exceeded`, ...
    #[error("envd error {code}{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Envd {
        /// The Connect code.
        code: Code,
        /// envd's message.
        message: String,
        /// HTTP status, for unary errors and `/files`; `None` inside a stream trailer.
        status: Option<u16>,
    },
    /// The connection failed or broke (refused, reset, TLS, body cut by the peer).
    #[error("transport error ({surface}): {message}")]
    Transport {
        /// Where.
        surface: Surface,
        /// What the transport said (never contains secrets we put in headers).
        message: String,
    },
    /// A deadline of ours expired.
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The peer broke the protocol: bad frame, stream without its end-of-stream frame,
    /// wrong content type, undecodable JSON, missing start event.
    #[error("protocol error ({surface}): {message}")]
    Protocol {
        /// Who broke it.
        surface: Surface,
        /// What was wrong.
        message: String,
    },
    /// A stream from envd ended before its end (no end-of-stream frame, cut inside a
    /// frame, no start event): the connection was lost midway, not a protocol breach.
    #[error("stream cut short ({surface}): {message}")]
    StreamCut {
        /// Whose stream.
        surface: Surface,
        /// Where it ended.
        message: String,
    },
    /// Reading the caller's upload source failed.
    #[error("upload source failed: {0}")]
    Source(#[source] std::io::Error),
    /// Invalid configuration or argument (no API key, bad URL, ...).
    #[error("invalid configuration or argument: {0}")]
    Config(String),
    /// An adapter-internal shell command exited non-zero.
    #[error("shell command failed with exit code {exit_code}: {stderr}")]
    ControlCommand {
        /// Its exit code (-1 when killed).
        exit_code: i32,
        /// A bounded part of its stderr.
        stderr: String,
    },
}

impl Error {
    /// True when the sandbox is gone (killed, expired, never existed).
    pub fn is_sandbox_not_found(&self) -> bool {
        matches!(self, Error::SandboxNotFound { .. })
    }

    /// True for the edge proxy's 502 in front of envd (`The sandbox was not found`): the
    /// proxy cannot route to the sandbox, which is gone **or paused** (E2B answers both
    /// alike). A caller holding a lease may reconnect once (a paused sandbox resumes; a
    /// gone one answers 404) before treating it as gone; a retry layer must not retry it
    /// as a plain 502.
    pub fn is_unroutable(&self) -> bool {
        self.disposition() == crate::Disposition::Unroutable
    }

    /// True when the connection to envd broke mid-request or mid-stream (transport
    /// failure, or a stream that stopped without its end): what a killed sandbox looks
    /// like before one `/health` check tells it apart from a network hiccup.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            Error::Transport {
                surface: Surface::Envd,
                ..
            } | Error::StreamCut {
                surface: Surface::Envd,
                ..
            }
        )
    }

    /// True for envd's `not_found` (missing file, unknown pid).
    pub fn is_not_found(&self) -> bool {
        self.connect_code() == Some(Code::NotFound)
    }

    /// True for envd's `already_exists`.
    pub fn is_already_exists(&self) -> bool {
        self.connect_code() == Some(Code::AlreadyExists)
    }

    /// True for a 409 from the control plane.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// True for 401 or envd's `unauthenticated`.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, Error::Unauthorized { .. })
            || self.connect_code() == Some(Code::Unauthenticated)
    }

    /// True for our own timeouts and envd's `deadline_exceeded`.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. }) || self.connect_code() == Some(Code::DeadlineExceeded)
    }

    /// True when retrying later may help: [`Disposition::Temporary`](crate::Disposition)
    /// in the one table ([`Error::disposition`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self.disposition(), crate::Disposition::Temporary { .. })
    }

    /// The Connect code of an envd error.
    pub fn connect_code(&self) -> Option<Code> {
        match self {
            Error::Envd { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The HTTP status behind this error, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::SandboxNotFound { status, .. }
            | Error::Server { status, .. }
            | Error::Http { status, .. } => Some(*status),
            Error::TemplateNotFound { .. }
            | Error::VolumeNotFound { .. }
            | Error::EndpointNotFound { .. } => Some(404),
            Error::Unauthorized { .. } => Some(401),
            Error::Forbidden { .. } => Some(403),
            Error::RateLimited { .. } => Some(429),
            Error::Conflict { .. } => Some(409),
            Error::BadRequest { .. } => Some(400),
            Error::Envd { status, .. } => *status,
            _ => None,
        }
    }

    /// Map a non-success HTTP answer to an error.
    ///
    /// * control plane: E2B-format 404 → [`Error::SandboxNotFound`], bare 404 →
    ///   [`Error::EndpointNotFound`], 401/403/409/429/400/5xx → their kinds;
    /// * envd: a Connect error body (string `code`) → [`Error::Envd`]; the proxy's 502
    ///   `The sandbox was not found` → [`Error::SandboxNotFound`]; a plain JSON body with a
    ///   numeric `code` (envd's HTTP routes) → [`Error::Envd`] with the code derived from the
    ///   status, except 401 → [`Error::Unauthorized`] and 429 → [`Error::RateLimited`].
    ///
    /// `secrets` are replaced by `<redacted>` wherever they appear in the body.
    pub fn from_response(
        surface: Surface,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        secrets: &[&Secret],
    ) -> Error {
        let text = snippet(body, secrets);
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let obj = json.as_ref().and_then(|v| v.as_object());
        let num_code = obj.and_then(|o| o.get("code")).and_then(|c| c.as_i64());
        let str_code = obj
            .and_then(|o| o.get("code"))
            .and_then(|c| c.as_str())
            .and_then(Code::from_name);
        let message = obj
            .and_then(|o| o.get("message"))
            .and_then(|m| m.as_str())
            .map(|m| snippet(m.as_bytes(), secrets))
            .unwrap_or_else(|| text.clone());
        let error_code = obj
            .and_then(|o| o.get("error_code"))
            .and_then(|c| c.as_str())
            .map(|c| snippet(c.as_bytes(), secrets));

        if surface == Surface::Envd {
            if let Some(code) = str_code {
                return Error::Envd {
                    code,
                    message,
                    status: Some(status),
                };
            }
            // The edge proxy's JSON for a sandbox it cannot route to (gone, or paused: 502;
            // older deployments answer a paused one with 409): a numeric `code` equal to
            // the status and the `sandboxId` it was asked for, a shape envd never sends.
            let proxy = obj.is_some_and(|o| o.contains_key("sandboxId"))
                && num_code == Some(i64::from(status));
            if proxy && matches!(status, 502 | 409) {
                return Error::SandboxNotFound {
                    surface,
                    status,
                    message,
                };
            }
            // A plain JSON error from envd's own HTTP routes (`/files`): the status is its
            // meaning (the Python SDK's table). Statuses without a Connect meaning keep
            // their HTTP kind.
            let code = match status {
                401 => return Error::Unauthorized { surface, message },
                429 => {
                    return Error::RateLimited {
                        surface,
                        retry_after: parse_retry_after(retry_after),
                        message,
                    };
                }
                404 if num_code == Some(404) => Code::NotFound,
                404 => {
                    return Error::EndpointNotFound {
                        surface,
                        body: text,
                    };
                }
                400 | 406 => Code::InvalidArgument,
                403 => Code::PermissionDenied,
                409 => Code::AlreadyExists,
                507 => Code::ResourceExhausted,
                500 if num_code == Some(500) => Code::Internal,
                _ => return status_error(surface, status, message, error_code),
            };
            return Error::Envd {
                code,
                message,
                status: Some(status),
            };
        }

        match status {
            404 if num_code == Some(404) => Error::SandboxNotFound {
                surface,
                status,
                message,
            },
            404 => Error::EndpointNotFound {
                surface,
                body: text,
            },
            401 => Error::Unauthorized { surface, message },
            429 => Error::RateLimited {
                surface,
                retry_after: parse_retry_after(retry_after),
                message,
            },
            _ => status_error(surface, status, message, error_code),
        }
    }

    /// An error from a Connect error body (unary error or stream trailer).
    pub(crate) fn from_connect(
        body: ConnectErrorBody,
        status: Option<u16>,
        secrets: &[&Secret],
    ) -> Error {
        Error::Envd {
            code: body.code,
            message: message_snippet(&body.message, secrets),
            status,
        }
    }

    /// A transport error from reqwest: timeouts become [`Error::Timeout`].
    pub(crate) fn from_reqwest(
        surface: Surface,
        e: reqwest::Error,
        what: &'static str,
        after: Duration,
    ) -> Error {
        if e.is_timeout() {
            return Error::Timeout { what, after };
        }
        // Walk the source chain for the most useful text; reqwest's own Display is terse.
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        Error::Transport { surface, message }
    }

    pub(crate) fn stream_cut(surface: Surface, message: impl Into<String>) -> Error {
        Error::StreamCut {
            surface,
            message: message.into(),
        }
    }

    pub(crate) fn protocol(surface: Surface, message: impl Into<String>) -> Error {
        Error::Protocol {
            surface,
            message: message.into(),
        }
    }
}

fn status_error(
    surface: Surface,
    status: u16,
    message: String,
    error_code: Option<String>,
) -> Error {
    match status {
        400 => Error::BadRequest { surface, message },
        401 => Error::Unauthorized { surface, message },
        403 => Error::Forbidden { surface, message },
        409 => Error::Conflict { surface, message },
        500..=599 => Error::Server {
            surface,
            status,
            error_code,
            message,
        },
        _ => Error::Http {
            surface,
            status,
            message,
        },
    }
}

fn parse_retry_after(v: Option<&str>) -> Option<Duration> {
    v.and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// At most [`BODY_SNIPPET_LIMIT`] bytes of `body` as text, cut at a UTF-8 boundary, with
/// every secret replaced by `<redacted>` (before cutting, so no prefix of a secret leaks).
pub fn snippet(body: &[u8], secrets: &[&Secret]) -> String {
    let longest = secrets.iter().map(|s| s.expose().len()).max().unwrap_or(0);
    let take = body.len().min(BODY_SNIPPET_LIMIT + longest + 4);
    let mut text = String::from_utf8_lossy(&body[..take]).into_owned();
    for s in secrets {
        if !s.expose().is_empty() {
            text = text.replace(s.expose(), "<redacted>");
        }
    }
    let truncated = take < body.len() || text.len() > BODY_SNIPPET_LIMIT;
    if text.len() > BODY_SNIPPET_LIMIT {
        let mut cut = BODY_SNIPPET_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    // A secret cut in half at the end of `take` could leave its prefix: remove any tail
    // that is a prefix of a secret.
    for s in secrets {
        let secret = s.expose();
        for k in (4..secret.len()).rev() {
            if secret.is_char_boundary(k) && text.ends_with(&secret[..k]) {
                let new_len = text.len() - k;
                text.truncate(new_len);
                text.push_str("<redacted>");
                break;
            }
        }
    }
    if truncated {
        text.push('…');
    }
    text
}

/// A Connect error message of at most about [`BODY_SNIPPET_LIMIT`] bytes with every
/// secret replaced: a longer one keeps its head *and its tail* (`head … tail`), since Go
/// wraps errors as `context: cause` and the cause comes last (envd's `error starting
/// process '<whole command line>': … argument list too long`).
pub fn message_snippet(message: &str, secrets: &[&Secret]) -> String {
    let mut text = message.to_owned();
    for s in secrets {
        if !s.expose().is_empty() {
            text = text.replace(s.expose(), "<redacted>");
        }
    }
    if text.len() <= BODY_SNIPPET_LIMIT {
        return text;
    }
    let mut head = BODY_SNIPPET_LIMIT / 3;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (BODY_SNIPPET_LIMIT - BODY_SNIPPET_LIMIT / 3);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} … {}", &text[..head], &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_connect_messages_keep_their_cause() {
        let secret = Secret::new("tok-0123456789");
        let msg = format!(
            "error starting process 'sh -c {} tok-0123456789': fork/exec /usr/bin/setsid: argument list too long",
            "é".repeat(2000)
        );
        let m = message_snippet(&msg, &[&secret]);
        assert!(m.starts_with("error starting process"), "{m}");
        assert!(m.ends_with("argument list too long"), "{m}");
        assert!(
            m.contains(" … ") && m.len() <= BODY_SNIPPET_LIMIT + 8,
            "{}",
            m.len()
        );
        assert!(!m.contains("tok-01"), "{m}");
        assert_eq!(message_snippet("short", &[]), "short");
    }

    fn ctl(status: u16, body: &str) -> Error {
        Error::from_response(Surface::Control, status, None, body.as_bytes(), &[])
    }

    fn envd(status: u16, body: &str) -> Error {
        Error::from_response(Surface::Envd, status, None, body.as_bytes(), &[])
    }

    #[test]
    fn control_plane_statuses() {
        assert!(matches!(
            ctl(
                404,
                r#"{"code":404,"message":"Sandbox \"iabc\" doesn't exist"}"#
            ),
            Error::SandboxNotFound { status: 404, .. }
        ));
        assert!(matches!(
            ctl(404, "404 page not found"),
            Error::EndpointNotFound { .. }
        ));
        assert!(matches!(
            ctl(404, r#"{"message":"nope"}"#),
            Error::EndpointNotFound { .. }
        ));
        assert!(matches!(
            ctl(401, r#"{"code":401,"message":"Invalid API key"}"#),
            Error::Unauthorized { .. }
        ));
        assert!(matches!(
            ctl(403, r#"{"code":403,"message":"blocked"}"#),
            Error::Forbidden { .. }
        ));
        assert!(matches!(
            ctl(409, r#"{"code":409,"message":"already paused"}"#),
            Error::Conflict { .. }
        ));
        assert!(matches!(
            ctl(400, r#"{"code":400,"message":"validation error"}"#),
            Error::BadRequest { .. }
        ));
        let e = Error::from_response(
            Surface::Control,
            429,
            Some("7"),
            br#"{"code":429,"message":"Rate limit exceeded"}"#,
            &[],
        );
        match &e {
            Error::RateLimited {
                retry_after,
                message,
                ..
            } => {
                assert_eq!(*retry_after, Some(Duration::from_secs(7)));
                assert_eq!(message, "Rate limit exceeded");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.is_retryable());
        match ctl(
            503,
            r#"{"code":503,"message":"no capacity","error_code":"sandbox_capacity_unavailable"}"#,
        ) {
            Error::Server {
                status, error_code, ..
            } => {
                assert_eq!(status, 503);
                assert_eq!(error_code.as_deref(), Some("sandbox_capacity_unavailable"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ctl(500, "oops"),
            Error::Server { status: 500, .. }
        ));
        assert!(matches!(
            ctl(418, "teapot"),
            Error::Http { status: 418, .. }
        ));
    }

    #[test]
    fn envd_statuses() {
        let e = envd(404, r#"{"code":"not_found","message":"file not found"}"#);
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "envd error not_found (HTTP 404): file not found"
        );
        assert_eq!(e.status(), Some(404));
        assert!(envd(409, r#"{"code":"already_exists","message":"x"}"#).is_already_exists());
        let gone = envd(
            502,
            r#"{"sandboxId":"iabc","message":"The sandbox was not found","code":502}"#,
        );
        assert!(gone.is_sandbox_not_found(), "{gone:?}");
        assert!(matches!(
            envd(502, "Failed to route request to sandbox"),
            Error::Server { status: 502, .. }
        ));
        assert!(matches!(
            envd(
                401,
                r#"{"code":401,"message":"unauthorized access, please provide a valid access token"}"#
            ),
            Error::Unauthorized {
                surface: Surface::Envd,
                ..
            }
        ));
        // `/files` plain JSON errors
        assert!(envd(404, r#"{"code":404,"message":"path '/x' does not exist"}"#).is_not_found());
        assert_eq!(
            envd(400, r#"{"code":400,"message":"path is a directory"}"#).connect_code(),
            Some(Code::InvalidArgument)
        );
        assert_eq!(
            envd(507, r#"{"code":507,"message":"full"}"#).connect_code(),
            Some(Code::ResourceExhausted)
        );
        // a bare 404 in front of envd is not a missing file
        assert!(matches!(
            envd(404, "404 page not found"),
            Error::EndpointNotFound { .. }
        ));
        assert!(envd(504, r#"{"code":"deadline_exceeded","message":"t"}"#).is_timeout());
    }

    #[test]
    fn messages_are_bounded_and_redacted() {
        let key = Secret::new("e2b_0123456789abcdef");
        let token = Secret::new("a".repeat(64));
        let body = format!(
            r#"{{"code":401,"message":"bad key e2b_0123456789abcdef and token {}"}}"#,
            "a".repeat(64)
        );
        let e = Error::from_response(
            Surface::Control,
            401,
            None,
            body.as_bytes(),
            &[&key, &token],
        );
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("e2b_0123456789abcdef"), "{shown}");
        assert!(!shown.contains(&"a".repeat(64)), "{shown}");
        assert!(shown.contains("<redacted>"));

        // long body: bounded, cut at a char boundary
        let long = "é".repeat(2000);
        let e = ctl(500, &long);
        let Error::Server { message, .. } = e else {
            panic!()
        };
        assert!(message.len() <= BODY_SNIPPET_LIMIT + '…'.len_utf8());
        assert!(message.ends_with('…'));

        // a secret straddling the cut leaks no prefix
        let mut body = "x".repeat(BODY_SNIPPET_LIMIT - 6);
        body.push_str(key.expose());
        body.push_str(&"y".repeat(600));
        let s = snippet(body.as_bytes(), &[&key]);
        assert!(!s.contains("e2b_01"), "{s}");
    }
}
