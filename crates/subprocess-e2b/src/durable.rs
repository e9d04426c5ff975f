//! Durable commands on E2B ([`exec_world::durable`]): a spawn that outlives its `Child`
//! and this host, found again by id from any client of the sandbox.
//!
//! # How it works
//!
//! A durable spawn is one envd `Start`, as root, of the native spawn helper with
//! `--durable STATE ID CAP META` in front of its usual arguments (contained mode: the
//! spawn's cgroup; plain mode: `--root` with no cgroup, only the drop to the user). The
//! envd process carries the id as its tag, so envd's `List` and `Connect` (and the
//! official SDKs' `commands.list()` / `connect(pid)`) see it. Before anything runs the
//! helper makes the record `STATE/ID/` (mode 0700, root): `mkdir` refuses an id that
//! exists (`AlreadyExists`, nothing runs). The state directory ([`DEFAULT_DURABLE_DIR`],
//! [`E2bSubprocessOptions::durable_dir`](crate::E2bSubprocessOptions::durable_dir)) and
//! each of its parents must be a root-owned directory nobody else can write, opened
//! without following links, so the sandbox user can neither read, forge nor swap a
//! record. The helper then forks: the parent stays as the program's watching parent
//! (root, outside its cgroup, session and group) and tees the program's stdout and
//! stderr into a ring of `CAP` bytes per stream (the oldest bytes are overwritten, the
//! total ever written is kept, so drops are counted exactly) and on to envd's stream,
//! enforces the backstop ([`E2bSubprocess::kill_after`](crate::E2bSubprocess::kill_after)),
//! and once the program ended writes its status (`exit N` / `signal N`) and ends as it
//! did. The record layout is in `helper/record.rs`.
//!
//! The spawning `Child` streams as any spawn does (the watcher forwards), but a lost
//! stream or a drop never kills the command; `signal` / `terminate` / stdin work on it.
//!
//! [`durable_attach`](exec_world::Subprocess::durable_attach) is one envd `Start`, as
//! root, of the helper's reader `--tail STATE ID OUT ERR`: it sends the record's
//! description, the streams from the asked offsets (or the oldest kept byte, the
//! difference counted in [`Attached::dropped`]), then live (inotify on the record), then
//! the recorded status, as frames on its stdout (`helper/tail.rs`, `src/frames.rs`).
//! A cut attach stream is resumed from the exact offsets reached (a new `--tail`), so
//! nothing is lost or doubled. Stdin writes and close go to envd's `SendInput` /
//! `CloseStdin` by tag (the watcher shares envd's stdin pipe with the program);
//! `signal` and `terminate` go to the program's pid, group, marker and cgroup through
//! the trusted shell (never to the watcher: its death would make the outcome unknown).
//! Dropping an attached child SIGKILLs its reader, never the command.
//!
//! The state is [`DurableState::Unknown`] (and `wait` is
//! [`exec_world::ErrorKind::OutcomeUnknown`]) when no status
//! was recorded and the sandbox booted since the start (another `boot_id`: a cold resume)
//! or the watcher is gone (no such pid, a zombie, or another start time).
//!
//! [`durable_list`](exec_world::Subprocess::durable_list) is envd's `List` and the
//! helper's `--list` at once (two requests in parallel): every record, plus the
//! processes envd runs with a tag that is a valid id and no record, such as commands the
//! official SDKs started with a tag. Those have no record: listed as running with envd's
//! pid, program, args and cwd (`started` is the Unix epoch: envd does not say), attached
//! live only (envd's `Connect` by tag: output from now on, `start` is zero, the status
//! is envd's end event), and they cannot be collected (`NotFound`).
//! [`durable_collect`](exec_world::Subprocess::durable_collect) is one `--collect`.
//!
//! # Request cost
//!
//! A durable spawn: 1 `Start` (as a plain spawn). An attach: 1 `Start`, plus 1 or 2
//! `GET /files` per stream of an ended record with at least 1 MiB kept (record-less
//! commands: 1 `List` + 1 `Connect`). `durable_list`: 1 `List` + 1 `Start`.
//! `durable_collect`: 1 `Start`. An attached child's `signal`: 1 `Start`;
//! `terminate`: 1 `Start`; its drop before the end: 1 `SendSignal` (the reader).
//!
//! # Limits
//!
//! Durable spawns need the native helper (this build for x86_64 Linux and a sandbox that
//! runs it) and a sandbox where envd may start processes as root; else `Unsupported`.
//! A reader left by a host that died mid-attach runs until the command ends. The
//! command never waits for an attach (the watcher writes the record first): a reader
//! that falls more than the cap behind gets an
//! [`exec_world::ErrorKind::Interrupted`] item naming the
//! offset to attach again from, and that stream ends there. The spawning `Child`'s own
//! streams keep envd's back-pressure while it is held (a slow reader of them slows the
//! command, as for any spawn); once it is dropped its output is discarded.
//! An attach reads through envd's process stream (base64 events), except that a stream
//! of an ended record with at least 1 MiB kept is handed over by the reader (a `b`
//! frame) and fetched from the record's ring file with a ranged root `GET /files` (one
//! or, when the ring wrapped, two), so a large ended record reads at the speed of a file
//! (world-bench `attach_64m`: 0.89x an fs-e2b read of the same bytes, against about half
//! through the process stream). The record's directories are root's and nobody else
//! may write them, so root's `GET` follows no path the sandbox user controls; the ring is
//! final once the status is written. A fetch that fails resumes with a new reader from
//! the exact offset reached.
//! The spawning host keeps the spawn's own event stream open (its output discarded once
//! the `Child` is gone) until the command ends or the host goes. When the acting user is
//! root, the records are not protected from it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessSelector, Signal as EnvdSignal};
use e2b_core::{EnvdApi, ProcessStream, StartProcess};
use exec_world::{
    Attached, Child, ChildBackend, DurableId, DurableInfo, DurableSpec, DurableState, Error,
    ErrorKind, ExitStatus, InputSink, OutputOffsets, OutputStream, Signal, WorldPath,
};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::frames::{Deframer, Frame};
use crate::session::Session;
use crate::world::WorldShared;

/// Where durable records live unless configured otherwise: root-owned, 0700.
pub const DEFAULT_DURABLE_DIR: &str = "/var/lib/exec-world/durable";

/// How often a cut attach stream is resumed before `wait` (or, cut before the record's
/// description came, `durable_attach`) reports the cut.
const RESUMES: u32 = 3;

/// The durable starts of one adapter still in flight. `spawn` returns before envd
/// answered; the adapter's later durable starts and its `durable_list` / `attach` /
/// `collect` wait for these answers first, so a command exists for them once its
/// `spawn` returned (and the first of two starts with one id is the one that runs).
#[derive(Default)]
pub(crate) struct Pending(Mutex<Vec<Weak<Session>>>);

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

impl Pending {
    /// The starts in flight now.
    pub(crate) fn snapshot(&self) -> Vec<Weak<Session>> {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|w| w.upgrade().is_some_and(|s| !s.start_known()));
        v.clone()
    }

    /// Adds a start in flight.
    pub(crate) fn add(&self, s: &Arc<Session>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(s));
    }

    /// Waits until the starts in flight now were answered (or failed).
    pub(crate) async fn settle(&self) {
        settle(&self.snapshot()).await;
    }
}

/// Waits until each of `starts` was answered (or failed).
pub(crate) async fn settle(starts: &[Weak<Session>]) {
    for w in starts {
        if let Some(s) = w.upgrade() {
            let _ = s.started().await;
        }
    }
}

/// What a durable spawn adds to its start (`session.rs`).
#[derive(Clone, Debug)]
pub(crate) struct DurableLaunch {
    pub(crate) id: DurableId,
    dir: String,
    cap: u64,
    meta: String,
    /// The adapter's durable starts before this one (it is sent after their answers).
    pub(crate) after: Vec<Weak<Session>>,
}

impl DurableLaunch {
    /// The launch of `spec` for a spawn of `program args` in `cwd`.
    pub(crate) fn new(
        spec: &DurableSpec,
        dir: &str,
        program: &str,
        args: &[String],
        cwd: &str,
        marker: &str,
        stdin: bool,
    ) -> Result<DurableLaunch, Error> {
        spec.validate()?;
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let meta = serde_json::json!({
            "v": 1,
            "id": spec.id.as_str(),
            "tag": spec.tag,
            "program": program,
            "args": args,
            "cwd": cwd,
            "started_ms": started,
            "marker": marker,
            "stdin": stdin,
        });
        Ok(DurableLaunch {
            id: spec.id.clone(),
            dir: dir.to_owned(),
            cap: spec.output_cap,
            meta: meta.to_string(),
            after: Vec::new(),
        })
    }

    /// The helper's leading arguments.
    pub(crate) fn argv(&self) -> Vec<String> {
        vec![
            "--durable".to_owned(),
            self.dir.clone(),
            self.id.to_string(),
            self.cap.min(1 << 40).to_string(),
            self.meta.clone(),
        ]
    }
}

/// The error for the helper's refusal `why` of a durable spawn, if it is one of its own.
pub(crate) fn refusal(why: &str) -> Option<Error> {
    match why {
        "exists" => Some(
            Error::new(ErrorKind::AlreadyExists)
                .with_op("starting a durable command")
                .with_detail("a durable command with this id exists (running, or ended and not collected); nothing ran"),
        ),
        "state-dir" => Some(
            Error::new(ErrorKind::PermissionDenied)
                .with_op("starting a durable command")
                .with_detail("the durable state directory (or a parent) is not a root-owned directory nobody else can write, or root cannot create it; nothing ran"),
        ),
        "record" => Some(
            Error::other("the durable record could not be written; nothing ran")
                .with_op("starting a durable command"),
        ),
        _ => None,
    }
}

/// `exit N` / `signal N`.
fn parse_status(text: &[u8]) -> Option<ExitStatus> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let (kind, n) = text.split_once(' ')?;
    let n: i32 = n.parse().ok()?;
    match kind {
        "exit" => Some(ExitStatus {
            code: Some(n),
            signal: None,
        }),
        "signal" => Some(ExitStatus {
            code: None,
            signal: Some(n),
        }),
        _ => None,
    }
}

/// A state frame's payload (`R`, a status, `u`…).
fn parse_state(text: &[u8]) -> DurableState {
    match text {
        b"R" => DurableState::Running,
        t => parse_status(t).map_or(DurableState::Unknown, DurableState::Exited),
    }
}

/// What a record says about its command.
struct Described {
    info: DurableInfo,
    marker: String,
    stdin: bool,
    cgroup: Option<String>,
}

fn describe(id: &DurableId, meta: &[u8], pid_line: &[u8], state: DurableState) -> Described {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap_or_default();
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let args = v
        .get("args")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let started = v
        .get("started_ms")
        .and_then(|x| x.as_u64())
        .map_or(UNIX_EPOCH, |ms| UNIX_EPOCH + Duration::from_millis(ms));
    let line = String::from_utf8_lossy(pid_line);
    let mut f = line.split(' ');
    let pid = f
        .next()
        .and_then(|p| p.trim().parse().ok())
        .filter(|p| *p > 1);
    let cgroup = f
        .next()
        .map(str::trim)
        .filter(|c| c.starts_with('/') && !c.contains("..") && !c.contains('\n'))
        .map(str::to_owned);
    Described {
        info: DurableInfo {
            id: id.clone(),
            tag: s("tag"),
            program: s("program").unwrap_or_default(),
            args,
            cwd: s("cwd")
                .and_then(|c| WorldPath::new(&c).ok())
                .unwrap_or_else(root_path),
            started,
            pid,
            state,
        },
        marker: s("marker").unwrap_or_default(),
        stdin: v.get("stdin").and_then(|x| x.as_bool()).unwrap_or(false),
        cgroup,
    }
}

fn root_path() -> WorldPath {
    WorldPath::new("/").unwrap_or_else(|_| unreachable!("`/` is a valid path"))
}

/// The native helper's path (placing it first when needed).
async fn helper(world: &WorldShared) -> Result<String, Error> {
    let info = world.user_info().await?;
    let setup = world.spawn_setup(&info).await?;
    setup.native.ok_or_else(|| {
        Error::unsupported(
            "durable commands need the native spawn helper (this build or this sandbox has none)",
        )
    })
}

/// Runs a record reader to its end and returns its frames.
async fn run_reader(world: &WorldShared, args: Vec<String>, op: &str) -> Result<Vec<Frame>, Error> {
    let native = helper(world).await?;
    let spec = StartProcess::new(native)
        .args(args)
        .user("root")
        .cwd("/")
        .timeout(Duration::from_secs(120));
    let out = world.api.run(spec).await.map_err(|e| e.into_world(op))?;
    let mut deframer = Deframer::default();
    let frames = deframer
        .push(&out.stdout)
        .map_err(|e| Error::other(e).with_op(op))?;
    if out.end.exit_code != 0 || deframer.partial() {
        return Err(Error::other(format!(
            "the record reader failed ({}): {}",
            out.end.exit_code,
            String::from_utf8_lossy(&out.stdout).trim()
        ))
        .with_op(op));
    }
    Ok(frames)
}

/// `durable_list`: the records and envd's tagged processes without one.
pub(crate) async fn list(world: &WorldShared, dir: &str) -> Result<Vec<DurableInfo>, Error> {
    let op = "listing durable commands";
    let (frames, procs) = tokio::join!(
        run_reader(world, vec!["--list".to_owned(), dir.to_owned()], op),
        world.api.list_processes()
    );
    let mut out: Vec<DurableInfo> = Vec::new();
    let mut cur: Option<(DurableId, Bytes, Bytes)> = None;
    for f in frames? {
        match f.kind {
            b'r' => {
                cur = std::str::from_utf8(&f.payload)
                    .ok()
                    .and_then(|s| DurableId::new(s).ok())
                    .map(|id| (id, Bytes::new(), Bytes::new()))
            }
            b'm' => {
                if let Some(c) = cur.as_mut() {
                    c.1 = f.payload;
                }
            }
            b'i' => {
                if let Some(c) = cur.as_mut() {
                    c.2 = f.payload;
                }
            }
            b'R' | b'x' | b'u' => {
                if let Some((id, meta, pid)) = cur.take() {
                    let state = match f.kind {
                        b'R' => DurableState::Running,
                        b'x' => parse_status(&f.payload)
                            .map_or(DurableState::Unknown, DurableState::Exited),
                        _ => DurableState::Unknown,
                    };
                    out.push(describe(&id, &meta, &pid, state).info);
                }
            }
            _ => {}
        }
    }
    for p in procs.map_err(|e| e.into_world(op))? {
        let Some(id) = p.tag.as_deref().and_then(|t| DurableId::new(t).ok()) else {
            continue;
        };
        // A durable start whose record is being made (or already listed).
        if is_durable_start(&p) || out.iter().any(|i| i.id == id) {
            continue;
        }
        out.push(DurableInfo {
            id,
            tag: None,
            program: p.config.cmd.clone(),
            args: p.config.args.clone(),
            cwd: p
                .config
                .cwd
                .as_deref()
                .and_then(|c| WorldPath::new(c).ok())
                .unwrap_or_else(root_path),
            started: UNIX_EPOCH,
            pid: Some(p.pid),
            state: DurableState::Running,
        });
    }
    out.sort_by(|a, b| a.started.cmp(&b.started).then_with(|| a.id.cmp(&b.id)));
    Ok(out)
}

/// `durable_collect`.
pub(crate) async fn collect(world: &WorldShared, dir: &str, id: &DurableId) -> Result<(), Error> {
    let op = format!("collecting durable command {id}");
    let frames = run_reader(
        world,
        vec!["--collect".to_owned(), dir.to_owned(), id.to_string()],
        &op,
    )
    .await?;
    match frames.first().map(|f| f.kind) {
        Some(b'c') => Ok(()),
        Some(b'R') => Err(Error::invalid_spec(format!(
            "durable command {id} is still running: only an ended command can be collected"
        ))
        .with_op(op)),
        Some(b'n') => Err(Error::not_found(id.as_str()).with_op(op)),
        _ => Err(Error::other("the record reader gave no answer").with_op(op)),
    }
}

/// One envd stream of a record reader (or of envd's `Connect`), as frames.
struct TailStream {
    stream: ProcessStream,
    deframer: Deframer,
    queue: std::collections::VecDeque<Frame>,
    /// Connect to a record-less process: its stdout/stderr/end are passed as frames.
    raw: bool,
    /// Where handed-over ranges (`b` frames) are fetched from: envd's API and the
    /// record's directory. Set exactly when the reader was started with a bulk size.
    fetch: Option<(Arc<dyn EnvdApi>, String)>,
    /// The handed-over range being fetched; its bytes come before any later frame.
    bulk: Option<Bulk>,
}

/// Kept bytes of one stream of an ended record from which an attach reads them with a
/// ranged root `GET /files` of the record's ring instead of through the reader's
/// process stream (base64 in envd's JSON events: about half the speed).
const BULK_MIN: u64 = 1 << 20;

/// A stream's range of an ended record, fetched from its ring file (`b` frame).
struct Bulk {
    api: Arc<dyn EnvdApi>,
    /// The ring file.
    path: String,
    /// `o` or `e`.
    kind: u8,
    /// What is left to fetch: (offset in the file, length).
    parts: std::collections::VecDeque<(u64, u64)>,
    body: Option<(e2b_core::envd::Download, u64)>,
}

impl Bulk {
    /// The range of `b` frame `payload` (`o FROM TO CAP`) of the record at `record`.
    fn parse(api: Arc<dyn EnvdApi>, record: &str, payload: &[u8]) -> Result<Bulk, Error> {
        let text = String::from_utf8_lossy(payload);
        let bad = || {
            Error::other(format!("an unreadable handed-over range {text:?}"))
                .with_op("reading a durable record")
        };
        let mut f = text.split(' ');
        let (kind, file) = match f.next() {
            Some("o") => (b'o', "out"),
            Some("e") => (b'e', "err"),
            _ => return Err(bad()),
        };
        let mut num = || f.next().and_then(|n| n.parse::<u64>().ok()).ok_or_else(bad);
        let (from, to, cap) = (num()?, num()?, num()?);
        if cap == 0 || to < from || to - from > cap {
            return Err(bad());
        }
        // Byte n of the stream is at 16 + n % cap: at most two pieces of the ring.
        let len = to - from;
        let at = from % cap;
        let first = len.min(cap - at);
        let mut parts = std::collections::VecDeque::from([(16 + at, first)]);
        if len > first {
            parts.push_back((16, len - first));
        }
        Ok(Bulk {
            api,
            path: format!("{record}/{file}"),
            kind,
            parts,
            body: None,
        })
    }

    /// The next bytes of the range; `None` once all of it came.
    async fn next(&mut self) -> Result<Option<Bytes>, Error> {
        let op = "reading a durable record's output";
        loop {
            if let Some((body, left)) = self.body.as_mut() {
                match body.next().await {
                    Some(Ok(b)) if b.is_empty() => continue,
                    Some(Ok(b)) if b.len() as u64 > *left => {
                        return Err(Error::other("the ring file sent more than asked").with_op(op));
                    }
                    Some(Ok(b)) => {
                        *left -= b.len() as u64;
                        return Ok(Some(b));
                    }
                    Some(Err(e)) => return Err(e.into_world(op)),
                    None if *left > 0 => {
                        return Err(Error::new(ErrorKind::Transport)
                            .with_op(op)
                            .with_detail(format!("the ring file ended {left} bytes early"))
                            .with_temporary(true));
                    }
                    None => self.body = None,
                }
            }
            let Some((offset, len)) = self.parts.pop_front() else {
                return Ok(None);
            };
            let d = self
                .api
                .download_range(&self.path, Some("root"), offset, len)
                .await
                .map_err(|e| e.into_world(op))?;
            self.body = Some((d, len));
        }
    }
}

impl TailStream {
    fn new(stream: ProcessStream, raw: bool) -> TailStream {
        TailStream {
            stream,
            deframer: Deframer::default(),
            queue: Default::default(),
            raw,
            fetch: None,
            bulk: None,
        }
    }

    /// A reader started with a bulk size ([`start_tail`] with `bulk`): its `b` frames are
    /// fetched from the record at `record` through `api`.
    fn fetching(mut self, api: Arc<dyn EnvdApi>, record: String) -> TailStream {
        self.fetch = Some((api, record));
        self
    }

    /// The next frame; `None` when the stream ended (normally or not) without one.
    async fn next(&mut self) -> Result<Option<Frame>, Error> {
        loop {
            if let Some(b) = self.bulk.as_mut() {
                match b.next().await? {
                    Some(payload) => {
                        return Ok(Some(Frame {
                            kind: b.kind,
                            payload,
                        }));
                    }
                    None => self.bulk = None,
                }
            }
            if let Some(f) = self.queue.pop_front() {
                if f.kind == b'b' {
                    let Some((api, record)) = &self.fetch else {
                        return Err(Error::other("a handed-over range nobody asked for")
                            .with_op("reading a durable record"));
                    };
                    self.bulk = Some(Bulk::parse(api.clone(), record, &f.payload)?);
                    continue;
                }
                return Ok(Some(f));
            }
            let ev = match self.stream.next().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e.into_world("reading a durable command's output")),
                Some(Ok(ev)) => ev,
            };
            let frame = |kind: u8, payload: Vec<u8>| Frame {
                kind,
                payload: Bytes::from(payload),
            };
            match ev {
                ProcessEvent::Data(DataEvent::Stdout(b)) if self.raw => {
                    self.queue.push_back(frame(b'o', b))
                }
                ProcessEvent::Data(DataEvent::Stderr(b)) if self.raw => {
                    self.queue.push_back(frame(b'e', b))
                }
                ProcessEvent::Data(DataEvent::Stdout(b)) => {
                    let frames = self
                        .deframer
                        .push(&b)
                        .map_err(|e| Error::other(e).with_op("reading a durable record"))?;
                    self.queue.extend(frames);
                }
                ProcessEvent::Data(DataEvent::Stderr(b)) => {
                    tracing::debug!(stderr = %String::from_utf8_lossy(&b), "durable record reader");
                }
                ProcessEvent::End(e) if self.raw => {
                    let st = crate::status::exit_status(&e);
                    let text = match (st.code, st.signal) {
                        (_, Some(s)) => format!("signal {s}"),
                        (c, None) => format!("exit {}", c.unwrap_or(-1)),
                    };
                    self.queue.push_back(frame(b'x', text.into_bytes()));
                }
                _ => {}
            }
        }
    }
}

/// One record reader (`--tail`) from `from`; it hands over the kept bytes of an ended
/// record's stream of at least [`BULK_MIN`] (fetched from the ring by the returned
/// stream itself).
async fn start_tail(
    world: &WorldShared,
    native: &str,
    dir: &str,
    id: &DurableId,
    from: OutputOffsets,
) -> Result<TailStream, Error> {
    let spec = StartProcess::new(native)
        .args([
            "--tail".to_owned(),
            dir.to_owned(),
            id.to_string(),
            from.stdout.to_string(),
            from.stderr.to_string(),
            BULK_MIN.to_string(),
        ])
        .user("root")
        .cwd("/");
    let stream = world
        .api
        .start_process(spec)
        .await
        .map_err(|e| e.into_world(format!("attaching to durable command {id}")))?;
    Ok(TailStream::new(stream, false).fetching(world.api.clone(), format!("{dir}/{id}")))
}

/// `durable_attach`.
pub(crate) async fn attach(
    world: Arc<WorldShared>,
    dir: &str,
    id: &DurableId,
    from: OutputOffsets,
) -> Result<Attached, Error> {
    let op = format!("attaching to durable command {id}");
    let native = helper(&world).await?;
    let (mut attempts, mut cuts) = (0, 0);
    'again: loop {
        attempts += 1;
        let mut tail = start_tail(&world, &native, dir, id, from).await?;
        let tail_pid = tail.stream.pid();
        let (mut meta, mut pid_line, mut state) =
            (Bytes::new(), Bytes::new(), DurableState::Unknown);
        let (start, dropped) = loop {
            let f = match tail.next().await {
                Ok(Some(f)) => f,
                Ok(None) => {
                    return Err(Error::other("the record reader ended early").with_op(op));
                }
                // Cut before the record's description was read: nothing was handed out
                // yet, so a new reader from the same offsets is the same attach.
                Err(e) if e.is_temporary() && cuts < RESUMES => {
                    kill_reader(world.api.clone(), tail_pid);
                    cuts += 1;
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(cuts))).await;
                    continue 'again;
                }
                Err(e) => return Err(e.with_op(op)),
            };
            match f.kind {
                b'n' => match attach_live(world.clone(), id, &op).await? {
                    // A durable start of this id is making its record right now (another
                    // client's spawn in flight): read the record once it is there.
                    None if attempts < 20 => {
                        tokio::time::sleep(Duration::from_millis(25)).await;
                        continue 'again;
                    }
                    None => {
                        return Err(Error::other("the command's record did not appear").with_op(op));
                    }
                    Some(a) => return Ok(a),
                },
                b'm' => meta = f.payload,
                b'i' => pid_line = f.payload,
                b'a' => state = parse_state(&f.payload),
                b's' => break parse_start(&f.payload),
                _ => {}
            }
        };
        let d = describe(id, &meta, &pid_line, state);
        let shared = Arc::new(Shared::new(world.clone(), id.clone(), &d, tail_pid));
        let resume = Resume {
            native,
            dir: dir.to_owned(),
            pos: start,
        };
        // Stdin only while it runs (envd's pipe went with the process).
        let stdin = d.stdin && d.info.state == DurableState::Running;
        let child = DurableChild::start(shared, tail, Some(resume), stdin);
        return Ok(Attached {
            child,
            info: d.info,
            start,
            dropped,
        });
    }
}

/// True for envd's process of a durable spawn (the helper with `--durable` first): its
/// record exists, or is being made.
fn is_durable_start(p: &e2b_core::proto::process::ProcessInfo) -> bool {
    p.config.args.first().map(String::as_str) == Some("--durable")
}

/// `START_OUT START_ERR DROPPED_OUT DROPPED_ERR`.
fn parse_start(p: &[u8]) -> (OutputOffsets, OutputOffsets) {
    let text = String::from_utf8_lossy(p);
    let n: Vec<u64> = text
        .split(' ')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    let at = |i: usize| n.get(i).copied().unwrap_or(0);
    (
        OutputOffsets {
            stdout: at(0),
            stderr: at(1),
        },
        OutputOffsets {
            stdout: at(2),
            stderr: at(3),
        },
    )
}

/// A record-less command (started by an official SDK with a tag): envd's `List` for its
/// description, `Connect` by tag for its live output and end. `None` when the tagged
/// process is a durable start making its record (read the record instead).
async fn attach_live(
    world: Arc<WorldShared>,
    id: &DurableId,
    op: &str,
) -> Result<Option<Attached>, Error> {
    let procs = world
        .api
        .list_processes()
        .await
        .map_err(|e| e.into_world(op))?;
    let Some(p) = procs
        .into_iter()
        .find(|p| p.tag.as_deref() == Some(id.as_str()))
    else {
        return Err(Error::not_found(id.as_str()).with_op(op));
    };
    if is_durable_start(&p) {
        return Ok(None);
    }
    let stream = world
        .api
        .connect_process(
            ProcessSelector::Tag(id.to_string()),
            e2b_core::StreamOptions::default(),
        )
        .await
        .map_err(|e| {
            if e.is_not_found() {
                Error::not_found(id.as_str()).with_op(op)
            } else {
                e.into_world(op)
            }
        })?;
    let info = DurableInfo {
        id: id.clone(),
        tag: None,
        program: p.config.cmd.clone(),
        args: p.config.args.clone(),
        cwd: p
            .config
            .cwd
            .as_deref()
            .and_then(|c| WorldPath::new(c).ok())
            .unwrap_or_else(root_path),
        started: UNIX_EPOCH,
        pid: Some(p.pid),
        state: DurableState::Running,
    };
    let d = Described {
        info: info.clone(),
        marker: String::new(),
        stdin: true,
        cgroup: None,
    };
    let mut shared = Shared::new(world, id.clone(), &d, 0);
    shared.live_only = true;
    let child = DurableChild::start(Arc::new(shared), TailStream::new(stream, true), None, true);
    Ok(Some(Attached {
        child,
        info,
        start: OutputOffsets::default(),
        dropped: OutputOffsets::default(),
    }))
}

/// What an attached child's parts share.
struct Shared {
    world: Arc<WorldShared>,
    id: DurableId,
    pid: Option<u32>,
    marker: String,
    cgroup: Option<String>,
    /// envd's pid of the current record reader (0: none to end).
    tail_pid: AtomicU32,
    /// Attached through envd's `Connect` only (no record).
    live_only: bool,
    status_tx: watch::Sender<Option<Result<ExitStatus, Error>>>,
    status: watch::Receiver<Option<Result<ExitStatus, Error>>>,
    /// Set once the reader task returned.
    done: AtomicBool,
}

impl Shared {
    fn new(world: Arc<WorldShared>, id: DurableId, d: &Described, tail_pid: u32) -> Shared {
        let (status_tx, status) = watch::channel(None);
        Shared {
            world,
            id,
            pid: d.info.pid,
            marker: d.marker.clone(),
            cgroup: d.cgroup.clone(),
            tail_pid: AtomicU32::new(tail_pid),
            live_only: false,
            status_tx,
            status,
            done: AtomicBool::new(false),
        }
    }

    fn ended(&self) -> bool {
        self.status.borrow().is_some()
    }

    fn finish(&self, r: Result<ExitStatus, Error>) {
        self.status_tx.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(r);
                true
            } else {
                false
            }
        });
    }

    /// SIGKILLs the current record reader (never the command), once.
    fn end_reader(&self) {
        let pid = self.tail_pid.swap(0, Ordering::SeqCst);
        if pid == 0 || self.done.load(Ordering::SeqCst) {
            return;
        }
        kill_reader(self.world.api.clone(), pid);
    }
}

/// SIGKILLs the record reader `pid` (never the command) from a background task: one
/// whose stream was cut would otherwise tail a running record until the command ends.
fn kill_reader(api: Arc<dyn EnvdApi>, pid: u32) {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        h.spawn(async move {
            if let Err(e) = api
                .send_signal(ProcessSelector::Pid(pid), EnvdSignal::Sigkill)
                .await
            {
                tracing::debug!(error = %e, "ending a durable record reader");
            }
        });
    }
}

/// Where to resume a cut attach.
struct Resume {
    native: String,
    dir: String,
    pos: OutputOffsets,
}

type Item = Result<Bytes, Error>;

/// The reader task: frames → the two streams and the status; a cut stream is resumed
/// from the offsets reached.
async fn pump(
    shared: Arc<Shared>,
    mut tail: TailStream,
    mut resume: Option<Resume>,
    out: mpsc::Sender<Item>,
    err: mpsc::Sender<Item>,
) {
    let mut resumes = 0;
    // A stream that fell more than the cap behind ends with Interrupted (as the local
    // backend's): the sender goes, the other stream and the status go on.
    let (mut out, mut err) = (Some(out), Some(err));
    let gap = |stream: &str, n: u64, resume_at: u64| {
        Error::interrupted(format!("reading the {stream} of durable command {}", shared.id))
            .with_detail(format!(
                "this reader fell more than the output cap behind: {n} bytes were dropped; attach again from offset {resume_at}"
            ))
    };
    loop {
        let next = tail.next().await;
        let f = match next {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => {
                let cause = match next {
                    Err(e) => e,
                    _ => Error::new(ErrorKind::Transport)
                        .with_detail("the record reader ended without the command's status")
                        .with_temporary(true),
                };
                if let Some(r) = resume
                    .as_mut()
                    .filter(|_| resumes < RESUMES && !shared.ended())
                {
                    resumes += 1;
                    shared.end_reader();
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(resumes))).await;
                    match start_tail(&shared.world, &r.native, &r.dir, &shared.id, r.pos).await {
                        Ok(s) => {
                            shared.tail_pid.store(s.stream.pid(), Ordering::SeqCst);
                            tail = s;
                            continue;
                        }
                        Err(e) => tracing::debug!(error = %e, "resuming an attach"),
                    }
                }
                shared.finish(Err(
                    cause.with_op(format!("attached to durable command {}", shared.id))
                ));
                break;
            }
        };
        match f.kind {
            b'o' | b'e' => {
                let n = f.payload.len() as u64;
                if let Some(r) = resume.as_mut() {
                    if f.kind == b'o' {
                        r.pos.stdout += n;
                    } else {
                        r.pos.stderr += n;
                    }
                }
                let tx = if f.kind == b'o' { &out } else { &err };
                if let Some(tx) = tx {
                    let _ = tx.send(Ok(f.payload)).await;
                }
            }
            b'g' => {
                let text = String::from_utf8_lossy(&f.payload).into_owned();
                let (which, n) = text.split_once(' ').unwrap_or(("o", "0"));
                let n: u64 = n.trim().parse().unwrap_or(0);
                let mut at = 0;
                if let Some(r) = resume.as_mut() {
                    let pos = if which == "o" {
                        &mut r.pos.stdout
                    } else {
                        &mut r.pos.stderr
                    };
                    *pos += n;
                    at = *pos;
                }
                let (tx, name) = if which == "o" {
                    (&mut out, "stdout")
                } else {
                    (&mut err, "stderr")
                };
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Err(gap(name, n, at))).await;
                }
            }
            b's' => {
                // A resumed reader: bytes dropped since the cut are a gap.
                let (start, dropped) = parse_start(&f.payload);
                if let Some(r) = resume.as_mut() {
                    r.pos = start;
                }
                if dropped.stdout > 0
                    && let Some(tx) = out.take()
                {
                    let _ = tx
                        .send(Err(gap("stdout", dropped.stdout, start.stdout)))
                        .await;
                }
                if dropped.stderr > 0
                    && let Some(tx) = err.take()
                {
                    let _ = tx
                        .send(Err(gap("stderr", dropped.stderr, start.stderr)))
                        .await;
                }
            }
            b'x' => {
                // The reader ends by itself after its last frame.
                shared.done.store(true, Ordering::SeqCst);
                let r = parse_status(&f.payload).ok_or_else(|| {
                    Error::other(format!(
                        "unreadable recorded status {:?}",
                        String::from_utf8_lossy(&f.payload)
                    ))
                });
                shared.finish(r);
                break;
            }
            b'u' => {
                shared.done.store(true, Ordering::SeqCst);
                shared.finish(Err(Error::outcome_unknown(
                    format!("waiting for durable command {}", shared.id),
                    String::from_utf8_lossy(&f.payload).into_owned(),
                )));
                break;
            }
            b'n' => {
                shared.done.store(true, Ordering::SeqCst);
                shared.finish(Err(Error::outcome_unknown(
                    format!("waiting for durable command {}", shared.id),
                    "its record is gone",
                )));
                break;
            }
            _ => {}
        }
    }
    shared.done.store(true, Ordering::SeqCst);
}

/// The stream a channel's receiving end gives.
fn receiver_stream(mut rx: mpsc::Receiver<Item>) -> OutputStream {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// An attached durable command.
struct DurableChild {
    shared: Arc<Shared>,
    stdin: Mutex<Option<InputSink>>,
    stdout: Mutex<Option<OutputStream>>,
    stderr: Mutex<Option<OutputStream>>,
    task: tokio::task::AbortHandle,
}

impl DurableChild {
    fn start(shared: Arc<Shared>, tail: TailStream, resume: Option<Resume>, stdin: bool) -> Child {
        let chunks = (shared.world.output_buffer / (64 << 10)).max(4);
        let (out_tx, out_rx) = mpsc::channel(chunks);
        let (err_tx, err_rx) = mpsc::channel(chunks);
        let task = tokio::spawn(pump(shared.clone(), tail, resume, out_tx, err_tx)).abort_handle();
        let sel = ProcessSelector::Tag(shared.id.to_string());
        let stdin = stdin.then(|| {
            crate::child::forward_input(shared.world.api.clone(), async move { Some(sel) }, false)
        });
        Child::new(Box::new(DurableChild {
            shared,
            stdin: Mutex::new(stdin),
            stdout: Mutex::new(Some(receiver_stream(out_rx))),
            stderr: Mutex::new(Some(receiver_stream(err_rx))),
            task,
        }))
    }
}

fn take<T>(m: &Mutex<Option<T>>) -> Option<T> {
    m.lock().unwrap_or_else(PoisonError::into_inner).take()
}

#[async_trait]
impl ChildBackend for DurableChild {
    fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    async fn started(&self) -> Result<u32, Error> {
        self.shared.pid.ok_or_else(|| {
            Error::outcome_unknown(
                format!("attaching to durable command {}", self.shared.id),
                "its record has no pid (its watcher ended before the fork)",
            )
        })
    }

    fn take_stdin(&mut self) -> Option<InputSink> {
        take(&self.stdin)
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        take(&self.stdout)
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        take(&self.stderr)
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        // Streams nobody took are not read: the status does not wait for them.
        drop(take(&self.stdout));
        drop(take(&self.stderr));
        let mut rx = self.shared.status.clone();
        let r = rx
            .wait_for(|s| s.is_some())
            .await
            .map_err(|_| Error::other("the attach task ended without a status"))?;
        match &*r {
            Some(r) => r.clone(),
            None => Err(Error::other("no status")),
        }
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        if self.shared.ended() {
            return Ok(());
        }
        match self.shared.pid {
            Some(pid) if !self.shared.live_only => {
                self.shared.world.shell.signal(pid, sig, false).await
            }
            _ => {
                let es = match sig {
                    Signal::Term => EnvdSignal::Sigterm,
                    Signal::Kill => EnvdSignal::Sigkill,
                    other => {
                        return Err(Error::unsupported(format!(
                            "{} to a command without a record (envd sends TERM and KILL only)",
                            other.name()
                        )));
                    }
                };
                match self
                    .shared
                    .world
                    .api
                    .send_signal(ProcessSelector::Tag(self.shared.id.to_string()), es)
                    .await
                {
                    Ok(()) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(e.into_world("sending a signal")),
                }
            }
        }
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        if !self.shared.ended() {
            match self.shared.pid {
                Some(pid) if !self.shared.live_only => {
                    let cgroup = self.shared.cgroup.as_deref().unwrap_or("");
                    let clean = self
                        .shared
                        .world
                        .shell
                        .kill_tree(pid, &self.shared.marker, grace, false, cgroup)
                        .await?;
                    if !clean {
                        tracing::warn!(pid, "durable command: survivors after the tree kill");
                    }
                }
                _ => {
                    self.signal(Signal::Term).await?;
                    let ended = tokio::time::timeout(grace, self.wait()).await.is_ok();
                    if !ended {
                        self.signal(Signal::Kill).await?;
                    }
                }
            }
        }
        self.wait().await
    }

    fn detach(&mut self) {
        take(&self.stdin);
        take(&self.stdout);
        take(&self.stderr);
        self.shared.end_reader();
        self.task.abort();
    }
}

impl Drop for DurableChild {
    fn drop(&mut self) {
        self.shared.end_reader();
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_starts() {
        assert_eq!(parse_status(b"exit 3").and_then(|s| s.code), Some(3));
        assert_eq!(parse_status(b"signal 9\n").and_then(|s| s.signal), Some(9));
        assert_eq!(parse_status(b"odd 1"), None);
        assert_eq!(parse_state(b"R"), DurableState::Running);
        assert_eq!(parse_state(b"u"), DurableState::Unknown);
        let (s, d) = parse_start(b"10 20 3 0");
        assert_eq!((s.stdout, s.stderr, d.stdout, d.stderr), (10, 20, 3, 0));
    }

    #[test]
    fn a_record_describes_its_command() {
        let id: DurableId = "job-1".parse().unwrap();
        let spec = DurableSpec::new(id.clone()).tag("nightly").unwrap();
        let l = DurableLaunch::new(
            &spec,
            "/d",
            "sh",
            &["-c".into(), "x".into()],
            "/home/user",
            "m1",
            true,
        )
        .unwrap();
        let d = describe(
            &id,
            l.meta.as_bytes(),
            b"42 /sys/fs/cgroup/x\n",
            DurableState::Running,
        );
        assert_eq!(d.info.program, "sh");
        assert_eq!(d.info.args, ["-c", "x"]);
        assert_eq!(d.info.tag.as_deref(), Some("nightly"));
        assert_eq!(d.info.cwd.as_str(), "/home/user");
        assert_eq!(d.info.pid, Some(42));
        assert_eq!(d.cgroup.as_deref(), Some("/sys/fs/cgroup/x"));
        assert_eq!((d.marker.as_str(), d.stdin), ("m1", true));
        assert_eq!(
            l.argv()[..4],
            ["--durable", "/d", "job-1", &spec.output_cap.to_string()]
        );
    }
}
