//! Whole-tree transfer between this machine and a world: [`upload`] a local directory into
//! a world path, [`download`] a world directory to a local path.
//!
//! One implementation over the [`Subprocess`](crate::Subprocess) seam, so every backend
//! (local, E2B, a rooted view through its process root) gets it: the tree moves as one tar
//! stream through **one process of the acting user** in the world (`tar` reading stdin or
//! writing stdout), and the host side is the `tar` crate. Both directions extract into a
//! fresh staging directory next to the destination and rename it into place at the end,
//! so the destination appears whole or not at all (files atomic, and a failure leaves
//! nothing behind).
//!
//! [`upload_via_file`] and [`download_via_file`] keep the same contract but move the
//! archive as one file through an [`Fs`](crate::Fs) of the same world (for E2B, envd's
//! `/files`, several times faster than process stdin/stdout there); the one `tar` process
//! then reads or writes that file.
//!
//! The host never writes outside the destination: an archive entry with `..`, an absolute
//! path, or a path through a symlink (one the archive itself made, since the staging
//! directory starts empty) is refused with [`ErrorKind::InvalidPath`](crate::ErrorKind::InvalidPath)
//! naming the entry; a destination that is a symlink or a non-empty directory is refused.
//! Limits on total bytes and entry count ([`TreeOptions`]) are checked before the bytes
//! move, with the numbers in the [`ErrorKind::TooLarge`](crate::ErrorKind::TooLarge) error. Special files (FIFOs,
//! sockets, devices) are reported in [`TreeSummary::skipped`], never opened or created;
//! sparse files are reported in [`TreeSummary::sparse`] and sent with their holes as zeros.
//! Modes (without setuid/setgid on the host) and symlinks (their text, unfollowed) are kept.
//!
//! ```no_run
//! # async fn demo() -> Result<(), exec_world::Error> {
//! use exec_world::{LocalSubprocess, WorldPath, tree};
//! let world = LocalSubprocess::new()?;
//! let opts = tree::TreeOptions::default();
//! let sum = tree::upload(&world, "src".as_ref(), &WorldPath::new("/tmp/src-copy")?, &opts).await?;
//! println!("{} files, {} bytes", sum.files, sum.bytes);
//! # Ok(()) }
//! ```

mod bridge;
mod pack;
mod remote;
mod unpack;

use std::sync::Arc;

pub use remote::{download, download_via_file, sweep, upload, upload_via_file};
pub use unpack::extract;

/// The entries and file content bytes of the local tree at `root` (never following a
/// symlink): what an [`upload`] of it will move, for a progress bar's totals.
///
/// ```no_run
/// # fn demo() -> Result<(), exec_world::Error> {
/// let (entries, bytes) = exec_world::tree::local_totals("src".as_ref())?;
/// # let _ = (entries, bytes); Ok(()) }
/// ```
pub fn local_totals(root: &std::path::Path) -> Result<(u64, u64), crate::Error> {
    let unlimited = TreeOptions::default()
        .max_bytes(u64::MAX)
        .max_entries(u64::MAX);
    pack::survey(root, &mut Meter::new(&unlimited))
}

/// Progress of a transfer so far: content bytes and entries done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeProgress {
    /// File content bytes moved.
    pub bytes: u64,
    /// Entries (files, directories, links) moved.
    pub files: u64,
}

/// A progress callback: called from a worker thread, often; keep it cheap.
pub type ProgressFn = Arc<dyn Fn(TreeProgress) + Send + Sync>;

/// Limits and progress of a tree transfer.
///
/// ```
/// # use exec_world::tree::TreeOptions;
/// let opts = TreeOptions::default().max_bytes(1 << 30).max_entries(100_000);
/// assert_eq!(opts.max_entries, 100_000);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct TreeOptions {
    /// Most file content bytes one transfer may move (default 64 GiB).
    pub max_bytes: u64,
    /// Most entries (files, directories, links, skipped ones) one transfer may hold
    /// (default 1,000,000).
    pub max_entries: u64,
    /// Called as bytes and entries move.
    pub progress: Option<ProgressFn>,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            max_bytes: 64 << 30,
            max_entries: 1_000_000,
            progress: None,
        }
    }
}

impl std::fmt::Debug for TreeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeOptions")
            .field("max_bytes", &self.max_bytes)
            .field("max_entries", &self.max_entries)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl TreeOptions {
    /// Sets [`TreeOptions::max_bytes`].
    pub fn max_bytes(mut self, n: u64) -> Self {
        self.max_bytes = n;
        self
    }

    /// Sets [`TreeOptions::max_entries`].
    pub fn max_entries(mut self, n: u64) -> Self {
        self.max_entries = n;
        self
    }

    /// Sets [`TreeOptions::progress`].
    pub fn progress(mut self, f: impl Fn(TreeProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}

/// Why an entry was not transferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// A FIFO, socket or device: reported, never opened or created.
    Special,
    /// A hard link or entry type this transfer does not make.
    Unsupported,
}

/// What a transfer moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TreeSummary {
    /// Regular files.
    pub files: u64,
    /// Directories (the top one included).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// File content bytes.
    pub bytes: u64,
    /// Entries not transferred, with why (paths relative to the tree).
    pub skipped: Vec<(String, SkipReason)>,
    /// Sparse files (sent whole, holes as zeros), relative paths.
    pub sparse: Vec<String>,
}

/// Counts progress and enforces the limits, shared by both directions.
pub(crate) struct Meter {
    max_bytes: u64,
    max_entries: u64,
    progress: Option<ProgressFn>,
    pub(crate) done: TreeProgress,
    entries: u64,
    bytes_planned: u64,
}

impl Meter {
    pub(crate) fn new(opts: &TreeOptions) -> Meter {
        Meter {
            max_bytes: opts.max_bytes,
            max_entries: opts.max_entries,
            progress: opts.progress.clone(),
            done: TreeProgress::default(),
            entries: 0,
            bytes_planned: 0,
        }
    }

    /// Admits one more entry of `size` content bytes, or says which limit it breaks.
    pub(crate) fn admit(&mut self, path: &str, size: u64) -> Result<(), crate::Error> {
        self.entries += 1;
        if self.entries > self.max_entries {
            return Err(
                crate::Error::too_large(path, self.max_entries).with_detail(format!(
                    "the tree has more than {} entries (limit {} entries)",
                    self.max_entries, self.max_entries
                )),
            );
        }
        self.bytes_planned = self.bytes_planned.saturating_add(size);
        if self.bytes_planned > self.max_bytes {
            return Err(
                crate::Error::too_large(path, self.max_bytes).with_detail(format!(
                    "this entry of {size} bytes brings the tree to {} bytes (limit {} bytes)",
                    self.bytes_planned, self.max_bytes
                )),
            );
        }
        Ok(())
    }

    /// Records `n` content bytes moved.
    pub(crate) fn bytes(&mut self, n: u64) {
        self.done.bytes += n;
        self.tell();
    }

    /// Records one entry done.
    pub(crate) fn entry(&mut self) {
        self.done.files += 1;
        self.tell();
    }

    fn tell(&self) {
        if let Some(p) = &self.progress {
            p(self.done);
        }
    }
}
