//! [`E2bSubprocess`]: the `exec_world::Subprocess` of an E2B sandbox.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use e2b_core::EnvdApi;
use exec_world::{
    Attached, Child, DurableId, DurableInfo, Error, OutputOffsets, ProcCapabilities, SpawnSpec,
    StdinMode, Subprocess, Terminal, TerminalSpec, WorldPath,
};

use crate::child::E2bChild;
use crate::options::E2bSubprocessOptions;
use crate::session::{Launch, Session};
use crate::shell::UserInfo;
use crate::terminal::E2bTerminal;
use crate::world::WorldShared;
use crate::wrapper::{WrapArgs, validate};

/// Processes and terminals in one E2B sandbox, through envd.
///
/// Cheap to clone: clones, [`with_cwd`](E2bSubprocess::with_cwd) handles and the
/// handles the builder methods return share the cached user lookups and state
/// directories (per user). See the crate docs for the wrapper, the environment, the kill
/// path and the request cost.
#[derive(Clone, Debug)]
pub struct E2bSubprocess {
    world: Arc<WorldShared>,
    cwd: WorldPath,
    user: Option<String>,
    output_buffer: usize,
    process_timeout: Option<Duration>,
    kill_after: Option<Duration>,
    /// Where durable records live (root-owned).
    durable_dir: Arc<str>,
    /// This adapter's durable starts in flight.
    pending: Arc<crate::durable::Pending>,
    /// The adapter's host lease (shared by every handle), if on.
    lease: Option<Arc<crate::lease::HostLease>>,
}

impl E2bSubprocess {
    /// Processes in the sandbox behind `api` with `opts`. [`ErrorKind::InvalidPath`]
    /// when `opts.cwd` is not an absolute POSIX path. No request is made.
    ///
    /// [`ErrorKind::InvalidPath`]: exec_world::ErrorKind::InvalidPath
    pub fn new(api: Arc<dyn EnvdApi>, opts: E2bSubprocessOptions) -> Result<E2bSubprocess, Error> {
        let cwd = WorldPath::new(&opts.cwd)?;
        if !cwd.is_absolute() {
            return Err(Error::invalid_path(
                &opts.cwd,
                "the cwd of an E2bSubprocess must be an absolute POSIX path",
            ));
        }
        let output_buffer = opts.output_buffer.max(1);
        let world = WorldShared::new(
            api,
            opts.user.clone(),
            output_buffer,
            opts.process_timeout,
            opts.native_helper,
        );
        if let Some(info) = opts.known_user {
            world.preset_user(info);
        }
        Ok(E2bSubprocess {
            world: Arc::new(world),
            cwd: cwd.normalize(),
            user: opts.user,
            output_buffer,
            process_timeout: opts.process_timeout,
            kill_after: opts.kill_after,
            durable_dir: Arc::from(opts.durable_dir.as_str()),
            pending: Arc::default(),
            lease: opts.host_lease.map(crate::lease::HostLease::new),
        })
    }

    /// Like [`E2bSubprocess::new`] with the user's login home (found by the trusted
    /// shell with the setup, see [`prepare`](E2bSubprocess::prepare)) as the cwd.
    pub async fn at_home(
        api: Arc<dyn EnvdApi>,
        user: Option<String>,
    ) -> Result<E2bSubprocess, Error> {
        let mut opts = E2bSubprocessOptions::new("/");
        opts.user = user;
        let mut p = E2bSubprocess::new(api, opts)?;
        p.prepare().await?;
        let info = p.user_info().await?;
        let home = WorldPath::new(&info.home)
            .map_err(|e| Error::other(format!("home {}: {e}", info.home)))?;
        p.cwd = home;
        Ok(p)
    }

    /// This handle with its settings applied to a new shared part; the caches are kept.
    fn apply_settings(mut self) -> E2bSubprocess {
        self.world = Arc::new(self.world.with_settings(
            self.user.clone(),
            self.output_buffer,
            self.process_timeout,
        ));
        self
    }

    /// Runs processes as `user` instead of envd's default user (that user's lookup is
    /// cached like the first one's).
    pub fn user(mut self, user: impl Into<String>) -> E2bSubprocess {
        self.user = Some(user.into());
        self.apply_settings()
    }

    /// Runs processes as the user `info` describes (name, home, shell, `PATH`), known
    /// in advance (e.g. from the template), so no lookup runs: after
    /// [`prepare`](E2bSubprocess::prepare) a piped spawn is exactly one envd `Start`,
    /// even the first.
    pub fn known_user(self, info: UserInfo) -> E2bSubprocess {
        let p = self.user(info.name.clone());
        p.world.preset_user(info);
        p
    }

    /// Bound on the bytes buffered on the host per output stream before the reader
    /// stops reading envd (back-pressure); default
    /// [`DEFAULT_OUTPUT_BUFFER`](crate::DEFAULT_OUTPUT_BUFFER).
    pub fn output_buffer(mut self, bytes: usize) -> E2bSubprocess {
        self.output_buffer = bytes.max(1);
        self.apply_settings()
    }

    /// A lifetime envd enforces on every process (SIGKILL at expiry); default none.
    pub fn process_timeout(mut self, timeout: Option<Duration>) -> E2bSubprocess {
        self.process_timeout = timeout;
        self.apply_settings()
    }

    /// The in-sandbox backstop of this handle's spawns (see
    /// [`E2bSubprocessOptions::kill_after`]); the cached lookups are shared.
    ///
    /// ```no_run
    /// # async fn f(proc: subprocess_e2b::E2bSubprocess) {
    /// use std::time::Duration;
    /// // Whatever happens to this host, the command's tree is gone after 35 s.
    /// let bounded = proc.clone().kill_after(Some(Duration::from_secs(35)));
    /// # drop(bounded);
    /// # }
    /// ```
    pub fn kill_after(mut self, after: Option<Duration>) -> E2bSubprocess {
        self.kill_after = after;
        self
    }

    /// Another handle with default cwd `cwd` (relative: against the current one),
    /// sharing the cached lookups.
    pub fn with_cwd(&self, cwd: &WorldPath) -> E2bSubprocess {
        E2bSubprocess {
            cwd: cwd.resolve(&self.cwd),
            ..self.clone()
        }
    }

    /// Places the spawn helper and probes for a cgroup per spawn now rather than on the
    /// first spawn (one trusted command, once per adapter and user, which also looks
    /// the user up; with envd's default user its name is asked at the same time: one
    /// round trip), so
    /// [`capabilities`](Subprocess::capabilities) reports `contained_escapes` exactly.
    pub async fn prepare(&self) -> Result<(), Error> {
        self.world.ready().await.map(|_| ())
    }

    /// The sandbox user as the trusted shell found it (`getent passwd`).
    pub async fn user_info(&self) -> Result<UserInfo, Error> {
        self.world.user_info().await
    }

    /// The envd API this adapter uses.
    pub fn api(&self) -> &Arc<dyn EnvdApi> {
        &self.world.api
    }

    fn resolve_cwd(&self, cwd: Option<&WorldPath>) -> String {
        match cwd {
            Some(c) => c.resolve(&self.cwd).to_string(),
            None => self.cwd.to_string(),
        }
    }
}

#[async_trait]
impl Subprocess for E2bSubprocess {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn capabilities(&self) -> ProcCapabilities {
        ProcCapabilities {
            stdin: true,
            signals: true,
            process_groups: true,
            escaped_descendants: true,
            // A cgroup per spawn (root and a writable cgroup v2 in the sandbox, found by
            // the setup): an `env -i` + `setsid` orphan stays in it. Without one (or
            // before the setup ran) the marker scan is the fallback and such an orphan
            // can escape (docs/reliability.md).
            contained_escapes: self.world.contained(),
            clean_env: true,
            terminals: true,
            terminal_resize: true,
            // envd 0.6.13 sends a process's end event only after its output pipes close,
            // so a background job holding stdout keeps `wait` pending (as with the
            // official SDKs' `commands.run`).
            exit_before_output_eof: false,
            // Durable commands: not yet (issue 20, the E2B side).
            // Durable spawns need the native helper (and root in the sandbox).
            durable: self.world.native_helper(),
        }
    }

    async fn which(&self, program: &str) -> Result<Option<String>, Error> {
        if program.is_empty() || program.contains('\0') {
            return Ok(None);
        }
        let info = self.world.user_info().await?;
        let program = if program.contains('/') {
            WorldPath::new(program)
                .map(|p| p.resolve(&self.cwd).to_string())
                .unwrap_or_else(|_| program.to_owned())
        } else {
            program.to_owned()
        };
        self.world.shell.which(&info.path, &program).await
    }

    fn spawn(&self, spec: SpawnSpec) -> Result<Child, Error> {
        validate(&spec.program, &spec.args, &spec.env)?;
        spec.check_group()?;
        let cwd = self.resolve_cwd(spec.cwd.as_ref());
        let piped = spec.stdin == StdinMode::Piped;
        let marker = exec_world_sys::tree_script::new_marker();
        let durable = match &spec.durable {
            Some(d) => {
                let mut l = crate::durable::DurableLaunch::new(
                    d,
                    &self.durable_dir,
                    &spec.program,
                    &spec.args,
                    &cwd,
                    &marker,
                    piped,
                )?;
                l.after = self.pending.snapshot();
                Some(l)
            }
            None => None,
        };
        let is_durable = durable.is_some();
        let launch = Launch {
            wrap: WrapArgs {
                base: spec.env_base,
                terminal: false,
                home: String::new(),
                shell: String::new(),
                user: String::new(),
                path: String::new(),
                env: spec.env.clone(),
                marker,
                program: spec.program.clone(),
                args: spec.args.clone(),
            },
            cwd,
            stdin: piped,
            pty: None,
            kill_after: self.kill_after,
            durable,
            // A durable command outlives its host on purpose: no host lease.
            lease: if is_durable { None } else { self.lease.clone() },
            group: spec.group.clone(),
        };
        let session = Session::launch(self.world.clone(), launch)?;
        if is_durable {
            self.pending.add(&session);
        }
        Ok(Child::new(Box::new(E2bChild::new(session, piped))))
    }

    fn spawn_terminal(&self, spec: TerminalSpec) -> Result<Terminal, Error> {
        let program = spec.program.clone().unwrap_or_default();
        if spec.program.is_some() {
            validate(&program, &spec.args, &spec.env)?;
        } else {
            validate("sh", &spec.args, &spec.env)?;
        }
        let launch = Launch {
            wrap: WrapArgs {
                base: spec.env_base,
                terminal: true,
                home: String::new(),
                shell: String::new(),
                user: String::new(),
                path: String::new(),
                env: spec.env.clone(),
                marker: exec_world_sys::tree_script::new_marker(),
                // empty: the user's login shell, filled in once looked up
                program,
                args: spec.args.clone(),
            },
            cwd: self.resolve_cwd(spec.cwd.as_ref()),
            stdin: false,
            pty: Some((u32::from(spec.size.cols), u32::from(spec.size.rows))),
            kill_after: self.kill_after,
            durable: None,
            lease: None,
            group: None,
        };
        let session = Session::launch(self.world.clone(), launch)?;
        Ok(Terminal::new(Box::new(E2bTerminal::new(session))))
    }

    async fn durable_list(&self) -> Result<Vec<DurableInfo>, Error> {
        self.pending.settle().await;
        crate::durable::list(&self.world, &self.durable_dir).await
    }

    async fn durable_attach(&self, id: &DurableId, from: OutputOffsets) -> Result<Attached, Error> {
        self.pending.settle().await;
        crate::durable::attach(self.world.clone(), &self.durable_dir, id, from).await
    }

    async fn durable_collect(&self, id: &DurableId) -> Result<(), Error> {
        self.pending.settle().await;
        crate::durable::collect(&self.world, &self.durable_dir, id).await
    }
}
