//! The volume content API (`/volumecontent/{volumeID}/{dir,file,path}`), authorized by the
//! volume's token as `Authorization: Bearer …` instead of the API key.
//!
//! Sandboxes write volumes, so every name in a request is resolved below the volume's
//! root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: a link (or a directory
//! swapped for one) planted by a sandbox is refused, never followed, and special files are
//! only ever opened as `O_PATH` (never read, written or blocked on).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use e2b_proto::volume::{
    VolumeContentError, VolumeEntryStat, VolumeEntryType, VolumeMetadataUpdate,
};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde::Deserialize;
use time::OffsetDateTime;

use super::handlers::rfc3339;
use super::store::Store;

/// An error answer of the content API: `{"code": "<status>", "message": …}`.
pub(crate) struct ContentErr(StatusCode, String);

impl IntoResponse for ContentErr {
    fn into_response(self) -> Response {
        let body = VolumeContentError {
            code: self.0.as_u16().to_string(),
            message: self.1,
        };
        let mut r = (self.0, Json(body)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

type CResult<T> = Result<T, ContentErr>;

fn not_found(path: &str) -> ContentErr {
    ContentErr(StatusCode::NOT_FOUND, format!("path '{path}' not found"))
}

/// Map an errno of an operation on `path` to an answer.
fn errno(path: &str, e: Errno) -> ContentErr {
    match e {
        Errno::NOENT | Errno::NOTDIR => not_found(path),
        Errno::LOOP | Errno::XDEV => ContentErr(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' goes through a symbolic link"),
        ),
        Errno::EXIST => ContentErr(
            StatusCode::CONFLICT,
            format!("path '{path}' already exists"),
        ),
        Errno::NOTEMPTY => ContentErr(
            StatusCode::CONFLICT,
            format!("directory '{path}' is not empty"),
        ),
        Errno::ISDIR => ContentErr(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' is a directory"),
        ),
        e => ContentErr(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("operation on '{path}' failed: {e}"),
        ),
    }
}

#[derive(Deserialize)]
pub(crate) struct PathQuery {
    path: String,
    depth: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    force: Option<bool>,
}

/// The volume's root, after checking the bearer token.
fn open_volume(store: &Store, id: &str, headers: &HeaderMap) -> CResult<OwnedFd> {
    let unauthorized = || ContentErr(StatusCode::UNAUTHORIZED, "invalid volume token".into());
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(unauthorized)?;
    let vol = store.volumes.get(id).ok_or_else(unauthorized)?;
    if !constant_time_eq(given.as_bytes(), vol.token.as_bytes()) {
        return Err(unauthorized());
    }
    rustix::fs::open(
        store.volumes.data(&vol.id),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno("/", e))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `path` relative to the volume root (`.` for the root); `..` is refused.
fn relative(path: &str) -> CResult<String> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(ContentErr(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' must not contain '..'"),
        ));
    }
    Ok(if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    })
}

/// (parent, final name) of a relative path; `None` name for the root.
fn split(rel: &str) -> (&str, Option<&str>) {
    if rel == "." {
        return (".", None);
    }
    match rel.rsplit_once('/') {
        Some((p, n)) => (p, Some(n)),
        None => (".", Some(rel)),
    }
}

fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// An `O_PATH` handle of `rel` itself (a final symlink is the link).
fn handle(root: BorrowedFd<'_>, rel: &str) -> Result<OwnedFd, Errno> {
    open_beneath(root, rel, OFlags::PATH, Mode::empty())
}

/// Reopen an `O_PATH` handle with real access (the inode itself, no path walk).
fn reopen(fd: BorrowedFd<'_>, flags: OFlags) -> Result<OwnedFd, Errno> {
    use std::os::fd::AsRawFd;
    rustix::fs::open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        // Following this magic link is the point: it is the inode itself.
        flags | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn time_of(secs: i64, nsecs: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(secs) * 1_000_000_000 + i128::from(nsecs),
    )
    .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    rfc3339(t)
}

/// Stat of `name` in `dir` (no link followed), as the API reports it at `path`.
fn entry_stat(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<VolumeEntryStat, Errno> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let ft = FileType::from_raw_mode(st.st_mode);
    let kind = match ft {
        FileType::RegularFile => VolumeEntryType::File,
        FileType::Directory => VolumeEntryType::Directory,
        FileType::Symlink => VolumeEntryType::Symlink,
        _ => VolumeEntryType::Unknown,
    };
    let target = (kind == VolumeEntryType::Symlink)
        .then(|| rustix::fs::readlinkat(dir, name, Vec::new()).ok())
        .flatten()
        .map(|t| t.to_string_lossy().into_owned());
    let base = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("");
    Ok(VolumeEntryStat {
        name: base.to_owned(),
        path: path.to_owned(),
        kind,
        size: st.st_size,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        atime: time_of(st.st_atime, st.st_atime_nsec as i64),
        mtime: time_of(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: time_of(st.st_ctime, st.st_ctime_nsec as i64),
        target,
    })
}

/// The API path of a relative one (`/` + rel).
fn api_path(rel: &str) -> String {
    if rel == "." {
        "/".into()
    } else {
        format!("/{rel}")
    }
}

fn stat_rel(root: BorrowedFd<'_>, rel: &str) -> Result<VolumeEntryStat, Errno> {
    let (parent, name) = split(rel);
    let pdir = open_beneath(
        root,
        parent,
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    entry_stat(pdir.as_fd(), name.unwrap_or("."), &api_path(rel))
}

fn list_into(
    dir: BorrowedFd<'_>,
    rel: &str,
    depth: u32,
    out: &mut Vec<VolumeEntryStat>,
) -> Result<(), Errno> {
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&readable)? {
        let e = e?;
        let n = e.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    names.sort();
    for n in names {
        let child_rel = if rel == "." {
            n.clone()
        } else {
            format!("{rel}/{n}")
        };
        let Ok(st) = entry_stat(dir, &n, &api_path(&child_rel)) else {
            continue;
        };
        let is_dir = st.kind == VolumeEntryType::Directory;
        out.push(st);
        if is_dir && depth > 1 {
            let sub = rustix::fs::openat(
                dir,
                n.as_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            list_into(sub.as_fd(), &child_rel, depth - 1, out)?;
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> CResult<T> + Send + 'static,
) -> CResult<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|_| {
        Err(ContentErr(
            StatusCode::INTERNAL_SERVER_ERROR,
            "worker failed".into(),
        ))
    })
}

/// `GET /volumecontent/{id}/dir?path&depth`.
pub(crate) async fn list_dir(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
) -> CResult<Json<Vec<VolumeEntryStat>>> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        let dir = open_beneath(
            root.as_fd(),
            &rel,
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| errno(&q.path, e))?;
        let mut out = Vec::new();
        list_into(dir.as_fd(), &rel, q.depth.unwrap_or(1).max(1), &mut out)
            .map_err(|e| errno(&q.path, e))?;
        Ok(Json(out))
    })
    .await
}

fn set_owner_mode(
    fd: BorrowedFd<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), Errno> {
    if uid.is_some() || gid.is_some() {
        rustix::fs::chownat(
            fd,
            "",
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
            AtFlags::EMPTY_PATH,
        )?;
    }
    if let Some(m) = mode {
        use std::os::fd::AsRawFd;
        rustix::fs::chmod(
            format!("/proc/self/fd/{}", fd.as_raw_fd()),
            Mode::from_raw_mode(m & 0o7777),
        )?;
    }
    Ok(())
}

/// `POST /volumecontent/{id}/dir?path&uid&gid&mode&force`: 201 with the new directory.
pub(crate) async fn make_dir(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
) -> CResult<(StatusCode, Json<VolumeEntryStat>)> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        let mode = Mode::from_raw_mode(q.mode.unwrap_or(0o755) & 0o7777);
        let force = q.force.unwrap_or(false);
        let parts: Vec<&str> = if rel == "." {
            vec![]
        } else {
            rel.split('/').collect()
        };
        let mut dir = open_beneath(
            root.as_fd(),
            ".",
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| errno(&q.path, e))?;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            match rustix::fs::mkdirat(dir.as_fd(), *part, mode) {
                Ok(()) => {}
                Err(Errno::EXIST) if !last || force => {}
                Err(Errno::NOENT) => return Err(not_found(&q.path)),
                Err(e) if !last && !force => return Err(errno(&q.path, e)),
                Err(e) => return Err(errno(&q.path, e)),
            }
            if !last
                && !force
                && rustix::fs::statat(dir.as_fd(), *part, AtFlags::SYMLINK_NOFOLLOW).is_err()
            {
                return Err(not_found(&q.path));
            }
            dir = rustix::fs::openat(
                dir.as_fd(),
                *part,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| errno(&q.path, e))?;
        }
        set_owner_mode(dir.as_fd(), q.uid, q.gid, q.mode).map_err(|e| errno(&q.path, e))?;
        let st = stat_rel(root.as_fd(), &rel).map_err(|e| errno(&q.path, e))?;
        Ok((StatusCode::CREATED, Json(st)))
    })
    .await
}

/// `GET /volumecontent/{id}/file?path`: the bytes of a regular file.
pub(crate) async fn read_file(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
) -> CResult<Response> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        let h = handle(root.as_fd(), &rel).map_err(|e| errno(&q.path, e))?;
        let st = rustix::fs::fstat(&h).map_err(|e| errno(&q.path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(ContentErr(
                StatusCode::BAD_REQUEST,
                format!("path '{}' is not a regular file", q.path),
            ));
        }
        let fd = reopen(h.as_fd(), OFlags::RDONLY).map_err(|e| errno(&q.path, e))?;
        let mut f = std::fs::File::from(fd);
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut buf).map_err(|e| {
            ContentErr(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading '{}': {e}", q.path),
            )
        })?;
        let mut r = buf.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        Ok(r)
    })
    .await
}

/// `PUT /volumecontent/{id}/file?path&uid&gid&mode&force`: 201 with the file's stat; an
/// existing file is replaced only with `force`.
pub(crate) async fn write_file(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> CResult<(StatusCode, Json<VolumeEntryStat>)> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        let (parent, Some(name)) = split(&rel) else {
            return Err(errno(&q.path, Errno::ISDIR));
        };
        let pdir = open_beneath(
            root.as_fd(),
            parent,
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| errno(&q.path, e))?;
        let mode = Mode::from_raw_mode(q.mode.unwrap_or(0o644) & 0o7777);
        let fd = match rustix::fs::openat(
            pdir.as_fd(),
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        ) {
            Ok(fd) => fd,
            Err(Errno::EXIST) if q.force.unwrap_or(false) => {
                let h = rustix::fs::openat(
                    pdir.as_fd(),
                    name,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| errno(&q.path, e))?;
                let st = rustix::fs::fstat(&h).map_err(|e| errno(&q.path, e))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(ContentErr(
                        StatusCode::BAD_REQUEST,
                        format!("path '{}' is not a regular file", q.path),
                    ));
                }
                reopen(h.as_fd(), OFlags::WRONLY | OFlags::TRUNC).map_err(|e| errno(&q.path, e))?
            }
            Err(e) => return Err(errno(&q.path, e)),
        };
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, &body).map_err(|e| {
            ContentErr(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("writing '{}': {e}", q.path),
            )
        })?;
        set_owner_mode(f.as_fd(), q.uid, q.gid, q.mode).map_err(|e| errno(&q.path, e))?;
        let st = entry_stat(pdir.as_fd(), name, &api_path(&rel)).map_err(|e| errno(&q.path, e))?;
        Ok((StatusCode::CREATED, Json(st)))
    })
    .await
}

/// `GET /volumecontent/{id}/path?path`: the entry's stat (a link is not followed).
pub(crate) async fn stat(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
) -> CResult<Json<VolumeEntryStat>> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        stat_rel(root.as_fd(), &rel)
            .map(Json)
            .map_err(|e| errno(&q.path, e))
    })
    .await
}

/// Remove `name` in `dir` and, for a directory, everything below it (no link followed).
fn remove_all(dir: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&sub)? {
        let n = e?.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    for n in names {
        remove_all(sub.as_fd(), &n)?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// `DELETE /volumecontent/{id}/path?path`: 204; a directory goes with its contents.
pub(crate) async fn remove(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
) -> CResult<StatusCode> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    blocking(move || {
        let (parent, Some(name)) = split(&rel) else {
            return Err(ContentErr(
                StatusCode::BAD_REQUEST,
                "the volume's root cannot be removed".into(),
            ));
        };
        let pdir = open_beneath(
            root.as_fd(),
            parent,
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| errno(&q.path, e))?;
        remove_all(pdir.as_fd(), name).map_err(|e| errno(&q.path, e))?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

/// `PATCH /volumecontent/{id}/path?path` with `{uid, gid, mode}`: 200 with the new stat.
/// A symlink's metadata is not changed (400).
pub(crate) async fn update(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> CResult<Json<VolumeEntryStat>> {
    let root = open_volume(&store, &id, &headers)?;
    let rel = relative(&q.path)?;
    let upd: VolumeMetadataUpdate = serde_json::from_slice(&body)
        .map_err(|e| ContentErr(StatusCode::BAD_REQUEST, format!("invalid metadata: {e}")))?;
    blocking(move || {
        let h = handle(root.as_fd(), &rel).map_err(|e| errno(&q.path, e))?;
        let st = rustix::fs::fstat(&h).map_err(|e| errno(&q.path, e))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(ContentErr(
                StatusCode::BAD_REQUEST,
                format!("path '{}' is a symbolic link", q.path),
            ));
        }
        set_owner_mode(h.as_fd(), upd.uid, upd.gid, upd.mode).map_err(|e| errno(&q.path, e))?;
        stat_rel(root.as_fd(), &rel)
            .map(Json)
            .map_err(|e| errno(&q.path, e))
    })
    .await
}
