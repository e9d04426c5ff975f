//! The one classification table of this crate: for every [`Error`], what retrying can
//! do. [`Error::is_retryable`], the retry policy ([`crate::retry`]), the exec-world
//! mapping ([`crate::world_error`]) and the sandbox provider's lease all read
//! [`Error::disposition`]; nothing else decides it.
//!
//! | error | disposition |
//! | --- | --- |
//! | 429 (`Retry-After` kept), 503 | temporary, not executed |
//! | 502, 504, [`Error::Transport`], envd `unavailable` | temporary, maybe executed |
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
            | Error::Transport { .. } => temporary(true),
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
