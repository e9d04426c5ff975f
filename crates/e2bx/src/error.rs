//! How e2bx fails: one line on stderr saying what went wrong and what to do, then exit 1;
//! or a quiet exit with a given code (interrupted, broken pipe). Messages never contain the
//! API key or access tokens (e2b-core redacts them from server bodies; we never format them).

use e2b_core::Error;

/// A failed command.
#[derive(Debug)]
pub enum CliError {
    /// Print `e2bx: <message>` and exit 1.
    Message(String),
    /// Exit with this code without printing anything (already reported, or interrupted).
    Exit(i32),
}

/// Result of a command: the exit code to return.
pub type CliResult<T = i32> = Result<T, CliError>;

impl CliError {
    /// A message error.
    pub fn msg(m: impl Into<String>) -> Self {
        CliError::Message(m.into())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The reader of our output went away (`| head`): stop quietly, like SIGPIPE.
            return CliError::Exit(141);
        }
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<Error>()) {
            return CliError::Message(describe(inner));
        }
        CliError::Message(e.to_string())
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        CliError::Message(describe(&e))
    }
}

/// Map an error about sandbox `id` (not found → the timed-out hint).
pub fn for_sandbox(id: &str) -> impl Fn(Error) -> CliError + '_ {
    move |e| {
        if e.is_sandbox_not_found() {
            CliError::Message(sandbox_not_found(id))
        } else {
            CliError::from(e)
        }
    }
}

/// The message for a sandbox that is gone or never existed.
pub fn sandbox_not_found(id: &str) -> String {
    format!(
        "sandbox {id} not found (it may have timed out); create a new one or check the id with `e2bx sandbox list`"
    )
}

/// One line for any e2b-core error, with a hint where one helps.
pub fn describe(e: &Error) -> String {
    match e {
        Error::SandboxNotFound { .. } => {
            "sandbox not found (it may have timed out); create a new one or check the id with `e2bx sandbox list`".to_owned()
        }
        Error::TemplateNotFound { .. } => {
            "template not found; check --template (default: base)".to_owned()
        }
        Error::Unauthorized { surface, .. } => format!(
            "the {surface} refused our credentials (HTTP 401); check E2B_API_KEY (and E2B_API_URL)"
        ),
        Error::EndpointNotFound { surface, .. } => format!(
            "the {surface} answered 404 without an E2B error body; check E2B_API_URL / E2B_SANDBOX_URL / E2B_DOMAIN"
        ),
        Error::Transport { surface, message } => format!(
            "cannot reach the {surface} ({message}); check your network, E2B_API_URL and E2B_SANDBOX_URL"
        ),
        Error::Config(m) => m.clone(),
        other => {
            let mut s = other.to_string();
            if other.is_retryable() {
                s.push_str("; try again in a moment");
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipe_is_quiet() {
        let e = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(matches!(CliError::from(e), CliError::Exit(141)));
    }

    #[test]
    fn not_found_names_the_sandbox() {
        let e = Error::SandboxNotFound {
            surface: e2b_core::Surface::Control,
            status: 404,
            message: "x".into(),
        };
        match for_sandbox("i123")(e) {
            CliError::Message(m) => assert!(m.starts_with("sandbox i123 not found"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
