//! Bounded capture of process output: keep a head and a tail in memory, count the rest,
//! optionally spill everything to a file in the world. Backend-independent, so every
//! `Subprocess` gets the same output cap without implementing it.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};

use crate::error::Error;
use crate::fs::{ByteStream, Fs, Version, WriteOptions};
use crate::path::WorldPath;
use crate::proc::OutputStream;

/// How much of a stream [`capture`] keeps in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureLimit {
    /// Bytes kept from the start.
    pub head: usize,
    /// Bytes kept from the end (beyond the head).
    pub tail: usize,
}

/// Where [`capture`] writes the whole stream, through an [`Fs`].
pub struct Spill<'a> {
    /// The file system (usually the same world the process runs in).
    pub fs: &'a dyn Fs,
    /// The file; replaced atomically when the stream ends.
    pub path: WorldPath,
    /// Write options (mode, parents).
    pub options: WriteOptions,
}

/// What [`capture`] kept.
#[derive(Debug)]
pub struct Captured {
    /// The first bytes, up to `CaptureLimit::head`.
    pub head: Bytes,
    /// The last bytes after the head, up to `CaptureLimit::tail`.
    pub tail: Bytes,
    /// Every byte the stream produced.
    pub total: u64,
    /// The outcome of the spill, if one was asked for.
    pub spill: Option<Result<Version, Error>>,
}

impl Captured {
    /// True when bytes between head and tail were dropped.
    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// Head and tail as lossy UTF-8, with a one-line note of what was left out.
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.truncated() {
            let omitted = self.total - (self.head.len() + self.tail.len()) as u64;
            s.push_str(&format!("\n[… {omitted} bytes omitted …]\n"));
        }
        s.push_str(&String::from_utf8_lossy(&self.tail));
        s
    }
}

/// Reads `stream` to its end keeping at most `limit.head + limit.tail` bytes in memory;
/// with `spill`, the whole stream is also written to a file (the spill's failure is
/// reported in [`Captured::spill`] and does not stop the capture).
///
/// ```
/// # use exec_world::output::{capture, CaptureLimit};
/// # tokio_test_block_on(async {
/// let chunks = vec![Ok(bytes::Bytes::from_static(b"0123456789"))];
/// let s: exec_world::OutputStream = Box::pin(futures::stream::iter(chunks));
/// let c = capture(s, CaptureLimit { head: 3, tail: 2 }, None).await?;
/// assert_eq!((&c.head[..], &c.tail[..], c.total), (&b"012"[..], &b"89"[..], 10));
/// # Ok::<(), exec_world::Error>(()) });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().expect("rt").block_on(f) }
/// ```
pub async fn capture(
    mut stream: OutputStream,
    limit: CaptureLimit,
    spill: Option<Spill<'_>>,
) -> Result<Captured, Error> {
    let mut head = BytesMut::new();
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut total = 0u64;
    let (tx, writer) = match spill {
        Some(sp) => {
            let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Error>>(16);
            let data: ByteStream = Box::pin(rx);
            let fut = async move { sp.fs.write(&sp.path, data, sp.options).await };
            (Some(tx), Some(fut))
        }
        None => (None, None),
    };
    let read = async {
        let mut tx = tx;
        let mut failure = None;
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            total += chunk.len() as u64;
            if let Some(t) = tx.as_mut() {
                if t.send(Ok(chunk.clone())).await.is_err() {
                    tx = None; // the spill failed; keep capturing
                }
            }
            let room = limit.head.saturating_sub(head.len());
            let (h, rest) = chunk.split_at(room.min(chunk.len()));
            head.extend_from_slice(h);
            if rest.len() >= limit.tail {
                tail.clear();
                tail.extend(&rest[rest.len() - limit.tail..]);
            } else {
                tail.extend(rest);
                let excess = tail.len().saturating_sub(limit.tail);
                tail.drain(..excess);
            }
        }
        if let (Some(mut t), Some(e)) = (tx.take(), failure.as_ref()) {
            // Abandon the spill so the old file stays: the stream did not end cleanly.
            let _ = t
                .send(Err(Error::other(format!("output failed: {e}"))))
                .await;
        }
        drop(tx);
        failure
    };
    let (failure, spilled) = match writer {
        Some(w) => {
            let (f, s) = futures::future::join(read, w).await;
            (f, Some(s))
        }
        None => (read.await, None),
    };
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Captured {
        head: head.freeze(),
        tail: Bytes::from(Vec::from(tail)),
        total,
        spill: spilled,
    })
}
