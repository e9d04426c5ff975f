//! Errors of the LSP bridge: what a caller of [`LspClient`](super::LspClient) can act on.

use std::time::Duration;

use exec_world::Error;

use super::framing::FrameError;
use super::message::ResponseError;

/// Why an LSP operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LspError {
    /// The language server could not be started (program missing, bad cwd…).
    #[error("starting the language server: {0}")]
    Spawn(#[source] Error),
    /// Writing to the server failed (it exited, or the transport broke).
    #[error("writing to the language server: {0}")]
    Write(String),
    /// No response within the timeout; the request was cancelled (`$/cancelRequest`).
    #[error("{method}: no response within {after:?}")]
    Timeout {
        /// The request's method.
        method: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The server answered with a JSON-RPC error.
    #[error("{method}: server error {}: {}", error.code, error.message)]
    Server {
        /// The request's method.
        method: String,
        /// The error object.
        error: ResponseError,
    },
    /// The connection is closed (the server exited, its output ended, or the framing
    /// broke); `reason` says which, with the tail of its stderr when there is one.
    #[error("language server connection closed: {reason}")]
    Closed {
        /// What happened.
        reason: String,
    },
    /// A message from the server was unusable (bad framing that was skipped, bad JSON),
    /// or a result did not have the expected shape.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Parameters could not be serialized.
    #[error("serializing parameters: {0}")]
    Serialize(#[from] serde_json::Error),
    /// Reading a document through `Fs` failed.
    #[error("reading a document: {0}")]
    Fs(#[from] Error),
    /// Ending the server process failed.
    #[error("ending the language server: {0}")]
    Process(#[source] Error),
}

impl From<FrameError> for LspError {
    fn from(e: FrameError) -> Self {
        LspError::Protocol(e.to_string())
    }
}
