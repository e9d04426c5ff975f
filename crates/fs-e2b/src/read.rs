//! Reading files: the size check through envd `Stat` (following a symlink by a second
//! `Stat` of its resolved target), the bounded read and the chunked stream over
//! `GET /files`.

use bytes::{Bytes, BytesMut};
use e2b_core::proto::filesystem::{EntryInfo, FileType};
use exec_world::{ByteStream, FsError, WorldPath};
use futures::StreamExt as _;

use crate::error::map_error;
use crate::fs::Shared;

/// Largest chunk `read_stream` yields.
pub(crate) const CHUNK: usize = 1 << 20;

/// True when envd's entry is a symlink (envd reports the target's type, so the link is
/// recognised by its `permissions` string or its `symlinkTarget`).
pub(crate) fn is_link(e: &EntryInfo) -> bool {
    e.permissions.starts_with('L') || e.symlink_target.is_some()
}

/// envd's entry of the regular file `abs` (links followed): NotFound, IsADirectory, or
/// Other for anything that is not a regular file.
async fn regular_file(sh: &Shared, abs: &WorldPath) -> Result<EntryInfo, FsError> {
    let mut e = sh
        .api
        .stat(abs.as_str(), sh.user())
        .await
        .map_err(|e| map_error(e, abs, "stat"))?;
    if is_link(&e) {
        let target = match (&e.file_type, &e.symlink_target) {
            (FileType::Unspecified, _) | (_, None) => {
                return Err(FsError::NotFound { path: abs.clone() });
            }
            (_, Some(t)) => t.clone(),
        };
        // `symlinkTarget` is fully resolved, so this Stat is of the final target.
        e = sh
            .api
            .stat(&target, sh.user())
            .await
            .map_err(|e| map_error(e, abs, "stat link target"))?;
    }
    match e.file_type {
        FileType::File => Ok(e),
        FileType::Directory => Err(FsError::IsADirectory { path: abs.clone() }),
        _ => Err(FsError::other(format!("read {abs}: not a regular file"))),
    }
}

/// The whole file if it has at most `max` bytes: TooLarge from the stat size without a
/// download, and again (the download cancelled) if the file grew since.
pub(crate) async fn read_bounded(sh: &Shared, abs: &WorldPath, max: u64) -> Result<Bytes, FsError> {
    let e = regular_file(sh, abs).await?;
    let size = u64::try_from(e.size).unwrap_or(0);
    let too_large = || FsError::TooLarge {
        path: abs.clone(),
        limit: max,
    };
    if size > max {
        return Err(too_large());
    }
    let mut dl = sh
        .api
        .download(abs.as_str(), sh.user())
        .await
        .map_err(|e| map_error(e, abs, "download"))?;
    let mut buf = BytesMut::with_capacity(usize::try_from(size).unwrap_or(0));
    while let Some(chunk) = dl.next().await {
        let chunk = chunk.map_err(|e| map_error(e, abs, "download"))?;
        if (buf.len() as u64).saturating_add(chunk.len() as u64) > max {
            // Dropping the download cancels the transfer.
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The file as a stream of chunks of at most [`CHUNK`] bytes.
pub(crate) async fn read_stream(sh: &Shared, abs: &WorldPath) -> Result<ByteStream, FsError> {
    regular_file(sh, abs).await?;
    let dl = sh
        .api
        .download(abs.as_str(), sh.user())
        .await
        .map_err(|e| map_error(e, abs, "download"))?;
    let path = abs.clone();
    let stream = dl.flat_map(move |item| {
        let items: Vec<Result<Bytes, FsError>> = match item {
            Ok(mut b) => {
                let mut parts = Vec::with_capacity(b.len() / CHUNK + 1);
                while b.len() > CHUNK {
                    parts.push(Ok(b.split_to(CHUNK)));
                }
                if !b.is_empty() {
                    parts.push(Ok(b));
                }
                parts
            }
            Err(e) => vec![Err(map_error(e, &path, "download"))],
        };
        futures::stream::iter(items)
    });
    Ok(Box::pin(stream))
}
