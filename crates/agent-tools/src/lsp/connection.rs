//! The connection to a language server: state shared by [`LspClient`](super::LspClient)
//! and its tasks, and the tasks themselves. A reader (stdout → [`FrameDecoder`] →
//! responses to waiting requests, server requests to the [`ServerRequestHandler`],
//! notifications to subscribers), a writer (the only owner of the server's stdin, fed
//! whole frames through a bounded queue, so concurrent requests never interleave and a
//! caller giving up mid-send never leaves a half-written frame) and a stderr drain (a
//! bounded tail for error messages).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use exec_world::{InputSink, OutputStream};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::error::LspError;
use super::framing::{FrameDecoder, FrameError, encode};
use super::handler::ServerRequestHandler;
use super::message::{
    Incoming, Notification, RequestId, ResponseError, classify, notification_body, response_body,
};

/// How much of the server's stderr is kept for error messages.
pub(super) const STDERR_TAIL: usize = 16 * 1024;
/// Notifications buffered per subscriber before it lags.
pub(super) const NOTIFY_CAPACITY: usize = 1024;
/// Frames queued for the writer before senders wait.
pub(super) const OUTGOING_CAPACITY: usize = 256;

/// What the writer task is asked to do.
pub(super) enum Outgoing {
    /// Write one whole frame.
    Frame(bytes::Bytes),
    /// Close the server's stdin (EOF), then report back.
    Close(oneshot::Sender<()>),
}

pub(super) type Pending = HashMap<RequestId, oneshot::Sender<Result<Value, ResponseError>>>;

/// State shared by the client handle and its tasks.
pub(super) struct Shared {
    pub(super) outgoing: mpsc::Sender<Outgoing>,
    pub(super) pending: Mutex<Pending>,
    /// Why the connection closed, once it did.
    pub(super) closed: Mutex<Option<String>>,
    pub(super) stderr_tail: Mutex<VecDeque<u8>>,
    /// Latest `publishDiagnostics` per URI: the `diagnostics` array.
    pub(super) diagnostics: Mutex<HashMap<String, Vec<Value>>>,
    pub(super) diagnostics_changed: watch::Sender<u64>,
    pub(super) notifications: broadcast::Sender<Notification>,
    pub(super) handler: Arc<dyn ServerRequestHandler>,
}

impl Shared {
    /// Queues one message (whole frame) for the writer. Cancel-safe.
    pub(super) async fn send(&self, body: &[u8]) -> Result<(), LspError> {
        self.outgoing
            .send(Outgoing::Frame(encode(body)))
            .await
            .map_err(|_| self.closed_error("the server's stdin is closed"))
    }

    /// Queues a message without waiting; dropped if the queue is full or closed.
    pub(super) fn try_send(&self, body: &[u8]) {
        let _ = self.outgoing.try_send(Outgoing::Frame(encode(body)));
    }

    pub(super) fn closed_error(&self, fallback: &str) -> LspError {
        LspError::Closed {
            reason: self.closed_reason().unwrap_or_else(|| fallback.to_string()),
        }
    }

    pub(super) fn closed_reason(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    /// Marks the connection closed and fails every waiting request.
    pub(super) fn close(&self, reason: String) {
        if let Ok(mut c) = self.closed.lock() {
            if c.is_none() {
                let tail = self.stderr_tail();
                *c = Some(if tail.trim().is_empty() {
                    reason
                } else {
                    format!("{reason}; server stderr ends with: {}", tail.trim_end())
                });
            }
        }
        if let Ok(mut p) = self.pending.lock() {
            p.clear(); // dropping the senders wakes the waiters with Closed
        }
        self.diagnostics_changed.send_modify(|_| {});
    }

    pub(super) fn stderr_tail(&self) -> String {
        match self.stderr_tail.lock() {
            Ok(t) => {
                let bytes: Vec<u8> = t.iter().copied().collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Err(_) => String::new(),
        }
    }
}

/// Removes a request from the pending map when its caller is done with it, and tells the
/// server to cancel it when it was sent but not answered (timeout, future dropped).
pub(super) struct CancelGuard<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) id: RequestId,
    pub(super) sent: bool,
    pub(super) answered: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.remove(&self.id);
        }
        if self.sent && !self.answered && self.shared.closed_reason().is_none() {
            let params = json!({"id": self.id});
            self.shared
                .try_send(&notification_body("$/cancelRequest", &params));
        }
    }
}

/// Owns the server's stdin: writes queued frames whole, in order; closes on request.
pub(super) async fn write_loop(
    shared: Arc<Shared>,
    mut sink: InputSink,
    mut rx: mpsc::Receiver<Outgoing>,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            Outgoing::Frame(frame) => {
                let written = match sink.write_all(&frame).await {
                    Ok(()) => sink.flush().await,
                    Err(e) => Err(e),
                };
                if let Err(e) = written {
                    shared.close(format!("writing to the server: {e}"));
                    return;
                }
            }
            Outgoing::Close(done) => {
                let _ = sink.shutdown().await;
                drop(sink);
                let _ = done.send(());
                return;
            }
        }
    }
}

/// Reads the server's stdout until it ends, dispatching every message.
pub(super) async fn read_loop(shared: Arc<Shared>, mut out: OutputStream, max_body: usize) {
    let mut decoder = FrameDecoder::new(max_body);
    let reason = 'outer: loop {
        match out.next().await {
            None => break "the server's output ended (it exited)".to_string(),
            Some(Err(e)) => break format!("reading the server's output: {e}"),
            Some(Ok(chunk)) => {
                decoder.push(&chunk);
                loop {
                    match decoder.next_frame() {
                        Ok(Some(body)) => dispatch(&shared, &body),
                        Ok(None) => break,
                        Err(e @ FrameError::TooLarge { .. }) => {
                            tracing::warn!(error = %e, "lsp: skipped an oversize message");
                        }
                        Err(e) => break 'outer format!("framing error: {e}"),
                    }
                }
            }
        }
    };
    tracing::debug!(%reason, "lsp: connection closed");
    shared.close(reason);
}

fn dispatch(shared: &Arc<Shared>, body: &[u8]) {
    let msg = match classify(body) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "lsp: ignoring an invalid message");
            return;
        }
    };
    match msg {
        Incoming::Response { id, result } => {
            let waiter = shared.pending.lock().ok().and_then(|mut p| p.remove(&id));
            match waiter {
                Some(tx) => {
                    let _ = tx.send(result);
                }
                None => tracing::debug!(%id, "lsp: response to no pending request"),
            }
        }
        Incoming::Request(req) => {
            let result = shared.handler.handle(&req.method, &req.params);
            let body = response_body(&req.id, &result);
            let shared = shared.clone();
            // Queued from a task so the reader never waits on a full queue.
            tokio::spawn(async move {
                if let Err(e) = shared.send(&body).await {
                    tracing::debug!(error = %e, method = %req.method, "lsp: could not answer");
                }
            });
        }
        Incoming::Notification(n) => {
            // Subscribers first, then the diagnostics store: whoever wakes on the store
            // finds the notification already broadcast.
            let diagnostics = (n.method == "textDocument/publishDiagnostics")
                .then(|| {
                    let uri = n.params.get("uri").and_then(Value::as_str)?;
                    let diags = n.params.get("diagnostics").and_then(Value::as_array)?;
                    Some((uri.to_string(), diags.clone()))
                })
                .flatten();
            let _ = shared.notifications.send(n);
            if let Some((uri, diags)) = diagnostics {
                if let Ok(mut d) = shared.diagnostics.lock() {
                    d.insert(uri, diags);
                }
                shared
                    .diagnostics_changed
                    .send_modify(|v| *v = v.wrapping_add(1));
            }
        }
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes of the server's stderr.
pub(super) async fn drain_stderr(shared: Arc<Shared>, mut err: OutputStream) {
    while let Some(Ok(chunk)) = err.next().await {
        tracing::trace!(stderr = %String::from_utf8_lossy(&chunk), "lsp server");
        if let Ok(mut tail) = shared.stderr_tail.lock() {
            tail.extend(chunk.iter().copied());
            let excess = tail.len().saturating_sub(STDERR_TAIL);
            tail.drain(..excess);
        }
    }
}
