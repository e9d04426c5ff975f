//! Routing envd's event stream of one process into its output queues, driven by whoever
//! needs progress: the consumer of stdout (or stderr, or the terminal output) polls the
//! stream itself while its queue is empty, so a chunk goes from the HTTP body to the
//! reader with no task in between; the session's background task drives it when no
//! reader polls (nobody reads, or readers went quiet), so the start header, stderr, the
//! end event and a lost stream are handled even when nobody reads.
//!
//! The stream is polled with one waker of its own (`Fan`), which wakes the readers that
//! polled since its last wake, or the background task when none did. A reader that
//! stops polling while registered (a `select!` that dropped its `next()`) would keep
//! that wake to itself: the background task ticks (50 ms while readers poll, backing
//! off to 2 s while nothing happens) and drives when readers were quiet for a tick or a
//! wake is left unhandled, so such a stall lasts about a tick. What the guarantees need
//! is unchanged: bounded queues (a refused chunk is held and reading stops), the header
//! line parsed before any output, stderr routed apart, the queues closed with the
//! stream's error, and the tree kill after a lost stream before `started()` / `wait()`
//! report it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use e2b_core::ProcessStream;
use e2b_core::proto::process::{DataEvent, EndEvent, ProcessEvent};
use exec_world::{Error, ErrorKind, ExitStatus, OutputStream};
use futures::Stream;
use tokio::sync::watch;

use crate::queue::{Item, Queue};
use crate::session::{Session, StartState, Started, StatusState};
use crate::status::exit_status;
use crate::wrapper::{Header, parse_header};

/// The longest header line accepted before the program's own output.
const MAX_HEADER: usize = 512;

/// Events one background drive routes before it yields to other tasks.
const BG_BUDGET: usize = 64;

/// The background task's tick after readers drove (it catches a reader that stopped
/// polling with the stream's wake), doubled while nothing happens, up to `TICK_MAX`.
const TICK_MIN: Duration = Duration::from_millis(50);
const TICK_MAX: Duration = Duration::from_secs(2);

/// Who drives the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Party {
    /// The consumer of stdout (or the terminal output).
    Out,
    /// The consumer of stderr.
    Err,
    /// The session's background task.
    Bg,
}

/// The waker the stream is polled with: wakes the readers that wait, else the
/// background task; `news` says the stream (or a queue's room) changed since the last
/// drive.
#[derive(Default)]
pub(crate) struct Fan {
    slots: Mutex<Slots>,
    /// Polls by readers so far (the background task's tick watches it).
    activity: AtomicU64,
}

#[derive(Default)]
struct Slots {
    out: Option<Waker>,
    err: Option<Waker>,
    bg: Option<Waker>,
    news: bool,
}

impl Fan {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, party: Party, waker: &Waker) {
        if party != Party::Bg {
            self.activity.fetch_add(1, Ordering::Relaxed);
        }
        let mut s = self.lock();
        let slot = match party {
            Party::Out => &mut s.out,
            Party::Err => &mut s.err,
            Party::Bg => &mut s.bg,
        };
        match slot {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    /// A drive starts: what happened so far is being handled.
    fn begin(&self) {
        self.lock().news = false;
    }

    /// True when something happened that no drive has handled yet.
    fn news(&self) -> bool {
        self.lock().news
    }

    /// Wakes the background task (a reader saw the stream end: the task returns and
    /// lets the session go, which gives its cgroup back, without waiting for a tick).
    fn wake_bg(&self) {
        let bg = self.lock().bg.take();
        if let Some(w) = bg {
            w.wake();
        }
    }

    /// Wakes the waiting readers, else the background task.
    pub(crate) fn notify(&self) {
        let (a, b, c) = {
            let mut s = self.lock();
            s.news = true;
            let a = s.out.take();
            let b = s.err.take();
            let c = if a.is_none() && b.is_none() {
                s.bg.take()
            } else {
                None
            };
            (a, b, c)
        };
        for w in [a, b, c].into_iter().flatten() {
            w.wake();
        }
    }
}

impl Wake for Fan {
    fn wake(self: Arc<Self>) {
        self.notify();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notify();
    }
}

/// The routing state, behind the session's lock (held while the stream is polled).
pub(crate) struct Route {
    /// The event stream, once started; `None` again after its end.
    stream: Option<ProcessStream>,
    /// Set once the stream ended (or the start failed): the queues are (being) closed.
    done: bool,
    program: String,
    envd_pid: u32,
    /// The header line so far; `None` once parsed.
    header: Option<Vec<u8>>,
    failure: Option<Error>,
    end: Option<EndEvent>,
    broken: Option<Error>,
    /// A chunk a full queue refused (true: stderr), pushed before anything else.
    held: Option<(bool, Bytes)>,
    started_tx: Option<watch::Sender<StartState>>,
    status_tx: Option<watch::Sender<StatusState>>,
}

impl Route {
    pub(crate) fn new(
        program: String,
        started_tx: watch::Sender<StartState>,
        status_tx: watch::Sender<StatusState>,
    ) -> Route {
        Route {
            stream: None,
            done: false,
            program,
            envd_pid: 0,
            header: Some(Vec::new()),
            failure: None,
            end: None,
            broken: None,
            held: None,
            started_tx: Some(started_tx),
            status_tx: Some(status_tx),
        }
    }
}

/// What a drive did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drive {
    /// Something was routed (the caller looks at its queue again).
    Progress,
    /// Nothing to do now: the caller's waker is registered for the next change.
    Idle,
    /// The stream is over.
    Done,
}

/// What routing one event did.
enum Step {
    /// Routed; `Some(p)`: into the queue of reader `p`.
    Routed(Option<Party>),
    /// A full queue refused the chunk (now held).
    Held,
    /// The stream is over.
    Finished,
}

impl Session {
    fn route(&self) -> std::sync::MutexGuard<'_, Route> {
        self.route.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queue(&self, stderr: bool) -> Option<&Queue> {
        if stderr {
            self.err.as_ref()
        } else {
            Some(&self.out)
        }
    }

    /// The start failed before any stream: publish `e` and close the queues.
    pub(crate) fn fail_start(&self, e: Error) {
        let (started_tx, status_tx) = {
            let mut r = self.route();
            r.done = true;
            (r.started_tx.take(), r.status_tx.take())
        };
        if let Some(tx) = started_tx {
            let _ = tx.send(Some(Err(e.clone())));
        }
        self.out.close(Ok(()));
        if let Some(q) = &self.err {
            q.close(Ok(()));
        }
        if let Some(tx) = status_tx {
            let _ = tx.send(Some(Err(e)));
        }
        self.fan.notify();
    }

    /// The stream is open: route it from now on (the caller then runs [`Session::pump`]).
    pub(crate) fn install(&self, stream: ProcessStream) {
        let mut r = self.route();
        r.envd_pid = stream.pid();
        r.stream = Some(stream);
        drop(r);
        self.fan.notify();
    }

    /// Wakes whoever drives (a queue made room, a reader left, the tree is dead).
    pub(crate) fn poke(&self) {
        self.fan.notify();
    }

    /// Routes what the stream has ready, for `party` (whose waker `cx` holds). Readers
    /// stop once their own queue got a chunk; the background task after a budget.
    pub(crate) fn drive(self: &Arc<Self>, cx: &mut Context<'_>, party: Party) -> Drive {
        self.fan.register(party, cx.waker());
        let mut r = self.route();
        if r.done {
            return Drive::Done;
        }
        let Some(mut stream) = r.stream.take() else {
            return Drive::Idle; // not started yet
        };
        self.fan.begin();
        // A reader may be polled outside any runtime (futures' executor on a plain
        // thread): the stream's timers belong to the session's runtime.
        let _rt = self.handle.enter();
        let mut progress = false;
        if let Some((stderr, chunk)) = r.held.take() {
            match self.queue(stderr).map(|q| q.try_push(chunk)) {
                Some(Err(chunk)) => {
                    r.held = Some((stderr, chunk));
                    r.stream = Some(stream);
                    return Drive::Idle;
                }
                _ => progress = true,
            }
        }
        let mut fcx = Context::from_waker(&self.fan_waker);
        let mut budget = BG_BUDGET;
        let outcome = loop {
            let ev = match Pin::new(&mut stream).poll_next(&mut fcx) {
                Poll::Pending => break None,
                Poll::Ready(ev) => ev,
            };
            match self.route_event(&mut r, ev) {
                Step::Finished => break Some(Drive::Done),
                Step::Held => break None,
                Step::Routed(to) => {
                    progress = true;
                    if to == Some(party) {
                        break None;
                    }
                }
            }
            budget -= 1;
            if budget == 0 {
                break None;
            }
        };
        if outcome == Some(Drive::Done) {
            drop(stream);
            self.finish(&mut r);
            if party != Party::Bg {
                self.fan.wake_bg();
            }
            return Drive::Done;
        }
        r.stream = Some(stream);
        if progress {
            Drive::Progress
        } else {
            Drive::Idle
        }
    }

    /// Routes one event (the header line first: it publishes the start).
    fn route_event(
        &self,
        r: &mut Route,
        ev: Option<Result<ProcessEvent, e2b_core::Error>>,
    ) -> Step {
        let ev = match ev {
            None => return Step::Finished,
            // The exit was observed: what breaks after it (envd's `deadline_exceeded`
            // right after the end event of a process timeout, a lost trailer) changes
            // nothing.
            Some(Err(_)) if r.end.is_some() => return Step::Finished,
            Some(Err(e)) => {
                let e = e.into_world("reading the process's events");
                r.failure.get_or_insert_with(|| e.clone());
                r.broken = Some(e);
                return Step::Finished;
            }
            Some(Ok(ev)) => ev,
        };
        match ev {
            ProcessEvent::Data(DataEvent::Stdout(b) | DataEvent::Pty(b)) => {
                let mut data = Bytes::from(b);
                if let Some(buf) = r.header.as_mut() {
                    let nl = data.iter().position(|c| *c == b'\n');
                    let take = nl.map(|i| i + 1).unwrap_or(data.len());
                    buf.extend_from_slice(&data.split_to(take));
                    if nl.is_some() || buf.len() > MAX_HEADER {
                        let line = buf.strip_suffix(b"\n").unwrap_or(buf);
                        let outcome = self.parse_start(line, &r.program, r.envd_pid);
                        if let Err(f) = &outcome {
                            r.failure = Some(f.clone());
                        }
                        if let Some(tx) = &r.started_tx {
                            let _ = tx.send(Some(outcome));
                        }
                        r.header = None;
                    }
                }
                if r.header.is_some() || r.failure.is_some() {
                    return Step::Routed(None);
                }
                self.push(r, false, data)
            }
            ProcessEvent::Data(DataEvent::Stderr(b)) => self.push(r, true, Bytes::from(b)),
            ProcessEvent::End(e) => {
                r.end = Some(e);
                Step::Routed(None)
            }
            ProcessEvent::Start(_) | ProcessEvent::Keepalive(_) => Step::Routed(None),
        }
    }

    fn push(&self, r: &mut Route, stderr: bool, data: Bytes) -> Step {
        let Some(q) = self.queue(stderr) else {
            return Step::Routed(None);
        };
        if data.is_empty() {
            return Step::Routed(None);
        }
        match q.try_push(data) {
            Ok(()) => Step::Routed(Some(if stderr { Party::Err } else { Party::Out })),
            Err(data) => {
                r.held = Some((stderr, data));
                Step::Held
            }
        }
    }

    /// The start the header line reports.
    fn parse_start(&self, line: &[u8], program: &str, envd_pid: u32) -> Result<Started, Error> {
        match parse_header(line) {
            Some(Header::Pgid(pid, cgroup)) => {
                self.note_cgroup(cgroup);
                Ok(Started { pid, envd_pid })
            }
            Some(Header::NotFound) => Err(Error::not_found(program).with_op("spawn")),
            Some(Header::NotExecutable) => Err(Error::permission_denied(program).with_op("spawn")),
            Some(Header::Failed(why)) if crate::durable::refusal(&why).is_some() => {
                Err(crate::durable::refusal(&why)
                    .unwrap_or_else(|| Error::other(why))
                    .with_path(program))
            }
            Some(Header::Failed(why)) => {
                Err(Error::other(format!("the spawn helper refused: {why}"))
                    .with_op("spawn")
                    .with_path(program))
            }
            None => Err(Error::other(format!(
                "unexpected first output line {:?}",
                String::from_utf8_lossy(line)
            ))
            .with_op("spawn")
            .with_path(program)),
        }
    }

    /// The stream is over: the status, then (after the tree kill when the exit was not
    /// observed, in a task) the start fallback, the queues' end and the status.
    fn finish(self: &Arc<Self>, r: &mut Route) {
        r.done = true;
        r.held = None;
        let observed_exit = r.end.is_some();
        let status = match (r.failure.take(), r.end.take()) {
            (Some(f), _) => Err(f),
            (None, Some(e)) if r.header.is_none() => Ok(exit_status(&e)),
            (None, Some(e)) => Err({
                // Its directory may be gone: adapters made later set up afresh.
                self.world.start_failed();
                Error::other(format!(
                    "the spawn helper ended ({}) before starting the program",
                    if e.status.is_empty() {
                        format!("exit code {}", e.exit_code)
                    } else {
                        e.status.clone()
                    }
                ))
                .with_op("spawn")
                .with_path(&r.program)
            }),
            (None, None) => Err(Error::new(ErrorKind::Transport)
                .with_op("reading the process's events")
                .with_detail("the event stream ended without an end event")
                .with_temporary(true)),
        };
        let done = Finished {
            status,
            broken: r.broken.take(),
            started_tx: r.started_tx.take(),
            status_tx: r.status_tx.take(),
        };
        if observed_exit {
            done.publish(self);
            return;
        }
        // No observed exit: the tree may still run. End it before anyone hears of the
        // loss (a new request; the broken stream is not reused).
        let me = self.clone();
        self.handle.spawn(async move {
            let why = done
                .broken
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "the stream ended without an end event".into());
            me.reap_after_loss(&why).await;
            done.publish(&me);
        });
    }

    /// The background task's part: drives while no reader does, until the stream ends.
    pub(crate) async fn pump(self: Arc<Self>) {
        let mut tick = TICK_MIN;
        let mut readers_active = false;
        loop {
            let seen = self.fan.activity.load(Ordering::Relaxed);
            let mut listen_first = readers_active;
            let drive = futures::future::poll_fn(|cx| {
                if std::mem::take(&mut listen_first) {
                    // Readers poll: they drive. Only listen for wakes meant for this
                    // task, unless a wake is left unhandled.
                    self.fan.register(Party::Bg, cx.waker());
                    if !self.fan.news() {
                        return Poll::Pending;
                    }
                }
                let mut rounds = 0;
                loop {
                    match self.drive(cx, Party::Bg) {
                        Drive::Done => return Poll::Ready(()),
                        Drive::Idle => return Poll::Pending,
                        Drive::Progress => {
                            rounds += 1;
                            if rounds == 4 {
                                // Let other tasks run; come back at once.
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                        }
                    }
                }
            });
            match tokio::time::timeout(tick, drive).await {
                Ok(()) => return,
                Err(_) => {
                    // A tick. Readers polled since the last one: they drive, keep
                    // watching closely. Else the next round drives once whatever
                    // happened (a wake a reader kept but never used is handled so),
                    // backing off while nothing happens.
                    let active = self.fan.activity.load(Ordering::Relaxed) != seen;
                    readers_active = active;
                    tick = if active || self.fan.news() {
                        TICK_MIN
                    } else {
                        (tick * 2).min(TICK_MAX)
                    };
                }
            }
        }
    }

    /// A reader of the stdout (`Party::Out`) or stderr queue.
    pub(crate) fn reader(self: &Arc<Self>, party: Party) -> OutputStream {
        Box::pin(Reader {
            session: self.clone(),
            party,
        })
    }
}

/// What the end of the stream publishes.
struct Finished {
    status: Result<ExitStatus, Error>,
    broken: Option<Error>,
    started_tx: Option<watch::Sender<StartState>>,
    status_tx: Option<watch::Sender<StatusState>>,
}

impl Finished {
    fn publish(self, session: &Session) {
        if let Some(tx) = &self.started_tx
            && tx.borrow().is_none()
        {
            let f = match &self.status {
                Err(e) => e.clone(),
                Ok(_) => Error::other("no start header").with_op("spawn"),
            };
            let _ = tx.send(Some(Err(f)));
        }
        let close = match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        };
        session.out.close(close.clone());
        if let Some(q) = &session.err {
            q.close(close);
        }
        if let Some(tx) = self.status_tx {
            let _ = tx.send(Some(self.status));
        }
    }
}

/// The consumer's side of one output queue, as an [`OutputStream`]: pops what is
/// queued, else drives the event stream itself. Dropping it discards further output.
struct Reader {
    session: Arc<Session>,
    party: Party,
}

impl Reader {
    fn queue(&self) -> Option<&Queue> {
        self.session.queue(self.party == Party::Err)
    }

    fn pop(&self) -> Option<Item> {
        let (item, freed) = self.queue()?.try_pop()?;
        if freed {
            // The router may hold a chunk this queue refused.
            self.session.poke();
        }
        Some(item)
    }
}

impl Stream for Reader {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(q) = this.queue() else {
            return Poll::Ready(None);
        };
        // The stream's next wake is this reader's even while it takes queued chunks:
        // else the background task would get it, drive, and stay ahead (a task hop
        // per chunk again).
        this.session.fan.register(this.party, cx.waker());
        loop {
            if let Some(item) = this.pop() {
                return Poll::Ready(item);
            }
            match this.session.drive(cx, this.party) {
                Drive::Progress => continue,
                Drive::Idle | Drive::Done => {}
            }
            // Wait for a push from another driver (or the end), checking once more
            // after registering.
            if !q.register(cx.waker()) {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(q) = self.queue() {
            q.reader_gone();
        }
        // The router may hold a chunk for this queue: it is discarded now.
        self.session.poke();
    }
}
