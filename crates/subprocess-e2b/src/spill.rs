//! A bounded spill file in the sandbox: [`tee`] passes an output stream through to its
//! consumer unchanged and writes the first `max_bytes` of it to a file through an
//! `exec_world::Fs` on the same sandbox, with exec-world's own capture helper
//! (`output::capture` with a `Spill`): atomic replace when the stream ends, the old file
//! kept when it fails. The copy is fed through a bounded channel, so a slow file write
//! slows the consumer (and the process) instead of growing memory.

use std::sync::Arc;

use exec_world::output::{CaptureLimit, Spill, capture};
use exec_world::{Error, Fs, OutputStream, Version, WorldPath, WriteOptions};
use futures::{SinkExt, StreamExt};
use tokio::task::JoinHandle;

/// Where and how much to spill.
#[derive(Clone)]
pub struct SpillTarget {
    /// The file system of the sandbox (e.g. `fs_e2b::E2bFs`).
    pub fs: Arc<dyn Fs>,
    /// The file (replaced atomically at the end of the stream).
    pub path: WorldPath,
    /// At most this many bytes are kept in the file; the rest only reaches the consumer.
    pub max_bytes: u64,
    /// Write options (mode, parents).
    pub options: WriteOptions,
}

/// What the spill did.
#[derive(Debug)]
pub struct Spilled {
    /// Bytes the stream carried in all.
    pub total: u64,
    /// True when the file holds only the first `max_bytes`.
    pub truncated: bool,
    /// The written file's version, or why it was not written.
    pub file: Result<Version, Error>,
}

/// Tees `stream`: the returned stream yields the same items; the task writes the file and
/// reports once the stream ended (or the consumer dropped it: then the file is
/// abandoned and the old one kept).
pub fn tee(
    stream: OutputStream,
    target: SpillTarget,
) -> (OutputStream, JoinHandle<Result<Spilled, Error>>) {
    let (tx, rx) = futures::channel::mpsc::channel::<Result<bytes::Bytes, Error>>(8);
    let max = target.max_bytes;
    let complete = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = complete.clone();
    // The copy ends cleanly only if the source did; a consumer that dropped the stream
    // early leaves an error item, so the spill is abandoned (old file kept).
    let tail = futures::stream::once(async move {
        (!done.load(std::sync::atomic::Ordering::SeqCst))
            .then(|| Err(Error::other("output stream dropped before its end")))
    })
    .filter_map(|x| async move { x });
    let task = tokio::spawn(async move {
        let copy: OutputStream = Box::pin(rx.chain(tail));
        let spill = Spill {
            fs: target.fs.as_ref(),
            path: target.path.clone(),
            options: target.options,
        };
        let c = capture(copy, CaptureLimit { head: 0, tail: 0 }, Some(spill)).await?;
        Ok(Spilled {
            total: c.total,
            truncated: false,
            file: c.spill.unwrap_or_else(|| Err(Error::other("no spill"))),
        })
    });
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = counted.clone();
    let out_complete = complete;
    let out = futures::stream::unfold(
        (stream, Some(tx), 0u64),
        move |(mut s, mut tx, mut kept)| {
            let seen = seen.clone();
            let complete = out_complete.clone();
            async move {
                let item = s.next().await;
                match &item {
                    Some(Ok(chunk)) => {
                        seen.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        if let Some(t) = tx.as_mut() {
                            let room = max.saturating_sub(kept) as usize;
                            if room > 0 {
                                let part = chunk.slice(..room.min(chunk.len()));
                                kept += part.len() as u64;
                                if t.send(Ok(part)).await.is_err() {
                                    tx = None;
                                }
                            }
                        }
                    }
                    Some(Err(e)) => {
                        if let Some(mut t) = tx.take() {
                            let _ = t.send(Err(e.clone())).await;
                        }
                    }
                    None => {
                        complete.store(true, std::sync::atomic::Ordering::SeqCst);
                        tx = None; // end of stream: the file is complete
                    }
                }
                item.map(|i| (i, (s, tx, kept)))
            }
        },
    );
    let task = tokio::spawn(async move {
        let mut r = task
            .await
            .map_err(|e| Error::other(format!("spill task: {e}")))??;
        let total = counted.load(std::sync::atomic::Ordering::Relaxed);
        r.truncated = total > max;
        r.total = total;
        Ok(r)
    });
    (Box::pin(out), task)
}
