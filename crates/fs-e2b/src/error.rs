//! Mapping of e2b-core's [`Error`](e2b_core::Error) to exec-world's [`FsError`] kinds.

use e2b_core::Error;
use e2b_core::proto::connect::Code;
use exec_world::{FsError, WorldPath};

/// The [`FsError`] for `err`, raised while doing `what` to `path`.
///
/// | e2b-core | FsError |
/// | --- | --- |
/// | `SandboxNotFound` (E2B 404, proxy 502) | `Gone` |
/// | envd `not_found` / `already_exists` / `permission_denied` | `NotFound` / `AlreadyExists` / `PermissionDenied` |
/// | envd `invalid_argument` naming a directory / not a directory | `IsADirectory` / `NotADirectory` |
/// | `Timeout`, envd `deadline_exceeded` | `Timeout` |
/// | envd `canceled` | `Cancelled` |
/// | `Transport`, `Protocol`, envd `unavailable`, HTTP 502–504 | `Transport` |
/// | `Forbidden` | `PermissionDenied` |
/// | anything else | `Other` with the error as source |
pub fn map_error(err: Error, path: &WorldPath, what: &str) -> FsError {
    let path = path.clone();
    let context = format!("{what} {path}: {err}");
    match &err {
        Error::SandboxNotFound { .. } => FsError::Gone { context },
        // The kind's own words ("timed out", "transport error") are said once, by FsError.
        Error::Timeout {
            what: waited,
            after,
        } => FsError::Timeout {
            context: format!("{what} {path}: {waited} after {after:?}"),
        },
        Error::Transport { surface, message } => FsError::Transport {
            context: format!("{what} {path}: {surface}: {message}"),
            source: Box::new(err),
        },
        Error::Protocol { .. } => FsError::Transport {
            context,
            source: Box::new(err),
        },
        Error::Server { status, .. } if (502..=504).contains(status) => FsError::Transport {
            context,
            source: Box::new(err),
        },
        Error::Forbidden { .. } => FsError::PermissionDenied { path },
        Error::Envd { code, message, .. } => {
            let lower = message.to_ascii_lowercase();
            match code {
                Code::NotFound => FsError::NotFound { path },
                Code::AlreadyExists => FsError::AlreadyExists { path },
                Code::PermissionDenied => FsError::PermissionDenied { path },
                Code::DeadlineExceeded => FsError::Timeout { context },
                Code::Canceled => FsError::Cancelled { context },
                Code::Unavailable => FsError::Transport {
                    context,
                    source: Box::new(err),
                },
                Code::InvalidArgument if lower.contains("not a directory") => {
                    FsError::NotADirectory { path }
                }
                Code::InvalidArgument if lower.contains("is a directory") => {
                    FsError::IsADirectory { path }
                }
                _ => FsError::Other {
                    context,
                    source: Some(Box::new(err)),
                },
            }
        }
        _ => FsError::Other {
            context,
            source: Some(Box::new(err)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e2b_core::Surface;
    use std::time::Duration;

    fn envd(code: Code, message: &str) -> Error {
        Error::Envd {
            code,
            message: message.into(),
            status: None,
        }
    }

    #[test]
    fn kinds() {
        let p = WorldPath::new("/x").expect("path");
        let m = |e: Error| map_error(e, &p, "test");
        assert!(matches!(
            m(Error::SandboxNotFound {
                surface: Surface::Envd,
                status: 502,
                message: "gone".into()
            }),
            FsError::Gone { .. }
        ));
        assert!(matches!(
            m(envd(Code::NotFound, "nope")),
            FsError::NotFound { path } if path == p
        ));
        assert!(matches!(
            m(envd(Code::AlreadyExists, "x")),
            FsError::AlreadyExists { .. }
        ));
        assert!(matches!(
            m(envd(Code::InvalidArgument, "path '/x' is a directory")),
            FsError::IsADirectory { .. }
        ));
        assert!(matches!(
            m(envd(Code::DeadlineExceeded, "late")),
            FsError::Timeout { .. }
        ));
        assert!(matches!(
            m(Error::Timeout {
                what: "x",
                after: Duration::from_secs(1)
            }),
            FsError::Timeout { .. }
        ));
        assert!(matches!(
            m(Error::Transport {
                surface: Surface::Envd,
                message: "reset".into()
            }),
            FsError::Transport { .. }
        ));
        assert!(matches!(
            m(envd(Code::Internal, "boom")),
            FsError::Other { .. }
        ));
        // Operation, path and cause once each; the kind's words once.
        let shown = m(Error::Transport {
            surface: Surface::Envd,
            message: "connection reset".into(),
        })
        .to_string();
        assert_eq!(shown, "transport error: test /x: envd: connection reset");
        let shown = m(Error::Timeout {
            what: "download handshake",
            after: Duration::from_secs(3),
        })
        .to_string();
        assert_eq!(shown, "timed out: test /x: download handshake after 3s");
    }
}
