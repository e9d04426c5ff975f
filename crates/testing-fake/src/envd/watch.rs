//! Directory watching with inotify: the `WatchDir` stream and the polled watchers
//! (`CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`), with fsnotify's event mapping.

use std::collections::HashMap;
use std::ffi::OsString;
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
use futures::StreamExt as _;
use inotify::{EventMask, EventStream, WatchMask, Watches};
use rand::Rng as _;
use tokio::time::Instant;

use super::Envd;
use super::auth::ActingUser;
use super::connect::{self, RpcError};
use super::filesystem::{FsCtx, entry_info, go_err, resolve_for};
use super::isolation::FsWorker;

/// What fsnotify (envd's watcher) asks inotify for.
const MASK: WatchMask = WatchMask::MOVED_TO
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::CREATE)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::MODIFY)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::DELETE)
    .union(WatchMask::DELETE_SELF);

/// Read buffer of the event stream (room for many events with their names).
const EVENT_BUFFER: usize = 64 * 1024;

/// Watched directories by watch descriptor id: the world path each one watches.
type WatchedDirs = HashMap<i32, String>;

/// One inotify instance watching a directory (optionally recursively). Owned by the one
/// task that reads it.
struct DirWatcher {
    events: EventStream<Vec<u8>>,
    dirs: WatchedDirs,
    root: String,
    recursive: bool,
    include_entry: bool,
    ctx: FsCtx,
    fs: Arc<FsWorker>,
}

/// Add watches for `dir` (and its subdirectories when recursive). Runs on a worker, where
/// the sandbox's paths resolve.
fn add_watches(
    ctx: &FsCtx,
    watches: &mut Watches,
    dir: &str,
    recursive: bool,
    dirs: &mut WatchedDirs,
) -> std::io::Result<()> {
    let host = ctx.host(dir);
    let wd = watches.add(&host, MASK)?;
    dirs.insert(wd.get_watch_descriptor_id(), dir.to_string());
    if recursive && let Ok(rd) = std::fs::read_dir(&host) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let name = e.file_name().to_string_lossy().into_owned();
                let _ = add_watches(
                    ctx,
                    watches,
                    &format!("{}/{name}", dir.trim_end_matches('/')),
                    true,
                    dirs,
                );
            }
        }
    }
    Ok(())
}

/// fsnotify's operations for an inotify mask.
fn ops_of(mask: EventMask) -> Vec<EventType> {
    let mut ops = Vec::new();
    if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
        ops.push(EventType::Create);
    }
    if mask.intersects(EventMask::MOVE_SELF | EventMask::MOVED_FROM) {
        ops.push(EventType::Rename);
    }
    if mask.contains(EventMask::ATTRIB) {
        ops.push(EventType::Chmod);
    }
    if mask.contains(EventMask::MODIFY) {
        ops.push(EventType::Write);
    }
    if mask.intersects(EventMask::DELETE_SELF | EventMask::DELETE) {
        ops.push(EventType::Remove);
    }
    ops
}

/// Checks that `p` is a directory, with envd's messages.
fn check_directory(ctx: &FsCtx, p: &str) -> Result<(), RpcError> {
    match std::fs::metadata(ctx.host(p)) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => Err(RpcError::invalid(format!(
            "path {p} not a directory: %!w(<nil>)"
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RpcError::not_found(format!(
            "path {p} not found: stat {p}: {}",
            go_err(&e)
        ))),
        Err(e) => Err(RpcError::internal(format!(
            "error statting path {p}: stat {p}: {}",
            go_err(&e)
        ))),
    }
}

impl DirWatcher {
    /// Validate the path and start watching (the watches are added on a worker thread).
    async fn open(
        envd: &Envd,
        user: &ActingUser,
        req: &WatchDirRequest,
    ) -> Result<DirWatcher, RpcError> {
        let (_, path) = resolve_for(envd, user, &req.path)?;
        let ctx = envd.fsctx.clone();
        let recursive = req.recursive;
        let p = path.clone();
        let ctx2 = ctx.clone();
        let (inotify, dirs) = envd
            .fs
            .run(
                move || -> Result<(inotify::Inotify, WatchedDirs), RpcError> {
                    check_directory(&ctx2, &p)?;
                    let inotify = inotify::Inotify::init()
                        .map_err(|e| RpcError::internal(format!("error creating watcher: {e}")))?;
                    let mut dirs = HashMap::new();
                    add_watches(&ctx2, &mut inotify.watches(), &p, recursive, &mut dirs).map_err(
                        |e| {
                            RpcError::internal(format!(
                                "error adding path {p} to watcher: {}",
                                go_err(&e)
                            ))
                        },
                    )?;
                    Ok((inotify, dirs))
                },
            )
            .await
            .map_err(|e| RpcError::internal(e.to_string()))??;
        let events = inotify
            .into_event_stream(vec![0u8; EVENT_BUFFER])
            .map_err(|e| RpcError::internal(format!("error creating watcher: {e}")))?;
        Ok(DirWatcher {
            events,
            dirs,
            root: path,
            recursive,
            include_entry: req.include_entry,
            ctx,
            fs: envd.fs.clone(),
        })
    }

    /// Wait for the next event that concerns a watched directory, as fsnotify's events
    /// (one per operation it stands for).
    async fn next(&mut self) -> Result<Vec<FilesystemEvent>, RpcError> {
        loop {
            let ev = match self.events.next().await {
                Some(Ok(ev)) => ev,
                Some(Err(e)) => return Err(RpcError::internal(format!("watcher error: {e}"))),
                None => return Err(RpcError::internal("watcher error: inotify closed")),
            };
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                return Err(RpcError::internal(
                    "watcher error: fsnotify: queue or buffer overflow",
                ));
            }
            let wd = ev.wd.get_watch_descriptor_id();
            if ev.mask.contains(EventMask::IGNORED) {
                self.dirs.remove(&wd);
                continue;
            }
            let Some(dir) = self.dirs.get(&wd) else {
                continue;
            };
            let full = joined(dir, ev.name.as_ref());
            if self.recursive
                && ev.mask.contains(EventMask::ISDIR)
                && ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
            {
                self.watch_new_dir(&full).await;
            }
            return Ok(self.fs_events(ev.mask, &full).await);
        }
    }

    /// Watches a directory created (or moved) below a recursive watch, and its subtree.
    async fn watch_new_dir(&mut self, full: &str) {
        let ctx = self.ctx.clone();
        let mut watches = self.events.watches();
        let p = full.to_string();
        let added = self
            .fs
            .run(move || {
                let mut dirs = HashMap::new();
                let _ = add_watches(&ctx, &mut watches, &p, true, &mut dirs);
                dirs
            })
            .await
            .unwrap_or_default();
        self.dirs.extend(added);
    }

    /// fsnotify's events for one inotify event on `full`, named relative to the root.
    async fn fs_events(&self, mask: EventMask, full: &str) -> Vec<FilesystemEvent> {
        let rel = if full == self.root {
            ".".to_string()
        } else {
            full.strip_prefix(&format!("{}/", self.root.trim_end_matches('/')))
                .unwrap_or(full)
                .to_string()
        };
        let mut out = Vec::new();
        for op in ops_of(mask) {
            let entry = if self.include_entry
                && matches!(op, EventType::Create | EventType::Write | EventType::Chmod)
            {
                let ctx = self.ctx.clone();
                let p = full.to_string();
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
        out
    }
}

/// `dir/name`, or `dir` for an event on the watched directory itself.
fn joined(dir: &str, name: Option<&OsString>) -> String {
    match name.map(|n| n.to_string_lossy()) {
        Some(name) if !name.is_empty() => format!("{}/{name}", dir.trim_end_matches('/')),
        _ => dir.to_string(),
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
    let mut watcher = match DirWatcher::open(&envd, &user, &req).await {
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
    let mut watcher = DirWatcher::open(envd, user, &req).await?;
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
