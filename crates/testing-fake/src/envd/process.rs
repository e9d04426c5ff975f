//! `process.Process`: real processes started the way envd starts them, their process table,
//! output multiplexing to any number of streams, exit retention, signals, stdin and PTYs.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use e2b_proto::connect::Code;
use e2b_proto::process::{
    CloseStdinRequest, ConnectRequest, DataEvent, Empty, EndEvent, EventResponse, ListResponse,
    ProcessConfig, ProcessEvent, ProcessInfo, ProcessInput, ProcessSelector, SendInputRequest,
    SendSignalRequest, Signal, StartEvent, StartRequest, UpdateRequest,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::auth::ActingUser;
use super::connect::{self, RpcError, StreamTx};
use super::{Envd, SANDBOX_PATH, isolation, paths, pty, spawn, zygote};
use crate::template::TemplateUser;

const STD_CHUNK: usize = 32 << 10;
const PTY_CHUNK: usize = 16 << 10;
const RETENTION: Duration = Duration::from_secs(30);
/// envd 0.6.13's wrapper: raise the OOM score, then run the command through
/// `/usr/bin/nice` (so a missing program is `nice`'s error, exit 127, like on E2B).
const OOM_WRAPPER: &str = r#"echo 100 > /proc/$$/oom_score_adj && exec /usr/bin/nice -n 0 "${@}""#;
/// envd's answer (`getProcess`) to a request whose process selector is absent or empty.
const NO_SELECTOR: &str = "invalid input type *process.ProcessSelector";

/// A live process.
pub(crate) struct Proc {
    /// The pid as the sandbox sees it (in its PID namespace), reported to clients.
    pid: u32,
    /// The pid on the host, for signals.
    host_pid: u32,
    config: ProcessConfig,
    tag: Option<String>,
    subs: Mutex<Vec<mpsc::Sender<ProcessEvent>>>,
    stdin: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    pty: Option<Arc<pty::Master>>,
    /// envd's `outCancel`: stop waiting for the output readers (SIGKILL/SIGTERM sent).
    out_cancel: Notify,
}

impl Proc {
    fn subscribe(&self) -> mpsc::Receiver<ProcessEvent> {
        let (tx, rx) = mpsc::channel(64);
        if let Ok(mut s) = self.subs.lock() {
            s.push(tx);
        }
        rx
    }

    fn has_subscribers(&self) -> bool {
        self.subs.lock().map(|s| !s.is_empty()).unwrap_or(false)
    }

    /// Deliver to every subscriber (back-pressure: waits for slow ones; drops gone ones).
    async fn publish(&self, ev: ProcessEvent) {
        let subs: Vec<mpsc::Sender<ProcessEvent>> = match self.subs.lock() {
            Ok(s) => s.clone(),
            Err(_) => return,
        };
        let mut gone = false;
        let mut ev = Some(ev);
        for (i, s) in subs.iter().enumerate() {
            // The last subscriber (usually the only one) gets the event itself.
            let one = if i + 1 == subs.len() {
                ev.take()
            } else {
                ev.clone()
            };
            if let Some(one) = one
                && s.send(one).await.is_err()
            {
                gone = true;
            }
        }
        if gone && let Ok(mut s) = self.subs.lock() {
            s.retain(|t| !t.is_closed());
        }
    }
}

struct Retained {
    pid: u32,
    tag: Option<String>,
    end: EndEvent,
    expiry: Instant,
}

/// The process table: live processes in start order, and recently exited ones.
#[derive(Default)]
pub(crate) struct Table {
    inner: Mutex<TableInner>,
    /// Told (then dropped) when the sandbox's first process ended: the emulator's
    /// background work waits for it ([`super::spare`]).
    first_end: Mutex<Option<super::spare::Trigger>>,
}

#[derive(Default)]
struct TableInner {
    live: Vec<Arc<Proc>>,
    terminated: HashMap<u32, Retained>,
}

impl Table {
    /// Drop `trigger` when the first process of this table ends (or with the table, so
    /// a sandbox gone before any process lets it go too).
    pub(crate) fn on_first_end(&self, trigger: super::spare::Trigger) {
        if let Ok(mut slot) = self.first_end.lock() {
            *slot = Some(trigger);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.lock().map(|t| t.live.is_empty()).unwrap_or(true)
    }

    pub(crate) fn pids(&self) -> Vec<i32> {
        self.inner
            .lock()
            .map(|t| t.live.iter().map(|p| p.host_pid as i32).collect())
            .unwrap_or_default()
    }

    /// SIGKILL every direct child (used on drop).
    pub(crate) fn kill_all_direct(&self) {
        for pid in self.pids() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    fn get(&self, sel: &ProcessSelector) -> Result<Arc<Proc>, RpcError> {
        let t = self
            .inner
            .lock()
            .map_err(|_| RpcError::internal("process table poisoned"))?;
        match sel {
            ProcessSelector::Pid(pid) => t
                .live
                .iter()
                .find(|p| p.pid == *pid)
                .cloned()
                .ok_or_else(|| RpcError::not_found(format!("process with pid {pid} not found"))),
            ProcessSelector::Tag(tag) => t
                .live
                .iter()
                .find(|p| p.tag.as_deref() == Some(tag.as_str()))
                .cloned()
                .ok_or_else(|| RpcError::not_found(format!("process with tag {tag} not found"))),
        }
    }

    fn terminated(&self, sel: &ProcessSelector) -> Option<(u32, EndEvent)> {
        let mut t = self.inner.lock().ok()?;
        let now = Instant::now();
        t.terminated.retain(|_, r| r.expiry > now);
        let found = match sel {
            ProcessSelector::Pid(pid) => t.terminated.get(pid),
            ProcessSelector::Tag(tag) => t
                .terminated
                .values()
                .find(|r| r.tag.as_deref() == Some(tag.as_str())),
        };
        found.map(|r| (r.pid, r.end.clone()))
    }

    fn insert(&self, p: Arc<Proc>) {
        if let Ok(mut t) = self.inner.lock() {
            t.terminated.remove(&p.pid);
            if let Some(tag) = &p.tag {
                t.terminated.retain(|_, r| r.tag.as_ref() != Some(tag));
            }
            t.live.push(p);
        }
    }

    fn finish(&self, p: &Arc<Proc>, end: &EndEvent) {
        drop(self.first_end.lock().ok().and_then(|mut slot| slot.take()));
        if let Ok(mut t) = self.inner.lock() {
            let before = t.live.len();
            t.live.retain(|q| !Arc::ptr_eq(q, p));
            if t.live.len() != before {
                t.terminated.insert(
                    p.pid,
                    Retained {
                        pid: p.pid,
                        tag: p.tag.clone(),
                        end: end.clone(),
                        expiry: Instant::now() + RETENTION,
                    },
                );
            }
        }
    }
}

/// The end event of Go's `ProcessState`.
pub(crate) fn end_event(status: std::process::ExitStatus) -> EndEvent {
    if let Some(code) = status.code() {
        let s = format!("exit status {code}");
        EndEvent {
            exit_code: code,
            exited: true,
            error: (code != 0).then(|| s.clone()),
            status: s,
        }
    } else {
        let sig = status.signal().unwrap_or(0);
        let mut s = format!("signal: {}", e2b_proto::signal::go_name(sig));
        if status.core_dumped() {
            s.push_str(" (core dumped)");
        }
        EndEvent {
            exit_code: -1,
            exited: false,
            error: Some(s.clone()),
            status: s,
        }
    }
}

enum Pumped {
    Done,
    Closed,
    Deadline,
}

/// Forward a subscription to a stream: events, keepalives when idle, until `end`.
async fn pump(
    tx: &StreamTx,
    rx: &mut mpsc::Receiver<ProcessEvent>,
    keepalive: Duration,
    deadline: Option<Instant>,
) -> Pumped {
    let far = Instant::now() + Duration::from_secs(86400 * 365);
    let deadline_at = deadline.unwrap_or(far);
    let mut next_tick = Instant::now() + keepalive;
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else {
                    return Pumped::Done;
                };
                let is_end = matches!(ev, ProcessEvent::End(_));
                if is_end && Instant::now() >= deadline_at {
                    // The end of a process the deadline killed: envd's stream ends with
                    // `deadline_exceeded` and no end event.
                    return Pumped::Deadline;
                }
                let sent = match &ev {
                    ProcessEvent::Data(d) => tx.send_frame(output_frame(d)).await,
                    _ => tx.send(&EventResponse { event: ev }).await,
                };
                if sent.is_err() {
                    return Pumped::Closed;
                }
                if is_end {
                    return Pumped::Done;
                }
                next_tick = Instant::now() + keepalive;
            }
            _ = tokio::time::sleep_until(next_tick) => {
                let ka = EventResponse { event: ProcessEvent::Keepalive(Empty {}) };
                if tx.send(&ka).await.is_err() {
                    return Pumped::Closed;
                }
                next_tick += keepalive;
            }
            _ = tokio::time::sleep_until(deadline_at) => return Pumped::Deadline,
            _ = tx.closed() => return Pumped::Closed,
        }
    }
}

/// The envelope of an output event, `{"event":{"data":{"stdout":"<base64>"}}}`, written
/// in one buffer: the same bytes serde gives (`output_frame_is_serdes` checks), without
/// the base64 `String`, the JSON escape scan and the copy into the frame.
fn output_frame(d: &DataEvent) -> Bytes {
    use base64::Engine as _;
    let (key, data) = match d {
        DataEvent::Stdout(b) => ("stdout", b),
        DataEvent::Stderr(b) => ("stderr", b),
        DataEvent::Pty(b) => ("pty", b),
    };
    let head = format!(r#"{{"event":{{"data":{{"{key}":""#);
    let tail = r#""}}}"#;
    let b64_len = data.len().div_ceil(3) * 4;
    let len = head.len() + b64_len + tail.len();
    let mut out = vec![0u8; e2b_proto::envelope::PREFIX_LEN + len];
    out[1..5].copy_from_slice(&(len as u32).to_be_bytes());
    let mut at = e2b_proto::envelope::PREFIX_LEN;
    out[at..at + head.len()].copy_from_slice(head.as_bytes());
    at += head.len();
    let written =
        base64::engine::general_purpose::STANDARD.encode_slice(data, &mut out[at..at + b64_len]);
    if written.ok() != Some(b64_len) {
        // Never expected (padded base64 is exactly this long); serde's frame instead.
        let msg = EventResponse {
            event: ProcessEvent::Data(d.clone()),
        };
        return e2b_proto::envelope::encode_json(&msg).unwrap_or_default();
    }
    at += b64_len;
    out[at..].copy_from_slice(tail.as_bytes());
    Bytes::from(out)
}

async fn finish_pumped(tx: StreamTx, r: Pumped) {
    match r {
        Pumped::Done => tx.finish(None).await,
        Pumped::Deadline => {
            tx.finish(Some(RpcError::new(
                Code::DeadlineExceeded,
                "context deadline exceeded",
            )))
            .await
        }
        Pumped::Closed => {}
    }
}

/// `POST /process.Process/{method}`.
pub(crate) async fn dispatch(
    State(envd): State<Arc<Envd>>,
    Path(method): Path<String>,
    Extension(user): Extension<ActingUser>,
    http_method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    macro_rules! unary {
        ($t:ty, $f:expr) => {
            match connect::unary_request_any::<$t>(&http_method, &headers, &body) {
                Ok((Ok(req), codec)) => connect::unary_in(codec, $f(req).await),
                // A binary request without a selector: as the JSON one below.
                Ok((Err(_), codec)) => connect::unary_in(
                    codec,
                    Err::<Empty, _>(RpcError::new(Code::Unimplemented, NO_SELECTOR)),
                ),
                Err(resp) => resp,
            }
        };
    }
    let json_unary = http_method == Method::POST
        && headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
    if json_unary && SELECTOR_RPCS.contains(&method.as_str()) && lacks_selector(&body) {
        return connect::unary(Err::<Empty, _>(RpcError::new(
            Code::Unimplemented,
            NO_SELECTOR,
        )));
    }
    match method.as_str() {
        "Start" => match connect::stream_request::<StartRequest>(&http_method, &headers, &body) {
            Ok((req, deadline)) => start(envd, user, req, &headers, deadline).await,
            Err(Ok(resp)) => resp,
            Err(Err(e)) => connect::stream_error(e),
        },
        "Connect" => {
            match connect::stream_request::<ConnectRequest>(&http_method, &headers, &body) {
                Ok((req, deadline)) => connect_stream(envd, req, &headers, deadline),
                Err(Ok(resp)) => resp,
                Err(Err(e)) => connect::stream_error(e),
            }
        }
        "StreamInput" => match connect::stream_protocol_error(&http_method, &headers) {
            Some(resp) => resp,
            None => connect::stream_error(RpcError::new(
                Code::Unimplemented,
                "process.Process.StreamInput is not implemented by the emulator",
            )),
        },
        "List" => unary!(Empty, |_req: Empty| async { list(&envd) }),
        "SendInput" => unary!(SendInputRequest, |req| send_input(&envd, req)),
        "SendSignal" => unary!(SendSignalRequest, |req| async { send_signal(&envd, req) }),
        "Update" => unary!(UpdateRequest, |req| async { update(&envd, req) }),
        "CloseStdin" => unary!(CloseStdinRequest, |req| close_stdin(&envd, req)),
        _ => super::not_found().await,
    }
}

/// The unary RPCs that address one process through a `ProcessSelector`.
const SELECTOR_RPCS: [&str; 4] = ["SendInput", "SendSignal", "Update", "CloseStdin"];

/// True for a JSON request body whose `process` selector names neither a pid nor a tag
/// (envd answers 501 `unimplemented` before looking at anything else).
fn lacks_selector(body: &Bytes) -> bool {
    /// Only the selector: the other fields (a `SendInput`'s megabytes of base64) are
    /// skipped, not built.
    #[derive(serde::Deserialize)]
    struct Selector {
        #[serde(default)]
        process: Option<serde_json::Value>,
    }
    let Ok(msg) = serde_json::from_slice::<Selector>(body) else {
        return false;
    };
    match msg.process {
        Some(serde_json::Value::Object(sel)) => {
            !sel.contains_key("pid") && !sel.contains_key("tag")
        }
        Some(serde_json::Value::Null) | None => true,
        Some(_) => false,
    }
}

fn list(envd: &Envd) -> Result<ListResponse, RpcError> {
    let t = envd
        .procs
        .inner
        .lock()
        .map_err(|_| RpcError::internal("process table poisoned"))?;
    Ok(ListResponse {
        processes: t
            .live
            .iter()
            .map(|p| ProcessInfo {
                config: p.config.clone(),
                pid: p.pid,
                tag: p.tag.clone(),
            })
            .collect(),
    })
}

async fn send_input(envd: &Envd, req: SendInputRequest) -> Result<Empty, RpcError> {
    let p = envd.procs.get(&req.process)?;
    match req.input {
        Some(ProcessInput::Pty(data)) => {
            let Some(m) = &p.pty else {
                return Err(RpcError::internal(
                    "error writing to tty: tty not assigned to process — input should be written to the stdin, not the tty",
                ));
            };
            m.write_all(&data).await.map_err(|e| {
                RpcError::internal(format!(
                    "error writing to tty: error writing to tty of process '{}': {e}",
                    p.pid
                ))
            })?;
        }
        Some(ProcessInput::Stdin(data)) => {
            if p.pty.is_some() {
                return Err(RpcError::internal(
                    "error writing to stdin: tty assigned to process — input should be written to the pty, not the stdin",
                ));
            }
            let mut guard = p.stdin.lock().await;
            let Some(stdin) = guard.as_mut() else {
                return Err(RpcError::internal(
                    "error writing to stdin: stdin not enabled or closed",
                ));
            };
            let r = async {
                stdin.write_all(&data).await?;
                stdin.flush().await
            }
            .await;
            r.map_err(|e| {
                RpcError::internal(format!(
                    "error writing to stdin: error writing to stdin of process '{}': {e}",
                    p.pid
                ))
            })?;
        }
        None => {
            return Err(RpcError::new(
                Code::Unimplemented,
                "invalid input type <nil>",
            ));
        }
    }
    Ok(Empty {})
}

fn send_signal(envd: &Envd, req: SendSignalRequest) -> Result<Empty, RpcError> {
    let p = envd.procs.get(&req.process)?;
    let sig = match req.signal {
        Signal::Sigkill => libc::SIGKILL,
        Signal::Sigterm => libc::SIGTERM,
        other => {
            return Err(RpcError::new(
                Code::Unimplemented,
                format!("invalid signal: {}", other.as_str()),
            ));
        }
    };
    p.out_cancel.notify_one();
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(p.host_pid as i32, sig) } != 0 {
        return Err(RpcError::internal(format!(
            "error sending signal: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(Empty {})
}

fn update(envd: &Envd, req: UpdateRequest) -> Result<Empty, RpcError> {
    let p = envd.procs.get(&req.process)?;
    if let Some(pty) = req.pty {
        let size = pty.size.unwrap_or_default();
        let Some(m) = &p.pty else {
            return Err(RpcError::internal(
                "error resizing tty: tty not assigned to process",
            ));
        };
        m.resize(size.cols as u16, size.rows as u16)
            .map_err(|e| RpcError::internal(format!("error resizing tty: {e}")))?;
    }
    Ok(Empty {})
}

async fn close_stdin(envd: &Envd, req: CloseStdinRequest) -> Result<Empty, RpcError> {
    let p = envd.procs.get(&req.process)?;
    if p.pty.is_some() {
        return Err(RpcError::new(
            Code::Unknown,
            "error closing stdin: cannot close stdin for PTY process — send Ctrl+D (0x04) instead",
        ));
    }
    p.stdin.lock().await.take();
    Ok(Empty {})
}

fn connect_stream(
    envd: Arc<Envd>,
    req: ConnectRequest,
    headers: &HeaderMap,
    deadline: Option<Duration>,
) -> Response {
    let keepalive = connect::keepalive_interval(headers);
    let deadline = deadline.map(|d| Instant::now() + d);
    let p = match envd.procs.get(&req.process) {
        Ok(p) => p,
        Err(e) => {
            let Some((pid, end)) = envd.procs.terminated(&req.process) else {
                return connect::stream_error(e);
            };
            let (tx, resp) = connect::stream_response();
            tokio::spawn(async move {
                let start = EventResponse {
                    event: ProcessEvent::Start(StartEvent { pid }),
                };
                if tx.send(&start).await.is_err() {
                    return;
                }
                let end = EventResponse {
                    event: ProcessEvent::End(end),
                };
                if tx.send(&end).await.is_err() {
                    return;
                }
                tx.finish(None).await;
            });
            return resp;
        }
    };
    let mut rx = p.subscribe();
    let (tx, resp) = connect::stream_response();
    tokio::spawn(async move {
        let start = EventResponse {
            event: ProcessEvent::Start(StartEvent { pid: p.pid }),
        };
        if tx.send(&start).await.is_err() {
            return;
        }
        let r = pump(&tx, &mut rx, keepalive, deadline).await;
        finish_pumped(tx, r).await;
    });
    resp
}

/// Everything a spawned child needs in `pre_exec`, prepared before fork.
struct ChildSetup {
    ns: Option<Arc<isolation::NsFds>>,
    cwd: CString,
    creds: Option<(u32, u32)>,
    pty: bool,
}

impl ChildSetup {
    /// In the child; `join_cgroup`: see [`spawn::Prepared::start`].
    fn run(&self, join_cgroup: bool) -> std::io::Result<()> {
        if self.pty {
            pty::make_controlling()?;
        }
        if let Some(ns) = &self.ns {
            isolation::join_in_child(ns, join_cgroup)?;
        }
        // SAFETY: raw syscalls in the forked child on data prepared before fork.
        unsafe {
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((uid, gid)) = self.creds {
                // Raw system calls: glibc's setgid/setuid would try to change every thread
                // of the process it believes this still is (the child of a raw clone keeps
                // its parent's thread list) and wait for them forever. The child has one
                // thread, whose credentials are the process's.
                let groups = [gid as libc::gid_t];
                if libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// `Start`: resolve the user and cwd, build the command envd would run, spawn it in the
/// sandbox, register it, start its output readers and its waiter, and answer the stream
/// (`start`, output, `end`). A failure before the spawn is the stream's error.
async fn start(
    envd: Arc<Envd>,
    user: ActingUser,
    req: StartRequest,
    headers: &HeaderMap,
    deadline: Option<Duration>,
) -> Response {
    let keepalive = connect::keepalive_interval(headers);
    // One instant for the kill and the end of the stream: with the stream's a little
    // later, a quickly dying process's `end` could slip out before `deadline_exceeded`.
    let stream_deadline = proc_deadline(deadline);
    let (pid, rx) = match launch(&envd, user, &req, stream_deadline).await {
        Ok(started) => started,
        Err(e) => return connect::stream_error(e),
    };
    let (tx, resp) = connect::stream_response();
    tokio::spawn(async move {
        let mut rx = rx;
        let start = EventResponse {
            event: ProcessEvent::Start(StartEvent { pid }),
        };
        if tx.send(&start).await.is_err() {
            return;
        }
        let r = pump(&tx, &mut rx, keepalive, stream_deadline).await;
        finish_pumped(tx, r).await;
    });
    resp
}

/// When a process started with the `Connect-Timeout-Ms` `deadline` is killed (and its
/// stream ended): none for no or a zero deadline.
fn proc_deadline(deadline: Option<Duration>) -> Option<Instant> {
    deadline
        .filter(|d| !d.is_zero())
        .map(|d| Instant::now() + d)
}

/// Everything of `Start` up to the response: the sandbox pid and the first subscription.
async fn launch(
    envd: &Arc<Envd>,
    user: ActingUser,
    req: &StartRequest,
    deadline: Option<Instant>,
) -> Result<(u32, mpsc::Receiver<ProcessEvent>), RpcError> {
    let user = user
        .0
        .or_else(|| envd.default_user().cloned())
        .ok_or_else(|| RpcError::new(Code::Unauthenticated, "no user specified"))?;
    let workdir = envd.template().workdir.clone();
    let cwd = paths::resolve(
        req.process.cwd.as_deref().unwrap_or(""),
        &user,
        workdir.as_deref(),
    )
    .map_err(RpcError::invalid)?;
    let mut cmd = command(envd, &user, req);
    let master = match &req.pty {
        Some(p) => Some(attach_pty(envd, &mut cmd, req, p, &cwd).await?),
        None => {
            attach_pipes(&mut cmd, req.stdin.unwrap_or(true));
            None
        }
    };
    let mut child = spawn_in_sandbox(envd, cmd, &user, &cwd, master.is_some(), req).await?;
    let host_pid = child.id();
    let pty_master = match master.map(pty::Master::new).transpose() {
        Ok(m) => m.map(Arc::new),
        Err(e) => {
            child.start_kill();
            return Err(RpcError::invalid(format!("error starting pty: {e}")));
        }
    };
    let proc_ = Arc::new(Proc {
        pid: child.ns_pid(),
        host_pid,
        config: req.process.clone(),
        tag: req.tag.clone(),
        subs: Mutex::new(Vec::new()),
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
        pty: pty_master.clone(),
        out_cancel: Notify::new(),
    });
    let rx = proc_.subscribe();
    envd.procs.insert(proc_.clone());
    let (readers, done_rx) = start_readers(&proc_, &mut child, pty_master);
    tokio::spawn(wait_and_end(
        child,
        readers,
        done_rx,
        proc_.clone(),
        envd.procs.clone(),
        deadline,
    ));
    Ok((proc_.pid, rx))
}

/// The command envd runs: its OOM wrapper around the user's program, with the user's
/// login variables, the sandbox's globals and the request's variables, nothing else
/// (a later one of the same name wins).
fn command(envd: &Envd, user: &TemplateUser, req: &StartRequest) -> spawn::Spawn {
    let home = if envd.iso.enabled() {
        user.home.clone()
    } else {
        envd.host_path(&user.home).display().to_string()
    };
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        OOM_WRAPPER.to_owned(),
        "--".to_owned(),
        req.process.cmd.clone(),
    ];
    argv.extend(req.process.args.iter().cloned());
    let mut env: std::collections::BTreeMap<String, String> = [
        ("PATH", SANDBOX_PATH.to_owned()),
        ("HOME", home),
        ("USER", user.name.clone()),
        ("LOGNAME", user.name.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    env.extend(envd.globals.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(req.process.envs.iter().map(|(k, v)| (k.clone(), v.clone())));
    spawn::Spawn {
        argv,
        env: env.into_iter().collect(),
        stdio: [spawn::Io::Null, spawn::Io::Null, spawn::Io::Null],
    }
}

/// A PTY of the requested size as the child's stdin, stdout and stderr; returns the
/// master. Opened by a worker thread in the sandbox's mount namespace (its devpts).
async fn attach_pty(
    envd: &Envd,
    cmd: &mut spawn::Spawn,
    req: &StartRequest,
    p: &e2b_proto::process::Pty,
    cwd: &str,
) -> Result<OwnedFd, RpcError> {
    let size = p.size.unwrap_or_default();
    let (cols, rows) = (size.cols as u16, size.rows as u16);
    let (m, s) = envd
        .fs
        .run(move || pty::open(cols, rows))
        .await
        .and_then(|r| r)
        .map_err(|e| {
            RpcError::invalid(format!(
                "error starting pty with command '{}' in dir '{cwd}' with '{}' cols and '{}' rows: {e}",
                user_command(&req.process),
                size.cols,
                size.rows
            ))
        })?;
    let dup = |fd: &OwnedFd| fd.try_clone().map(spawn::Io::Fd);
    match (dup(&s), dup(&s), dup(&s)) {
        (Ok(a), Ok(b), Ok(c)) => {
            cmd.stdio = [a, b, c];
            Ok(m)
        }
        _ => Err(RpcError::invalid("error duplicating pty")),
    }
}

/// Piped stdout and stderr; stdin piped unless the request turned it off.
fn attach_pipes(cmd: &mut spawn::Spawn, stdin: bool) {
    let input = if stdin {
        spawn::Io::Piped
    } else {
        spawn::Io::Null
    };
    cmd.stdio = [input, spawn::Io::Piped, spawn::Io::Piped];
}

/// Spawns `cmd` as `user` in `cwd`, which must exist: through the sandbox's starter
/// when it has one (the starter's child is born in every namespace and group of the
/// sandbox); else in one job of a sandbox worker thread, which checks `cwd` and forks
/// (or, without isolation, clones on our memory) a child born in the sandbox's PID
/// namespace that joins its other namespaces (`ChildSetup`). The command (and with it
/// our copies of a pty slave) is dropped once the child has its own.
async fn spawn_in_sandbox(
    envd: &Envd,
    cmd: spawn::Spawn,
    user: &TemplateUser,
    cwd: &str,
    pty: bool,
    req: &StartRequest,
) -> Result<spawn::Child, RpcError> {
    let failed = |e: std::io::Error| {
        RpcError::invalid(format!(
            "error starting process '{}': {e}",
            user_command(&req.process)
        ))
    };
    let missing = || RpcError::invalid(format!("cwd '{cwd}' does not exist"));
    let host_cwd = envd.host_path(cwd);
    let setup = ChildSetup {
        ns: envd.iso.ns_fds(),
        cwd: CString::new(host_cwd.as_os_str().as_bytes()).unwrap_or_default(),
        creds: envd.iso.enabled().then_some((user.uid, user.gid)),
        pty,
    };
    let null = setup.ns.as_ref().and_then(|ns| ns.dev_null());
    let prepared = cmd.prepare(null).map_err(failed)?;
    let prepared = match envd.iso.zygote() {
        Some(z) => {
            let how = zygote::Setup {
                cwd: setup.cwd.clone(),
                creds: setup.creds,
                pty,
            };
            match z.start_command(prepared, how).await.map_err(failed)? {
                zygote::Outcome::Started(child) => return Ok(child),
                zygote::Outcome::Failed {
                    missing_cwd: true, ..
                } => return Err(missing()),
                zygote::Outcome::Failed { error, .. } => return Err(failed(error)),
                zygote::Outcome::Unavailable(prepared) => prepared,
            }
        }
        None => prepared,
    };
    let rt = tokio::runtime::Handle::current();
    let spawned = envd
        .fs
        .run(move || {
            if std::fs::metadata(&host_cwd).is_err() {
                return None;
            }
            let _entered = rt.enter();
            let cgroup = setup.ns.as_ref().and_then(|ns| ns.cgroup_dir());
            // Joining no namespace, the child needs no copy of our memory.
            let via = if setup.ns.is_none() {
                spawn::Via::SharedMemory
            } else {
                spawn::Via::Fork
            };
            // `ChildSetup::run` performs only raw syscalls on data prepared before fork.
            Some(prepared.start(via, cgroup, &|join| setup.run(join)))
        })
        .await;
    match spawned {
        Ok(Some(Ok(child))) => Ok(child),
        Ok(None) => Err(missing()),
        Ok(Some(Err(e))) | Err(e) => Err(failed(e)),
    }
}

/// The output readers of a fresh process (its PTY, or its stdout and stderr pipes), and
/// a receiver that ends once all of them have finished.
fn start_readers(
    proc_: &Arc<Proc>,
    child: &mut spawn::Child,
    pty_master: Option<Arc<pty::Master>>,
) -> (Vec<tokio::task::JoinHandle<()>>, mpsc::Receiver<()>) {
    let mut readers = Vec::new();
    let (done_tx, done_rx) = mpsc::channel::<()>(1);
    if let Some(m) = pty_master {
        readers.push(spawn_reader(
            OutputSource::Pty(m),
            PTY_CHUNK,
            DataEvent::Pty,
            proc_,
            &done_tx,
        ));
    }
    if let Some(out) = child.stdout.take() {
        readers.push(spawn_reader(
            OutputSource::Pipe(Box::new(out)),
            STD_CHUNK,
            DataEvent::Stdout,
            proc_,
            &done_tx,
        ));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(spawn_reader(
            OutputSource::Pipe(Box::new(err)),
            STD_CHUNK,
            DataEvent::Stderr,
            proc_,
            &done_tx,
        ));
    }
    (readers, done_rx)
}

/// The waiter: output done (or a kill, or the deadline), then the exit; then `end` to
/// every subscriber and the process moves to the table's exited ones.
async fn wait_and_end(
    mut child: spawn::Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    mut done_rx: mpsc::Receiver<()>,
    p: Arc<Proc>,
    table: Arc<Table>,
    deadline: Option<Instant>,
) {
    let far = Instant::now() + Duration::from_secs(86400 * 365);
    let kill_at = deadline.unwrap_or(far);
    tokio::select! {
        _ = done_rx.recv() => {}
        _ = p.out_cancel.notified() => {}
        _ = tokio::time::sleep_until(kill_at) => {
            child.start_kill();
        }
    }
    let wait = child.wait();
    tokio::pin!(wait);
    let status = loop {
        tokio::select! {
            st = &mut wait => break st,
            _ = tokio::time::sleep_until(kill_at) => {
                child.start_kill();
            }
        }
    };
    // Like Go's cmd.Wait closing the pipes: stop reading what a leftover grandchild
    // still writes.
    for r in &readers {
        if !r.is_finished() {
            r.abort();
        }
    }
    for r in readers {
        let _ = r.await;
    }
    let end = match status {
        Ok(st) => end_event(st),
        Err(e) => EndEvent {
            exit_code: -1,
            exited: false,
            status: String::new(),
            error: Some(e.to_string()),
        },
    };
    p.publish(ProcessEvent::End(end.clone())).await;
    table.finish(&p, &end);
    if let Ok(mut s) = p.subs.lock() {
        s.clear();
    }
}

/// Where a process's output is read from: its PTY master or a stdout/stderr pipe.
enum OutputSource {
    Pty(Arc<pty::Master>),
    Pipe(Box<dyn tokio::io::AsyncRead + Unpin + Send>),
}

impl OutputSource {
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            OutputSource::Pty(m) => m.read(buf).await,
            OutputSource::Pipe(r) => r.read(buf).await,
        }
    }
}

/// One output reader: chunks of at most `chunk` bytes, published as `wrap(bytes)` while
/// someone subscribes (envd discards output nobody reads); ends at EOF or an error and
/// then drops its `done` sender.
fn spawn_reader(
    mut reader: OutputSource,
    chunk: usize,
    wrap: fn(Vec<u8>) -> DataEvent,
    proc_: &Arc<Proc>,
    done: &mpsc::Sender<()>,
) -> tokio::task::JoinHandle<()> {
    let p = proc_.clone();
    let done = done.clone();
    tokio::spawn(async move {
        let _done = done;
        let mut buf = vec![0u8; chunk];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if p.has_subscribers() {
                        p.publish(ProcessEvent::Data(wrap(buf[..n].to_vec()))).await;
                    }
                }
            }
        }
    })
}

fn user_command(c: &ProcessConfig) -> String {
    std::iter::once(c.cmd.as_str())
        .chain(c.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_frame_is_serdes() {
        for n in [0usize, 1, 2, 3, 4, 5, 32 << 10, (32 << 10) - 1] {
            let raw: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
            for d in [
                DataEvent::Stdout(raw.clone()),
                DataEvent::Stderr(raw.clone()),
                DataEvent::Pty(raw.clone()),
            ] {
                let want = e2b_proto::envelope::encode_json(&EventResponse {
                    event: ProcessEvent::Data(d.clone()),
                })
                .expect("serde encodes");
                assert_eq!(output_frame(&d), want, "{n} bytes");
            }
        }
    }
}
