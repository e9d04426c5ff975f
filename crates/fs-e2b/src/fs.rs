//! [`E2bFs`]: the handle, its construction, and the `Fs` methods that are one control
//! command each (stat, lstat, read_dir, mkdir, remove, rename).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use e2b_core::EnvdApi;
use exec_world::{
    ByteStream, Created, DirEntry, Error, ErrorKind, FileKind, Fs, FsCapabilities, Metadata,
    Version, WorldPath, WriteOptions,
};

use crate::meta::parse_records;
use crate::options::E2bFsOptions;
use crate::scripts;
use crate::shell::Ctl;

/// What every handle on one sandbox shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// envd of the sandbox.
    pub api: Arc<dyn EnvdApi>,
    /// The acting user (`None`: envd's default).
    pub user: Option<String>,
    /// Shell commands as that user.
    pub ctl: Ctl,
    /// Staging directory name prefix.
    pub staging_prefix: String,
    /// Remove abandoned staging dirs from a background task.
    pub background_cleanup: bool,
    /// Lifetime of each shell command.
    pub command_timeout: std::time::Duration,
    /// Shell commands as root (only to start the holders' wrappers).
    pub root_ctl: Ctl,
    /// Root-only directory for root-staged writes (see [`E2bFsOptions::root_staging`]).
    pub root_staging: Option<String>,
    /// The acting user's uid, gid and groups (decimal), once asked (see [`crate::holder`]).
    pub identity: std::sync::Mutex<Option<[String; 3]>>,
}

impl Shared {
    /// The acting user for envd calls.
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
}

/// `exec_world::Fs` over an E2B sandbox (see the crate docs for how each operation works).
///
/// Cheap to clone; clones and [`Fs::with_cwd`] handles share the sandbox connection.
#[derive(Debug, Clone)]
pub struct E2bFs {
    pub(crate) shared: Arc<Shared>,
    cwd: WorldPath,
}

impl E2bFs {
    /// An `Fs` over `api` with `opts`. [`ErrorKind::InvalidPath`] when `opts.cwd` is not an
    /// absolute POSIX path, or the staging prefix is empty or contains `/`.
    pub fn new(api: Arc<dyn EnvdApi>, opts: E2bFsOptions) -> Result<E2bFs, Error> {
        let cwd = WorldPath::new(opts.cwd.clone())?;
        if !cwd.is_absolute() {
            return Err(Error::invalid_path(
                &opts.cwd,
                "the cwd of an E2bFs must be an absolute POSIX path",
            ));
        }
        if opts.staging_prefix.is_empty() || opts.staging_prefix.contains(['/', '\0']) {
            return Err(Error::invalid_path(
                &opts.staging_prefix,
                "staging prefix must be a non-empty file name",
            ));
        }
        if let Some(d) = &opts.root_staging
            && (!d.starts_with('/') || d.contains('\0'))
        {
            return Err(Error::invalid_path(
                d,
                "the root staging directory must be an absolute path",
            ));
        }
        let mut ctl = Ctl::new(api.clone(), opts.user.clone(), opts.command_timeout);
        if opts.warm_worker {
            ctl = ctl.with_warm(opts.command_timeout);
        }
        let root_ctl = Ctl::new(api.clone(), Some("root".into()), opts.command_timeout);
        Ok(E2bFs {
            shared: Arc::new(Shared {
                api,
                user: opts.user,
                ctl,
                staging_prefix: opts.staging_prefix,
                background_cleanup: opts.background_cleanup,
                command_timeout: opts.command_timeout,
                root_ctl,
                root_staging: opts.root_staging,
                identity: std::sync::Mutex::new(None),
            }),
            cwd: cwd.normalize(),
        })
    }

    /// The envd API this file system works on.
    pub fn api(&self) -> &Arc<dyn EnvdApi> {
        &self.shared.api
    }

    /// The acting user (`None`: the sandbox's default user).
    pub fn user(&self) -> Option<&str> {
        self.shared.user()
    }

    /// At most `max` bytes from the start of the file at `p`, as the acting user, in one
    /// envd request (a holder copies the head of the file it opened to its output): what
    /// a "show me the start of this file" tool needs, with no `TooLarge`. A FIFO, socket
    /// or device is refused before a byte is read, a directory is `IsADirectory`, a
    /// holder the user stops or kills is `Interrupted`.
    ///
    /// ```no_run
    /// # async fn demo(fs: fs_e2b::E2bFs) -> Result<(), exec_world::Error> {
    /// let head = fs.read_head(&exec_world::WorldPath::new("/etc/hostname")?, 64).await?;
    /// assert!(head.len() <= 64);
    /// # Ok(()) }
    /// ```
    pub async fn read_head(&self, p: &WorldPath, max: u64) -> Result<Bytes, Error> {
        let abs = self.resolve_file(p, "read")?;
        crate::read::read_head(&self.shared, &abs, max).await
    }

    /// Writes `data` to `p` as the sandbox@1 contract's `write_file` does: missing parents
    /// made (0755), a final symlink followed with the acting user's rights (as a shell's
    /// `>` does: the user's permissions decide where it may land), the file replaced
    /// atomically; `mode` or the existing file's, else 0644. One envd request up to
    /// 1 MiB; larger, two with [`E2bFsOptions::root_staging`].
    ///
    /// ```no_run
    /// # async fn demo(fs: fs_e2b::E2bFs) -> Result<(), exec_world::Error> {
    /// fs.write_file(&exec_world::WorldPath::new("/workspace/a/b.txt")?, "hi".into(), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_file(
        &self,
        p: &WorldPath,
        data: Bytes,
        mode: Option<u32>,
    ) -> Result<Version, Error> {
        let abs = self.resolve_file(p, "write")?;
        let mut opts = WriteOptions::default().create_parents(true);
        opts.mode = mode;
        crate::write::write_with(
            &self.shared,
            &abs,
            exec_world::bytes_stream(data),
            opts,
            true,
        )
        .await
    }

    /// `p` resolved for an operation on a file's content: a path that ends in `/` (or
    /// in `.` or `..`) names a directory, so it is refused before any normalization
    /// could turn `dir/` into the file `dir`.
    fn resolve_file(&self, p: &WorldPath, what: &str) -> Result<WorldPath, Error> {
        let s = p.as_str();
        if s.ends_with('/') || s == "." || s == ".." || s.ends_with("/.") || s.ends_with("/..") {
            return Err(
                Error::invalid_path(s, "the path names a directory, not a file").with_op(what),
            );
        }
        Ok(self.resolve(p))
    }

    /// One record of `abs` (stat or lstat script).
    async fn stat_with(
        &self,
        script: &str,
        abs: &WorldPath,
        what: &str,
    ) -> Result<Metadata, Error> {
        let out = self
            .shared
            .ctl
            .run_ok_read(script, &[abs.as_str()], abs, what)
            .await?;
        let rec = parse_records(&out.stdout)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                Error::other("no record printed")
                    .with_op(what)
                    .with_path(abs)
            })?;
        Ok(rec.metadata())
    }
}

#[async_trait]
impl Fs for E2bFs {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn with_cwd(&self, cwd: &WorldPath) -> Box<dyn Fs> {
        Box::new(E2bFs {
            shared: self.shared.clone(),
            cwd: cwd.resolve(&self.cwd),
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
        opts: exec_world::WatchOptions,
    ) -> Result<exec_world::WatchStream, Error> {
        crate::watch::watch(self, self.resolve(p), opts).await
    }

    async fn stat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let abs = self.resolve(p);
        let m = self.stat_with(scripts::STAT, &abs, "stat").await?;
        if m.kind == FileKind::Symlink {
            // `find -L` falls back to the link itself only when its target is missing.
            return Err(Error::not_found(&abs).with_op("stat"));
        }
        Ok(m)
    }

    async fn lstat(&self, p: &WorldPath) -> Result<Metadata, Error> {
        let abs = self.resolve(p);
        self.stat_with(scripts::LSTAT, &abs, "lstat").await
    }

    async fn read_dir(&self, p: &WorldPath) -> Result<Vec<DirEntry>, Error> {
        let abs = self.resolve(p);
        let out = self
            .shared
            .ctl
            .run_ok_read(scripts::READ_DIR, &[abs.as_str()], &abs, "read_dir")
            .await?;
        parse_records(&out.stdout)?
            .into_iter()
            .map(|r| {
                Ok(DirEntry {
                    path: abs.join(&r.name)?,
                    metadata: r.metadata(),
                    name: r.name,
                })
            })
            .collect()
    }

    async fn read(&self, p: &WorldPath, max_bytes: u64) -> Result<Bytes, Error> {
        let abs = self.resolve_file(p, "read")?;
        crate::read::read_bounded(&self.shared, &abs, max_bytes).await
    }

    async fn read_stream(&self, p: &WorldPath) -> Result<ByteStream, Error> {
        let abs = self.resolve_file(p, "read_stream")?;
        crate::read::read_stream(&self.shared, &abs).await
    }

    async fn write(
        &self,
        p: &WorldPath,
        data: ByteStream,
        opts: WriteOptions,
    ) -> Result<Version, Error> {
        let abs = self.resolve_file(p, "write")?;
        crate::write::write(&self.shared, &abs, data, opts).await
    }

    async fn create_if_absent(&self, p: &WorldPath, data: Bytes) -> Result<Created, Error> {
        let abs = self.resolve_file(p, "create_if_absent")?;
        crate::write::create_if_absent(&self.shared, &abs, data).await
    }

    async fn mkdir(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let abs = self.resolve(p);
        let script = if recursive {
            scripts::MKDIR_P
        } else {
            scripts::MKDIR
        };
        self.shared
            .ctl
            .run_ok_once(script, &[abs.as_str()], &abs, "mkdir")
            .await
            .map(drop)
    }

    async fn remove(&self, p: &WorldPath, recursive: bool) -> Result<(), Error> {
        let abs = self.resolve(p);
        let flag = if recursive { "1" } else { "0" };
        self.shared
            .ctl
            .run_ok_once(scripts::REMOVE, &[abs.as_str(), flag], &abs, "remove")
            .await
            .map(drop)
    }

    async fn rename(&self, from: &WorldPath, to: &WorldPath) -> Result<(), Error> {
        let from = self.resolve(from);
        let to = self.resolve(to);
        let out = self
            .shared
            .ctl
            .run_once(
                scripts::RENAME,
                &[from.as_str(), to.as_str()],
                &from,
                "rename",
            )
            .await?;
        if out.exit_code == 0 {
            return Ok(());
        }
        // Kinds about the destination name it; the rest name the source.
        let e = crate::shell::classify(&out, &from, "rename");
        Err(match e.kind() {
            ErrorKind::NotEmpty | ErrorKind::AlreadyExists => Error::not_empty(&to),
            ErrorKind::IsADirectory => Error::is_a_directory(&to),
            ErrorKind::NotADirectory => Error::not_a_directory(&to),
            _ => return Err(e),
        }
        .with_op("rename"))
    }
}
