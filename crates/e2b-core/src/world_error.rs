//! The one table from this crate's [`Error`] to exec-world's
//! [`ErrorKind`], used by every E2B adapter (fs-e2b,
//! subprocess-e2b) and by the sandbox provider (sandbox-e2b).
//!
//! It lives here, not in exec-world, so exec-world stays free of HTTP and E2B: this crate
//! already knows every variant, and exec-world is a light dependency (no network stack).
//!
//! | e2b-core | kind | temporary |
//! | --- | --- | --- |
//! | `SandboxNotFound` (E2B 404, the proxy's 502 for a gone or paused sandbox) | `Gone` | no |
//! | `TemplateNotFound`, `VolumeNotFound` | `NotFound` | no |
//! | `Unauthorized` (401), `Forbidden` (403), envd `unauthenticated` / `permission_denied` | `PermissionDenied` | no |
//! | `RateLimited` (429) | `Transport` | yes |
//! | `Server` 502/503/504, `Transport` (reset, refused, cut body), envd `unavailable` | `Transport` | yes |
//! | `StreamCut` (a stream that ended before its end) | `Transport` | yes |
//! | `Protocol` | `Transport` | no |
//! | `Timeout`, envd `deadline_exceeded` | `Timeout` | no |
//! | envd `canceled` | `Cancelled` | no |
//! | envd `not_found` / `already_exists` | `NotFound` / `AlreadyExists` | no |
//! | envd `invalid_argument` (its message is the detail, never read for the kind), `BadRequest` (400), `Config` | `InvalidSpec` | no |
//! | envd `unimplemented` | `Unsupported` | no |
//! | other 5xx, other envd codes, `EndpointNotFound`, `Conflict`, `Http`, `Source`, `ControlCommand` | `Other` | no |
//!
//! "Temporary" is [`Error::disposition`] (the one table, via [`Error::is_retryable`]):
//! this table does not classify retries a second time.

use exec_world::ErrorKind;

use crate::error::Error;
use crate::proto::connect::Code;

impl Error {
    /// The exec-world kind of this error (the table in the [module docs](self)).
    pub fn world_kind(&self) -> ErrorKind {
        match self {
            // Gone, or unroutable behind the proxy (paused or gone): the caller without a
            // lease to renew cannot reach it either way.
            Error::SandboxNotFound { .. } => ErrorKind::Gone,
            Error::TemplateNotFound { .. } | Error::VolumeNotFound { .. } => ErrorKind::NotFound,
            Error::Unauthorized { .. } | Error::Forbidden { .. } => ErrorKind::PermissionDenied,
            Error::RateLimited { .. }
            | Error::Transport { .. }
            | Error::StreamCut { .. }
            | Error::Protocol { .. } => ErrorKind::Transport,
            Error::Server { status, .. } if (502..=504).contains(status) => ErrorKind::Transport,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::BadRequest { .. } | Error::Config(_) => ErrorKind::InvalidSpec,
            Error::Envd { code, .. } => code_kind(*code),
            Error::Server { .. }
            | Error::EndpointNotFound { .. }
            | Error::Conflict { .. }
            | Error::Http { .. }
            | Error::Source(_)
            | Error::ControlCommand { .. } => ErrorKind::Other,
        }
    }

    /// True when retrying the operation later may help: [`Error::is_retryable`] (the one
    /// table).
    fn is_temporary(&self) -> bool {
        self.is_retryable()
    }

    /// This error as an [`exec_world::Error`] of [`world_kind`](Error::world_kind), met
    /// while doing `op`; the caller adds the path (`.with_path(p)`). The detail says the
    /// cause without repeating the kind's words, and this error is its source.
    pub fn into_world(self, op: impl Into<String>) -> exec_world::Error {
        let detail = match &self {
            // The kind already says "transport error" / "timed out": keep the rest.
            Error::Transport { surface, message } => format!("{surface}: {message}"),
            Error::Timeout { what, after } => format!("{what} after {after:?}"),
            other => other.to_string(),
        };
        exec_world::Error::new(self.world_kind())
            .with_op(op)
            .with_detail(detail)
            .with_temporary(self.is_temporary())
            .with_source(self)
    }
}

/// The kind of an envd Connect code (the code only: envd's words are never read).
fn code_kind(code: Code) -> ErrorKind {
    match code {
        Code::NotFound => ErrorKind::NotFound,
        Code::AlreadyExists => ErrorKind::AlreadyExists,
        Code::PermissionDenied | Code::Unauthenticated => ErrorKind::PermissionDenied,
        Code::DeadlineExceeded => ErrorKind::Timeout,
        Code::Canceled => ErrorKind::Cancelled,
        Code::Unavailable => ErrorKind::Transport,
        Code::Unimplemented => ErrorKind::Unsupported,
        Code::InvalidArgument => ErrorKind::InvalidSpec,
        // Unknown, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Internal,
        // DataLoss, and any code a later Connect version adds.
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::Surface;

    /// The place of each variant in `samples`: a new variant of [`Error`] fails to compile
    /// here (no wildcard), and then fails the test until a sample of it is added.
    fn place(e: &Error) -> usize {
        match e {
            Error::SandboxNotFound { .. } => 0,
            Error::TemplateNotFound { .. } => 1,
            Error::EndpointNotFound { .. } => 2,
            Error::Unauthorized { .. } => 3,
            Error::Forbidden { .. } => 4,
            Error::RateLimited { .. } => 5,
            Error::Conflict { .. } => 6,
            Error::BadRequest { .. } => 7,
            Error::Server { .. } => 8,
            Error::Http { .. } => 9,
            Error::Envd { .. } => 10,
            Error::Transport { .. } => 11,
            Error::Timeout { .. } => 12,
            Error::Protocol { .. } => 13,
            Error::StreamCut { .. } => 17,
            Error::Source(_) => 14,
            Error::Config(_) => 15,
            Error::ControlCommand { .. } => 16,
            Error::VolumeNotFound { .. } => 17,
        }
    }
    const VARIANTS: usize = 18;

    fn envd(code: Code, message: &str) -> Error {
        Error::Envd {
            code,
            message: message.into(),
            status: None,
        }
    }

    fn server(status: u16) -> Error {
        Error::Server {
            surface: Surface::Envd,
            status,
            error_code: None,
            message: "busy".into(),
        }
    }

    /// Every variant (some twice, where the table looks inside), its kind and whether it
    /// is temporary.
    fn samples() -> Vec<(Error, ErrorKind, bool)> {
        let (c, e) = (Surface::Control, Surface::Envd);
        let msg = || "m".to_string();
        vec![
            (
                Error::SandboxNotFound {
                    surface: c,
                    status: 404,
                    message: msg(),
                },
                ErrorKind::Gone,
                false,
            ),
            (
                Error::SandboxNotFound {
                    surface: e,
                    status: 502,
                    message: "The sandbox was not found".into(),
                },
                ErrorKind::Gone,
                false,
            ),
            (
                Error::TemplateNotFound { message: msg() },
                ErrorKind::NotFound,
                false,
            ),
            (
                Error::VolumeNotFound { message: msg() },
                ErrorKind::NotFound,
                false,
            ),
            (
                Error::EndpointNotFound {
                    surface: e,
                    body: msg(),
                },
                ErrorKind::Other,
                false,
            ),
            (
                Error::Unauthorized {
                    surface: c,
                    message: msg(),
                },
                ErrorKind::PermissionDenied,
                false,
            ),
            (
                Error::Forbidden {
                    surface: c,
                    message: msg(),
                },
                ErrorKind::PermissionDenied,
                false,
            ),
            (
                Error::RateLimited {
                    surface: c,
                    retry_after: Some(Duration::from_secs(1)),
                    message: msg(),
                },
                ErrorKind::Transport,
                true,
            ),
            (
                Error::Conflict {
                    surface: c,
                    message: msg(),
                },
                ErrorKind::Other,
                false,
            ),
            (
                Error::BadRequest {
                    surface: c,
                    message: msg(),
                },
                ErrorKind::InvalidSpec,
                false,
            ),
            (server(500), ErrorKind::Other, false),
            (server(501), ErrorKind::Other, false),
            (server(502), ErrorKind::Transport, true),
            (server(503), ErrorKind::Transport, true),
            (server(504), ErrorKind::Transport, true),
            (server(507), ErrorKind::Other, false),
            (
                Error::Http {
                    surface: e,
                    status: 418,
                    message: msg(),
                },
                ErrorKind::Other,
                false,
            ),
            (envd(Code::NotFound, "gone"), ErrorKind::NotFound, false),
            (
                Error::Transport {
                    surface: e,
                    message: "connection reset".into(),
                },
                ErrorKind::Transport,
                true,
            ),
            (
                Error::Transport {
                    surface: c,
                    message: "connection refused".into(),
                },
                ErrorKind::Transport,
                true,
            ),
            (
                Error::Timeout {
                    what: "x",
                    after: Duration::from_secs(1),
                },
                ErrorKind::Timeout,
                false,
            ),
            (
                Error::StreamCut {
                    surface: e,
                    message: "stream ended without its end".into(),
                },
                ErrorKind::Transport,
                true,
            ),
            (
                Error::Protocol {
                    surface: e,
                    message: "bad frame".into(),
                },
                ErrorKind::Transport,
                false,
            ),
            (
                Error::Source(std::io::Error::other("disk")),
                ErrorKind::Other,
                false,
            ),
            (
                Error::Config("no key".into()),
                ErrorKind::InvalidSpec,
                false,
            ),
            (
                Error::ControlCommand {
                    exit_code: 1,
                    stderr: msg(),
                },
                ErrorKind::Other,
                false,
            ),
        ]
    }

    #[test]
    fn every_variant_has_its_kind() {
        let samples = samples();
        let covered: BTreeSet<usize> = samples.iter().map(|(e, _, _)| place(e)).collect();
        assert_eq!(covered, (0..VARIANTS).collect(), "a variant has no sample");
        for (e, kind, temporary) in samples {
            let shown = format!("{e:?}");
            assert_eq!(e.world_kind(), kind, "{shown}");
            let w = e.into_world("op");
            assert_eq!(w.kind(), kind, "{shown}");
            assert_eq!(w.is_temporary(), temporary, "{shown}");
            assert!(std::error::Error::source(&w).is_some(), "{shown}");
        }
    }

    #[test]
    fn every_connect_code_has_its_kind() {
        let table = [
            (Code::Canceled, ErrorKind::Cancelled, false),
            (Code::Unknown, ErrorKind::Other, false),
            (Code::InvalidArgument, ErrorKind::InvalidSpec, false),
            (Code::DeadlineExceeded, ErrorKind::Timeout, false),
            (Code::NotFound, ErrorKind::NotFound, false),
            (Code::AlreadyExists, ErrorKind::AlreadyExists, false),
            (Code::PermissionDenied, ErrorKind::PermissionDenied, false),
            (Code::ResourceExhausted, ErrorKind::Other, false),
            (Code::FailedPrecondition, ErrorKind::Other, false),
            (Code::Aborted, ErrorKind::Other, false),
            (Code::OutOfRange, ErrorKind::Other, false),
            (Code::Unimplemented, ErrorKind::Unsupported, false),
            (Code::Internal, ErrorKind::Other, false),
            (Code::Unavailable, ErrorKind::Transport, true),
            (Code::DataLoss, ErrorKind::Other, false),
            (Code::Unauthenticated, ErrorKind::PermissionDenied, false),
        ];
        let listed: Vec<Code> = table.iter().map(|(c, _, _)| *c).collect();
        assert_eq!(listed, Code::all().collect::<Vec<_>>(), "one row per code");
        for (code, kind, temporary) in table {
            let w = envd(code, "envd said so").into_world("op");
            assert_eq!((w.kind(), w.is_temporary()), (kind, temporary), "{code}");
        }
        // The message is never read for the kind.
        let k = |m: &str| envd(Code::InvalidArgument, m).world_kind();
        assert_eq!(k("path '/x' is a directory"), ErrorKind::InvalidSpec);
        assert_eq!(k("cwd '/nope' does not exist"), ErrorKind::InvalidSpec);
    }

    #[test]
    fn display_says_op_path_and_cause_once() {
        let reset = Error::Transport {
            surface: Surface::Envd,
            message: "connection reset".into(),
        };
        let shown = reset.into_world("read").with_path("/x").to_string();
        assert_eq!(shown, "read /x: transport error: envd: connection reset");
        let late = Error::Timeout {
            what: "download handshake",
            after: Duration::from_secs(3),
        };
        let shown = late.into_world("read").with_path("/x").to_string();
        assert_eq!(shown, "read /x: timed out: download handshake after 3s");
        let busy = server(503)
            .into_world("starting sh in /home/user")
            .to_string();
        assert_eq!(busy.matches("transport error").count(), 1, "{busy}");
        assert!(busy.contains("HTTP 503") && busy.contains("busy"), "{busy}");
    }
}
