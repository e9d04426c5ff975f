//! `filesystem.Filesystem`: Stat, MakeDir, Move, ListDir, Remove (and dispatch of the
//! watch RPCs), plus `EntryInfo` exactly as envd builds it.
//!
//! Every operation runs on the sandbox's [`super::isolation::FsWorker`] threads, so paths
//! resolve in the sandbox's own mount namespace.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path as AxPath, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use e2b_proto::connect::Code;
use e2b_proto::filesystem::{
    EntryInfo, EntryResponse, FileType, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
};
use e2b_proto::process::Empty;

use super::auth::ActingUser;
use super::connect::{self, RpcError};
use super::{Envd, paths};
use crate::template::{Template, TemplateUser};

/// What file operations need, cheap to clone into a worker job.
#[derive(Debug, Clone)]
pub(crate) struct FsCtx {
    pub(crate) tree: PathBuf,
    pub(crate) isolated: bool,
    /// How the sandbox's ids are stored on the host.
    pub(crate) ids: super::userns::IdMap,
    pub(crate) template: Arc<Template>,
}

impl FsCtx {
    /// Host path of a sandbox path (identity when isolated).
    pub(crate) fn host(&self, sandbox: &str) -> PathBuf {
        if self.isolated {
            return PathBuf::from(sandbox);
        }
        for m in &self.template.mounts {
            if sandbox == m || sandbox.starts_with(&format!("{m}/")) {
                return self.tree.join(sandbox.trim_start_matches('/'));
            }
        }
        PathBuf::from(sandbox)
    }

    /// Sandbox path of a host path.
    pub(crate) fn sandbox(&self, host: &Path) -> String {
        if !self.isolated
            && let Ok(rest) = host.strip_prefix(&self.tree)
        {
            return format!("/{}", rest.display());
        }
        host.display().to_string()
    }

    /// chown to the acting user (skipped when not root, where it cannot work).
    pub(crate) fn chown(&self, host: &Path, user: &TemplateUser) -> std::io::Result<()> {
        if !self.isolated {
            return Ok(());
        }
        let (uid, gid) = self.host_ids(user);
        std::os::unix::fs::chown(host, Some(uid), Some(gid))
    }

    /// The host uid and gid of `user`'s files.
    pub(crate) fn host_ids(&self, user: &TemplateUser) -> (u32, u32) {
        (self.ids.host_id(user.uid), self.ids.host_id(user.gid))
    }

    /// envd's `EnsureDirs`: create each missing component (0755, chowned).
    pub(crate) fn ensure_dirs(&self, dir: &str, user: &TemplateUser) -> Result<(), String> {
        let mut subpaths = Vec::new();
        let mut p = dir.to_string();
        loop {
            subpaths.push(p.clone());
            p = paths::dir(&p);
            if p == "/" || p == "." {
                break;
            }
        }
        subpaths.reverse();
        for sp in subpaths {
            let host = self.host(&sp);
            match std::fs::metadata(&host) {
                Ok(md) if md.is_dir() => {}
                Ok(_) => return Err(format!("path is a file: {sp}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match std::fs::create_dir(&host) {
                        Ok(()) => {
                            let _ = std::fs::set_permissions(
                                &host,
                                std::fs::Permissions::from_mode(0o755),
                            );
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(format!(
                                "failed to create directory: mkdir {sp}: {}",
                                go_err(&e)
                            ));
                        }
                    }
                    self.chown(&host, user).map_err(|e| {
                        format!("failed to chown directory: chown {sp}: {}", go_err(&e))
                    })?;
                }
                Err(e) => {
                    return Err(format!(
                        "failed to stat directory: stat {sp}: {}",
                        go_err(&e)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The error text Go's `syscall.Errno` prints.
pub(crate) fn go_err(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) => "no such file or directory".into(),
        Some(libc::ENOTDIR) => "not a directory".into(),
        Some(libc::EEXIST) => "file exists".into(),
        Some(libc::EACCES) => "permission denied".into(),
        Some(libc::EPERM) => "operation not permitted".into(),
        Some(libc::EISDIR) => "is a directory".into(),
        Some(libc::ENOTEMPTY) => "directory not empty".into(),
        Some(libc::EXDEV) => "invalid cross-device link".into(),
        Some(libc::ELOOP) => "too many levels of symbolic links".into(),
        Some(libc::ENOSPC) => "no space left on device".into(),
        Some(libc::EROFS) => "read-only file system".into(),
        Some(libc::EBUSY) => "device or resource busy".into(),
        Some(libc::EINVAL) => "invalid argument".into(),
        _ => {
            let s = e.to_string();
            let s = s.split(" (os error").next().unwrap_or(&s).to_string();
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
                None => s,
            }
        }
    }
}

/// Go's `FileMode.String()` of a raw `st_mode`.
pub(crate) fn go_mode_string(mode: u32) -> String {
    let fmt = mode & libc::S_IFMT;
    let mut s = String::new();
    if fmt == libc::S_IFDIR {
        s.push('d');
    }
    if fmt == libc::S_IFLNK {
        s.push('L');
    }
    if fmt == libc::S_IFBLK || fmt == libc::S_IFCHR {
        s.push('D');
    }
    if fmt == libc::S_IFIFO {
        s.push('p');
    }
    if fmt == libc::S_IFSOCK {
        s.push('S');
    }
    if mode & libc::S_ISUID != 0 {
        s.push('u');
    }
    if mode & libc::S_ISGID != 0 {
        s.push('g');
    }
    if fmt == libc::S_IFCHR {
        s.push('c');
    }
    if mode & libc::S_ISVTX != 0 {
        s.push('t');
    }
    if s.is_empty() {
        s.push('-');
    }
    const RWX: &[u8; 9] = b"rwxrwxrwx";
    for (i, c) in RWX.iter().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 {
            *c as char
        } else {
            '-'
        });
    }
    s
}

/// protobuf-JSON Timestamp: UTC, `Z`, 0/3/6/9 fractional digits.
pub(crate) fn timestamp(secs: i64, nanos: i64) -> Option<String> {
    if secs == 0 && nanos == 0 {
        return None;
    }
    let t = time::OffsetDateTime::from_unix_timestamp(secs).ok()?;
    let frac = if nanos == 0 {
        String::new()
    } else if nanos % 1_000_000 == 0 {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    };
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{frac}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    ))
}

fn file_type(md: &std::fs::Metadata) -> FileType {
    if md.is_file() {
        FileType::File
    } else if md.is_dir() {
        FileType::Directory
    } else {
        FileType::Unspecified
    }
}

/// `user.e2b.*` extended attributes (prefix stripped).
pub(crate) fn read_metadata(host: &Path) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = std::collections::BTreeMap::new();
    let Ok(c) = std::ffi::CString::new(host.as_os_str().as_bytes()) else {
        return out;
    };
    let mut names = vec![0u8; 4096];
    // SAFETY: buffer pointer and length are valid.
    let n = unsafe { libc::listxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return out;
    }
    for name in names[..n as usize].split(|b| *b == 0) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let Some(key) = name.strip_prefix("user.e2b.") else {
            continue;
        };
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut val = vec![0u8; 4096];
        // SAFETY: buffer pointer and length are valid.
        let m = unsafe {
            libc::getxattr(
                c.as_ptr(),
                cname.as_ptr(),
                val.as_mut_ptr().cast(),
                val.len(),
            )
        };
        if m >= 0 {
            out.insert(
                key.to_string(),
                String::from_utf8_lossy(&val[..m as usize]).into_owned(),
            );
        }
    }
    out
}

/// Build the `EntryInfo` of a sandbox path (lstat semantics; symlinks report the target).
pub(crate) fn entry_info(ctx: &FsCtx, path: &str) -> std::io::Result<EntryInfo> {
    let host = ctx.host(path);
    let md = std::fs::symlink_metadata(&host)?;
    let mut symlink_target = None;
    let (ft, mode) = if md.file_type().is_symlink() {
        let target = std::fs::canonicalize(&host)
            .map(|p| ctx.sandbox(&p))
            .unwrap_or_else(|_| path.to_string());
        let r = match std::fs::metadata(ctx.host(&target)) {
            Ok(t) => (file_type(&t), t.mode() & 0o777),
            Err(_) => (FileType::Unspecified, 0),
        };
        symlink_target = Some(target);
        r
    } else {
        (file_type(&md), md.mode() & 0o777)
    };
    let t = &ctx.template;
    Ok(EntryInfo {
        name: paths::base(path),
        file_type: ft,
        path: path.to_string(),
        size: md.size() as i64,
        mode,
        permissions: go_mode_string(md.mode()),
        owner: {
            let uid = ctx.ids.sandbox_id(md.uid());
            t.user_by_uid(uid)
                .map_or_else(|| uid.to_string(), |u| u.name.clone())
        },
        group: {
            let gid = ctx.ids.sandbox_id(md.gid());
            t.group_by_gid(gid)
                .map_or_else(|| gid.to_string(), str::to_string)
        },
        modified_time: timestamp(md.mtime(), md.mtime_nsec()),
        symlink_target,
        metadata: read_metadata(&host),
    })
}

fn entry_rpc(ctx: &FsCtx, path: &str) -> Result<EntryInfo, RpcError> {
    entry_info(ctx, path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RpcError::not_found(format!("file not found: lstat {path}: {}", go_err(&e)))
        } else {
            RpcError::internal(format!(
                "error getting file info: lstat {path}: {}",
                go_err(&e)
            ))
        }
    })
}

/// Resolve the request's path for the acting (or default) user.
pub(crate) fn resolve_for(
    envd: &Envd,
    user: &ActingUser,
    path: &str,
) -> Result<(TemplateUser, String), RpcError> {
    let u = user
        .0
        .clone()
        .or_else(|| envd.default_user().cloned())
        .ok_or_else(|| RpcError::new(Code::Unauthenticated, "no user specified"))?;
    let resolved =
        paths::resolve(path, &u, envd.template().workdir.as_deref()).map_err(RpcError::invalid)?;
    Ok((u, resolved))
}

async fn on_worker<R: Send + 'static>(
    envd: &Envd,
    f: impl FnOnce(&FsCtx) -> Result<R, RpcError> + Send + 'static,
) -> Result<R, RpcError> {
    let ctx = envd.fsctx.clone();
    envd.fs
        .run(move || f(&ctx))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?
}

async fn stat(envd: &Envd, user: &ActingUser, req: PathRequest) -> Result<EntryResponse, RpcError> {
    let (_, path) = resolve_for(envd, user, &req.path)?;
    on_worker(envd, move |ctx| {
        Ok(EntryResponse {
            entry: entry_rpc(ctx, &path)?,
        })
    })
    .await
}

async fn make_dir(
    envd: &Envd,
    user: &ActingUser,
    req: PathRequest,
) -> Result<EntryResponse, RpcError> {
    let (u, path) = resolve_for(envd, user, &req.path)?;
    on_worker(envd, move |ctx| {
        match std::fs::metadata(ctx.host(&path)) {
            Ok(md) if md.is_dir() => {
                return Err(RpcError::new(
                    Code::AlreadyExists,
                    format!("directory already exists: {path}"),
                ));
            }
            Ok(_) => {
                return Err(RpcError::invalid(format!(
                    "path already exists but it is not a directory: {path}"
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(RpcError::internal(format!(
                    "error getting file info: stat {path}: {}",
                    go_err(&e)
                )));
            }
        }
        ctx.ensure_dirs(&path, &u).map_err(RpcError::internal)?;
        Ok(EntryResponse {
            entry: entry_rpc(ctx, &path)?,
        })
    })
    .await
}

async fn move_(
    envd: &Envd,
    user: &ActingUser,
    req: MoveRequest,
) -> Result<EntryResponse, RpcError> {
    let (u, source) = resolve_for(envd, user, &req.source)?;
    let (_, destination) = resolve_for(envd, user, &req.destination)?;
    on_worker(envd, move |ctx| {
        ctx.ensure_dirs(&paths::dir(&destination), &u)
            .map_err(RpcError::internal)?;
        if let Err(e) = std::fs::rename(ctx.host(&source), ctx.host(&destination)) {
            let msg = format!("rename {source} {destination}: {}", go_err(&e));
            return Err(if e.kind() == std::io::ErrorKind::NotFound {
                RpcError::not_found(format!("source file not found: {msg}"))
            } else {
                RpcError::internal(format!("error renaming: {msg}"))
            });
        }
        Ok(EntryResponse {
            entry: entry_rpc(ctx, &destination)?,
        })
    })
    .await
}

async fn remove(envd: &Envd, user: &ActingUser, req: PathRequest) -> Result<Empty, RpcError> {
    let (_, path) = resolve_for(envd, user, &req.path)?;
    on_worker(envd, move |ctx| {
        let host = ctx.host(&path);
        let r = match std::fs::symlink_metadata(&host) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(&host),
            Ok(_) => std::fs::remove_file(&host),
        };
        match r {
            Ok(()) => Ok(Empty {}),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Empty {}),
            Err(e) => Err(RpcError::internal(format!(
                "error removing file or directory: unlinkat {path}: {}",
                go_err(&e)
            ))),
        }
    })
    .await
}

/// `filepath.EvalSymlinks` in the sandbox view, with envd's errors.
pub(crate) fn follow_symlink(ctx: &FsCtx, path: &str) -> Result<String, RpcError> {
    match std::fs::canonicalize(ctx.host(path)) {
        Ok(p) => Ok(ctx.sandbox(&p)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RpcError::not_found(format!(
            "path not found: lstat {path}: {}",
            go_err(&e)
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(RpcError::new(
            Code::FailedPrecondition,
            format!("cyclic symlink or chain >255 links at {path:?}"),
        )),
        Err(e) => Err(RpcError::internal(format!(
            "error resolving symlink: {}",
            go_err(&e)
        ))),
    }
}

fn walk(
    ctx: &FsCtx,
    requested: &str,
    resolved: &str,
    rel: &str,
    depth: usize,
    cur: usize,
    out: &mut Vec<EntryInfo>,
) -> Result<(), RpcError> {
    let dir = if rel.is_empty() {
        resolved.to_string()
    } else {
        paths::join(resolved, rel)
    };
    let rd = std::fs::read_dir(ctx.host(&dir)).map_err(|e| {
        RpcError::internal(format!(
            "error reading directory {resolved}: open {dir}: {}",
            go_err(&e)
        ))
    })?;
    let mut names: Vec<Vec<u8>> = rd
        .filter_map(|e| e.ok())
        .map(|e| {
            use std::os::unix::ffi::OsStrExt;
            e.file_name().as_bytes().to_vec()
        })
        .collect();
    names.sort();
    for name in names {
        let name = String::from_utf8_lossy(&name).into_owned();
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let child = paths::join(resolved, &child_rel);
        let mut info = match entry_info(ctx, &child) {
            Ok(i) => i,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(RpcError::internal(format!(
                    "error reading directory {resolved}: {}",
                    go_err(&e)
                )));
            }
        };
        info.path = paths::join(requested, &child_rel);
        let is_real_dir = std::fs::symlink_metadata(ctx.host(&child))
            .map(|m| m.is_dir())
            .unwrap_or(false);
        out.push(info);
        if is_real_dir && cur < depth {
            walk(ctx, requested, resolved, &child_rel, depth, cur + 1, out)?;
        }
    }
    Ok(())
}

async fn list_dir(
    envd: &Envd,
    user: &ActingUser,
    req: ListDirRequest,
) -> Result<ListDirResponse, RpcError> {
    let depth = if req.depth == 0 {
        1
    } else {
        req.depth as usize
    };
    let (_, requested) = resolve_for(envd, user, &req.path)?;
    on_worker(envd, move |ctx| {
        let resolved = follow_symlink(ctx, &requested)?;
        match std::fs::metadata(ctx.host(&resolved)) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(RpcError::invalid(format!(
                    "path is not a directory: {resolved}"
                )));
            }
            Err(e) => {
                return Err(RpcError::not_found(format!(
                    "directory not found: stat {resolved}: {}",
                    go_err(&e)
                )));
            }
        }
        let mut entries = Vec::new();
        walk(ctx, &requested, &resolved, "", depth, 1, &mut entries)?;
        Ok(ListDirResponse { entries })
    })
    .await
}

/// `POST /filesystem.Filesystem/{method}`.
pub(crate) async fn dispatch(
    State(envd): State<Arc<Envd>>,
    AxPath(method): AxPath<String>,
    Extension(user): Extension<ActingUser>,
    http_method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    macro_rules! unary {
        ($t:ty, $f:ident) => {
            match connect::unary_request::<$t>(&http_method, &headers, &body) {
                Ok(req) => connect::unary($f(&envd, &user, req).await),
                Err(resp) => resp,
            }
        };
    }
    match method.as_str() {
        "Stat" => unary!(PathRequest, stat),
        "MakeDir" => unary!(PathRequest, make_dir),
        "Move" => unary!(MoveRequest, move_),
        "ListDir" => unary!(ListDirRequest, list_dir),
        "Remove" => unary!(PathRequest, remove),
        "WatchDir" => super::watch::watch_dir(envd, user, &http_method, &headers, &body).await,
        "CreateWatcher" => unary!(e2b_proto::filesystem::WatchDirRequest, create_watcher),
        "GetWatcherEvents" => unary!(e2b_proto::filesystem::WatcherRequest, get_watcher_events),
        "RemoveWatcher" => unary!(e2b_proto::filesystem::WatcherRequest, remove_watcher),
        _ => super::not_found().await,
    }
}

async fn create_watcher(
    envd: &Arc<Envd>,
    user: &ActingUser,
    req: e2b_proto::filesystem::WatchDirRequest,
) -> Result<e2b_proto::filesystem::CreateWatcherResponse, RpcError> {
    super::watch::create_watcher(envd, user, req).await
}

async fn get_watcher_events(
    envd: &Arc<Envd>,
    _user: &ActingUser,
    req: e2b_proto::filesystem::WatcherRequest,
) -> Result<e2b_proto::filesystem::GetWatcherEventsResponse, RpcError> {
    envd.watchers.drain(&req.watcher_id)
}

async fn remove_watcher(
    envd: &Arc<Envd>,
    _user: &ActingUser,
    req: e2b_proto::filesystem::WatcherRequest,
) -> Result<Empty, RpcError> {
    envd.watchers.remove(&req.watcher_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_file_mode_strings() {
        assert_eq!(go_mode_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(go_mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(go_mode_string(libc::S_IFLNK | 0o777), "Lrwxrwxrwx");
        assert_eq!(go_mode_string(libc::S_IFDIR | 0o1777), "dtrwxrwxrwx");
        assert_eq!(go_mode_string(libc::S_IFCHR | 0o666), "Dcrw-rw-rw-");
        assert_eq!(go_mode_string(libc::S_IFREG | 0o4755), "urwxr-xr-x");
    }

    #[test]
    fn protobuf_timestamps() {
        assert_eq!(timestamp(0, 0), None);
        assert_eq!(
            timestamp(1_787_342_422, 123_456_789).as_deref(),
            Some("2026-08-21T20:00:22.123456789Z")
        );
        assert_eq!(
            timestamp(1_787_342_422, 120_000_000).as_deref(),
            Some("2026-08-21T20:00:22.120Z")
        );
        assert_eq!(
            timestamp(1_787_342_422, 0).as_deref(),
            Some("2026-08-21T20:00:22Z")
        );
    }
}
