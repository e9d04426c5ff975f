//! Directory watching for the [`Fs`](crate::Fs) seam: [`Fs::watch`](crate::Fs::watch)'s
//! options, its events and the stream that carries them.
//!
//! A watch is a stream of [`WatchEvent`]s, each with a sequence number that grows by one
//! per event. When a backend lost events (a kernel queue overflow, a server-side limit, a
//! reconnect) it says so with a [`WatchEventKind::Overflow`] event instead of skipping
//! silently: the caller should rescan the directory. Dropping the [`WatchStream`] stops
//! the watch on both sides.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;

use crate::error::Error;

/// What happened to an entry below a watched directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchEventKind {
    /// The entry was created (or moved in: the new name of a rename).
    Created,
    /// The file's content was written.
    Written,
    /// The entry was removed.
    Removed,
    /// The entry was renamed away (its new name, when watched, comes as `Created`).
    Renamed,
    /// Mode, owner or times changed.
    MetadataChanged,
    /// Events were lost: rescan. `path` is empty.
    Overflow,
}

impl WatchEventKind {
    /// The kind as a lower-case word (`created`, `written`, `removed`, `renamed`,
    /// `metadata`, `overflow`), as e2bx prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventKind::Created => "created",
            WatchEventKind::Written => "written",
            WatchEventKind::Removed => "removed",
            WatchEventKind::Renamed => "renamed",
            WatchEventKind::MetadataChanged => "metadata",
            WatchEventKind::Overflow => "overflow",
        }
    }
}

impl std::fmt::Display for WatchEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change below a watched directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchEvent {
    /// Position in the stream: 0 for the first event, then one more per event (an
    /// overflow event takes a number too).
    pub seq: u64,
    /// What happened.
    pub kind: WatchEventKind,
    /// The entry's path relative to the watched directory (`a/b.txt`; `.` for the
    /// directory itself; empty for an overflow).
    pub path: String,
}

impl WatchEvent {
    /// An event (for backends).
    ///
    /// ```
    /// # use exec_world::{WatchEvent, WatchEventKind};
    /// let e = WatchEvent::new(0, WatchEventKind::Created, "a.txt");
    /// assert_eq!(e.path, "a.txt");
    /// ```
    pub fn new(seq: u64, kind: WatchEventKind, path: impl Into<String>) -> WatchEvent {
        WatchEvent {
            seq,
            kind,
            path: path.into(),
        }
    }
}

/// Options of [`Fs::watch`](crate::Fs::watch).
///
/// ```
/// # use exec_world::WatchOptions;
/// let opts = WatchOptions::default().recursive(true);
/// assert!(opts.recursive);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchOptions {
    /// Watch subdirectories too (also those created while watching).
    pub recursive: bool,
}

impl WatchOptions {
    /// Sets [`WatchOptions::recursive`].
    pub fn recursive(mut self, yes: bool) -> Self {
        self.recursive = yes;
        self
    }
}

/// The events of one watch, in order; an `Err` item ends it. Dropping it stops the watch.
pub struct WatchStream {
    inner: Pin<Box<dyn Stream<Item = Result<WatchEvent, Error>> + Send + 'static>>,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

impl WatchStream {
    /// Wraps a backend's stream of events. Its drop must stop the watch.
    pub fn new(
        inner: impl Stream<Item = Result<WatchEvent, Error>> + Send + 'static,
    ) -> WatchStream {
        WatchStream {
            inner: Box::pin(inner),
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Numbers events as they are made (one counter per stream).
#[derive(Debug, Default)]
pub struct Sequencer {
    next: u64,
}

impl Sequencer {
    /// The next event of `kind` on `path`.
    ///
    /// ```
    /// # use exec_world::{watch::Sequencer, WatchEventKind};
    /// let mut s = Sequencer::default();
    /// assert_eq!(s.event(WatchEventKind::Created, "a").seq, 0);
    /// assert_eq!(s.event(WatchEventKind::Removed, "a").seq, 1);
    /// ```
    pub fn event(&mut self, kind: WatchEventKind, path: impl Into<String>) -> WatchEvent {
        let e = WatchEvent::new(self.next, kind, path);
        self.next += 1;
        e
    }
}
