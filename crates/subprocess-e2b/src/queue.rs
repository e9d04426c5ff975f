//! A byte queue between the task reading envd's event stream and the consumer of one
//! output stream: bounded in bytes (the reader waits when it is full, which stops reading
//! the HTTP body and, through TCP flow control, makes envd block the process's writes),
//! with a `relax` switch for after the process tree is known dead, so the end event can
//! arrive even when nobody reads (what is left is bounded by envd's queue and the pipes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use exec_world::{Error, OutputStream};
use tokio::sync::Notify;

struct State {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    /// `Some` once the writer finished: `Ok` for EOF, `Err` with the failure otherwise.
    end: Option<Result<(), Error>>,
    reader_gone: bool,
    relaxed: bool,
}

/// The shared queue.
pub(crate) struct Queue {
    state: Mutex<State>,
    data: Notify,
    space: Notify,
    limit: usize,
}

impl Queue {
    /// A queue holding at most about `limit` bytes (one chunk may overshoot).
    pub(crate) fn new(limit: usize) -> Arc<Queue> {
        Arc::new(Queue {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                bytes: 0,
                end: None,
                reader_gone: false,
                relaxed: false,
            }),
            data: Notify::new(),
            space: Notify::new(),
            limit: limit.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `chunk`, waiting while the queue is full (unless relaxed). Discards it when
    /// the reader is gone.
    pub(crate) async fn push(&self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        loop {
            let space = self.space.notified();
            {
                let mut s = self.lock();
                if s.reader_gone {
                    return;
                }
                if s.bytes < self.limit || s.relaxed {
                    s.bytes += chunk.len();
                    s.chunks.push_back(chunk);
                    drop(s);
                    self.data.notify_one();
                    return;
                }
            }
            space.await;
        }
    }

    /// Ends the stream (EOF, or an error item after the queued bytes).
    pub(crate) fn close(&self, end: Result<(), Error>) {
        let mut s = self.lock();
        if s.end.is_none() {
            s.end = Some(end);
        }
        drop(s);
        self.data.notify_one();
    }

    /// Stops waiting for space from now on.
    pub(crate) fn relax(&self) {
        self.lock().relaxed = true;
        self.space.notify_one();
    }

    /// Bytes queued now (for tests and debugging).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.lock().bytes
    }

    async fn pop(&self) -> Option<Result<Bytes, Error>> {
        loop {
            let data = self.data.notified();
            {
                let mut s = self.lock();
                if let Some(c) = s.chunks.pop_front() {
                    s.bytes -= c.len();
                    drop(s);
                    self.space.notify_one();
                    return Some(Ok(c));
                }
                match s.end.take() {
                    Some(Ok(())) => {
                        s.end = Some(Ok(()));
                        return None;
                    }
                    Some(Err(e)) => {
                        // One error item, then the end.
                        s.end = Some(Ok(()));
                        return Some(Err(e));
                    }
                    None => {}
                }
            }
            data.await;
        }
    }

    /// The consumer's side as an [`OutputStream`]; dropping it discards further output.
    pub(crate) fn reader(self: &Arc<Queue>) -> OutputStream {
        let r = Reader(self.clone());
        Box::pin(futures::stream::unfold(r, |r| async move {
            let item = r.0.pop().await?;
            Some((item, r))
        }))
    }
}

/// Marks the reader gone on drop, so the writer discards instead of waiting.
struct Reader(Arc<Queue>);

impl Drop for Reader {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.reader_gone = true;
        s.chunks.clear();
        s.bytes = 0;
        drop(s);
        self.0.space.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::time::Duration;

    #[tokio::test]
    async fn bounded_then_relaxed_then_dropped() {
        let q = Queue::new(4);
        q.push(Bytes::from_static(b"abcd")).await;
        // Full: the next push waits.
        let blocked =
            tokio::time::timeout(Duration::from_millis(50), q.push(Bytes::from_static(b"e"))).await;
        assert!(blocked.is_err());
        assert_eq!(q.queued(), 4);
        q.relax();
        q.push(Bytes::from_static(b"f")).await;
        q.close(Ok(()));
        let mut r = q.reader();
        let mut all = Vec::new();
        while let Some(c) = r.next().await {
            all.extend_from_slice(&c.expect("chunk"));
        }
        assert_eq!(all, b"abcdf");
        drop(r);
        let q2 = Queue::new(1);
        drop(q2.reader());
        q2.push(Bytes::from_static(b"xyz")).await;
        q2.push(Bytes::from_static(b"xyz")).await; // discarded, never waits
        assert_eq!(q2.queued(), 0);
    }
}
