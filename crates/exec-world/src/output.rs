//! Bounded capture of process output: keep a head and a tail in memory, count the rest,
//! optionally spill everything to a file in the world. Backend-independent, so every
//! `Subprocess` gets the same output cap without implementing it.
//!
//! [`Prefix`] (the first bytes up to a cap, everything counted) and [`utf8_complete_len`]
//! are the pieces every bounded capture of the workspace is built from: [`capture`]'s
//! head, agent-tools' bash output and e2b-core's trusted shell.

use std::collections::VecDeque;

use bytes::Bytes;
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

/// The first `cap` bytes of a stream, and a count of every byte: the one bounded
/// buffer behind the workspace's output caps.
///
/// ```
/// let mut p = exec_world::output::Prefix::new(4);
/// assert_eq!(p.push(b"ab"), b"");
/// assert_eq!(p.push(b"cdef"), b"ef"); // what did not fit
/// assert_eq!((p.kept(), p.total(), p.truncated()), (&b"abcd"[..], 6, true));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefix {
    cap: usize,
    kept: Vec<u8>,
    total: u64,
}

impl Prefix {
    /// An empty prefix keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Prefix {
        Prefix {
            cap,
            kept: Vec::with_capacity(cap.min(64 * 1024)),
            total: 0,
        }
    }

    /// Keeps the part of `chunk` that fits under the cap and counts all of it; returns
    /// the part that did not fit (empty when everything was kept).
    pub fn push<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        self.total += chunk.len() as u64;
        let room = self.cap.saturating_sub(self.kept.len());
        let (kept, rest) = chunk.split_at(room.min(chunk.len()));
        self.kept.extend_from_slice(kept);
        rest
    }

    /// The bytes kept so far.
    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// Every byte pushed, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// True when some pushed bytes were not kept.
    pub fn truncated(&self) -> bool {
        self.total > self.kept.len() as u64
    }

    /// The kept bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.kept
    }
}

/// The length of `buf` without a trailing *incomplete* UTF-8 character (what a cap cut
/// in the middle of one leaves): if the last bytes start a multi-byte sequence that is
/// cut short, the length ends before its lead byte. Invalid bytes elsewhere are data and
/// are not touched.
///
/// ```
/// use exec_world::output::utf8_complete_len;
/// let euro = "a€".as_bytes();
/// assert_eq!(utf8_complete_len(&euro[..3]), 1);
/// assert_eq!(utf8_complete_len(euro), 4);
/// assert_eq!(utf8_complete_len(b"ab\xff"), 3);
/// ```
pub fn utf8_complete_len(buf: &[u8]) -> usize {
    let len = buf.len();
    // Look back over at most 3 continuation bytes for the lead byte.
    for back in 1..=len.min(4) {
        let i = len - back;
        let b = buf[i];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: keep looking for the lead
        }
        let need = match b {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return len, // not a lead byte: invalid data, keep as is
        };
        // Only a *valid prefix* is dropped: the continuation bytes seen so far must be
        // all the bytes after the lead.
        return if back < need { i } else { len };
    }
    len
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
    let mut head = Prefix::new(limit.head);
    let mut tail: VecDeque<u8> = VecDeque::new();
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
            if let Some(t) = tx.as_mut() {
                if t.send(Ok(chunk.clone())).await.is_err() {
                    tx = None; // the spill failed; keep capturing
                }
            }
            let rest = head.push(&chunk);
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
        total: head.total(),
        head: Bytes::from(head.into_vec()),
        tail: Bytes::from(Vec::from(tail)),
        spill: spilled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_cuts_at_the_cap_and_flags() {
        let mut b = Prefix::new(5);
        assert!(b.push(b"abc").is_empty());
        assert!(!b.truncated());
        assert_eq!(b.push(b"defg"), b"fg");
        assert_eq!(b.kept(), b"abcde");
        assert_eq!(b.push(b"x"), b"x");
        assert_eq!((b.total(), b.truncated()), (8, true));
        assert_eq!(b.into_vec(), b"abcde");
    }
}
