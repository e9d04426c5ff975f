//! [`Rooted`]: any [`Fs`] seen through a virtual `/` anchored at one real directory, the
//! way an agent's workspace should see a sandbox. `..`, absolute paths and symlinks are
//! resolved inside the root, as `openat2(RESOLVE_IN_ROOT)` does: `..` at the root stays
//! at the root, an absolute path or absolute link text starts again at the root, and no
//! path reaches a file outside it.
//!
//! Symlinks are followed by this layer, one component at a time through the inner
//! backend's `lstat`, so the inner backend is only ever asked about link-free paths below
//! the root. That costs one `lstat` per component below the root on each operation that
//! resolves a path (a local call for `LocalFs`, one process start for fs-e2b); the final
//! operation itself is the inner backend's. A directory swapped for a symlink between the
//! check and the operation would redirect that one operation, so locally the inner
//! backend should be [`LocalFs::beneath`](crate::LocalFs::beneath) the same root: the
//! kernel then refuses any link below the root during the call (`openat2`), and such a
//! race fails instead of leaving the root. Over fs-e2b the window remains, bounded by the
//! inner backend's own permissions (it acts as the sandbox user). Errors name virtual
//! paths, never the real root.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, ErrorKind};
use crate::fs::{
    ByteStream, Created, DirEntry, Fs, FsCapabilities, Metadata, Version, WriteOptions,
};
use crate::path::WorldPath;
use crate::watch::{WatchOptions, WatchStream};

/// How many symlinks one resolution may follow (Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// A virtual `/` anchored at a real directory of another [`Fs`].
///
/// ```
/// # async fn demo() -> Result<(), exec_world::Error> {
/// use std::sync::Arc;
/// use exec_world::{Fs, LocalFs, Rooted, WorldPath};
/// let dir = std::env::temp_dir();
/// let ws = Rooted::new(Arc::new(LocalFs::new()?), WorldPath::new(dir.to_string_lossy())?)?;
/// // `/../../etc/passwd` is `<dir>/etc/passwd`: nothing outside `dir` is reachable.
/// assert!(ws.read(&WorldPath::new("/../../etc/passwd")?, 1 << 20).await.is_err());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Rooted {
    inner: Arc<dyn Fs>,
    root: WorldPath,
    cwd: WorldPath,
}

impl std::fmt::Debug for Rooted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rooted")
            .field("root", &self.root)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl Rooted {
    /// `inner` seen with `/` at the real directory `root` (absolute; normalized here);
    /// the virtual cwd starts at `/`. The root itself is trusted (the host chose it).
    pub fn new(inner: Arc<dyn Fs>, root: WorldPath) -> Result<Rooted, Error> {
        if !root.is_absolute() {
            return Err(Error::invalid_path(
                &root,
                "the root of a rooted view must be absolute",
            ));
        }
        Ok(Rooted {
            inner,
            root: root.normalize(),
            cwd: WorldPath::root(),
        })
    }

    /// The real directory `/` is anchored at.
    pub fn root(&self) -> &WorldPath {
        &self.root
    }

    /// The real path of link-free virtual components.
    fn real(&self, parts: &[String]) -> WorldPath {
        let mut s = self.root.as_str().trim_end_matches('/').to_owned();
        for p in parts {
            s.push('/');
            s.push_str(p);
        }
        if s.is_empty() {
            s.push('/');
        }
        WorldPath::new(s).unwrap_or_else(|_| self.root.clone())
    }

    /// The virtual path of link-free components.
    fn virt(parts: &[String]) -> WorldPath {
        WorldPath::new(format!("/{}", parts.join("/"))).unwrap_or_else(|_| WorldPath::root())
    }

    /// Resolve `p` inside the root: the real path to hand to the inner backend, and the
    /// virtual path it stands for. Symlinks are followed in every component, the last one
    /// too when `follow_last`.
    async fn resolve_in_root(
        &self,
        p: &WorldPath,
        follow_last: bool,
    ) -> Result<(WorldPath, WorldPath), Error> {
        let asked = p.resolve(&self.cwd);
        let mut todo: VecDeque<String> = asked.components().map(str::to_owned).collect();
        let mut done: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "." => continue,
                ".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            done.push(c);
            if todo.is_empty() && !follow_last {
                break;
            }
            let meta = match self.inner.lstat(&self.real(&done)).await {
                Ok(m) => m,
                // Nothing below a missing component can be a link: the rest is lexical.
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    for rest in todo.drain(..) {
                        match rest.as_str() {
                            "." => {}
                            ".." => {
                                done.pop();
                            }
                            _ => done.push(rest),
                        }
                    }
                    break;
                }
                Err(e) => return Err(self.unroot(e, &asked)),
            };
            if !meta.is_symlink() {
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(Error::invalid_path(
                    &asked,
                    format!("more than {MAX_LINKS} symbolic links"),
                ));
            }
            let text = meta.symlink_target.ok_or_else(|| {
                Error::other(format!(
                    "resolving {asked}: the backend did not report where {} points",
                    Self::virt(&done)
                ))
            })?;
            done.pop();
            if text.starts_with('/') {
                done.clear();
            }
            for part in text.split('/').filter(|s| !s.is_empty()).rev() {
                todo.push_front(part.to_owned());
            }
        }
        Ok((self.real(&done), Self::virt(&done)))
    }

    /// The virtual path of a real one below the root.
    fn to_virtual(&self, real: &WorldPath) -> Option<WorldPath> {
        let root = self.root.as_str().trim_end_matches('/');
        let rest = real.as_str().strip_prefix(root)?;
        if rest.is_empty() {
            return Some(WorldPath::root());
        }
        rest.starts_with('/')
            .then(|| WorldPath::new(rest).ok())
            .flatten()
    }

    /// `e` with real paths replaced by virtual ones (`fallback` where none maps).
    fn unroot(&self, e: Error, fallback: &WorldPath) -> Error {
        if e.kind() == ErrorKind::InvalidPath {
            return e.map_path(|_| fallback.to_string());
        }
        e.map_path(|real| {
            WorldPath::new(real)
                .ok()
                .and_then(|real| self.to_virtual(&real))
                .unwrap_or_else(|| fallback.clone())
                .to_string()
        })
    }
}

#[async_trait]
impl Fs for Rooted {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn with_cwd(&self, cwd: &WorldPath) -> Box<dyn Fs> {
        Box::new(Rooted {
            cwd: cwd.resolve(&self.cwd),
            ..self.clone()
        })
    }

    fn capabilities(&self) -> FsCapabilities {
        self.inner.capabilities()
    }

    async fn stat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let (real, v) = self.resolve_in_root(p, true).await?;
        self.inner.stat(&real).await.map_err(|e| self.unroot(e, &v))
    }

    async fn lstat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let (real, v) = self.resolve_in_root(p, false).await?;
        self.inner
            .lstat(&real)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn read_dir(&self, p: &WorldPath) -> Result<Vec<DirEntry>, Error> {
        let (real, v) = self.resolve_in_root(p, true).await?;
        let entries = self
            .inner
            .read_dir(&real)
            .await
            .map_err(|e| self.unroot(e, &v))?;
        entries
            .into_iter()
            .map(|mut e| {
                e.path = v.join(&e.name)?;
                Ok(e)
            })
            .collect()
    }

    async fn read(&self, p: &WorldPath, max_bytes: u64) -> Result<Bytes, Error> {
        let (real, v) = self.resolve_in_root(p, true).await?;
        self.inner
            .read(&real, max_bytes)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn read_stream(&self, p: &WorldPath) -> Result<ByteStream, Error> {
        let (real, v) = self.resolve_in_root(p, true).await?;
        self.inner
            .read_stream(&real)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn write(
        &self,
        p: &WorldPath,
        data: ByteStream,
        opts: WriteOptions,
    ) -> Result<Version, Error> {
        let (real, v) = self.resolve_in_root(p, false).await?;
        self.inner
            .write(&real, data, opts)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn create_if_absent(&self, p: &WorldPath, data: Bytes) -> Result<Created, Error> {
        let (real, v) = self.resolve_in_root(p, false).await?;
        self.inner
            .create_if_absent(&real, data)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn mkdir(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let (real, v) = self.resolve_in_root(p, false).await?;
        if v.as_str() == "/" {
            // The root exists by construction.
            return if recursive {
                Ok(())
            } else {
                Err(Error::already_exists(v))
            };
        }
        self.inner
            .mkdir(&real, recursive)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn remove(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let (real, v) = self.resolve_in_root(p, false).await?;
        if v.as_str() == "/" {
            return Err(Error::permission_denied(v));
        }
        self.inner
            .remove(&real, recursive)
            .await
            .map_err(|e| self.unroot(e, &v))
    }

    async fn rename(&self, from: &WorldPath, to: &WorldPath) -> Result<(), Error> {
        let (real_from, v_from) = self.resolve_in_root(from, false).await?;
        let (real_to, v_to) = self.resolve_in_root(to, false).await?;
        if v_from.as_str() == "/" || v_to.as_str() == "/" {
            return Err(Error::permission_denied(WorldPath::root()));
        }
        self.inner
            .rename(&real_from, &real_to)
            .await
            .map_err(|e| self.unroot(e, &v_to))
    }

    /// Watches the directory `p` resolves to inside the root. Events name paths relative
    /// to it, and the inner backend's recursive watch never descends through a symlink,
    /// so nothing outside the root is watched through this view.
    async fn watch(&self, p: &WorldPath, opts: WatchOptions) -> Result<WatchStream, Error> {
        let (real, v) = self.resolve_in_root(p, true).await?;
        let events = self
            .inner
            .watch(&real, opts)
            .await
            .map_err(|e| self.unroot(e, &v))?;
        let fallback = v.to_string();
        Ok(WatchStream::new(futures::StreamExt::map(
            events,
            move |r| r.map_err(|e| e.map_path(|_| fallback.clone())),
        )))
    }
}
