//! `e2bx cp SRC DST`: one file up (local → `sbx:PATH` / `:PATH`) or down, streamed in
//! 64 KiB chunks (never the whole file in memory), with a progress bar on a terminal.
//! Downloads land in a temporary sibling first and are renamed into place when complete.

use std::path::{Path, PathBuf};

use e2b_core::proto::filesystem::FileType;
use e2b_core::{EnvdApi, reader_stream};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::cli::CpArgs;
use crate::error::{CliError, CliResult, for_path};
use crate::progress::Progress;

/// A sandbox path in `cp` syntax (`sbx:PATH` or `:PATH`), or `None` for a local one.
pub fn remote_path(arg: &str) -> Option<&str> {
    arg.strip_prefix("sbx:").or_else(|| arg.strip_prefix(':'))
}

/// Copy; returns 0.
pub async fn cp(sandbox: &dyn EnvdApi, args: &CpArgs, quiet: bool) -> CliResult {
    match (remote_path(&args.src), remote_path(&args.dst)) {
        (None, Some(dst)) => upload(sandbox, Path::new(&args.src), dst, quiet).await,
        (Some(src), None) => download(sandbox, src, Path::new(&args.dst), quiet).await,
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

async fn upload(sandbox: &dyn EnvdApi, src: &Path, dst: &str, quiet: bool) -> CliResult {
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
        || matches!(sandbox.stat(dst, None).await, Ok(e) if e.file_type == FileType::Directory);
    let target = if dst.is_empty() {
        name
    } else if into_dir {
        format!("{}/{name}", dst.trim_end_matches('/'))
    } else {
        dst.to_owned()
    };
    let progress = Progress::new(meta.len(), quiet);
    let counted = {
        let progress = progress.clone();
        reader_stream(file).inspect(move |chunk| {
            if let Ok(b) = chunk {
                progress.inc(b.len());
            }
        })
    };
    let res = sandbox.upload(&target, None, Box::pin(counted)).await;
    progress.finish();
    match res {
        Ok(_) => Ok(0),
        // envd may refuse before reading the body and close the connection (the client
        // then sees a broken pipe instead of the answer), or answer with its own error
        // (EACCES, or EROFS on the emulator's read-only host paths). Either way, when the
        // user cannot write there, say so.
        Err(e) if !writable(sandbox, &target).await => {
            drop(e);
            Err(CliError::msg(format!(
                "{target}: permission denied in the sandbox (its user cannot write there); pick a path under the home directory or /tmp"
            )))
        }
        Err(e) => Err(for_path(&target)(e)),
    }
}

/// Whether the sandbox's default user can create `path`: its nearest existing ancestor
/// (the upload creates missing parents) is writable. Unknown counts as writable.
async fn writable(sandbox: &dyn EnvdApi, path: &str) -> bool {
    const SCRIPT: &str =
        r#"d=$(dirname -- "$1"); while [ ! -e "$d" ]; do d=$(dirname -- "$d"); done; test -w "$d""#;
    let spec = e2b_core::StartProcess::new("/bin/sh").args(["-c", SCRIPT, "sh", path]);
    match sandbox.run(spec).await {
        Ok(out) => out.end.exit_code == 0,
        Err(_) => true,
    }
}

async fn download(sandbox: &dyn EnvdApi, src: &str, dst: &Path, quiet: bool) -> CliResult {
    let info = sandbox.stat(src, None).await.map_err(for_path(src))?;
    if info.file_type == FileType::Directory {
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
    let mut body = sandbox.download(src, None).await.map_err(for_path(src))?;
    let total = body
        .content_length()
        .unwrap_or_else(|| u64::try_from(info.size).unwrap_or(0));
    let progress = Progress::new(total, quiet);
    let copy = async {
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(for_path(src))?;
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
