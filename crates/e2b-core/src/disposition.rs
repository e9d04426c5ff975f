//! The one classification table of this crate: for every [`Error`], what retrying can
//! do. [`Error::is_retryable`], the retry policy ([`crate::retry`]), the exec-world
//! mapping ([`crate::world_error`]), the keep-alive's stop decision and the lease all read
//! [`Error::disposition`]; nothing else decides it.
//!
//! | error | disposition |
//! | --- | --- |
//! | 429 (`Retry-After` kept), 503 | temporary, not executed |
//! | 502, 504, [`Error::Transport`], [`Error::StreamCut`], envd `unavailable` | temporary, maybe executed |
//! | [`Error::SandboxNotFound`] from the control plane (E2B-format 404) | gone |
//! | [`Error::SandboxNotFound`] from envd's proxy (502 or 409 with a `sandboxId`: paused or missing) | unroutable |
//! | our own [`Error::Timeout`] (the caller's budget is spent), every other status, code and variant | final |

use std::time::Duration;

use crate::error::{Error, Surface};
use crate::proto::connect::Code;

/// What retrying can do about an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Retrying later may help.
    Temporary {
        /// The request may have taken effect (retry idempotent calls only).
        maybe_executed: bool,
        /// The server's `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// The sandbox no longer exists (the control plane said so): make a new one.
    Gone,
    /// envd's proxy cannot route to the sandbox: paused (a connect resumes it) or gone
    /// (a connect answers 404). A lease holder reconnects once; never a plain retry.
    Unroutable,
    /// Retrying cannot help.
    Final,
}

impl Error {
    /// This error's place in the table of the [module docs](self).
    ///
    /// ```
    /// use e2b_core::{Disposition, Error, Surface};
    /// let e = Error::SandboxNotFound { surface: Surface::Envd, status: 502, message: String::new() };
    /// assert_eq!(e.disposition(), Disposition::Unroutable);
    /// ```
    pub fn disposition(&self) -> Disposition {
        let temporary = |maybe_executed| Disposition::Temporary {
            maybe_executed,
            retry_after: None,
        };
        match self {
            Error::RateLimited { retry_after, .. } => Disposition::Temporary {
                maybe_executed: false,
                retry_after: *retry_after,
            },
            Error::Server { status: 503, .. } => temporary(false),
            Error::Server {
                status: 502 | 504, ..
            }
            | Error::Transport { .. }
            | Error::StreamCut { .. } => temporary(true),
            Error::Envd {
                code: Code::Unavailable,
                ..
            } => temporary(true),
            Error::SandboxNotFound {
                surface: Surface::Control,
                ..
            } => Disposition::Gone,
            Error::SandboxNotFound {
                surface: Surface::Envd,
                ..
            } => Disposition::Unroutable,
            Error::Envd { .. }
            | Error::Server { .. }
            | Error::TemplateNotFound { .. }
            | Error::VolumeNotFound { .. }
            | Error::EndpointNotFound { .. }
            | Error::Unauthorized { .. }
            | Error::Forbidden { .. }
            | Error::Conflict { .. }
            | Error::BadRequest { .. }
            | Error::Http { .. }
            | Error::Timeout { .. }
            | Error::Protocol { .. }
            | Error::Source(_)
            | Error::Config(_)
            | Error::ControlCommand { .. } => Disposition::Final,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{RetryClass, classify};

    /// One sample per variant: a new variant fails to compile here (no wildcard).
    fn samples() -> Vec<(Error, Disposition)> {
        let m = String::new;
        let fin = Disposition::Final;
        let tmp = |maybe_executed| Disposition::Temporary {
            maybe_executed,
            retry_after: None,
        };
        let all = vec![
            (
                Error::SandboxNotFound {
                    surface: Surface::Control,
                    status: 404,
                    message: m(),
                },
                Disposition::Gone,
            ),
            (
                Error::SandboxNotFound {
                    surface: Surface::Envd,
                    status: 502,
                    message: m(),
                },
                Disposition::Unroutable,
            ),
            (
                Error::SandboxNotFound {
                    surface: Surface::Envd,
                    status: 409,
                    message: m(),
                },
                Disposition::Unroutable,
            ),
            (Error::TemplateNotFound { message: m() }, fin),
            (Error::VolumeNotFound { message: m() }, fin),
            (
                Error::EndpointNotFound {
                    surface: Surface::Envd,
                    body: m(),
                },
                fin,
            ),
            (
                Error::Unauthorized {
                    surface: Surface::Control,
                    message: m(),
                },
                fin,
            ),
            (
                Error::Forbidden {
                    surface: Surface::Control,
                    message: m(),
                },
                fin,
            ),
            (
                Error::RateLimited {
                    surface: Surface::Control,
                    retry_after: Some(Duration::from_secs(2)),
                    message: m(),
                },
                Disposition::Temporary {
                    maybe_executed: false,
                    retry_after: Some(Duration::from_secs(2)),
                },
            ),
            (
                Error::Conflict {
                    surface: Surface::Control,
                    message: m(),
                },
                fin,
            ),
            (
                Error::BadRequest {
                    surface: Surface::Control,
                    message: m(),
                },
                fin,
            ),
            (
                Error::Server {
                    surface: Surface::Control,
                    status: 503,
                    error_code: None,
                    message: m(),
                },
                tmp(false),
            ),
            (
                Error::Server {
                    surface: Surface::Control,
                    status: 502,
                    error_code: None,
                    message: m(),
                },
                tmp(true),
            ),
            (
                Error::Server {
                    surface: Surface::Envd,
                    status: 504,
                    error_code: None,
                    message: m(),
                },
                tmp(true),
            ),
            (
                Error::Server {
                    surface: Surface::Control,
                    status: 500,
                    error_code: None,
                    message: m(),
                },
                fin,
            ),
            (
                Error::Http {
                    surface: Surface::Control,
                    status: 418,
                    message: m(),
                },
                fin,
            ),
            (
                Error::Transport {
                    surface: Surface::Envd,
                    message: m(),
                },
                tmp(true),
            ),
            (
                Error::Timeout {
                    what: "x",
                    after: Duration::from_secs(1),
                },
                fin,
            ),
            (
                Error::Protocol {
                    surface: Surface::Envd,
                    message: m(),
                },
                fin,
            ),
            (Error::Source(std::io::Error::other("x")), fin),
            (Error::Config(m()), fin),
            (
                Error::ControlCommand {
                    exit_code: 1,
                    stderr: m(),
                },
                fin,
            ),
        ];
        for (e, _) in &all {
            match e {
                Error::SandboxNotFound { .. }
                | Error::TemplateNotFound { .. }
                | Error::VolumeNotFound { .. }
                | Error::EndpointNotFound { .. }
                | Error::Unauthorized { .. }
                | Error::Forbidden { .. }
                | Error::RateLimited { .. }
                | Error::Conflict { .. }
                | Error::BadRequest { .. }
                | Error::Server { .. }
                | Error::Http { .. }
                | Error::Envd { .. }
                | Error::Transport { .. }
                | Error::Timeout { .. }
                | Error::Protocol { .. }
                | Error::StreamCut { .. }
                | Error::Source(_)
                | Error::Config(_)
                | Error::ControlCommand { .. } => {}
            }
        }
        let mut all = all;
        for code in Code::all() {
            let d = if code == Code::Unavailable {
                tmp(true)
            } else {
                fin
            };
            all.push((
                Error::Envd {
                    code,
                    message: m(),
                    status: None,
                },
                d,
            ));
        }
        all
    }

    /// Every variant and every Connect code, through the table and each caller.
    #[test]
    fn every_error_through_the_table_and_its_callers() {
        for (e, want) in samples() {
            let shown = format!("{e:?}");
            let d = e.disposition();
            assert_eq!(d, want, "{shown}");
            let temporary = matches!(d, Disposition::Temporary { .. });
            assert_eq!(e.is_retryable(), temporary, "{shown}");
            assert_eq!(e.is_unroutable(), d == Disposition::Unroutable, "{shown}");
            let class = classify(&e);
            match d {
                Disposition::Temporary {
                    maybe_executed: false,
                    retry_after,
                } => {
                    assert_eq!(class, RetryClass::NotExecuted { retry_after }, "{shown}")
                }
                Disposition::Temporary {
                    maybe_executed: true,
                    ..
                } => {
                    assert_eq!(class, RetryClass::Ambiguous, "{shown}")
                }
                Disposition::Gone | Disposition::Unroutable | Disposition::Final => {
                    assert_eq!(class, RetryClass::Final, "{shown}")
                }
            }
            if matches!(d, Disposition::Gone | Disposition::Unroutable) {
                assert_eq!(e.world_kind(), exec_world::ErrorKind::Gone, "{shown}");
            }
            let w = e.into_world("op");
            assert_eq!(w.is_temporary(), temporary, "{shown}");
        }
    }
}
