//! Error mapping: `e2b_core::Error` → `exec_world::ProcError` kinds, and [`Failure`], a
//! cloneable record of a start or wait failure that every `started()` / `wait()` caller
//! gets as a fresh `ProcError`.

use e2b_core::Error;
use e2b_core::proto::connect::Code;
use exec_world::ProcError;

/// Maps an e2b-core error met while `context` to a `ProcError` kind: sandbox gone →
/// `Gone`, timeouts → `Timeout`, network and protocol faults → `Transport`, envd's
/// `invalid_argument` at start (missing cwd) → `InvalidSpec`, auth refusals →
/// `PermissionDenied`, the rest → `Other`.
pub fn map_error(context: &str, e: Error) -> ProcError {
    let context = context.to_owned();
    if e.is_sandbox_not_found() {
        return ProcError::Gone {
            context: format!("{context}: {e}"),
        };
    }
    if e.is_timeout() {
        return ProcError::Timeout {
            context: format!("{context}: {e}"),
        };
    }
    match &e {
        // The context names the operation and the cause (with its HTTP status) once;
        // `ProcError::Transport` adds only its "transport error: " prefix.
        Error::Transport { .. }
        | Error::Protocol { .. }
        | Error::RateLimited { .. }
        | Error::Server { .. } => ProcError::Transport {
            context: format!("{context}: {e}"),
            source: Box::new(e),
        },
        Error::Unauthorized { .. } | Error::Forbidden { .. } => ProcError::PermissionDenied {
            what: format!("{context}: {e}"),
        },
        Error::Envd { code, .. } => match code {
            Code::InvalidArgument => ProcError::InvalidSpec {
                reason: format!("{context}: {e}"),
            },
            Code::PermissionDenied | Code::Unauthenticated => ProcError::PermissionDenied {
                what: format!("{context}: {e}"),
            },
            Code::Unavailable => ProcError::Transport {
                context: format!("{context}: {e}"),
                source: Box::new(e),
            },
            _ => ProcError::Other {
                context: format!("{context}: {e}"),
                source: Some(Box::new(e)),
            },
        },
        _ => ProcError::Other {
            context: format!("{context}: {e}"),
            source: Some(Box::new(e)),
        },
    }
}

/// A failure kept for repeated `started()` / `wait()` calls (`ProcError` is not `Clone`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    NotFound(String),
    PermissionDenied(String),
    InvalidSpec(String),
    Gone(String),
    Timeout(String),
    Transport(String),
    Other(String),
}

impl Failure {
    /// Records `e`.
    pub(crate) fn of(e: &ProcError) -> Failure {
        match e {
            ProcError::NotFound { program } => Failure::NotFound(program.clone()),
            ProcError::PermissionDenied { what } => Failure::PermissionDenied(what.clone()),
            ProcError::InvalidSpec { reason } => Failure::InvalidSpec(reason.clone()),
            ProcError::Gone { context } => Failure::Gone(context.clone()),
            ProcError::Timeout { context } => Failure::Timeout(context.clone()),
            // The context already names the operation and the cause: keep it, not the
            // display (which would repeat "transport error: " on every copy).
            ProcError::Transport { context, .. } => Failure::Transport(context.clone()),
            other => Failure::Other(other.to_string()),
        }
    }

    /// A fresh `ProcError` of the recorded kind.
    pub(crate) fn to_error(&self) -> ProcError {
        match self.clone() {
            Failure::NotFound(program) => ProcError::NotFound { program },
            Failure::PermissionDenied(what) => ProcError::PermissionDenied { what },
            Failure::InvalidSpec(reason) => ProcError::InvalidSpec { reason },
            Failure::Gone(context) => ProcError::Gone { context },
            Failure::Timeout(context) => ProcError::Timeout { context },
            Failure::Transport(context) => ProcError::Transport {
                source: context.clone().into(),
                context,
            },
            Failure::Other(context) => ProcError::other(context),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e2b_core::Surface;

    #[test]
    fn kinds() {
        let gone = Error::SandboxNotFound {
            surface: Surface::Envd,
            status: 502,
            message: "The sandbox was not found".into(),
        };
        assert!(matches!(map_error("x", gone), ProcError::Gone { .. }));
        let t = Error::Transport {
            surface: Surface::Envd,
            message: "reset".into(),
        };
        assert!(matches!(map_error("x", t), ProcError::Transport { .. }));
        // The operation and the cause (with the HTTP status) appear once, even after a
        // round trip through `Failure`.
        let busy = Error::Server {
            surface: Surface::Envd,
            status: 503,
            error_code: None,
            message: "envd is busy".into(),
        };
        let first = map_error("starting /bin/sh in /home/user", busy);
        let again = Failure::of(&first).to_error().to_string();
        assert_eq!(again, first.to_string());
        assert_eq!(again.matches("transport error").count(), 1, "{again}");
        assert!(
            again.contains("HTTP 503") && again.contains("envd is busy"),
            "{again}"
        );
        assert_eq!(again.matches("starting /bin/sh").count(), 1, "{again}");
        let cwd = Error::Envd {
            code: Code::InvalidArgument,
            message: "cwd '/nope' does not exist".into(),
            status: None,
        };
        assert!(matches!(map_error("x", cwd), ProcError::InvalidSpec { .. }));
        let f = Failure::of(&ProcError::NotFound {
            program: "p".into(),
        });
        assert!(matches!(f.to_error(), ProcError::NotFound { program } if program == "p"));
    }
}
