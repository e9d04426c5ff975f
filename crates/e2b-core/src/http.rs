//! Shared HTTP plumbing: building the reqwest client, reading bounded error bodies, and
//! turning non-success answers into [`Error`]s.

use std::time::Duration;

use futures::StreamExt as _;

use crate::config::{Config, Secret};
use crate::error::{Error, Surface};

/// Most bytes read from an error response body.
const ERROR_BODY_READ_LIMIT: usize = 64 * 1024;

/// The reqwest client shared by the control plane and every sandbox handle. No global
/// timeout (streams must outlive it); each call sets its own.
pub(crate) fn build_client(cfg: &Config) -> Result<reqwest::Client, Error> {
    let b = reqwest::Client::builder()
        .connect_timeout(cfg.connect_timeout)
        .user_agent(cfg.user_agent.clone());
    let b = if cfg.http2 {
        // Windows grown from the measured bandwidth-delay product: with the fixed 64 KiB
        // default a 256 MiB download ran at a third of HTTP/1.1's speed.
        b.http2_prior_knowledge().http2_adaptive_window(true)
    } else {
        b
    };
    b.build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))
}

/// Sends `rb`, a request that can be repeated safely (a read); when it fails the way a
/// request does on a pooled connection the server had already dropped (HTTP/1.1: closed
/// before any byte of the answer; HTTP/2: the connection broke under the stream), sends
/// it once more on a fresh connection, whatever the retry policy. hyper resends by
/// itself only when nothing was written yet; a connection closed by the peer while it sat
/// in the pool usually takes the request first.
///
/// Only for repeatable requests: the client cannot tell this from a server that received
/// the request and died before answering, so a call that is not idempotent (process
/// `Start`, an upload, create) is never resent here. Timeouts and connect errors are left
/// to the retry policy; a streamed body cannot be cloned and is sent once.
pub(crate) async fn send_resending_stale(
    rb: reqwest::RequestBuilder,
) -> Result<reqwest::Response, reqwest::Error> {
    let again = rb.try_clone();
    match rb.send().await {
        Err(e) if is_stale_connection(&e) => match again {
            Some(again) => {
                tracing::debug!(error = %e, "request on a dropped pooled connection: sent again");
                again.send().await
            }
            None => Err(e),
        },
        r => r,
    }
}

/// True for the errors of a request sent on a connection the peer had closed: hyper's
/// "connection closed before message completed", or a broken pipe / reset / abort while
/// sending (HTTP/2 reports it as the connection's I/O error).
pub(crate) fn is_stale_connection(e: &reqwest::Error) -> bool {
    if e.is_timeout() || e.is_connect() || e.is_body() || e.is_decode() {
        return false;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            )
        {
            return true;
        }
        src = s.source();
    }
    false
}

/// Read at most [`ERROR_BODY_READ_LIMIT`] bytes of a body (for error messages).
pub(crate) async fn read_bounded(resp: reqwest::Response, timeout: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            let room = ERROR_BODY_READ_LIMIT.saturating_sub(out.len());
            out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if out.len() >= ERROR_BODY_READ_LIMIT {
                break;
            }
        }
    };
    // A body that never ends must not hang the error path.
    let _ = tokio::time::timeout(timeout, read).await;
    out
}

/// Consume a non-success response into the mapped error.
pub(crate) async fn error_from(
    surface: Surface,
    resp: reqwest::Response,
    timeout: Duration,
    secrets: &[&Secret],
) -> Error {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = read_bounded(resp, timeout).await;
    Error::from_response(surface, status, retry_after.as_deref(), &body, secrets)
}

/// The media type of a response, lowercased, without parameters.
pub(crate) fn media_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}
