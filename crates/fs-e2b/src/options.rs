//! [`E2bFsOptions`]: how an [`E2bFs`](crate::E2bFs) is set up (cwd, acting user, staging).

use std::time::Duration;

/// Options of [`E2bFs::new`](crate::E2bFs::new).
///
/// ```
/// let opts = fs_e2b::E2bFsOptions::new("/home/user").user("user");
/// # drop(opts);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct E2bFsOptions {
    /// The directory relative paths resolve against (absolute POSIX path).
    pub cwd: String,
    /// The user every operation acts as; `None` = the sandbox's default user.
    pub user: Option<String>,
    /// Name prefix of the staging directories `write` and `create_if_absent` create next
    /// to their target (a random suffix follows). Default `.e2b-stage-`.
    pub staging_prefix: String,
    /// Remove a staging directory from a background task when a write is dropped midway
    /// (default true; the directory is otherwise left behind).
    pub background_cleanup: bool,
    /// Lifetime of each shell command (envd kills it at expiry). Default 120 s.
    pub command_timeout: Duration,
    /// A directory only root can reach (e.g. `/opt/capybara/upload`, root 0700 all the
    /// way): when set, a write larger than an inline one (1 MiB) uploads its bytes there
    /// as root and one holder start copies them into place as the acting user (two
    /// requests instead of three). Never
    /// a directory the user can write or search. Default `None`.
    pub root_staging: Option<String>,
    /// Run stat, lstat, listings, mkdir, remove, rename, reads of at most 2 MiB and
    /// writes of at most 1 MiB on a warm worker: one long-lived non-dumpable
    /// process of the acting user per adapter, asked with one `SendInput` on a stream
    /// already open, instead of a process `Start` per call (see `src/warm.rs`). The first
    /// such call starts it in the background (one more request, once) and goes the
    /// ordinary way; concurrent calls and any call after a failure do too. Default true.
    pub warm_worker: bool,
}

impl E2bFsOptions {
    /// Options with cwd `cwd`, the default user and default staging.
    pub fn new(cwd: impl Into<String>) -> Self {
        E2bFsOptions {
            cwd: cwd.into(),
            user: None,
            staging_prefix: ".e2b-stage-".into(),
            background_cleanup: true,
            command_timeout: Duration::from_secs(120),
            root_staging: None,
            warm_worker: true,
        }
    }

    /// Act as `user`.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets [`E2bFsOptions::staging_prefix`].
    pub fn staging_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.staging_prefix = prefix.into();
        self
    }

    /// Sets [`E2bFsOptions::background_cleanup`].
    pub fn background_cleanup(mut self, on: bool) -> Self {
        self.background_cleanup = on;
        self
    }

    /// Sets [`E2bFsOptions::root_staging`].
    ///
    /// ```
    /// let opts = fs_e2b::E2bFsOptions::new("/workspace").root_staging("/opt/capybara/upload");
    /// assert_eq!(opts.root_staging.as_deref(), Some("/opt/capybara/upload"));
    /// ```
    pub fn root_staging(mut self, dir: impl Into<String>) -> Self {
        self.root_staging = Some(dir.into());
        self
    }

    /// Sets [`E2bFsOptions::warm_worker`].
    ///
    /// ```
    /// let opts = fs_e2b::E2bFsOptions::new("/home/user").warm_worker(false);
    /// assert!(!opts.warm_worker);
    /// ```
    pub fn warm_worker(mut self, on: bool) -> Self {
        self.warm_worker = on;
        self
    }

    /// Sets [`E2bFsOptions::command_timeout`].
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }
}
