//! `LocalFs`: [`Fs`] over this machine's file system (tokio::fs), optionally held
//! beneath a root by the kernel ([`LocalFs::beneath`], see `beneath.rs`).
//!
//! Atomic write = a temporary file in the target's directory (`O_EXCL`), filled from the
//! stream, `fsync`ed, `rename`d over the target, then the directory `fsync`ed. An error
//! or a dropped future removes the temporary file and leaves the old one.
//! `create_if_absent` writes a temporary file completely and hard-links it into place
//! (`link` never replaces: exactly one racing caller wins, and nobody sees a partial
//! file), falling back to `O_EXCL` on file systems without hard links.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, ErrorKind};
use crate::fs::{
    ByteStream, Created, DirEntry, FileKind, Fs, FsCapabilities, Metadata, Version, WriteOptions,
};
use crate::path::WorldPath;

use super::beneath::{Anchor, Pinned};

/// Chunk size of streamed reads.
const CHUNK: usize = 256 * 1024;

/// The local file system, with a cwd for relative paths.
///
/// ```no_run
/// # use exec_world::{Fs, LocalFs, WorldPath};
/// # async fn f() -> Result<(), exec_world::Error> {
/// let fs = LocalFs::at(WorldPath::new("/tmp")?)?;
/// let meta = fs.stat(&WorldPath::new("x.txt")?).await?; // /tmp/x.txt
/// # let _ = meta; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LocalFs {
    cwd: WorldPath,
    /// The kernel-enforced root, when made with [`LocalFs::beneath`].
    anchor: Option<Arc<Anchor>>,
}

impl LocalFs {
    /// The local file system with this process's current directory as cwd.
    pub fn new() -> Result<LocalFs, Error> {
        let cwd =
            std::env::current_dir().map_err(|e| Error::other(format!("current directory: {e}")))?;
        let cwd = cwd.to_str().ok_or_else(|| {
            Error::invalid_path(cwd.display().to_string(), "current directory is not UTF-8")
        })?;
        LocalFs::at(WorldPath::new(cwd)?)
    }

    /// The local file system with `cwd` (made absolute against `/`) as cwd.
    pub fn at(cwd: WorldPath) -> Result<LocalFs, Error> {
        Ok(LocalFs {
            cwd: cwd.resolve(&WorldPath::root()),
            anchor: None,
        })
    }

    /// The local file system held beneath `root` by the kernel, with `root` as cwd: every
    /// path is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from a
    /// descriptor of `root`, so no symbolic link below it is ever followed, not even one
    /// swapped in during a call (the call fails with [`ErrorKind::InvalidPath`] instead),
    /// and paths outside `root` are refused. Meant under [`Rooted`](crate::Rooted), which
    /// resolves the links itself and hands down link-free paths: together they give the
    /// agent links inside its root and the kernel's guarantee that nothing leaves it.
    /// Needs Linux 5.6 (`openat2`); older kernels refuse here.
    ///
    /// ```no_run
    /// # use exec_world::{Fs, LocalFs, WorldPath};
    /// # async fn f() -> Result<(), exec_world::Error> {
    /// let fs = LocalFs::beneath(WorldPath::new("/srv/conversation-1")?)?;
    /// // A link `/srv/conversation-1/out -> /etc` makes this fail, never write to /etc.
    /// let data = exec_world::bytes_stream(bytes::Bytes::from_static(b"x"));
    /// fs.write(&WorldPath::new("out/passwd")?, data, Default::default()).await?;
    /// # Ok(()) }
    /// ```
    pub fn beneath(root: WorldPath) -> Result<LocalFs, Error> {
        let root = root.resolve(&WorldPath::root());
        let anchor = Anchor::open(root.clone())?;
        Ok(LocalFs {
            cwd: root,
            anchor: Some(Arc::new(anchor)),
        })
    }

    fn local(&self, p: &WorldPath) -> (WorldPath, PathBuf) {
        let abs = p.resolve(&self.cwd);
        let path = PathBuf::from(abs.as_str());
        (abs, path)
    }

    /// `p` itself, for calls that follow its last component: pinned when anchored.
    fn pinned(&self, p: &WorldPath, op: &str) -> Result<(WorldPath, Pinned), Error> {
        let abs = p.resolve(&self.cwd);
        let pin = match &self.anchor {
            Some(a) => a.pin(&abs, op)?,
            None => Pinned::plain(&abs),
        };
        Ok((abs, pin))
    }

    /// `p` as an entry of its pinned parent, for calls that create, replace or remove it.
    fn entry(&self, p: &WorldPath, op: &str) -> Result<(WorldPath, Pinned), Error> {
        let abs = p.resolve(&self.cwd);
        let pin = match &self.anchor {
            Some(a) => a.pin_entry(&abs, op)?,
            None => Pinned::plain(&abs),
        };
        Ok((abs, pin))
    }

    /// `p` as an entry of its pinned parent, or the pinned root itself (`lstat /`).
    fn entry_or_root(&self, p: &WorldPath, op: &str) -> Result<(WorldPath, Pinned), Error> {
        match &self.anchor {
            Some(a) if &p.resolve(&self.cwd).normalize() == a.root() => self.pinned(p, op),
            _ => self.entry(p, op),
        }
    }

    /// `mkdir` beneath the anchor: one component at a time, each created in its pinned
    /// parent, so a link swapped in for a created directory stops the walk.
    async fn mkdir_beneath(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let abs = p.resolve(&self.cwd);
        if !recursive {
            let (abs, pin) = self.entry(&abs, "mkdir")?;
            return tokio::fs::create_dir(pin.path())
                .await
                .map_err(|e| Error::from_io(&abs, "mkdir", e));
        }
        let mut todo = Vec::new();
        let mut at = abs.clone();
        // Walk up to the deepest directory that exists (as a directory, no link).
        loop {
            match self.pinned(&at, "mkdir") {
                Ok((_, pin)) => match tokio::fs::metadata(pin.path()).await {
                    Ok(m) if m.is_dir() => break,
                    Ok(_) => return Err(Error::already_exists(&at).with_op("mkdir")),
                    Err(e) => return Err(Error::from_io(&at, "mkdir", e)),
                },
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            match at.parent() {
                Some(parent) if parent != at => {
                    todo.push(at);
                    at = parent;
                }
                _ => return Err(Error::not_found(&abs).with_op("mkdir")),
            }
        }
        while let Some(dir) = todo.pop() {
            let (dir, pin) = self.entry(&dir, "mkdir")?;
            match tokio::fs::create_dir(pin.path()).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // Raced with another creator: fine if it is a directory (no link).
                    let (_, again) = self.pinned(&dir, "mkdir")?;
                    match tokio::fs::metadata(again.path()).await {
                        Ok(m) if m.is_dir() => {}
                        _ => return Err(Error::already_exists(&dir).with_op("mkdir")),
                    }
                }
                Err(e) => return Err(Error::from_io(&dir, "mkdir", e)),
            }
        }
        Ok(())
    }

    /// Opens `p` for reading only if it is a regular file: `O_NONBLOCK`, so a FIFO
    /// planted or swapped in never blocks the open, and the kind is checked on the opened
    /// descriptor (no window between a check and the open).
    async fn open_file(
        &self,
        p: &WorldPath,
    ) -> Result<(WorldPath, tokio::fs::File, std::fs::Metadata), Error> {
        let abs = p.resolve(&self.cwd);
        let file = match &self.anchor {
            Some(a) => {
                let flags = rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::NONBLOCK
                    | rustix::fs::OFlags::NOCTTY;
                let fd = a.open_at(&abs, "open", flags)?;
                tokio::fs::File::from_std(std::fs::File::from(fd))
            }
            None => open_path(&abs, Path::new(abs.as_str())).await?,
        };
        let meta = check_regular(&abs, &file).await?;
        Ok((abs, file, meta))
    }
}

/// Opens `path` for reading without blocking on a FIFO (`O_NONBLOCK`) or taking a
/// terminal (`O_NOCTTY`); a socket is refused as not a regular file.
async fn open_path(abs: &WorldPath, path: &Path) -> Result<tokio::fs::File, Error> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut o = std::fs::OpenOptions::new();
    o.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC);
    let file = tokio::fs::OpenOptions::from(o)
        .open(path)
        .await
        .map_err(|e| match e.raw_os_error() {
            // A socket cannot be opened at all.
            Some(libc::ENXIO) => Error::other(NOT_REGULAR).with_op("open").with_path(abs),
            _ => Error::from_io(abs, "open", e),
        })?;
    Ok(file)
}

/// Checks on the opened descriptor that it is a regular file (a directory is
/// `IsADirectory`, a FIFO, socket or device an error that says so).
async fn check_regular(
    abs: &WorldPath,
    file: &tokio::fs::File,
) -> Result<std::fs::Metadata, Error> {
    let meta = file
        .metadata()
        .await
        .map_err(|e| Error::from_io(abs, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::is_a_directory(abs.clone()));
    }
    if !meta.is_file() {
        return Err(Error::other(NOT_REGULAR).with_op("open").with_path(abs));
    }
    Ok(meta)
}

/// What a read of a FIFO, socket or device says.
pub(crate) const NOT_REGULAR: &str = "not a regular file (a FIFO, socket or device is never read)";

/// Turns std metadata into ours; `target` is the link target for symlinks.
pub(crate) fn to_metadata(m: &std::fs::Metadata, target: Option<String>) -> Metadata {
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    };
    let mtime = m.modified().ok();
    let version = Version {
        size: m.size(),
        mtime,
        token: format!(
            "{:x}:{:x}:{}:{}.{}:{}.{}",
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ),
    };
    Metadata::new(
        kind,
        m.size(),
        Some(m.mode() & 0o7777),
        mtime,
        target,
        version,
    )
    .with_owner(
        super::owners::user_name(m.uid()),
        super::owners::group_name(m.gid()),
    )
}

async fn lstat_path(abs: &WorldPath, path: &Path) -> Result<Metadata, Error> {
    let m = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|e| Error::from_io(abs, "lstat", e))?;
    let target = if m.file_type().is_symlink() {
        let t = tokio::fs::read_link(path)
            .await
            .map_err(|e| Error::from_io(abs, "readlink", e))?;
        Some(t.to_string_lossy().into_owned())
    } else {
        None
    };
    Ok(to_metadata(&m, target))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique temporary name next to `path`.
fn temp_sibling(path: &Path) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = format!(
        ".{name}.exec-world-{}-{n}-{nanos:x}.tmp",
        std::process::id()
    );
    path.with_file_name(tmp)
}

/// Removes a temporary file unless disarmed (covers errors and dropped futures).
struct TempGuard(Option<PathBuf>);

impl TempGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Creates `tmp` exclusively with `mode`, fills it from `data`, fsyncs it.
async fn fill_temp(
    abs: &WorldPath,
    tmp: &Path,
    mut data: ByteStream,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)
        .await
        .map_err(|e| Error::from_io(abs, "create temporary file for", e))?;
    while let Some(chunk) = data.next().await {
        let chunk = chunk?;
        file.write_all(&chunk)
            .await
            .map_err(|e| Error::from_io(abs, "write", e))?;
    }
    file.flush()
        .await
        .map_err(|e| Error::from_io(abs, "write", e))?;
    // A replaced file keeps its owner where we may set it (as root); else it is ours.
    if let Some((uid, gid)) = owner {
        let std_file = file.into_std().await;
        let _ = std::os::unix::fs::fchown(&std_file, Some(uid), Some(gid));
        file = tokio::fs::File::from_std(std_file);
    }
    // open(2) applies the umask; set the exact bits asked for (after chown, which may
    // clear set-id bits).
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|e| Error::from_io(abs, "chmod", e))?;
    file.sync_all()
        .await
        .map_err(|e| Error::from_io(abs, "fsync", e))?;
    Ok(())
}

async fn sync_dir(dir: &Path) {
    if let Ok(d) = tokio::fs::File::open(dir).await {
        let _ = d.sync_all().await;
    }
}

#[async_trait]
impl Fs for LocalFs {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn with_cwd(&self, cwd: &WorldPath) -> Box<dyn Fs> {
        Box::new(LocalFs {
            cwd: cwd.resolve(&self.cwd),
            anchor: self.anchor.clone(),
        })
    }

    fn capabilities(&self) -> FsCapabilities {
        FsCapabilities {
            symlinks: true,
            posix_modes: true,
            atomic_write: true,
            exclusive_create: true,
            large_files: true,
            mtime: true,
            watch: true,
        }
    }

    async fn watch(
        &self,
        p: &WorldPath,
        opts: crate::watch::WatchOptions,
    ) -> Result<crate::watch::WatchStream, Error> {
        let (abs, _) = self.local(p);
        super::watch::watch(&abs, opts)
    }

    async fn stat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let (abs, pin) = self.pinned(p, "stat")?;
        let m = tokio::fs::metadata(pin.path())
            .await
            .map_err(|e| Error::from_io(&abs, "stat", e))?;
        Ok(to_metadata(&m, None))
    }

    async fn lstat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let (abs, pin) = self.entry_or_root(p, "lstat")?;
        lstat_path(&abs, pin.path()).await
    }

    async fn read_dir(&self, p: &WorldPath) -> Result<Vec<DirEntry>, Error> {
        let (abs, pin) = self.pinned(p, "read_dir")?;
        let mut rd = tokio::fs::read_dir(pin.path())
            .await
            .map_err(|e| Error::from_io(&abs, "read_dir", e))?;
        let mut out = Vec::new();
        while let Some(entry) = rd
            .next_entry()
            .await
            .map_err(|e| Error::from_io(&abs, "read_dir", e))?
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = abs.join(&name)?;
            let meta = match lstat_path(&child, &entry.path()).await {
                Ok(m) => m,
                // Removed between listing and lstat: not part of the listing.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            out.push(DirEntry {
                name,
                path: child,
                metadata: meta,
            });
        }
        Ok(out)
    }

    async fn read(&self, p: &WorldPath, max_bytes: u64) -> Result<Bytes, Error> {
        let (abs, file, meta) = self.open_file(p).await?;
        if meta.len() > max_bytes {
            return Err(Error::too_large(abs, max_bytes));
        }
        // The file may grow, or report size 0 (/proc): never read past max + 1.
        let mut buf = Vec::with_capacity(meta.len() as usize);
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut buf)
            .await
            .map_err(|e| Error::from_io(&abs, "read", e))?;
        if buf.len() as u64 > max_bytes {
            return Err(Error::too_large(abs, max_bytes));
        }
        Ok(Bytes::from(buf))
    }

    async fn read_stream(&self, p: &WorldPath) -> Result<ByteStream, Error> {
        let (abs, file, _meta) = self.open_file(p).await?;
        let stream = tokio_util::io::ReaderStream::with_capacity(file, CHUNK)
            .map(move |r| r.map_err(|e| Error::from_io(&abs, "read", e)));
        Ok(Box::pin(stream))
    }

    async fn write(
        &self,
        p: &WorldPath,
        data: ByteStream,
        opts: WriteOptions,
    ) -> Result<Version, Error> {
        let abs = p.resolve(&self.cwd);
        let parent = abs
            .parent()
            .ok_or_else(|| Error::is_a_directory(abs.clone()))?;
        if opts.create_parents {
            self.mkdir(&parent, true).await?;
        }
        let (abs, pin) = self.entry(&abs, "write")?;
        let path = pin.path();
        let existing = match tokio::fs::symlink_metadata(path).await {
            Ok(m) if m.is_dir() => return Err(Error::is_a_directory(abs)),
            Ok(m) if m.is_file() => Some((m.mode() & 0o7777, m.uid(), m.gid())),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::from_io(&abs, "lstat", e)),
        };
        let mode = opts.mode.or(existing.map(|e| e.0)).unwrap_or(0o644);
        let tmp = temp_sibling(path);
        let mut guard = TempGuard(Some(tmp.clone()));
        let owner = existing.map(|e| (e.1, e.2));
        fill_temp(&abs, &tmp, data, mode, owner)
            .await
            .map_err(|e| match e {
                // A missing parent shows up as ENOENT on the temp file: name the target.
                e if e.kind() == ErrorKind::NotFound => Error::not_found(&abs),
                other => other,
            })?;
        tokio::fs::rename(&tmp, path)
            .await
            .map_err(|e| Error::from_io(&abs, "rename into place", e))?;
        guard.disarm();
        sync_dir(&pin.dir_path()).await;
        let m = tokio::fs::symlink_metadata(path)
            .await
            .map_err(|e| Error::from_io(&abs, "stat", e))?;
        Ok(to_metadata(&m, None).version)
    }

    async fn create_if_absent(&self, p: &WorldPath, data: Bytes) -> Result<Created, Error> {
        let (abs, pin) = self.entry(p, "create")?;
        let path = pin.path();
        match tokio::fs::symlink_metadata(path).await {
            Ok(_) => return Ok(Created::AlreadyExisted),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::from_io(&abs, "lstat", e)),
        }
        let tmp = temp_sibling(path);
        let _guard = TempGuard(Some(tmp.clone()));
        fill_temp(
            &abs,
            &tmp,
            crate::fs::bytes_stream(data.clone()),
            0o644,
            None,
        )
        .await
        .map_err(|e| match e {
            e if e.kind() == ErrorKind::NotFound => Error::not_found(&abs),
            other => other,
        })?;
        match tokio::fs::hard_link(&tmp, path).await {
            Ok(()) => {
                sync_dir(&pin.dir_path()).await;
                Ok(Created::Created)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Created::AlreadyExisted),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EOPNOTSUPP)) => {
                // No hard links here: O_EXCL still decides the winner.
                let mut f = match tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(path)
                    .await
                {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return Ok(Created::AlreadyExisted);
                    }
                    Err(e) => return Err(Error::from_io(&abs, "create", e)),
                };
                f.write_all(&data)
                    .await
                    .map_err(|e| Error::from_io(&abs, "write", e))?;
                f.sync_all()
                    .await
                    .map_err(|e| Error::from_io(&abs, "fsync", e))?;
                Ok(Created::Created)
            }
            Err(e) => Err(Error::from_io(&abs, "link into place", e)),
        }
    }

    async fn mkdir(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        if self.anchor.is_some() {
            return self.mkdir_beneath(p, recursive).await;
        }
        let (abs, path) = self.local(p);
        if recursive {
            match tokio::fs::create_dir_all(&path).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    // create_dir_all fails with EEXIST when a non-directory is in the way.
                    match tokio::fs::metadata(&path).await {
                        Ok(m) if !m.is_dir() => Err(Error::already_exists(abs)),
                        _ => Err(Error::from_io(&abs, "mkdir", e)),
                    }
                }
            }
        } else {
            tokio::fs::create_dir(&path)
                .await
                .map_err(|e| Error::from_io(&abs, "mkdir", e))
        }
    }

    async fn remove(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let (abs, pin) = self.entry(p, "remove")?;
        let path = pin.path();
        let m = tokio::fs::symlink_metadata(path)
            .await
            .map_err(|e| Error::from_io(&abs, "lstat", e))?;
        let r = if m.is_dir() {
            if recursive {
                tokio::fs::remove_dir_all(path).await
            } else {
                tokio::fs::remove_dir(path).await
            }
        } else {
            tokio::fs::remove_file(path).await
        };
        r.map_err(|e| match e.raw_os_error() {
            Some(libc::EEXIST) => Error::not_empty(abs.clone()),
            _ => Error::from_io(&abs, "remove", e),
        })
    }

    async fn rename(&self, from: &WorldPath, to: &WorldPath) -> Result<(), Error> {
        let (from_abs, from_pin) = self.entry(from, "rename")?;
        let (to_abs, to_pin) = self.entry(to, "rename")?;
        tokio::fs::rename(from_pin.path(), to_pin.path())
            .await
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EEXIST) | Some(libc::ENOTEMPTY) => Error::not_empty(to_abs),
                Some(libc::EISDIR) => Error::is_a_directory(to_abs),
                Some(libc::ENOTDIR) => Error::not_a_directory(to_abs),
                _ => Error::from_io(&from_abs, "rename", e),
            })
    }
}
