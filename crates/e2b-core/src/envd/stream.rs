//! Decoding server-streaming Connect responses, and the typed streams handed to callers.
//!
//! A response body is fed chunk by chunk to [`FrameDecoder`]; data frames become messages,
//! the end-of-stream frame ends the stream (`{}`) or fails it with its Connect error. A
//! body that ends before the end-of-stream frame (or inside a frame) is an error, never a
//! clean end. With an idle timeout, a gap without any bytes longer than it fails the
//! stream with [`Error::Timeout`].

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::event_decode::StreamMessage;
use crate::config::Secret;
use crate::error::{Error, Surface};
use crate::proto::connect::Code;
use crate::proto::envelope::{EndStream, FrameDecoder};
use crate::proto::filesystem::FilesystemEvent;
use crate::proto::process::{DataEvent, EndEvent, ProcessEvent};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};

/// A boxed stream of decoded messages (or the error that ended it).
pub type MessageStream<T> = Pin<Box<dyn Stream<Item = Result<T, Error>> + Send>>;

type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

struct DecodeState {
    body: BodyStream,
    decoder: FrameDecoder,
    idle: Option<Duration>,
    secrets: Vec<Secret>,
    finished: bool,
}

impl DecodeState {
    fn fail(&mut self, e: Error) -> Option<Result<Bytes, Error>> {
        self.finished = true;
        Some(Err(e))
    }

    /// The payload of the next data frame; `None` after a clean end-of-stream.
    async fn next_payload(&mut self) -> Option<Result<Bytes, Error>> {
        if self.finished {
            return None;
        }
        loop {
            match self.decoder.next_frame() {
                Err(e) => {
                    return self.fail(Error::protocol(Surface::Envd, format!("bad envelope: {e}")));
                }
                Ok(Some(frame)) if frame.is_end_stream() => {
                    self.finished = true;
                    let end: EndStream = match serde_json::from_slice(&frame.payload) {
                        Ok(end) => end,
                        Err(e) => {
                            return Some(Err(Error::protocol(
                                Surface::Envd,
                                format!("undecodable end-of-stream frame: {e}"),
                            )));
                        }
                    };
                    let secrets: Vec<&Secret> = self.secrets.iter().collect();
                    return end
                        .error
                        .map(|err| Err(Error::from_connect(err, None, &secrets)));
                }
                Ok(Some(frame)) => return Some(Ok(frame.payload)),
                Ok(None) => {}
            }
            let chunk = match self.idle {
                Some(idle) => match tokio::time::timeout(idle, self.body.next()).await {
                    Ok(c) => c,
                    Err(_) => {
                        return self.fail(Error::Timeout {
                            what: "envd stream idle",
                            after: idle,
                        });
                    }
                },
                None => self.body.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => self.decoder.push(&bytes),
                Some(Err(e)) => {
                    let e =
                        Error::from_reqwest(Surface::Envd, e, "envd stream body", Duration::ZERO);
                    return self.fail(e);
                }
                None => {
                    let detail = match self.decoder.finish() {
                        Err(e) => format!("stream ended inside a frame: {e}"),
                        Ok(()) => "stream ended without its end-of-stream frame".to_owned(),
                    };
                    return self.fail(Error::stream_cut(Surface::Envd, detail));
                }
            }
        }
    }
}

/// Turn a 200 `application/connect+json` response into a message stream.
pub(crate) fn message_stream<T: StreamMessage>(
    resp: reqwest::Response,
    idle: Option<Duration>,
    secrets: Vec<Secret>,
) -> MessageStream<T> {
    let st = DecodeState {
        body: Box::pin(resp.bytes_stream()),
        decoder: FrameDecoder::default(),
        idle,
        secrets,
        finished: false,
    };
    Box::pin(futures::stream::unfold(st, |mut st| async move {
        loop {
            let item = match st.next_payload().await? {
                Ok(payload) => match T::decode(&payload) {
                    Ok(msg) => Ok(msg),
                    // A oneof member this client does not know (a newer envd): protobuf-JSON
                    // parsers ignore unknown fields, so skip the message.
                    Err(e) if e.is_data() && e.to_string().starts_with("unknown variant") => {
                        tracing::debug!("skipping a stream message of an unknown kind: {e}");
                        continue;
                    }
                    Err(e) => {
                        st.finished = true;
                        Err(Error::protocol(
                            Surface::Envd,
                            format!("undecodable stream message: {e}"),
                        ))
                    }
                },
                Err(e) => Err(e),
            };
            return Some((item, st));
        }
    }))
}

/// The events of one process after its `start`: output chunks and finally `end`.
/// Keepalives are dropped. The stream ends after the end-of-stream frame; if the
/// connection breaks first, the last item is an error.
///
/// Dropping it disconnects from the process but does not stop it (envd keeps it running;
/// use `send_signal` to stop it).
pub struct ProcessStream {
    pid: u32,
    inner: MessageStream<ProcessEvent>,
    /// Set once `end` came: the event, held while the end-of-stream frame that follows it
    /// is read, then what came after it (if anything).
    after_end: Option<Box<AfterEnd>>,
    /// The stream is over (after `end` and its end-of-stream frame, or an error).
    done: bool,
}

/// `end` received; the rest of the body is being read so the connection can be reused.
struct AfterEnd {
    /// The `end` event, until it is handed out.
    end: Option<Result<ProcessEvent, Error>>,
    /// An item that came after `end` (an error, such as envd's `deadline_exceeded`).
    next: Option<Result<ProcessEvent, Error>>,
    /// How long `end` waits for the end-of-stream frame.
    grace: Pin<Box<tokio::time::Sleep>>,
}

/// How long an `end` event is held for the end-of-stream frame that follows it. envd
/// writes both at once; reading the frame before handing out `end` leaves the response
/// complete, so the HTTP/1.1 connection goes back to the pool instead of being closed
/// (a caller that stops at `end` and drops the stream would otherwise cost the next
/// request a new connection: one more round trip).
const END_GRACE: Duration = Duration::from_millis(250);

impl std::fmt::Debug for ProcessStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessStream")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// Everything a process printed, and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessOutput {
    /// The pid.
    pub pid: u32,
    /// stdout bytes.
    pub stdout: Vec<u8>,
    /// stderr bytes.
    pub stderr: Vec<u8>,
    /// PTY bytes.
    pub pty: Vec<u8>,
    /// The end event (exit code 0 when omitted on the wire).
    pub end: EndEvent,
}

impl ProcessStream {
    /// Wrap a stream of events (after `start`) for a process; also how in-process
    /// stand-ins of [`EnvdApi`](crate::EnvdApi) build one.
    pub fn new(pid: u32, events: MessageStream<ProcessEvent>) -> Self {
        ProcessStream {
            pid,
            inner: events,
            after_end: None,
            done: false,
        }
    }

    /// The pid from the `start` event.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Read to the end, collecting output. A stream that ends without an `end` event, or
    /// without its end-of-stream frame, is an error. One exception: when the process
    /// lifetime (`Connect-Timeout-Ms`) expires, envd may close the stream with
    /// `deadline_exceeded` right after the `end` event; the `end` (killed, -1) is returned.
    pub async fn wait_output(mut self) -> Result<ProcessOutput, Error> {
        let mut out = ProcessOutput {
            pid: self.pid,
            ..Default::default()
        };
        let mut end = None;
        while let Some(ev) = self.next().await {
            let ev = match ev {
                Err(e) if end.is_some() && e.connect_code() == Some(Code::DeadlineExceeded) => {
                    break;
                }
                other => other?,
            };
            match ev {
                ProcessEvent::Data(DataEvent::Stdout(b)) => out.stdout.extend_from_slice(&b),
                ProcessEvent::Data(DataEvent::Stderr(b)) => out.stderr.extend_from_slice(&b),
                ProcessEvent::Data(DataEvent::Pty(b)) => out.pty.extend_from_slice(&b),
                ProcessEvent::End(e) => end = Some(e),
                ProcessEvent::Start(_) | ProcessEvent::Keepalive(_) => {}
            }
        }
        out.end = end.ok_or_else(|| {
            Error::protocol(Surface::Envd, "process stream ended without an end event")
        })?;
        Ok(out)
    }
}

impl Stream for ProcessStream {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(a) = this.after_end.as_mut() {
                if a.end.is_some() && a.next.is_none() && !this.done {
                    // Read on until the end-of-stream frame (or whatever follows `end`),
                    // for at most the grace period.
                    match this.inner.as_mut().poll_next(cx) {
                        Poll::Ready(Some(Ok(ProcessEvent::Keepalive(_)))) => continue,
                        Poll::Ready(None) => this.done = true,
                        Poll::Ready(Some(item)) => a.next = Some(item),
                        Poll::Pending => {
                            if a.grace.as_mut().poll(cx).is_pending() {
                                return Poll::Pending;
                            }
                        }
                    }
                }
                if let Some(end) = a.end.take() {
                    return Poll::Ready(Some(end));
                }
                if let Some(next) = a.next.take() {
                    return Poll::Ready(Some(next));
                }
                if this.done {
                    return Poll::Ready(None);
                }
                // The grace ran out before the frame: read on as usual.
                this.after_end = None;
                continue;
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(ProcessEvent::Keepalive(_)))) => continue,
                Poll::Ready(Some(Ok(ProcessEvent::End(e)))) => {
                    this.after_end = Some(Box::new(AfterEnd {
                        end: Some(Ok(ProcessEvent::End(e))),
                        next: None,
                        grace: Box::pin(tokio::time::sleep(END_GRACE)),
                    }));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }
}

/// Events of a directory watch after its `start`. Keepalives are dropped; the watch
/// runs until dropped, its deadline (`deadline_exceeded`) or an error.
pub struct WatchStream {
    inner: MessageStream<FilesystemEvent>,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

impl WatchStream {
    /// Wrap a stream of filesystem events (after `start`).
    pub fn new(events: MessageStream<FilesystemEvent>) -> Self {
        WatchStream { inner: events }
    }
}

impl Stream for WatchStream {
    type Item = Result<FilesystemEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
