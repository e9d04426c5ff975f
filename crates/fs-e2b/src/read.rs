//! Reading files as the acting user: the bytes come from a process running as that user
//! (the [`READ`](crate::scripts::READ) script over envd's process stream), never from
//! envd's `GET /files`, which opens files as root. Root therefore never follows a path
//! the user controls: a root-only file is `PermissionDenied`, a link the user planted
//! reaches only what the user may read, and swapping the path midway changes nothing.
//!
//! The script checks the size of the opened file before it sends a byte (TooLarge
//! without a transfer) and sends at most `max + 1` bytes; memory stays bounded (one
//! chunk at a time for `read_stream`, at most `max` bytes for `read`). A reader that is
//! dropped before its end is killed.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessSelector, Signal};
use exec_world::{ByteStream, Error, WorldPath};
use futures::StreamExt as _;

use crate::fs::Shared;
use crate::scripts;
use crate::shell::{EXIT_TOO_LARGE, ShellOutput, classify};

/// Largest chunk `read_stream` yields.
pub(crate) const CHUNK: usize = 1 << 20;

/// Most stderr bytes kept of a reader (its error message).
const MAX_STDERR: usize = 64 << 10;

/// Longest header line (the size in decimal and a newline).
const MAX_HEADER: usize = 32;

/// Limits at or past this are sent as "no limit" (the shell's arithmetic is signed 64-bit).
const NO_LIMIT_FROM: u64 = 1 << 62;

/// How long a `read_stream` reader may live (it is killed when its stream is dropped
/// earlier); bounds a reader stuck on a file the user swapped for a FIFO.
const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// What the reader process did next.
enum Step {
    /// Bytes of the file.
    Data(Vec<u8>),
    /// The process ended with this exit code.
    End(i32),
}

/// A running reader process; killed when dropped before its end.
struct Reader {
    events: ProcessStream,
    api: Arc<dyn EnvdApi>,
    stderr: Vec<u8>,
    ended: bool,
    path: WorldPath,
    what: &'static str,
}

impl Reader {
    /// The next piece of stdout, or the end; stderr is kept (bounded) for the error.
    async fn step(&mut self) -> Result<Step, Error> {
        loop {
            let ev = match self.events.next().await {
                Some(Ok(ev)) => ev,
                Some(Err(e)) => return Err(e.into_world(self.what).with_path(&self.path)),
                None => {
                    return Err(
                        Error::other("the reader's stream ended without its exit status")
                            .with_op(self.what)
                            .with_path(&self.path),
                    );
                }
            };
            match ev {
                ProcessEvent::Data(DataEvent::Stdout(b)) => return Ok(Step::Data(b)),
                ProcessEvent::Data(DataEvent::Stderr(b) | DataEvent::Pty(b)) => {
                    let room = MAX_STDERR.saturating_sub(self.stderr.len());
                    self.stderr.extend_from_slice(&b[..room.min(b.len())]);
                }
                ProcessEvent::End(end) => {
                    self.ended = true;
                    return Ok(Step::End(end.exit_code));
                }
                ProcessEvent::Start(_) | ProcessEvent::Keepalive(_) => {}
            }
        }
    }

    /// The error of a reader that exited with `code` (not 0).
    fn failure(&self, code: i32, limit: Option<u64>) -> Error {
        if code == EXIT_TOO_LARGE
            && let Some(limit) = limit
        {
            return Error::too_large(&self.path, limit).with_op(self.what);
        }
        let out = ShellOutput {
            exit_code: code,
            stdout: Vec::new(),
            stderr: self.stderr.clone(),
        };
        classify(&out, &self.path, self.what)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let api = self.api.clone();
        let pid = self.events.pid();
        handle.spawn(async move {
            if let Err(e) = api
                .send_signal(ProcessSelector::Pid(pid), Signal::Sigkill)
                .await
            {
                tracing::debug!(pid, error = %e, "killing an abandoned reader failed");
            }
        });
    }
}

/// Starts the reader of `abs` and waits for its header: the reader, the file size and
/// the first bytes of content. Errors (missing, denied, directory, too large) come here.
async fn open(
    sh: &Shared,
    abs: &WorldPath,
    limit: Option<u64>,
    what: &'static str,
) -> Result<(Reader, u64, Vec<u8>), Error> {
    let limit_arg = match limit {
        Some(l) if l < NO_LIMIT_FROM => l.to_string(),
        _ => String::new(),
    };
    let lifetime = if limit.is_some() {
        Some(sh.command_timeout)
    } else {
        Some(STREAM_LIFETIME.max(sh.command_timeout))
    };
    let events = sh
        .ctl
        .start(
            scripts::READ,
            &[abs.as_str(), &limit_arg],
            lifetime,
            abs,
            what,
        )
        .await?;
    let mut r = Reader {
        events,
        api: sh.ctl.api().clone(),
        stderr: Vec::new(),
        ended: false,
        path: abs.clone(),
        what,
    };
    let mut head = Vec::new();
    loop {
        match r.step().await? {
            Step::Data(b) => head.extend_from_slice(&b),
            Step::End(code) if head.is_empty() || code != 0 => {
                return Err(r.failure(code, limit));
            }
            Step::End(_) => {}
        }
        if let Some(nl) = head.iter().position(|&c| c == b'\n') {
            let size = std::str::from_utf8(&head[..nl])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| unreadable_header(what, abs))?;
            let rest = head.split_off(nl + 1);
            return Ok((r, size, rest));
        }
        if head.len() > MAX_HEADER || r.ended {
            return Err(unreadable_header(what, abs));
        }
    }
}

/// The reader printed no size line.
fn unreadable_header(what: &str, abs: &WorldPath) -> Error {
    Error::other("unreadable size header")
        .with_op(what)
        .with_path(abs)
}

/// The whole file if it has at most `max` bytes: TooLarge from the size of the opened
/// file before any byte is sent, and again (the reader killed) if it grew since.
pub(crate) async fn read_bounded(sh: &Shared, abs: &WorldPath, max: u64) -> Result<Bytes, Error> {
    let (mut r, size, first) = open(sh, abs, Some(max), "read").await?;
    let too_large = || Error::too_large(abs, max).with_op("read");
    let mut buf = BytesMut::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    let mut piece = first;
    loop {
        if (buf.len() as u64).saturating_add(piece.len() as u64) > max {
            // Dropping the reader kills it.
            return Err(too_large());
        }
        buf.extend_from_slice(&piece);
        if r.ended {
            return Ok(buf.freeze());
        }
        piece = match r.step().await? {
            Step::Data(b) => b,
            Step::End(0) => return Ok(buf.freeze()),
            Step::End(code) => return Err(r.failure(code, Some(max))),
        };
    }
}

/// Splits `b` into pieces of at most [`CHUNK`] bytes.
fn chunks(b: Vec<u8>) -> Vec<Result<Bytes, Error>> {
    let mut b = Bytes::from(b);
    let mut parts = Vec::with_capacity(b.len() / CHUNK + 1);
    while b.len() > CHUNK {
        parts.push(Ok(b.split_to(CHUNK)));
    }
    if !b.is_empty() {
        parts.push(Ok(b));
    }
    parts
}

/// The file as a stream of chunks of at most [`CHUNK`] bytes; the reader is killed when
/// the stream is dropped before its end.
pub(crate) async fn read_stream(sh: &Shared, abs: &WorldPath) -> Result<ByteStream, Error> {
    let (r, _size, first) = open(sh, abs, None, "read_stream").await?;
    let head = futures::stream::iter(chunks(first));
    let rest = futures::stream::unfold(Some(r), |state| async move {
        let mut r = state?;
        if r.ended {
            return None;
        }
        match r.step().await {
            Ok(Step::Data(b)) => Some((futures::stream::iter(chunks(b)), Some(r))),
            Ok(Step::End(0)) => None,
            Ok(Step::End(code)) => {
                let e = r.failure(code, None);
                Some((futures::stream::iter(vec![Err(e)]), None))
            }
            Err(e) => Some((futures::stream::iter(vec![Err(e)]), None)),
        }
    })
    .flatten();
    Ok(Box::pin(head.chain(rest)))
}
