//! Directory watching with inotify: the `WatchDir` stream and the polled watchers
//! (`CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`), with fsnotify's event mapping.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use e2b_proto::connect::Code;
use e2b_proto::filesystem::{
    CreateWatcherResponse, EventType, FilesystemEvent, GetWatcherEventsResponse, WatchDirRequest,
    WatchDirResponse,
};
use e2b_proto::process::Empty;
use rand::Rng as _;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::Envd;
use super::auth::ActingUser;
use super::connect::{self, RpcError};
use super::filesystem::{FsCtx, entry_info, go_err, resolve_for};
use super::isolation::FsWorker;

const MASK: u32 = libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_CREATE
    | libc::IN_ATTRIB
    | libc::IN_MODIFY
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF;

/// One inotify instance watching a directory (optionally recursively).
struct Inotify {
    fd: AsyncFd<OwnedFd>,
    wds: Mutex<HashMap<i32, String>>,
    root: String,
    recursive: bool,
    include_entry: bool,
    ctx: FsCtx,
    fs: Arc<FsWorker>,
}

/// Add watches for `dir` (and its subdirectories when recursive). Runs on a worker.
fn add_watches(
    ctx: &FsCtx,
    fd: i32,
    dir: &str,
    recursive: bool,
    wds: &mut HashMap<i32, String>,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let host = ctx.host(dir);
    let c = std::ffi::CString::new(host.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: valid fd and NUL-terminated path.
    let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), MASK) };
    if wd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    wds.insert(wd, dir.to_string());
    if recursive && let Ok(rd) = std::fs::read_dir(&host) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let name = e.file_name().to_string_lossy().into_owned();
                let _ = add_watches(
                    ctx,
                    fd,
                    &format!("{}/{name}", dir.trim_end_matches('/')),
                    true,
                    wds,
                );
            }
        }
    }
    Ok(())
}

fn ops_of(mask: u32) -> Vec<EventType> {
    let mut ops = Vec::new();
    if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
        ops.push(EventType::Create);
    }
    if mask & (libc::IN_MOVE_SELF | libc::IN_MOVED_FROM) != 0 {
        ops.push(EventType::Rename);
    }
    if mask & libc::IN_ATTRIB != 0 {
        ops.push(EventType::Chmod);
    }
    if mask & libc::IN_MODIFY != 0 {
        ops.push(EventType::Write);
    }
    if mask & (libc::IN_DELETE_SELF | libc::IN_DELETE) != 0 {
        ops.push(EventType::Remove);
    }
    ops
}

impl Inotify {
    /// Validate the path and start watching (on a worker thread).
    async fn open(
        envd: &Envd,
        user: &ActingUser,
        req: &WatchDirRequest,
    ) -> Result<Arc<Inotify>, RpcError> {
        let (_, path) = resolve_for(envd, user, &req.path)?;
        let ctx = envd.fsctx.clone();
        let recursive = req.recursive;
        let p = path.clone();
        let ctx2 = ctx.clone();
        let (fd, wds) = envd
            .fs
            .run(
                move || -> Result<(OwnedFd, HashMap<i32, String>), RpcError> {
                    match std::fs::metadata(ctx2.host(&p)) {
                        Ok(md) if md.is_dir() => {}
                        Ok(_) => {
                            return Err(RpcError::invalid(format!(
                                "path {p} not a directory: %!w(<nil>)"
                            )));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            return Err(RpcError::not_found(format!(
                                "path {p} not found: stat {p}: {}",
                                go_err(&e)
                            )));
                        }
                        Err(e) => {
                            return Err(RpcError::internal(format!(
                                "error statting path {p}: stat {p}: {}",
                                go_err(&e)
                            )));
                        }
                    }
                    // SAFETY: inotify_init1 has no preconditions.
                    let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
                    if raw < 0 {
                        return Err(RpcError::internal(format!(
                            "error creating watcher: {}",
                            std::io::Error::last_os_error()
                        )));
                    }
                    // SAFETY: a fresh fd we own.
                    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                    let mut wds = HashMap::new();
                    add_watches(&ctx2, fd.as_raw_fd(), &p, recursive, &mut wds).map_err(|e| {
                        RpcError::internal(format!(
                            "error adding path {p} to watcher: {}",
                            go_err(&e)
                        ))
                    })?;
                    Ok((fd, wds))
                },
            )
            .await
            .map_err(|e| RpcError::internal(e.to_string()))??;
        Ok(Arc::new(Inotify {
            // SAFETY: the fd is owned by the AsyncFd and stays open for its lifetime.
            fd: unsafe { AsyncFd::register(fd) }.map_err(|e| {
                RpcError::internal(format!(
                    "error creating watcher: {}",
                    std::io::Error::from(e)
                ))
            })?,
            wds: Mutex::new(wds),
            root: path,
            recursive,
            include_entry: req.include_entry,
            ctx,
            fs: envd.fs.clone(),
        }))
    }

    /// Wait for the next batch of events.
    async fn next(&self) -> Result<Vec<FilesystemEvent>, RpcError> {
        let mut buf = vec![0u8; 64 * 1024];
        let n = loop {
            let mut guard = self
                .fd
                .readable()
                .await
                .map_err(|e| RpcError::internal(format!("watcher error: {e}")))?;
            let r = guard.try_io(|inner| {
                // SAFETY: buffer is valid for writes of its length.
                let n =
                    unsafe { libc::read(inner.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(Ok(n)) => break n,
                Ok(Err(e)) => return Err(RpcError::internal(format!("watcher error: {e}"))),
                Err(_) => continue,
            }
        };
        let mut out = Vec::new();
        let mut off = 0;
        let hdr = std::mem::size_of::<libc::inotify_event>();
        while off + hdr <= n {
            let wd = i32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
            let mask = u32::from_ne_bytes([buf[off + 4], buf[off + 5], buf[off + 6], buf[off + 7]]);
            let len =
                u32::from_ne_bytes([buf[off + 12], buf[off + 13], buf[off + 14], buf[off + 15]])
                    as usize;
            let name_bytes = &buf[off + hdr..(off + hdr + len).min(n)];
            off += hdr + len;
            let name = String::from_utf8_lossy(name_bytes)
                .trim_end_matches('\0')
                .to_string();
            if mask & libc::IN_Q_OVERFLOW != 0 {
                return Err(RpcError::internal(
                    "watcher error: fsnotify: queue or buffer overflow",
                ));
            }
            let dir = {
                let mut wds = self
                    .wds
                    .lock()
                    .map_err(|_| RpcError::internal("poisoned"))?;
                if mask & libc::IN_IGNORED != 0 {
                    wds.remove(&wd);
                    continue;
                }
                match wds.get(&wd) {
                    Some(d) => d.clone(),
                    None => continue,
                }
            };
            let full = if name.is_empty() {
                dir.clone()
            } else {
                format!("{}/{name}", dir.trim_end_matches('/'))
            };
            if self.recursive
                && mask & libc::IN_ISDIR != 0
                && mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0
            {
                let ctx = self.ctx.clone();
                let raw = self.fd.get_ref().as_raw_fd();
                let p = full.clone();
                let added = self
                    .fs
                    .run(move || {
                        let mut wds = HashMap::new();
                        let _ = add_watches(&ctx, raw, &p, true, &mut wds);
                        wds
                    })
                    .await
                    .unwrap_or_default();
                if let Ok(mut wds) = self.wds.lock() {
                    wds.extend(added);
                }
            }
            let rel = if full == self.root {
                ".".to_string()
            } else {
                full.strip_prefix(&format!("{}/", self.root.trim_end_matches('/')))
                    .unwrap_or(&full)
                    .to_string()
            };
            for op in ops_of(mask) {
                let entry = if self.include_entry
                    && matches!(op, EventType::Create | EventType::Write | EventType::Chmod)
                {
                    let ctx = self.ctx.clone();
                    let p = full.clone();
                    self.fs
                        .run(move || entry_info(&ctx, &p).ok())
                        .await
                        .ok()
                        .flatten()
                } else {
                    None
                };
                out.push(FilesystemEvent {
                    name: rel.clone(),
                    event_type: op,
                    entry,
                });
            }
        }
        Ok(out)
    }
}

/// `WatchDir` (server stream).
pub(crate) async fn watch_dir(
    envd: Arc<Envd>,
    user: ActingUser,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let (req, deadline) = match connect::stream_request::<WatchDirRequest>(method, headers, body) {
        Ok(v) => v,
        Err(Ok(resp)) => return resp,
        Err(Err(e)) => return connect::stream_error(e),
    };
    let keepalive = connect::keepalive_interval(headers);
    let deadline = deadline.map(|d| Instant::now() + d);
    let watcher = match Inotify::open(&envd, &user, &req).await {
        Ok(w) => w,
        Err(e) => return connect::stream_error(e),
    };
    drop(envd);
    let (tx, resp) = connect::stream_response();
    tokio::spawn(async move {
        if tx.send(&WatchDirResponse::Start(Empty {})).await.is_err() {
            return;
        }
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        let deadline_at = deadline.unwrap_or(far);
        let mut next_tick = Instant::now() + keepalive;
        loop {
            tokio::select! {
                evs = watcher.next() => {
                    match evs {
                        Ok(evs) => {
                            for ev in evs {
                                if tx.send(&WatchDirResponse::Filesystem(ev)).await.is_err() {
                                    return;
                                }
                                next_tick = Instant::now() + keepalive;
                            }
                        }
                        Err(e) => {
                            tx.finish(Some(e)).await;
                            return;
                        }
                    }
                }
                _ = tokio::time::sleep_until(next_tick) => {
                    if tx.send(&WatchDirResponse::Keepalive(Empty {})).await.is_err() {
                        return;
                    }
                    next_tick += keepalive;
                }
                _ = tokio::time::sleep_until(deadline_at) => {
                    tx.finish(Some(RpcError::new(Code::DeadlineExceeded, "context deadline exceeded"))).await;
                    return;
                }
                _ = tx.closed() => return,
            }
        }
    });
    resp
}

struct Polled {
    events: Mutex<Vec<FilesystemEvent>>,
    error: Mutex<Option<RpcError>>,
    task: tokio::task::JoinHandle<()>,
}

/// Watchers created by `CreateWatcher`.
#[derive(Default)]
pub(crate) struct Watchers {
    map: Mutex<HashMap<String, Arc<Polled>>>,
}

impl Watchers {
    /// Stop and forget every watcher.
    pub(crate) fn clear(&self) {
        if let Ok(mut m) = self.map.lock() {
            for (_, w) in m.drain() {
                w.task.abort();
            }
        }
    }

    /// Drain a watcher's queued events.
    pub(crate) fn drain(&self, id: &str) -> Result<GetWatcherEventsResponse, RpcError> {
        let w = self
            .map
            .lock()
            .map_err(|_| RpcError::internal("poisoned"))?
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::not_found(format!("watcher with id {id} not found")))?;
        if let Ok(e) = w.error.lock()
            && let Some(err) = e.clone()
        {
            return Err(err);
        }
        let events = w
            .events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default();
        Ok(GetWatcherEventsResponse { events })
    }

    /// Remove a watcher.
    pub(crate) fn remove(&self, id: &str) -> Result<Empty, RpcError> {
        let w = self
            .map
            .lock()
            .map_err(|_| RpcError::internal("poisoned"))?
            .remove(id)
            .ok_or_else(|| RpcError::not_found(format!("watcher with id {id} not found")))?;
        w.task.abort();
        Ok(Empty {})
    }
}

/// `CreateWatcher`.
pub(crate) async fn create_watcher(
    envd: &Arc<Envd>,
    user: &ActingUser,
    req: WatchDirRequest,
) -> Result<CreateWatcherResponse, RpcError> {
    let watcher = Inotify::open(envd, user, &req).await?;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let id: String = std::iter::once('w')
        .chain((0..20).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char))
        .collect();
    let events = Mutex::new(Vec::new());
    let error = Mutex::new(None);
    let polled = Arc::new_cyclic(|weak: &std::sync::Weak<Polled>| {
        let weak = weak.clone();
        let task = tokio::spawn(async move {
            loop {
                let r = watcher.next().await;
                let Some(me) = weak.upgrade() else {
                    return;
                };
                match r {
                    Ok(evs) => {
                        if let Ok(mut q) = me.events.lock() {
                            q.extend(evs);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut slot) = me.error.lock() {
                            *slot = Some(e);
                        }
                        return;
                    }
                }
            }
        });
        Polled {
            events,
            error,
            task,
        }
    });
    envd.watchers
        .map
        .lock()
        .map_err(|_| RpcError::internal("poisoned"))?
        .insert(id.clone(), polled);
    Ok(CreateWatcherResponse { watcher_id: id })
}
