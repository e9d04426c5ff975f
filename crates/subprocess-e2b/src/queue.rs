//! A byte queue between the routing of envd's event stream (`route.rs`) and the consumer
//! of one output stream: bounded in bytes (a push into a full queue is refused and the
//! router holds that chunk and stops reading the stream, which stops reading the HTTP
//! body and, through TCP flow control, makes envd block the process's writes), with a
//! `relax` switch for after the process tree is known dead, so the end event can arrive
//! even when nobody reads (what is left is bounded by envd's queue and the pipes).
//!
//! Poll-based and lock-short: the router pushes from whatever task is driving the stream
//! (often the consumer itself), and a push wakes the consumer only if it is waiting.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::task::Waker;

use bytes::Bytes;
use exec_world::Error;

struct State {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    /// `Some` once the writer finished: `Ok` for EOF, `Err` with the failure otherwise.
    end: Option<Result<(), Error>>,
    reader_gone: bool,
    relaxed: bool,
    /// The consumer, while it waits for a chunk or the end.
    reader: Option<Waker>,
}

/// One item for the consumer: a chunk, the error that ended the stream, or its end
/// (`None`).
pub(crate) type Item = Option<Result<Bytes, Error>>;

/// The shared queue.
pub(crate) struct Queue {
    state: Mutex<State>,
    limit: usize,
}

impl Queue {
    /// A queue holding at most about `limit` bytes (one chunk may overshoot).
    pub(crate) fn new(limit: usize) -> Queue {
        Queue {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                bytes: 0,
                end: None,
                reader_gone: false,
                relaxed: false,
                reader: None,
            }),
            limit: limit.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `chunk` and wakes a waiting consumer, unless the queue is full (and not
    /// relaxed): then the chunk comes back. Discards it when the reader is gone.
    pub(crate) fn try_push(&self, chunk: Bytes) -> Result<(), Bytes> {
        if chunk.is_empty() {
            return Ok(());
        }
        let mut s = self.lock();
        if s.reader_gone {
            return Ok(());
        }
        if s.bytes >= self.limit && !s.relaxed {
            return Err(chunk);
        }
        s.bytes += chunk.len();
        s.chunks.push_back(chunk);
        let reader = s.reader.take();
        drop(s);
        if let Some(w) = reader {
            w.wake();
        }
        Ok(())
    }

    /// Ends the stream (EOF, or an error item after the queued bytes).
    pub(crate) fn close(&self, end: Result<(), Error>) {
        let mut s = self.lock();
        if s.end.is_none() {
            s.end = Some(end);
        }
        let reader = s.reader.take();
        drop(s);
        if let Some(w) = reader {
            w.wake();
        }
    }

    /// Stops refusing pushes from now on. The caller wakes the router (it may hold a
    /// refused chunk).
    pub(crate) fn relax(&self) {
        self.lock().relaxed = true;
    }

    /// Bytes queued now (for tests and debugging).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.lock().bytes
    }

    /// The next item if there is one (`None`: empty and still open), and whether this
    /// pop made room in a full queue (the router may be holding a refused chunk).
    pub(crate) fn try_pop(&self) -> Option<(Item, bool)> {
        let mut s = self.lock();
        if let Some(c) = s.chunks.pop_front() {
            let was_full = s.bytes >= self.limit && !s.relaxed;
            s.bytes -= c.len();
            return Some((Some(Ok(c)), was_full));
        }
        match s.end.take() {
            Some(Ok(())) => {
                s.end = Some(Ok(()));
                Some((None, false))
            }
            Some(Err(e)) => {
                // One error item, then the end.
                s.end = Some(Ok(()));
                Some((Some(Err(e)), false))
            }
            None => None,
        }
    }

    /// Registers the consumer's waker for the next push or the end; true when an item
    /// is already there (then the caller pops instead of waiting).
    pub(crate) fn register(&self, waker: &Waker) -> bool {
        let mut s = self.lock();
        if !s.chunks.is_empty() || s.end.is_some() {
            return true;
        }
        match &mut s.reader {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        false
    }

    /// The consumer is gone: what is queued is dropped, later pushes are discarded.
    pub(crate) fn reader_gone(&self) {
        let mut s = self.lock();
        s.reader_gone = true;
        s.chunks.clear();
        s.bytes = 0;
        s.reader = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn popped(q: &Queue) -> Option<Item> {
        q.try_pop().map(|(item, _)| item)
    }

    #[test]
    fn bounded_then_relaxed_then_closed_then_dropped() {
        let q = Queue::new(4);
        assert!(q.try_push(Bytes::from_static(b"abcd")).is_ok());
        // Full: the next push is refused and nothing more is queued.
        assert_eq!(
            q.try_push(Bytes::from_static(b"e")),
            Err(Bytes::from_static(b"e"))
        );
        assert_eq!(q.queued(), 4);
        // Popping from a full queue reports the room it made.
        let (item, freed) = q.try_pop().expect("an item");
        assert_eq!(item.expect("chunk").expect("ok"), &b"abcd"[..]);
        assert!(freed);
        assert!(q.try_push(Bytes::from_static(b"ef")).is_ok());
        assert!(q.try_push(Bytes::from_static(b"gh")).is_ok());
        assert!(q.try_push(Bytes::from_static(b"i")).is_err());
        q.relax();
        assert!(q.try_push(Bytes::from_static(b"i")).is_ok());
        q.close(Err(Error::other("cut")));
        let mut all = Vec::new();
        while let Some(Some(Ok(c))) = popped(&q) {
            all.extend_from_slice(&c);
            if all.len() == 5 {
                break;
            }
        }
        assert_eq!(all, b"efghi");
        assert!(matches!(popped(&q), Some(Some(Err(_)))), "the error item");
        assert!(matches!(popped(&q), Some(None)), "then the end, for good");
        assert!(matches!(popped(&q), Some(None)));

        let q2 = Queue::new(1);
        assert!(q2.try_pop().is_none(), "empty and open");
        q2.reader_gone();
        assert!(q2.try_push(Bytes::from_static(b"xyz")).is_ok());
        assert!(
            q2.try_push(Bytes::from_static(b"xyz")).is_ok(),
            "discarded, never refused"
        );
        assert_eq!(q2.queued(), 0);
    }

    #[test]
    fn a_push_wakes_the_waiting_reader_once() {
        struct Count(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let count = std::sync::Arc::new(Count(Default::default()));
        let waker = Waker::from(count.clone());
        let q = Queue::new(16);
        assert!(!q.register(&waker), "nothing queued yet");
        assert!(q.try_push(Bytes::from_static(b"a")).is_ok());
        assert!(q.try_push(Bytes::from_static(b"b")).is_ok());
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(q.register(&waker), "an item is there");
        assert!(matches!(popped(&q), Some(Some(Ok(_)))));
        assert!(matches!(popped(&q), Some(Some(Ok(_)))));
        assert!(!q.register(&waker));
        q.close(Ok(()));
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
