//! One remote process, for pipes and terminals alike: the start task (user lookup, helper
//! placement, spec file for terminals, envd `Start` of the spawn helper), which then
//! drives envd's events while no reader does (`route.rs` routes them into bounded queues
//! and publishes the verified pid, the spawn's cgroup and the exit status), and the shared
//! kill path (tree kill, cgroup included, then envd's SIGKILL as the last resort).
//!
//! Any end of the event stream that is not the process's observed exit (a cut stream,
//! envd's `deadline_exceeded` of a process timeout, a reset, silence past the stream
//! idle timeout) runs the tree kill through a new request *before* `wait` reports it, so
//! nothing the spawn started outlives the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;
use e2b_core::proto::process::{ProcessSelector, Signal as EnvdSignal};
use e2b_core::{ProcessStream, StartProcess};
use exec_world::{Error, ErrorKind, ExitStatus};
use tokio::sync::watch;

use crate::lease::LeaseHold;
use crate::queue::Queue;
use crate::route::{Fan, Route};
use crate::shell::Ids;
use crate::world::WorldShared;
use crate::wrapper::WrapArgs;

/// Where a started process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Started {
    /// The verified process group id (== the program's pid).
    pub(crate) pid: u32,
    /// The pid envd knows (for SendInput, Update, SendSignal); equal to `pid` unless
    /// `setsid` had to fork.
    pub(crate) envd_pid: u32,
}

/// What `started()` waits for.
pub(crate) type StartState = Option<Result<Started, Error>>;
/// What `wait()` waits for.
pub(crate) type StatusState = Option<Result<ExitStatus, Error>>;

/// The shared state of one process.
pub(crate) struct Session {
    pub(crate) world: Arc<WorldShared>,
    pub(crate) marker: String,
    pub(crate) terminal: bool,
    started: watch::Receiver<StartState>,
    status: watch::Receiver<StatusState>,
    /// stdout (pipes) or the terminal output.
    pub(crate) out: Queue,
    /// stderr (pipes only).
    pub(crate) err: Option<Queue>,
    /// The event stream and its routing state (`route.rs`).
    pub(crate) route: Mutex<Route>,
    /// The waker the event stream is polled with (wakes whoever drives it).
    pub(crate) fan: Arc<Fan>,
    /// `fan` as a [`Waker`].
    pub(crate) fan_waker: Waker,
    pub(crate) detached: AtomicBool,
    /// envd's pid of the wrapper (from the start event), once the stream is open.
    envd_pid: OnceLock<u32>,
    /// Set once a tree kill finished with no survivor (nothing left for `Drop`).
    reaped: AtomicBool,
    /// The cgroup name this spawn was given (contained mode).
    cgroup_name: OnceLock<String>,
    /// The spawn's group label (its cgroup name is reused only within the group).
    group: Option<String>,
    /// The cgroup directory the helper reported (its header), for the tree kill.
    cgroup: OnceLock<String>,
    pub(crate) handle: tokio::runtime::Handle,
}

/// A leader pid no process can have (Linux pids stay below 2^22): a tree kill with it
/// finds members by their marker only.
const NO_LEADER: u32 = u32::MAX;

/// Longest the tree kill after a lost stream may hold up the report of the loss
/// (e2b-core's 60 s stream idle bound plus this stays within 90 s).
pub(crate) const LOSS_KILL_BOUND: Duration = Duration::from_secs(20);

/// What the start task needs.
pub(crate) struct Launch {
    pub(crate) wrap: WrapArgs,
    pub(crate) cwd: String,
    pub(crate) stdin: bool,
    /// Terminal size (cols, rows) for a PTY start.
    pub(crate) pty: Option<(u32, u32)>,
    /// The in-sandbox backstop, if any.
    pub(crate) kill_after: Option<Duration>,
    /// A durable spawn's record (`durable.rs`); such a spawn is never killed for a lost
    /// stream or a drop.
    pub(crate) durable: Option<crate::durable::DurableLaunch>,
    /// The adapter's host lease, for a spawn that is not durable (`lease.rs`).
    pub(crate) lease: Option<Arc<crate::lease::HostLease>>,
    /// The spawn's group label ([`exec_world::SpawnSpec::group`]), part of its cgroup's
    /// name.
    pub(crate) group: Option<String>,
}

impl Session {
    /// Starts the remote process in a task and returns at once.
    pub(crate) fn launch(world: Arc<WorldShared>, launch: Launch) -> Result<Arc<Session>, Error> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::other("spawn must be called within a tokio runtime"))?;
        let (started_tx, started) = watch::channel(None);
        let (status_tx, status) = watch::channel(None);
        let out = Queue::new(world.output_buffer);
        let terminal = launch.pty.is_some();
        let err = (!terminal).then(|| Queue::new(world.output_buffer));
        let fan = Arc::new(Fan::default());
        let program = launch.wrap.program.clone();
        let session = Arc::new(Session {
            world: world.clone(),
            marker: launch.wrap.marker.clone(),
            terminal,
            started,
            status,
            out,
            err,
            route: Mutex::new(Route::new(program, started_tx, status_tx)),
            fan_waker: Waker::from(fan.clone()),
            fan,
            detached: AtomicBool::new(launch.durable.is_some()),
            envd_pid: OnceLock::new(),
            reaped: AtomicBool::new(false),
            cgroup_name: OnceLock::new(),
            group: launch.group.clone(),
            cgroup: OnceLock::new(),
            handle: handle.clone(),
        });
        let me = session.clone();
        handle.spawn(async move {
            let (stream, hold) = match start(&world, &me, launch).await {
                Ok(s) => s,
                Err(e) => {
                    // The request may have reached envd before the connection failed:
                    // end whatever carries this spawn's marker before reporting.
                    if matches!(e.kind(), ErrorKind::Transport | ErrorKind::Timeout) {
                        me.reap_after_loss(&e.to_string()).await;
                    }
                    world.start_failed();
                    me.fail_start(e);
                    return;
                }
            };
            let _ = me.envd_pid.set(stream.pid());
            me.install(stream);
            me.pump().await;
            // The stream is over (the exit, or a loss): this spawn no longer keeps the
            // lease renewed; after a loss the lease is what ends it in the sandbox.
            drop(hold);
        });
        Ok(session)
    }

    /// The group leader to kill: the verified pid, else envd's pid of the wrapper (the
    /// session leader `setsid` made in place), else [`NO_LEADER`] (marker only).
    fn leader(&self) -> Started {
        if let Some(Ok(s)) = &*self.started.borrow() {
            return *s;
        }
        let envd = self.envd_pid.get().copied().unwrap_or(NO_LEADER);
        Started {
            pid: envd,
            envd_pid: envd,
        }
    }

    /// The tree kill after the stream ended without the process's exit (its end is not
    /// observed, so it and its descendants may still run). Logged, never fatal: the
    /// caller reports the loss itself. Bounded by [`LOSS_KILL_BOUND`]: past it the loss
    /// is reported anyway (a frozen envd must not hold `wait` beyond e2b-core's idle
    /// bound plus this, 90 s in all), `Drop` tries the kill again, and the host lease
    /// ends the spawn in the sandbox.
    pub(crate) async fn reap_after_loss(&self, why: &str) {
        if self.detached.load(Ordering::SeqCst) {
            return;
        }
        let target = self.leader();
        let kill = self.kill_target(target, Duration::ZERO);
        match tokio::time::timeout(LOSS_KILL_BOUND, kill).await {
            Ok(Ok(())) => tracing::debug!(pid = target.pid, why, "tree killed after a lost stream"),
            Ok(Err(e)) => tracing::warn!(
                pid = target.pid,
                error = %e,
                why,
                "tree kill after a lost stream failed"
            ),
            Err(_) => tracing::warn!(
                pid = target.pid,
                why,
                "tree kill after a lost stream did not finish in time"
            ),
        }
    }

    /// True when `dir` (from the header line, which the sandbox user might forge) is
    /// this spawn's cgroup: inside the cgroup2 mount, no `..`, named as given (or the
    /// helper's `NAME.<pid>`). The root tree kill only ever touches such a directory.
    fn cgroup_is_ours(&self, dir: &str) -> bool {
        let (Some(name), Some(mount)) = (self.cgroup_name.get(), self.world.setup_mount()) else {
            return false;
        };
        let Some(rest) = dir.strip_prefix(mount.as_str()) else {
            return false;
        };
        let Some(last) = rest.rsplit('/').next() else {
            return false;
        };
        let named = last == name
            || last
                .strip_prefix(name.as_str())
                .and_then(|s| s.strip_prefix('.'))
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        rest.starts_with('/')
            && named
            && rest.split('/').all(|c| c != ".." && c != ".")
            && !dir.contains(['\n', '\r', '\0'])
    }

    /// Keeps `dir` (from the header line) as the spawn's cgroup if it is ours.
    pub(crate) fn note_cgroup(&self, dir: String) {
        if self.cgroup_is_ours(&dir) {
            let _ = self.cgroup.set(dir);
        }
    }

    /// The spawn's group label.
    pub(crate) fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// Records the cgroup name this spawn was given.
    pub(crate) fn set_cgroup_name(&self, name: String) {
        let _ = self.cgroup_name.set(name);
    }

    /// The verified pid, once known.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &*self.started.borrow() {
            Some(Ok(s)) => Some(s.pid),
            _ => None,
        }
    }

    /// Waits for the start (verified pid) or its failure.
    pub(crate) async fn started(&self) -> Result<Started, Error> {
        let mut rx = self.started.clone();
        let r = rx
            .wait_for(|s| s.is_some())
            .await
            .map_err(|_| Error::other("the start task ended without a result"))?;
        match &*r {
            Some(Ok(s)) => Ok(*s),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::other("no start result")),
        }
    }

    /// True once the start was answered (the verified pid, or a failure).
    pub(crate) fn start_known(&self) -> bool {
        self.started.borrow().is_some()
    }

    /// True once the process's end (or a failure) is known.
    pub(crate) fn ended(&self) -> bool {
        self.status.borrow().is_some()
    }

    /// Waits for the end.
    pub(crate) async fn wait(&self) -> Result<ExitStatus, Error> {
        let mut rx = self.status.clone();
        let r = rx
            .wait_for(|s| s.is_some())
            .await
            .map_err(|_| Error::other("the reader task ended without a status"))?;
        match &*r {
            Some(Ok(s)) => Ok(*s),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::other("no status")),
        }
    }

    /// Sends `sig` to the process itself: envd's SendSignal for TERM/KILL when envd
    /// knows the program's pid, else `kill -s` through the trusted shell.
    pub(crate) async fn signal_process(&self, sig: exec_world::Signal) -> Result<(), Error> {
        let s = self.started().await?;
        if self.ended() {
            return Ok(());
        }
        let envd_sig = match sig {
            exec_world::Signal::Term => Some(EnvdSignal::Sigterm),
            exec_world::Signal::Kill => Some(EnvdSignal::Sigkill),
            _ => None,
        };
        if let (Some(es), true) = (envd_sig, s.pid == s.envd_pid) {
            return match self
                .world
                .api
                .send_signal(ProcessSelector::Pid(s.envd_pid), es)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e.into_world("sending a signal")),
            };
        }
        self.world.shell.signal(s.pid, sig, false).await
    }

    /// The kill path: exec-world's tree kill (TERM [+HUP] to group, session, descendants
    /// and marker holders, `grace`, KILL rounds), then envd's SIGKILL if it reported
    /// survivors or could not run. Returns once the kill is done (not the exit).
    pub(crate) async fn kill(&self, grace: Duration) -> Result<(), Error> {
        // Wait for the start (or its failure); a failed start still has envd's pid or
        // the marker to go by.
        let _ = self.started().await;
        if self.reaped.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.kill_target(self.leader(), grace).await
    }

    async fn kill_target(&self, s: Started, grace: Duration) -> Result<(), Error> {
        let tree = self
            .world
            .shell
            .kill_tree(
                s.pid,
                &self.marker,
                grace,
                self.terminal,
                self.cgroup.get().map_or("", String::as_str),
            )
            .await;
        if !matches!(tree, Ok(true)) && s.envd_pid != NO_LEADER {
            tracing::warn!(
                pid = s.pid,
                ?tree,
                "tree kill incomplete; envd SIGKILL as the last resort"
            );
            match self
                .world
                .api
                .send_signal(ProcessSelector::Pid(s.envd_pid), EnvdSignal::Sigkill)
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    return Err(match tree {
                        Err(t) => t,
                        Ok(_) => e.into_world("killing the process"),
                    });
                }
            }
        } else if !tree? {
            // Marker only (no leader known) and the script reported survivors.
            return Err(Error::other("some survived the tree kill").with_op(format!(
                "terminating the processes of spawn {}",
                self.marker
            )));
        }
        self.reaped.store(true, Ordering::SeqCst);
        // Nothing of the tree is alive: what is still queued upstream is bounded, so
        // stop applying back-pressure and let the end event through.
        self.out.relax();
        if let Some(e) = &self.err {
            e.relax();
        }
        self.poke();
        Ok(())
    }

    /// `terminate`: the kill path, then the leader's status.
    pub(crate) async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.kill(grace).await?;
        self.wait().await
    }

    /// True once the process's exit was observed (its end event).
    fn exited(&self) -> bool {
        matches!(&*self.status.borrow(), Some(Ok(_)))
    }

    /// Called from the backend's `Drop`: unless detached, already reaped, or a pipe
    /// process whose exit was observed, kill the tree from a background task (no grace).
    /// A process that ended with an error (lost stream) is killed again if the kill
    /// after the loss did not finish.
    pub(crate) fn drop_kill(self: &Arc<Self>) {
        if self.detached.load(Ordering::SeqCst)
            || self.reaped.load(Ordering::SeqCst)
            || (self.exited() && !self.terminal)
        {
            return;
        }
        let me = self.clone();
        self.handle.spawn(async move {
            if let Err(e) = me.kill(Duration::ZERO).await {
                tracing::warn!(error = %e, "kill on drop failed");
            }
        });
    }
}

/// Longest backstop (100 years): a longer `kill_after` (`Duration::MAX` included) is
/// this one, which the helper's 10-digit numbers and `timeout` both take.
pub(crate) const MAX_KILL_AFTER_SECS: u64 = 100 * 365 * 24 * 3600;

/// A backstop in whole seconds (rounded up, at most [`MAX_KILL_AFTER_SECS`]): the
/// native helper's `--kill-after`, or `timeout -s KILL`'s.
pub(crate) fn kill_after_secs(after: Option<Duration>) -> Option<String> {
    after.map(|d| {
        d.as_secs()
            .saturating_add(u64::from(d.subsec_nanos() > 0))
            .min(MAX_KILL_AFTER_SECS)
            .to_string()
    })
}

/// The envd `Start` of the spawn helper (after the user lookup and the helper's
/// placement; terminals upload their spec file first). Contained mode starts it as root
/// with the spawn's cgroup name; plain mode as the acting user.
async fn start(
    world: &Arc<WorldShared>,
    session: &Session,
    mut launch: Launch,
) -> Result<(ProcessStream, Option<LeaseHold>), Error> {
    if let Some(booted) = crate::boot::first_spawn(world, session, &launch).await? {
        return Ok(booted);
    }
    let (info, setup) = world.ready().await?;
    launch.wrap.home = info.home.clone();
    launch.wrap.shell = info.shell.clone();
    launch.wrap.user = info.name.clone();
    launch.wrap.path = info.path.clone();
    if launch.wrap.program.is_empty() {
        launch.wrap.program = info.shell.clone();
    }
    let terminal = launch.pty.is_some();
    let durable = launch.durable.take();
    let ids = match (&setup.cgroup, &durable) {
        (None, None) => Ids::default(),
        _ => world.drop_ids(&info).await?.unwrap_or_default(),
    };
    let cgroup = setup.cgroup.as_ref().map(|cg| {
        let name = world.take_cgroup(terminal, session.group.as_deref());
        let _ = session.cgroup_name.set(name.clone());
        (cg, name)
    });
    let user = match (&cgroup, &durable) {
        (None, None) => info.name.clone(),
        _ => "root".to_owned(),
    };
    // Piped spawns start the native helper when it was placed: it is the whole chain
    // (session, cgroup, drop, exec). Terminals and the rest use the `sh` helper.
    let native = setup.native.as_ref().filter(|_| launch.pty.is_none());
    if durable.is_some() && native.is_none() {
        return Err(Error::unsupported(
            "durable commands need the native spawn helper (this build or this sandbox has none)",
        )
        .with_op(format!("starting {}", launch.wrap.program)));
    }
    // The backstop, in whole seconds: the native helper's `--kill-after`, else `timeout
    // -s KILL` in front of the program (it kills its process group).
    let kill_after = kill_after_secs(launch.kill_after);
    if let (Some(secs), None) = (&kill_after, native) {
        let program = std::mem::replace(&mut launch.wrap.program, "timeout".to_owned());
        launch.wrap.args.splice(
            0..0,
            ["-s".to_owned(), "KILL".to_owned(), secs.clone(), program],
        );
    }
    let mut argv: Vec<String> = match (&cgroup, native) {
        (Some((cg, name)), Some(_)) => vec![
            "--root".to_owned(),
            cg.mount.clone(),
            name.clone(),
            ids.uid,
            ids.gid,
            ids.groups,
        ],
        // Durable without a cgroup: root for the watcher, no cgroup, the drop.
        (None, Some(_)) if durable.is_some() => vec![
            "--root".to_owned(),
            String::new(),
            String::new(),
            ids.uid,
            ids.gid,
            ids.groups,
        ],
        (None, Some(_)) => vec!["--user".to_owned()],
        (Some((cg, name)), None) => vec![
            setup.helper.clone(),
            "--root".to_owned(),
            cg.mount.clone(),
            name.clone(),
            cg.setpriv.clone(),
            ids.uid,
            ids.gid,
        ],
        (None, None) => vec![
            setup.helper.clone(),
            "--user".to_owned(),
            "0".to_owned(),
            String::new(),
        ],
    };
    let mut hold = None;
    let mut spec = match (launch.pty, native) {
        (None, Some(native)) => {
            // `[--kill-after SECS] [--lease FILE SECS]`, in that order.
            if let Some(lease) = &launch.lease {
                let (h, args) = lease.hold(&world.api, &setup.dir);
                hold = Some(h);
                argv.splice(0..0, args);
            }
            if let Some(secs) = kill_after {
                argv.splice(0..0, ["--kill-after".to_owned(), secs]);
            }
            let mut start = StartProcess::new(native.clone());
            if let Some(d) = &durable {
                argv.splice(0..0, d.argv());
                start = start.tag(d.id.to_string());
            }
            argv.extend(launch.wrap.positional());
            start.args(argv).stdin(launch.stdin)
        }
        (None, None) => {
            if let Some(lease) = &launch.lease {
                lease.unavailable();
            }
            argv.extend(launch.wrap.positional());
            StartProcess::new("setsid")
                .args(
                    ["-w".to_owned(), "/bin/sh".to_owned()]
                        .into_iter()
                        .chain(argv),
                )
                .stdin(launch.stdin)
        }
        (Some((cols, rows)), _) => {
            // Contained: the root part sources the file, so it lives in the root-owned
            // helper directory and is written by root; plain: the user's state directory.
            let dir = match &setup.cgroup {
                Some(_) => setup.dir.clone(),
                None => world.state_dir(&info).await?,
            };
            let file = format!("{dir}/term-{}.sh", e2b_core::trusted_shell::random_suffix());
            world.shell.make_private_file(&file, &user).await?;
            world
                .api
                .upload_bytes(&file, Some(&user), Bytes::from(launch.wrap.spec_file()))
                .await
                .map_err(|e| {
                    e.into_world("writing the terminal spec file")
                        .with_path(&file)
                })?;
            argv.extend(["--file".to_owned(), file]);
            StartProcess::new("/bin/sh").args(argv).pty(cols, rows)
        }
    };
    spec = spec.user(user).cwd(launch.cwd.clone());
    if let Some(d) = &durable {
        crate::durable::settle(&d.after).await;
    }
    if let Some(t) = world.process_timeout {
        spec = spec.timeout(t);
    }
    let stream = world.api.start_process(spec).await.map_err(|e| {
        e.into_world(format!(
            "starting {} in {}",
            launch.wrap.program, launch.cwd
        ))
    })?;
    Ok((stream, hold))
}

impl Drop for Session {
    /// The spawn is over (its kill, if any, has run: the kill tasks hold the session):
    /// its cgroup name goes back to the adapter for reuse, unless the process was
    /// detached and may still live in it.
    fn drop(&mut self) {
        if self.detached.load(Ordering::SeqCst) {
            return;
        }
        let name = self
            .cgroup
            .get()
            .and_then(|d| d.rsplit('/').next())
            .map(str::to_owned)
            .or_else(|| self.cgroup_name.get().cloned());
        if let Some(name) = name {
            self.world
                .give_back_cgroup(self.terminal, self.group.clone(), name);
        }
    }
}
