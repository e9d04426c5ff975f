//! `e2bx cp SRC DST`: one file up (local → `sbx:PATH` / `:PATH`) or down, streamed in
//! chunks (never the whole file in memory), with a progress bar on a terminal, through
//! `fs-e2b` as the sandbox user: uploads are staged and renamed atomically, downloads are
//! read by a process of the user (never envd's root `/files`), so a link the user planted
//! cannot make root read or write past the user's permissions. Downloads land in a
//! temporary local sibling first and are renamed into place when complete.

use std::path::{Path, PathBuf};

use e2b_core::reader_stream;
use exec_world::{Error, ErrorKind, Fs as _, WorldPath, WriteOptions};
use fs_e2b::E2bFs;
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::cli::CpArgs;
use crate::error::{CliError, CliResult};
use crate::progress::Progress;

/// A sandbox path in `cp` syntax (`sbx:PATH` or `:PATH`), or `None` for a local one.
pub fn remote_path(arg: &str) -> Option<&str> {
    arg.strip_prefix("sbx:").or_else(|| arg.strip_prefix(':'))
}

/// Copy; returns 0.
pub async fn cp(fs: &E2bFs, args: &CpArgs, quiet: bool) -> CliResult {
    match (remote_path(&args.src), remote_path(&args.dst)) {
        (None, Some(dst)) => upload(fs, Path::new(&args.src), dst, quiet).await,
        (Some(src), None) => download(fs, src, Path::new(&args.dst), quiet).await,
        (Some(_), Some(_)) => Err(CliError::msg(
            "both paths are in the sandbox; copy inside it with `e2bx run -- cp SRC DST`",
        )),
        (None, None) => Err(CliError::msg(
            "neither path is in the sandbox; prefix the sandbox one with sbx: (or :), e.g. `e2bx cp notes.txt sbx:notes.txt`",
        )),
    }
}

fn base_name(p: &str) -> Option<&str> {
    p.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
}

async fn upload(fs: &E2bFs, src: &Path, dst: &str, quiet: bool) -> CliResult {
    let shown = src.display().to_string();
    let file = tokio::fs::File::open(src)
        .await
        .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
    let meta = file
        .metadata()
        .await
        .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
    if meta.is_dir() {
        return Err(CliError::msg(format!(
            "{shown} is a directory; cp copies one file (pack it first, e.g. tar czf dir.tgz {shown})"
        )));
    }
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    // A destination that is empty, ends with '/' or is a directory receives the file name.
    let into_dir = dst.is_empty()
        || dst.ends_with('/')
        || matches!(fs.stat(&world_path(dst)?).await, Ok(m) if m.is_dir());
    let target = if dst.is_empty() {
        name
    } else if into_dir {
        format!("{}/{name}", dst.trim_end_matches('/'))
    } else {
        dst.to_owned()
    };
    let progress = Progress::new(meta.len(), quiet);
    let counted = {
        let shown = shown.clone();
        let progress = progress.clone();
        reader_stream(file)
            .inspect(move |chunk| {
                if let Ok(b) = chunk {
                    progress.inc(b.len());
                }
            })
            .map(move |chunk| chunk.map_err(|e| Error::io("reading", e).with_path(&shown)))
    };
    // As the sandbox user, atomically (staged beside the target, then renamed): the user's
    // permissions apply and no link the user planted redirects the write.
    let res = fs
        .write(
            &world_path(&target)?,
            Box::pin(counted),
            WriteOptions::default().create_parents(true),
        )
        .await;
    progress.finish();
    res.map(|_| 0).map_err(|e| fs_error(&target, &e))
}

async fn download(fs: &E2bFs, src: &str, dst: &Path, quiet: bool) -> CliResult {
    let path = world_path(src)?;
    let info = fs.stat(&path).await.map_err(|e| fs_error(src, &e))?;
    if info.is_dir() {
        return Err(CliError::msg(format!(
            "{src} is a directory in the sandbox; cp copies one file (pack it first: e2bx run -- tar czf dir.tgz {src})"
        )));
    }
    let target: PathBuf = if dst.is_dir() || dst.as_os_str().to_string_lossy().ends_with('/') {
        dst.join(base_name(src).unwrap_or("file"))
    } else {
        dst.to_owned()
    };
    let shown = target.display().to_string();
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let fname = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CliError::msg(format!("{shown}: not a file path")))?;
    let tmp = parent.join(format!(".{fname}.e2bx-{}", std::process::id()));
    // Read as the sandbox user (never envd's root download).
    let mut body = fs.read_stream(&path).await.map_err(|e| fs_error(src, &e))?;
    let progress = Progress::new(info.size, quiet);
    let copy = async {
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| CliError::msg(format!("{src}: {e}")))?;
            out.write_all(&chunk)
                .await
                .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
            progress.inc(chunk.len());
        }
        out.flush()
            .await
            .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
        tokio::fs::rename(&tmp, &target)
            .await
            .map_err(|e| CliError::msg(format!("{shown}: {e}")))
    };
    let res = copy.await;
    progress.finish();
    if res.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    res.map(|()| 0)
}

/// A sandbox path as given on the command line (relative: the user's home).
pub fn world_path(p: &str) -> CliResult<WorldPath> {
    WorldPath::new(p).map_err(|e| CliError::msg(format!("{p}: {e}")))
}

/// One line for a file error about sandbox path `path`, with a hint where one helps.
pub fn fs_error(path: &str, e: &Error) -> CliError {
    CliError::msg(match e.kind() {
        ErrorKind::NotFound => {
            format!("{path}: no such file or directory in the sandbox; check the path with `e2bx ls`")
        }
        ErrorKind::PermissionDenied => format!(
            "{path}: permission denied in the sandbox (its user cannot access it); pick a path under the home directory or /tmp"
        ),
        ErrorKind::IsADirectory => format!("{path}: is a directory in the sandbox"),
        ErrorKind::NotADirectory => {
            format!("{path}: a parent is not a directory in the sandbox")
        }
        ErrorKind::AlreadyExists => format!("{path}: already exists"),
        ErrorKind::Gone => {
            "sandbox not found (it may have timed out); create a new one or check the id with `e2bx sandbox list`".to_owned()
        }
        _ => e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_syntax() {
        assert_eq!(remote_path("sbx:/a/b"), Some("/a/b"));
        assert_eq!(remote_path(":x"), Some("x"));
        assert_eq!(remote_path(":"), Some(""));
        assert_eq!(remote_path("./a:b"), None);
        assert_eq!(base_name("/a/b/"), Some("b"));
        assert_eq!(base_name("/"), None);
    }
}
