//! Spare sandboxes: a sandbox booted ahead of the create that will need it.
//!
//! After a create, the emulator boots one more sandbox of the same kind (template,
//! internet access, hidden directories) in the background: its tree laid out and
//! allowlisted ([`super::Prepared`]) and, with the boundary, all of it
//! ([`super::Booted`]): user, network (with pasta for internet access), cgroup, mount,
//! PID, UTS and time namespaces, the holder as its PID 1 with `/proc` and a fresh boot id,
//! the limit groups and envd's file workers. It is made under `sandboxes/.making-*` and
//! renamed to `.spare-*` once whole. The next create of that kind renames the directory
//! to its own root and has nothing left to build but envd's routes; so a create costs
//! about what it costs without the boundary. The sandbox's clocks (`/proc/uptime`, PID
//! 1's start) count from when it was booted, not from the create (PID 1 must not start
//! before its clocks' zero). No process but the holder (`sleep`) runs in a spare before it
//! is taken.
//!
//! A refill begins [`QUIET_AFTER`] after the sandbox just created ended its first command
//! (or [`REFILL_AFTER`] after the create without one), at nice 10 ([`BACKGROUND_NICE`]): a
//! harness's first command comes right after the create, and a spare made meanwhile would
//! share the two cores and the kernel's namespace locks with it and leave the emulator's
//! memory copy-on-write behind each fork (pasta is set back to nice 0).
//!
//! A create that finds the spare for it still being made (or waiting to begin) hurries it
//! (begun now, at nice 0) and waits for it rather than building a second sandbox beside
//! it on the same cores. A spare of another kind than the last create's is dropped; one
//! whose holder or pasta ended is dropped, never handed out; a create that finds none
//! boots as without spares and reports its own failures (a spare that failed to build is
//! forgotten). `E2B_LOCAL_SPARES` sets how many are kept (default 1, `0` turns them off);
//! a spare with internet access holds a pasta process (about 21 MB resident) while it
//! waits.
//!
//! A create storm (a create that finds its spare still being made) makes one more spare
//! at once per such create, up to [`MAX_BURST`] beyond the configured number, with as
//! many more uplinks ([`super::uplink_pool`]): a boot waits on the kernel more than it
//! uses the cores, so boots side by side keep up where one at a time cannot. Once no
//! create came for [`BURST_IDLE`], the ready spares beyond the configured number are
//! dropped and the burst ends.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Booted, EnvdConfig, Prepared};
use crate::template::Template;

/// What makes two sandboxes' spares interchangeable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kind {
    template: Template,
    internet: bool,
    hidden: Vec<PathBuf>,
}

impl Kind {
    /// The kind of `cfg`'s sandbox; `None` when it cannot have a spare (its volumes are
    /// its own).
    fn of(cfg: &EnvdConfig) -> Option<Kind> {
        cfg.volumes.is_empty().then(|| Kind {
            template: cfg.template.clone(),
            internet: cfg.allow_internet,
            hidden: cfg.hidden.clone(),
        })
    }
}

/// One sandbox prepared ahead: its directory, laid out, and its [`Parts`].
pub(crate) struct Spare {
    kind: Kind,
    /// `None` once moved to its sandbox's root.
    root: Option<PathBuf>,
    prepared: Option<Prepared>,
    /// With the boundary: the sandbox booted (holder, namespaces, file workers).
    booted: Option<Booted>,
}

impl Spare {
    /// Prepare a spare of `kind` at `making` (a directory that does not exist yet), then
    /// rename it to `ready`: a `.spare-*` directory is a whole spare.
    fn build(kind: Kind, making: PathBuf, ready: PathBuf) -> Result<Spare, super::EnvdError> {
        let root = making;
        let mut spare = Spare {
            kind,
            root: Some(root.clone()),
            prepared: None,
            booted: None,
        };
        let cfg = EnvdConfig {
            sandbox_id: String::new(),
            template: spare.kind.template.clone(),
            root: root.clone(),
            access_token: None,
            env_vars: Default::default(),
            allow_internet: spare.kind.internet,
            volumes: Vec::new(),
            hidden: spare.kind.hidden.clone(),
        };
        std::fs::create_dir_all(&root)
            .map_err(super::io_err(format!("creating {}", root.display())))?;
        spare.prepared = Some(super::prepare(&cfg, &root)?);
        // Without the boundary (`--no-isolation`) only the tree is prepared.
        if !super::isolation::opted_out()
            && let Some(prepared) = &spare.prepared
        {
            spare.booted = Some(super::boot_isolation(&cfg, &root, prepared.clone())?);
        }
        std::fs::rename(&root, &ready)
            .map_err(super::io_err(format!("renaming {}", root.display())))?;
        spare.root = Some(ready);
        Ok(spare)
    }

    /// Rename the spare's directory to `root` and hand out what was prepared (nothing
    /// booted without the boundary); `None` (the spare dropped) when a part died
    /// meanwhile or the rename fails.
    pub(super) fn move_to(mut self, root: &Path) -> Option<(Prepared, Option<Booted>)> {
        if !self.booted.as_ref().is_none_or(Booted::whole) {
            return None;
        }
        let from = self.root.as_ref()?;
        if let Some(parent) = root.parent() {
            std::fs::create_dir_all(parent).ok()?;
        }
        // Never onto an existing directory (rename would replace an empty one).
        if std::fs::symlink_metadata(root).is_ok() {
            return None;
        }
        std::fs::rename(from, root).ok()?;
        self.root = None;
        Some((self.prepared.take()?, self.booted.take()))
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        self.booted.take();
        if let Some(root) = self.root.take() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// The spares of one emulator, for the kind of sandbox created last.
pub(crate) struct Spares {
    /// Where spares are laid out: beside the sandboxes (`<state>/sandboxes`).
    dir: PathBuf,
    state: Mutex<State>,
    /// Told whenever a spare being made is ready or given up.
    built: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    /// The kind spares are made for (the last create's).
    kind: Option<Kind>,
    ready: Vec<Spare>,
    making: usize,
    /// The refills waiting to begin, and the threads of those begun (to hurry them).
    waiting: Vec<Arc<Go>>,
    builders: Vec<libc::pid_t>,
    closed: bool,
    /// Spares made beyond [`target`] while creates come faster than one spare is made
    /// (a create storm), at most [`MAX_BURST`]; see [`Spares::take`].
    burst: usize,
    /// When a create last took (or waited for) a spare.
    last_take: Option<Instant>,
}

/// When a refill may begin ([`Spares::refill`]): once the new sandbox has been quiet
/// ([`QUIET_AFTER`] after its first command ended, or [`REFILL_AFTER`] after the create
/// without one), or at once when a create needs the spare (hurried).
struct Go {
    created: Instant,
    state: Mutex<GoState>,
    cv: Condvar,
}

#[derive(Default)]
struct GoState {
    ended: Option<Instant>,
    hurried: bool,
}

impl Go {
    fn new() -> Go {
        Go {
            created: Instant::now(),
            state: Mutex::new(GoState::default()),
            cv: Condvar::new(),
        }
    }

    /// The new sandbox's first command ended (or the sandbox is gone).
    fn ended(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.ended.get_or_insert_with(Instant::now);
        }
        self.cv.notify_all();
    }

    /// Begin now.
    fn hurry(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.hurried = true;
        }
        self.cv.notify_all();
    }

    /// Until the refill may begin.
    fn wait(&self) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        loop {
            if st.hurried {
                return;
            }
            let due = match st.ended {
                Some(t) => t + QUIET_AFTER,
                None => self.created + REFILL_AFTER,
            };
            let Some(left) = due.checked_duration_since(Instant::now()) else {
                return;
            };
            st = match self.cv.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(_) => return,
            };
        }
    }
}

/// Lets a refill begin when dropped: the new sandbox holds it until its first command
/// ended (or the sandbox is gone), see [`Spares::refill`].
pub(crate) struct Trigger(Arc<Go>);

impl Drop for Trigger {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// The nice value of the threads that make spares (and of what they start, pasta reset
/// to 0): a spare is made while the sandbox just created runs its first commands, on the
/// same cores, and must yield to them. A create that waits for one sets it back to 0.
pub(crate) const BACKGROUND_NICE: libc::c_int = 10;

/// How long a refill waits at most for the new sandbox's first command to end before it
/// begins ([`Spares::refill`]): a harness runs its first command right after the create,
/// and a spare made meanwhile would slow it down (namespaces, mounts and pasta's start
/// take the kernel's locks and the second core, and each fork of the emulator leaves its
/// memory copy-on-write for a while).
const REFILL_AFTER: Duration = Duration::from_millis(100);

/// How long after the new sandbox's first command ended a refill begins: the end of that
/// command's stream is still being sent then (measured: beginning at once added 1-2 ms
/// to the first command).
const QUIET_AFTER: Duration = Duration::from_millis(50);

/// How long a create waits at most for a spare being made ([`Spares::take`]) before it
/// builds its own.
const TAKE_WAIT: Duration = Duration::from_secs(2);

/// At most how many spares beyond [`target`] are made during a create storm.
const MAX_BURST: usize = 3;

/// How long spares made for a storm ([`MAX_BURST`]) are kept unused: a create within
/// that time of the last one is still the storm's; after it they are dropped (with
/// internet access each holds a pasta process) and the burst is over.
const BURST_IDLE: Duration = Duration::from_secs(2);

/// How many spares to keep (`E2B_LOCAL_SPARES`, default 1).
fn target() -> usize {
    std::env::var("E2B_LOCAL_SPARES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
}

fn renice(tid: libc::pid_t, nice: libc::c_int) {
    // SAFETY: setpriority on a thread id of this process.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
}

/// Whether this process may give a thread back the usual priority once it lowered it
/// (`CAP_SYS_NICE`): probed once, by raising the calling thread's priority one step and
/// restoring it. Without it, spares are made at the usual priority: what their threads
/// start (a sandbox's commands, through its file workers) would keep the lower one.
fn can_undo_nice() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        // SAFETY: getpriority/setpriority/gettid on the calling thread.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            if *libc::__errno_location() != 0 {
                return false;
            }
            let raised = libc::setpriority(libc::PRIO_PROCESS, tid, now - 1) == 0;
            if raised {
                libc::setpriority(libc::PRIO_PROCESS, tid, now);
            }
            raised
        }
    })
}

impl Spares {
    /// The spares of an emulator whose sandboxes live in `dir`.
    pub(crate) fn new(dir: PathBuf) -> Arc<Spares> {
        Arc::new(Spares {
            dir,
            state: Mutex::new(State::default()),
            built: tokio::sync::Notify::new(),
        })
    }

    /// A spare for `cfg`'s sandbox: one ready, or the one being made for it, which is
    /// hurried (begun now, at the usual priority) and awaited; `None` when there is none
    /// (or it failed, or took longer than [`TAKE_WAIT`]): the create builds its own.
    /// The spare has a head start over building anew, which would also compete with it.
    pub(crate) async fn take(&self, cfg: &EnvdConfig) -> Option<Spare> {
        let kind = Kind::of(cfg)?;
        let deadline = tokio::time::Instant::now() + TAKE_WAIT;
        let mut first = true;
        loop {
            let built = self.built.notified();
            {
                let mut state = self.state.lock().ok()?;
                if first {
                    first = false;
                    let now = Instant::now();
                    // A create long after the last one: any storm is over.
                    if state.last_take.is_none_or(|t| now - t > BURST_IDLE) {
                        state.burst = 0;
                    }
                    state.last_take = Some(now);
                    // Creates faster than spares are made: make more at once (their
                    // boots wait on the kernel more than they use the cores, so they
                    // overlap), up to MAX_BURST beyond the target.
                    if !state.ready.iter().any(|s| s.kind == kind)
                        && state.making > 0
                        && state.kind.as_ref() == Some(&kind)
                    {
                        state.burst = (state.burst + 1).min(MAX_BURST);
                    }
                    if kind.internet {
                        super::uplink_pool::set_burst(state.burst);
                    }
                }
                if let Some(i) = state.ready.iter().position(|s| s.kind == kind) {
                    return Some(state.ready.swap_remove(i));
                }
                if state.making == 0 || state.kind.as_ref() != Some(&kind) {
                    return None;
                }
                for go in state.waiting.drain(..) {
                    go.hurry();
                }
                for tid in &state.builders {
                    renice(*tid, 0);
                }
            }
            tokio::time::timeout_at(deadline, built).await.ok()?;
        }
    }

    /// Make spares of `cfg`'s kind in the background until [`target`] are ready or being
    /// made; spares of another kind are dropped. They begin [`QUIET_AFTER`] after the
    /// returned [`Trigger`] is dropped (held by the new sandbox until its first command
    /// ended), [`REFILL_AFTER`] after now if it is not, or when a create hurries them.
    pub(crate) fn refill(self: &Arc<Self>, cfg: &EnvdConfig) -> Trigger {
        let go = Arc::new(Go::new());
        let trigger = Trigger(go.clone());
        let Some(kind) = Kind::of(cfg) else {
            return trigger;
        };
        let (missing, dropped) = {
            let Ok(mut state) = self.state.lock() else {
                return trigger;
            };
            if state.closed {
                return trigger;
            }
            let want = match target() {
                0 => 0,
                n => n + state.burst,
            };
            let mut dropped = Vec::new();
            if state.kind.as_ref() != Some(&kind) {
                dropped = std::mem::take(&mut state.ready);
                state.kind = Some(kind.clone());
            }
            let n = want.saturating_sub(state.ready.len() + state.making);
            state.making += n;
            if n > 0 {
                state.waiting.push(go.clone());
            }
            (n, dropped)
        };
        drop(dropped);
        static N: AtomicU64 = AtomicU64::new(0);
        for _ in 0..missing {
            let go = go.clone();
            let me = self.clone();
            let kind = kind.clone();
            let n = N.fetch_add(1, Ordering::Relaxed);
            let name = format!("{}-{n}", std::process::id());
            let making = self.dir.join(format!(".making-{name}"));
            let ready = self.dir.join(format!(".spare-{name}"));
            let spawned = std::thread::Builder::new()
                .name("envd-spare".into())
                .spawn(move || me.make(&go, kind, making, ready));
            if spawned.is_err()
                && let Ok(mut state) = self.state.lock()
            {
                state.making -= 1;
            }
        }
        trigger
    }

    /// One refill's thread: wait for `go`, make the spare, hand it in (or undo it).
    fn make(&self, go: &Go, kind: Kind, making: PathBuf, ready: PathBuf) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        if can_undo_nice() {
            renice(tid, BACKGROUND_NICE);
        }
        go.wait();
        let begun = match self.state.lock() {
            Ok(mut state) => {
                state.waiting.retain(|w| !std::ptr::eq(Arc::as_ptr(w), go));
                if !state.closed {
                    state.builders.push(tid);
                }
                !state.closed
            }
            Err(_) => false,
        };
        let built = begun.then(|| Spare::build(kind, making, ready));
        let late = match self.state.lock() {
            Ok(mut state) => {
                state.builders.retain(|t| *t != tid);
                match built {
                    Some(Ok(s)) if !state.closed && state.kind.as_ref() == Some(&s.kind) => {
                        state.ready.push(s);
                        state.making -= 1;
                        let beyond = state.ready.len() > target();
                        drop(state);
                        self.built.notify_waiters();
                        if beyond {
                            self.trim_after_burst();
                        }
                        return;
                    }
                    Some(Ok(s)) => Some(s),
                    Some(Err(e)) => {
                        tracing::debug!("a spare sandbox could not be prepared: {e}");
                        None
                    }
                    None => None,
                }
            }
            Err(_) => return,
        };
        // Undone before it stops counting, so `close` sees nothing left.
        drop(late);
        if let Ok(mut state) = self.state.lock() {
            state.making -= 1;
        }
        self.built.notify_waiters();
    }

    /// On the thread of a spare made beyond [`target`] (a storm's): once no create took
    /// one for [`BURST_IDLE`], drop the ready spares beyond the target and end the burst.
    fn trim_after_burst(&self) {
        let since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let extra = {
                let Ok(mut state) = self.state.lock() else {
                    return;
                };
                if state.closed || state.ready.len() <= target() {
                    return;
                }
                let last = state.last_take.map_or(since, |t| t.max(since));
                if last.elapsed() < BURST_IDLE {
                    continue;
                }
                state.burst = 0;
                let keep = target();
                state.ready.split_off(keep)
            };
            drop(extra);
            super::uplink_pool::set_burst(0);
            return;
        }
    }

    /// Drop every ready spare, make no more, and wait (at most 10 s) until the ones being
    /// made are undone: the emulator stops and leaves nothing behind.
    pub(crate) async fn close(&self) {
        let ready = match self.state.lock() {
            Ok(mut state) => {
                state.closed = true;
                for go in state.waiting.drain(..) {
                    go.hurry();
                }
                std::mem::take(&mut state.ready)
            }
            Err(_) => return,
        };
        drop(ready);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state.lock().is_ok_and(|s| s.making > 0) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
