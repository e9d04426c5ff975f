//! Writing one uploaded file: open (or create) it as envd's `processFile` does, stream the
//! body in, store its metadata.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;

use axum::http::StatusCode;
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::super::filesystem::{FsCtx, go_err, read_metadata};
use super::super::{Envd, paths};
use super::Failure;
use super::metadata::write_metadata;
use crate::template::TemplateUser;

/// One element of the upload response.
#[derive(Debug, Serialize)]
pub(super) struct UploadedEntry {
    pub(super) path: String,
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, String>,
}

/// Open the target for writing as envd's `processFile` does (on a worker).
fn open_target(ctx: &FsCtx, path: &str, user: &TemplateUser) -> Result<std::fs::File, Failure> {
    ctx.ensure_dirs(&paths::dir(path), user).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error ensuring directories: {e}"),
        )
    })?;
    let host = ctx.host(path);
    let existed = match std::fs::metadata(&host) {
        Ok(md) if md.is_dir() => {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("path is a directory: {path}"),
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error getting file info: stat {path}: {}", go_err(&e)),
            ));
        }
    };
    let mut chowned = false;
    if existed {
        match ctx.chown(&host, user) {
            Ok(()) => chowned = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err((
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "error changing file ownership: chown {path}: {}",
                        go_err(&e)
                    ),
                ));
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o666)
        .open(&host)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOSPC) {
                (
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!("not enough inodes available: open {path}: {}", go_err(&e)),
                )
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error opening file: open {path}: {}", go_err(&e)),
                )
            }
        })?;
    if !chowned && ctx.isolated {
        let (uid, gid) = ctx.host_ids(user);
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid)).map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "error changing file ownership: chown {path}: {}",
                    go_err(&e)
                ),
            )
        })?;
    }
    Ok(file)
}

/// Write one file from a stream of chunks; returns its upload entry.
pub(super) async fn process_file<S>(
    envd: &Envd,
    path: String,
    user: &TemplateUser,
    mut data: S,
    metadata: &BTreeMap<String, String>,
    content_length: Option<u64>,
) -> Result<UploadedEntry, Failure>
where
    S: Stream<Item = Result<Bytes, Failure>> + Unpin,
{
    let ctx = envd.fsctx.clone();
    let (p, u) = (path.clone(), user.clone());
    let file = envd
        .fs
        .run(move || open_target(&ctx, &p, &u))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let mut out = tokio::fs::File::from_std(file);
    let enospc = |e: &std::io::Error| {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            let base = "not enough disk space available";
            let msg = match content_length {
                Some(n) if n > 0 => format!("attempted to write {n} bytes: {base}"),
                _ => base.to_string(),
            };
            (StatusCode::INSUFFICIENT_STORAGE, msg)
        } else {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error writing file: write {path}: {}", go_err(e)),
            )
        }
    };
    while let Some(chunk) = data.next().await {
        let chunk = chunk?;
        out.write_all(&chunk).await.map_err(|e| enospc(&e))?;
    }
    out.flush().await.map_err(|e| enospc(&e))?;
    let std_file = out.into_std().await;
    let md = metadata.clone();
    let written = tokio::task::spawn_blocking(move || {
        let r = write_metadata(&std_file, &md);
        let host_path = format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            std_file.as_raw_fd()
        });
        let persisted = read_metadata(std::path::Path::new(&host_path));
        (r, persisted)
    })
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (r, persisted) = written;
    if let Err(e) = r
        && e.raw_os_error() != Some(libc::ENOTSUP)
    {
        return Err(
            if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
                (
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!("not enough space for file metadata: {}", go_err(&e)),
                )
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error writing file metadata: {}", go_err(&e)),
                )
            },
        );
    }
    Ok(UploadedEntry {
        name: paths::base(&path),
        path,
        kind: "file",
        metadata: persisted,
    })
}
