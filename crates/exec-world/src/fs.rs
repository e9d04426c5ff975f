//! The [`Fs`] seam: files of the execution world, and the types its methods use.

use std::pin::Pin;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

use crate::error::Error;
use crate::path::{Target, WorldPath};
use crate::watch::{WatchOptions, WatchStream};

/// A stream of file bytes, in order; an `Err` item ends it.
///
/// Build one from memory with [`bytes_stream`]; consume it with `futures::StreamExt`.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send + 'static>>;

/// A [`ByteStream`] yielding `data` as one chunk (nothing for empty data).
///
/// ```
/// # use exec_world::bytes_stream;
/// let s = bytes_stream(bytes::Bytes::from_static(b"hello"));
/// # drop(s);
/// ```
pub fn bytes_stream(data: impl Into<Bytes>) -> ByteStream {
    let data = data.into();
    let items: Vec<Result<Bytes, Error>> = if data.is_empty() {
        Vec::new()
    } else {
        vec![Ok(data)]
    };
    Box::pin(futures::stream::iter(items))
}

/// What a path is (as seen by `lstat`, or by `stat` after following links).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (only from `lstat` and `read_dir`).
    Symlink,
    /// Anything else: fifo, socket, device.
    Other,
}

/// Identifies one content state of a file: changes on every write.
///
/// Compare versions for equality only. `size` and `mtime` are informative; `token` is
/// opaque and backend-specific (local: device, inode, size, mtime and ctime; a remote
/// backend may use a content hash) and is what makes two versions differ even when a
/// rewrite keeps size and mtime.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// Size in bytes of that content.
    pub size: u64,
    /// Modification time, where the backend knows it.
    pub mtime: Option<SystemTime>,
    /// Opaque token; equal tokens mean the same write.
    pub token: String,
}

/// What `stat` / `lstat` tell about a path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metadata {
    /// File, directory, symlink or other.
    pub kind: FileKind,
    /// Size in bytes (for a symlink from `lstat`: the length of its target).
    pub size: u64,
    /// Permission bits (`0o7777` mask), when [`FsCapabilities::posix_modes`].
    pub mode: Option<u32>,
    /// Modification time, when the backend knows it.
    pub mtime: Option<SystemTime>,
    /// For a symlink seen by `lstat` (or listed by `read_dir`): where it points. The link
    /// text as stored where the backend can read it (local), else the absolute path it
    /// resolves to (E2B's envd reports only that).
    pub symlink_target: Option<String>,
    /// The content version (see [`Version`]).
    pub version: Version,
    /// The owner's user name (its uid in decimal when the world has no name for it),
    /// when the backend knows it.
    pub owner: Option<String>,
    /// The owning group's name (its gid in decimal when unnamed), when the backend
    /// knows it.
    pub group: Option<String>,
}

impl Metadata {
    /// Metadata from its parts (for backends; other fields may be added later).
    pub fn new(
        kind: FileKind,
        size: u64,
        mode: Option<u32>,
        mtime: Option<SystemTime>,
        symlink_target: Option<String>,
        version: Version,
    ) -> Metadata {
        Metadata {
            kind,
            size,
            mode,
            mtime,
            symlink_target,
            version,
            owner: None,
            group: None,
        }
    }

    /// The same metadata with its owner and group names.
    ///
    /// ```
    /// # use exec_world::{FileKind, Metadata, Version};
    /// let v = Version { size: 0, mtime: None, token: "t".into() };
    /// let m = Metadata::new(FileKind::File, 0, Some(0o644), None, None, v)
    ///     .with_owner("user", "user");
    /// assert_eq!(m.owner.as_deref(), Some("user"));
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>, group: impl Into<String>) -> Metadata {
        self.owner = Some(owner.into());
        self.group = Some(group.into());
        self
    }

    /// True for a regular file.
    pub fn is_file(&self) -> bool {
        self.kind == FileKind::File
    }

    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Dir
    }

    /// True for a symlink (only ever from `lstat` / `read_dir`).
    pub fn is_symlink(&self) -> bool {
        self.kind == FileKind::Symlink
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name within the directory.
    pub name: String,
    /// Absolute path of the entry.
    pub path: WorldPath,
    /// Its metadata, *not* following a symlink (as `lstat`).
    pub metadata: Metadata,
}

/// Options of [`Fs::write`]. Build with `WriteOptions::default()` and the setters.
///
/// ```
/// # use exec_world::WriteOptions;
/// let opts = WriteOptions::default().mode(0o755).create_parents(true);
/// # drop(opts);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteOptions {
    /// Permission bits of the written file. `None`: a replaced file keeps its mode, a new
    /// one gets `0o644`.
    pub mode: Option<u32>,
    /// Create missing parent directories (mode `0o755`) instead of failing with NotFound.
    pub create_parents: bool,
}

impl WriteOptions {
    /// Sets [`WriteOptions::mode`].
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Sets [`WriteOptions::create_parents`].
    pub fn create_parents(mut self, yes: bool) -> Self {
        self.create_parents = yes;
        self
    }
}

/// The outcome of [`Fs::create_if_absent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// This call created the file with the given content.
    Created,
    /// Something already existed at the path; it was left untouched.
    AlreadyExisted,
}

/// What a file-system backend supports. The conformance suite skips what a flag denies,
/// and the crate README shows every backend's flags. New flags default to `false`.
///
/// Build with struct update syntax so flags added later default to `false`:
/// `FsCapabilities { /* flags you claim */ ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsCapabilities {
    /// Symlinks exist: `lstat` reports them, `stat` follows them.
    pub symlinks: bool,
    /// `Metadata::mode` is reported and `WriteOptions::mode` is applied.
    pub posix_modes: bool,
    /// `write` is atomic: readers see the old or the new content, a failed write leaves
    /// the old file.
    pub atomic_write: bool,
    /// `create_if_absent` is an atomic no-replace (exactly one of racing callers wins).
    pub exclusive_create: bool,
    /// Files of hundreds of MiB stream in constant memory both ways.
    pub large_files: bool,
    /// `Metadata::mtime` is reported.
    pub mtime: bool,
    /// [`Fs::watch`] is implemented (else it returns `Unsupported`).
    pub watch: bool,
}

/// The files of an execution world.
///
/// **Paths**: every method takes a [`WorldPath`]; a relative one is resolved against
/// [`Fs::cwd`] by POSIX rules ([`WorldPath::resolve`]). The cwd belongs to the `Fs`
/// value: [`Fs::with_cwd`] gives a handle on the same world with another cwd.
///
/// **Errors** are [`Error`] kinds carrying the (resolved) path.
///
/// Implementations are cheap handles (`Send + Sync`), usable from many tasks at once.
/// All methods must be cancel-safe in the sense that dropping the future leaves the world
/// consistent (an interrupted `write` leaves the old file).
#[async_trait]
pub trait Fs: Send + Sync {
    /// The directory relative paths are resolved against (absolute).
    fn cwd(&self) -> &WorldPath;

    /// A handle on the same world whose cwd is `cwd` (itself resolved against this cwd).
    /// Does not check that the directory exists.
    fn with_cwd(&self, cwd: &WorldPath) -> Box<dyn Fs>;

    /// What this backend supports.
    fn capabilities(&self) -> FsCapabilities;

    /// Metadata of `p`, following symlinks (a dangling link is NotFound).
    async fn stat(&self, p: &WorldPath) -> Result<Metadata, Error>;

    /// Metadata of `p` itself; a symlink is reported as [`FileKind::Symlink`] with its
    /// `symlink_target`.
    async fn lstat(&self, p: &WorldPath) -> Result<Metadata, Error>;

    /// The entries of directory `p`, one level, without `.` and `..`, in no set order.
    /// NotFound, or NotADirectory when `p` is not a directory.
    async fn read_dir(&self, p: &WorldPath) -> Result<Vec<DirEntry>, Error>;

    /// The whole content of file `p`, if it has at most `max_bytes` bytes; otherwise
    /// [`ErrorKind::TooLarge`](crate::ErrorKind::TooLarge) with `limit = max_bytes`, without transferring the whole file.
    /// IsADirectory for a directory.
    async fn read(&self, p: &WorldPath, max_bytes: u64) -> Result<Bytes, Error>;

    /// The content of file `p` as a stream, in chunks, in constant memory. Errors opening
    /// the file (NotFound, IsADirectory…) are returned here, later ones as stream items.
    async fn read_stream(&self, p: &WorldPath) -> Result<ByteStream, Error>;

    /// Replaces (or creates) file `p` with the bytes of `data`, atomically: readers see
    /// the old or the new content, never a mix; when `data` yields an error, the write is
    /// abandoned and the old file (or no file) remains. Returns the new [`Version`].
    /// Missing parents: NotFound unless [`WriteOptions::create_parents`].
    /// `p` naming a directory: IsADirectory. A symlink at `p` is replaced, not followed;
    /// a hard link at `p` is broken (the new content is a new file).
    async fn write(
        &self,
        p: &WorldPath,
        data: ByteStream,
        opts: WriteOptions,
    ) -> Result<Version, Error>;

    /// Creates file `p` with `data` unless anything exists at `p` (atomic no-replace: of
    /// callers racing for the same path exactly one gets [`Created::Created`], and a file
    /// is never seen partially written by the others).
    async fn create_if_absent(&self, p: &WorldPath, data: Bytes) -> Result<Created, Error>;

    /// Creates directory `p`. Not `recursive`: the parent must exist (NotFound) and `p`
    /// must not (AlreadyExists). `recursive`: creates missing parents, and succeeds when
    /// `p` already is a directory.
    async fn mkdir(&self, p: &WorldPath, recursive: bool) -> Result<(), Error>;

    /// Removes file, symlink (not its target) or directory `p`. A non-empty directory
    /// needs `recursive` (else NotEmpty). NotFound when nothing is there.
    async fn remove(&self, p: &WorldPath, recursive: bool) -> Result<(), Error>;

    /// Renames `from` to `to` (POSIX `rename`: replaces a file at `to` atomically; onto a
    /// non-empty directory: NotEmpty or AlreadyExists).
    async fn rename(&self, from: &WorldPath, to: &WorldPath) -> Result<(), Error>;

    /// Watches directory `p` (and its subdirectories when `opts.recursive`): a stream of
    /// [`WatchEvent`](crate::WatchEvent)s with paths relative to `p`, numbered in order,
    /// with an explicit overflow event wherever events were lost. Dropping the stream
    /// stops the watch. NotFound, NotADirectory, or PermissionDenied when the acting user
    /// cannot read `p`. Backends without [`FsCapabilities::watch`]: `Unsupported`.
    async fn watch(&self, p: &WorldPath, opts: WatchOptions) -> Result<WatchStream, Error> {
        let _ = opts;
        Err(Error::unsupported("watching a directory")
            .with_op("watch")
            .with_path(self.resolve(p)))
    }

    /// The canonical [`Target`] of `p`: resolved against the cwd and normalized
    /// lexically (no I/O; symlinks are not followed).
    fn canonical(&self, p: &WorldPath) -> Target {
        Target::new(p, self.cwd())
    }

    /// `p` resolved against the cwd (absolute, normalized).
    fn resolve(&self, p: &WorldPath) -> WorldPath {
        p.resolve(self.cwd())
    }
}
