//! [`E2bSubprocessOptions`]: how an [`E2bSubprocess`](crate::E2bSubprocess) is set up
//! (cwd, user, host buffering, envd's process lifetime).

use std::time::Duration;

use crate::shell::UserInfo;

/// Default bound on what is buffered on the host per output stream (1 MiB).
pub const DEFAULT_OUTPUT_BUFFER: usize = 1 << 20;

/// Options of [`E2bSubprocess::new`](crate::E2bSubprocess::new); the same settings can be
/// changed later with the adapter's builder methods, which keep its cached lookups.
///
/// ```
/// use std::time::Duration;
/// let opts = subprocess_e2b::E2bSubprocessOptions::new("/home/user")
///     .user("user")
///     .process_timeout(Some(Duration::from_secs(600)))
///     .kill_after(Some(Duration::from_secs(605)));
/// # drop(opts);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct E2bSubprocessOptions {
    /// The default cwd of every spawn (absolute POSIX path).
    pub cwd: String,
    /// The user processes run as; `None` = envd's default user.
    pub user: Option<String>,
    /// The user's facts (name, home, shell, `PATH`) when known in advance (e.g. from the
    /// template): no lookup runs, so the first piped spawn is exactly one envd `Start`.
    /// Implies [`user`](E2bSubprocessOptions::user).
    pub known_user: Option<UserInfo>,
    /// Bound on the bytes buffered on the host per output stream before the reader stops
    /// reading envd (back-pressure). Default [`DEFAULT_OUTPUT_BUFFER`].
    pub output_buffer: usize,
    /// A lifetime envd enforces on every process (SIGKILL at expiry). Default none.
    pub process_timeout: Option<Duration>,
    /// An in-sandbox backstop: every process is SIGKILLed with its whole tree (its
    /// cgroup, or without one its process group) this long after its start, by the
    /// sandbox itself, so it ends even when this host is gone or lost its connection.
    /// Unlike [`process_timeout`](E2bSubprocessOptions::process_timeout), which envd
    /// enforces on its own child only, it reaches every descendant. Whole seconds
    /// (rounded up), at most 100 years (`Duration::MAX` is that). Default none.
    pub kill_after: Option<Duration>,
    /// Start piped spawns through the native spawn helper (one small static program,
    /// placed once per adapter) where this build has it and the sandbox runs it; `false`
    /// keeps the `sh` helper for every spawn. Default `true`. Same guarantees either way.
    pub native_helper: bool,
    /// Where durable commands keep their records in the sandbox (see the crate's
    /// `durable` docs): an absolute path whose every component is, or can be made, a
    /// directory owned by root that nobody else can write. Every client of a sandbox must
    /// use the same one to find the others' commands. Default
    /// [`DEFAULT_DURABLE_DIR`](crate::DEFAULT_DURABLE_DIR).
    pub durable_dir: String,
    /// The host lease: a piped spawn that is not durable ends, by the sandbox itself,
    /// at most this long after this host stopped renewing the adapter's lease (the host
    /// process died, the network was cut, envd froze), even when no kill can reach the
    /// sandbox. One envd request per adapter every quarter of it while spawns run (see
    /// the `lease` module docs). Whole seconds (rounded up, at least 1 s). Needs the
    /// native spawn helper; `None` turns it off. Default
    /// [`DEFAULT_HOST_LEASE`](crate::DEFAULT_HOST_LEASE) (2 minutes).
    pub host_lease: Option<Duration>,
}

impl E2bSubprocessOptions {
    /// Options with default cwd `cwd`, envd's default user and default buffering.
    pub fn new(cwd: impl Into<String>) -> Self {
        E2bSubprocessOptions {
            cwd: cwd.into(),
            user: None,
            known_user: None,
            output_buffer: DEFAULT_OUTPUT_BUFFER,
            process_timeout: None,
            kill_after: None,
            native_helper: true,
            durable_dir: crate::DEFAULT_DURABLE_DIR.to_owned(),
            host_lease: Some(crate::lease::DEFAULT_HOST_LEASE),
        }
    }

    /// Run processes as `user`.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets [`E2bSubprocessOptions::known_user`] (and the user to its name).
    pub fn known_user(mut self, info: UserInfo) -> Self {
        self.user = Some(info.name.clone());
        self.known_user = Some(info);
        self
    }

    /// Sets [`E2bSubprocessOptions::output_buffer`] (at least 1).
    pub fn output_buffer(mut self, bytes: usize) -> Self {
        self.output_buffer = bytes.max(1);
        self
    }

    /// Sets [`E2bSubprocessOptions::native_helper`].
    pub fn native_helper(mut self, on: bool) -> Self {
        self.native_helper = on;
        self
    }

    /// Sets [`E2bSubprocessOptions::durable_dir`].
    pub fn durable_dir(mut self, dir: impl Into<String>) -> Self {
        self.durable_dir = dir.into();
        self
    }

    /// Sets [`E2bSubprocessOptions::host_lease`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = subprocess_e2b::E2bSubprocessOptions::new("/home/user")
    ///     .host_lease(Some(Duration::from_secs(30)));
    /// assert_eq!(opts.host_lease, Some(Duration::from_secs(30)));
    /// ```
    pub fn host_lease(mut self, bound: Option<Duration>) -> Self {
        self.host_lease = bound;
        self
    }

    /// Sets [`E2bSubprocessOptions::kill_after`].
    pub fn kill_after(mut self, after: Option<Duration>) -> Self {
        self.kill_after = after;
        self
    }

    /// Sets [`E2bSubprocessOptions::process_timeout`].
    pub fn process_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.process_timeout = timeout;
        self
    }
}
