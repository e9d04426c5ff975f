//! The world side of a tree transfer: one `sh` process of the acting user running `tar`,
//! fed (upload) or read (download) over the [`Subprocess`] streams, and the plumbing
//! between those streams and the blocking tar code on the host.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use super::bridge::{ChanReader, ChanWriter};
use super::{Meter, TreeOptions, TreeSummary, pack, unpack};
use crate::error::{Error, ErrorKind};
use crate::path::WorldPath;
use crate::proc::{OutputStream, SpawnSpec, StdinMode, Subprocess};

/// Exit codes of the scripts for refusals the host names precisely.
const EXIT_LINK: i32 = 90;
const EXIT_NOT_DIR: i32 = 91;
const EXIT_NOT_EMPTY: i32 = 92;
const EXIT_MISSING: i32 = 93;

/// Upload: check the destination (absent or an empty directory, not a symlink), extract
/// stdin into a fresh 0700 sibling directory, rename it onto the destination. The
/// staging directory goes away on any failure.
const UPLOAD: &str = r#"set -u
dest=$1
case $dest in */*) parent=${dest%/*} ;; *) parent=. ;; esac
[ -n "$parent" ] || parent=/
name=${dest##*/}
if [ -L "$dest" ]; then echo "the destination is a symbolic link; refusing to write through it" >&2; exit 90; fi
if [ -e "$dest" ]; then
  [ -d "$dest" ] || { echo "the destination exists and is not a directory" >&2; exit 91; }
  [ -z "$(ls -A -- "$dest")" ] || { echo "the destination directory is not empty" >&2; exit 92; }
fi
[ -d "$parent" ] || { echo "the destination's parent directory does not exist" >&2; exit 93; }
stage=$(mktemp -d -- "$parent/.$name.tree-XXXXXXXXXX") || exit 1
trap 'rm -rf -- "$stage"' EXIT
if [ -n "${2:-}" ]; then trap 'rm -rf -- "$stage"; rm -f -- "$2"' EXIT; src=$2; else src=-; fi
tar -x -p --no-same-owner -f "$src" -C "$stage" || exit 1
[ -z "${2:-}" ] || rm -f -- "$2"
mv -T -- "$stage" "$dest" || exit 1
trap - EXIT
"#;

/// Download: the directory as a tar stream on stdout.
const DOWNLOAD: &str = r#"set -u
src=$1
[ -e "$src" ] || { echo "the source does not exist" >&2; exit 93; }
[ -d "$src" ] || { echo "the source is not a directory" >&2; exit 91; }
exec tar -c -f - -C "$src" .
"#;

/// Download through a file: the directory archived into a fresh private file in the
/// temp directory, whose path is printed.
const DOWNLOAD_TO_FILE: &str = r#"set -u
src=$1
[ -e "$src" ] || { echo "the source does not exist" >&2; exit 93; }
[ -d "$src" ] || { echo "the source is not a directory" >&2; exit 91; }
f=$(mktemp "${TMPDIR:-/tmp}/.tree-XXXXXXXXXX.tar") || exit 1
tar -c -f "$f" -C "$src" . || { rm -f -- "$f"; exit 1; }
printf '%s\n' "$f"
"#;

/// Most stderr bytes kept for an error message.
const MAX_STDERR: usize = 16 << 10;

async fn drain_stderr(s: Option<OutputStream>) -> String {
    let mut buf = Vec::new();
    if let Some(mut s) = s {
        while let Some(Ok(chunk)) = s.next().await {
            let room = MAX_STDERR.saturating_sub(buf.len());
            buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// The error a failed script exit stands for.
fn script_error(op: &str, path: &WorldPath, code: Option<i32>, stderr: &str) -> Error {
    let detail = if stderr.is_empty() {
        format!("tar exited with {code:?}")
    } else {
        stderr.to_string()
    };
    let kind = match code {
        Some(EXIT_LINK) => ErrorKind::InvalidPath,
        Some(EXIT_NOT_DIR) => ErrorKind::NotADirectory,
        Some(EXIT_NOT_EMPTY) => ErrorKind::NotEmpty,
        Some(EXIT_MISSING) => ErrorKind::NotFound,
        _ if stderr.contains("Permission denied") => ErrorKind::PermissionDenied,
        _ if stderr.contains("No such file or directory") => ErrorKind::NotFound,
        _ if stderr.contains("No space left") => ErrorKind::TooLarge,
        _ => ErrorKind::Other,
    };
    Error::new(kind)
        .with_op(op)
        .with_path(path)
        .with_detail(detail)
}

fn spawn(
    world: &dyn Subprocess,
    script: &str,
    path: &WorldPath,
    stdin: bool,
) -> Result<crate::proc::Child, Error> {
    spawn_with(world, script, &[path.as_str()], stdin)
}

/// `sh -c SCRIPT sh ARGS…` in the world, `LC_ALL=C`.
fn spawn_with(
    world: &dyn Subprocess,
    script: &str,
    args: &[&str],
    stdin: bool,
) -> Result<crate::proc::Child, Error> {
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args.iter().map(|a| a.to_string()))
        .env("LC_ALL", "C")
        .stdin(if stdin {
            StdinMode::Piped
        } else {
            StdinMode::Null
        });
    world.spawn(spec)
}

/// An error of an upload names the operation `upload` unless a step named it already.
fn upload_op(e: Error) -> Error {
    if e.op().is_none() {
        e.with_op("upload")
    } else {
        e
    }
}

/// Counts the local tree against `opts`' limits before anything is started: a tree over
/// them is refused with the numbers, and nothing reaches the world.
async fn survey_limits(local: &Path, opts: &TreeOptions) -> Result<(), Error> {
    let root = local.to_path_buf();
    let survey_opts = TreeOptions {
        progress: None,
        ..opts.clone()
    };
    tokio::task::spawn_blocking(move || pack::survey(&root, &mut Meter::new(&survey_opts)))
        .await
        .map_err(joined)?
        .map_err(upload_op)?;
    Ok(())
}

fn joined(e: tokio::task::JoinError) -> Error {
    Error::other(format!("tree transfer worker failed: {e}"))
}

/// Uploads the local directory `local` to the world path `dest` (absolute in `world`'s
/// view; absent or an empty directory) as one tar stream into one `tar` process of the
/// acting user. Returns what moved. See the [module docs](super).
pub async fn upload(
    world: &dyn Subprocess,
    local: &Path,
    dest: &WorldPath,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    survey_limits(local, opts).await?;

    let mut child = spawn(world, UPLOAD, dest, true).map_err(upload_op)?;
    let mut stdin = child
        .take_stdin()
        .ok_or_else(|| Error::other("upload: the tar process has no stdin"))?;
    let stdout = child.take_stdout();
    let stderr = child.take_stderr();
    let (writer, mut rx) = ChanWriter::new();
    let root = local.to_path_buf();
    let mut meter = Meter::new(opts);
    let packer = tokio::task::spawn_blocking(move || pack::pack(&root, writer, &mut meter));
    let feed = async {
        let mut broken = None;
        while let Some(chunk) = rx.recv().await {
            if broken.is_none()
                && let Err(e) = stdin.write_all(&chunk).await
            {
                broken = Some(e);
            }
        }
        let packed = packer.await.map_err(joined).and_then(|r| r);
        if packed.is_err() && broken.is_none() {
            // The archive is incomplete: a block that is no tar header makes tar fail,
            // so the script removes its staging directory and renames nothing.
            let _ = stdin.write_all(&[0xff; 1024]).await;
        }
        if broken.is_none()
            && let Err(e) = stdin.shutdown().await
        {
            broken = Some(e);
        }
        drop(stdin);
        (packed, broken)
    };
    let drain_out = async {
        if let Some(mut s) = stdout {
            while s.next().await.is_some() {}
        }
    };
    let ((packed, broken), err_text, ()) = futures::join!(feed, drain_stderr(stderr), drain_out);
    let sum = match packed {
        Ok(sum) => sum,
        Err(e) => {
            let _ = child.wait().await;
            return Err(upload_op(e));
        }
    };
    let status = child.wait().await.map_err(upload_op)?;
    if !status.success() {
        return Err(script_error("upload", dest, status.code, &err_text));
    }
    if let Some(e) = broken {
        return Err(Error::io("upload: feeding tar", e).with_path(dest));
    }
    Ok(sum)
}

/// [`upload`] for worlds whose process stdin is slow (E2B's is one `SendInput` request
/// per 64 KiB): the same archive is written first as one file beside the destination
/// through `fs` (for fs-e2b: envd's `/files` into a file a process of the acting user
/// holds, streamed, atomic), then one `tar` of the acting user extracts it and removes
/// it. `fs` and `world` must see the same paths. Same contract as [`upload`]; the world
/// briefly holds the archive too (the tree's size again).
pub async fn upload_via_file(
    fs: &dyn crate::Fs,
    world: &dyn Subprocess,
    local: &Path,
    dest: &WorldPath,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    survey_limits(local, opts).await?;
    let name = dest
        .as_str()
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("tree");
    let parent = dest.parent().unwrap_or_else(WorldPath::root);
    let suffix = format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let archive = parent.join(&format!(".{name}.tree-{suffix}.tar"))?;
    let (writer, rx) = ChanWriter::new();
    let root = local.to_path_buf();
    let mut meter = Meter::new(opts);
    let packer = tokio::task::spawn_blocking(move || pack::pack(&root, writer, &mut meter));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Error>(b), rx))
    });
    let written = fs
        .write(
            &archive,
            Box::pin(body),
            crate::WriteOptions::default().mode(0o600),
        )
        .await;
    let packed = packer.await.map_err(joined)?;
    let sum = match (packed, written) {
        (Ok(sum), Ok(_)) => sum,
        (p, w) => {
            if w.is_ok() {
                let _ = fs.remove(&archive, false).await;
            }
            return Err(upload_op(
                p.err()
                    .or(w.err())
                    .unwrap_or_else(|| Error::other("upload failed")),
            ));
        }
    };
    let mut child =
        spawn_with(world, UPLOAD, &[dest.as_str(), archive.as_str()], false).map_err(upload_op)?;
    let (err_text, ()) = futures::join!(drain_stderr(child.take_stderr()), async {
        if let Some(mut s) = child.take_stdout() {
            while s.next().await.is_some() {}
        }
    });
    let status = child.wait().await.map_err(upload_op)?;
    if !status.success() {
        let _ = fs.remove(&archive, false).await;
        return Err(script_error("upload", dest, status.code, &err_text));
    }
    Ok(sum)
}

/// Downloads the world directory `src` (absolute in `world`'s view) to the local path
/// `local` (absent or an empty directory) from one `tar -c` process of the acting user,
/// extracted by [`extract`](super::extract)'s rules. See the [module docs](super).
pub async fn download(
    world: &dyn Subprocess,
    src: &WorldPath,
    local: &Path,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    let child = spawn(world, DOWNLOAD, src, false);
    let mut child = child.map_err(|e| e.with_op("download"))?;
    let stdout = child.take_stdout();
    let stderr = child.take_stderr();
    let (tx, reader) = ChanReader::new();
    let dest = local.to_path_buf();
    let mut meter = Meter::new(opts);
    let extractor =
        tokio::task::spawn_blocking(move || unpack::stage_archive(reader, &dest, &mut meter));
    let child_ref = &child;
    let extract = async move {
        let r = extractor.await.map_err(joined).and_then(|r| r);
        if r.is_err() {
            // Refused or failed: end tar (its output is not wanted any more).
            let _ = child_ref.terminate(Duration::from_secs(2)).await;
        }
        r
    };
    let pump = async move {
        let mut tx = Some(tx);
        if let Some(mut s) = stdout {
            while let Some(item) = s.next().await {
                let item: std::io::Result<Bytes> =
                    item.map_err(|e| std::io::Error::other(e.to_string()));
                // After the extractor is done, the rest (tar's padding) is drained.
                if let Some(t) = &tx
                    && t.send(item).await.is_err()
                {
                    tx = None;
                }
            }
        }
    };
    let (extracted, (), err_text) = futures::join!(extract, pump, drain_stderr(stderr));
    let status = child.wait().await;
    match (extracted, status) {
        (Ok((stage, sum)), Ok(st)) if st.success() => {
            unpack::finish(&stage, local)?;
            Ok(sum)
        }
        (Ok((stage, _)), Ok(st)) => {
            // tar failed (an unreadable file, a missing source): what arrived is not the
            // world's tree; nothing is kept.
            unpack::discard(&stage);
            Err(script_error("download", src, st.code, &err_text))
        }
        (Ok((stage, _)), Err(e)) => {
            unpack::discard(&stage);
            Err(e.with_op("download"))
        }
        (Err(e), Ok(st))
            if !st.success() && e.kind() == ErrorKind::Other && !err_text.is_empty() =>
        {
            Err(script_error("download", src, st.code, &err_text))
        }
        (Err(e), _) => Err(e),
    }
}

/// [`download`] for worlds whose process output is slow (E2B streams it as events): one
/// `tar` of the acting user archives the directory into a private temp file, which is
/// read through `fs` (for fs-e2b: held open by a process of the user and streamed by
/// envd's `/files`), extracted by [`extract`](super::extract)'s rules, then removed.
/// `fs` and `world` must see the same paths. Same contract as [`download`].
pub async fn download_via_file(
    fs: &dyn crate::Fs,
    world: &dyn Subprocess,
    src: &WorldPath,
    local: &Path,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    let mut child =
        spawn(world, DOWNLOAD_TO_FILE, src, false).map_err(|e| e.with_op("download"))?;
    let stdout = child.take_stdout();
    let (out, err_text) = futures::join!(
        async {
            let mut buf = Vec::new();
            if let Some(mut s) = stdout {
                while let Some(Ok(c)) = s.next().await {
                    buf.extend_from_slice(&c);
                }
            }
            String::from_utf8_lossy(&buf).trim().to_string()
        },
        drain_stderr(child.take_stderr())
    );
    let status = child.wait().await.map_err(|e| e.with_op("download"))?;
    if !status.success() {
        return Err(script_error("download", src, status.code, &err_text));
    }
    let archive = WorldPath::new(out.as_str())?;
    let r = async {
        let mut body = fs.read_stream(&archive).await?;
        let (tx, reader) = ChanReader::new();
        let dest = local.to_path_buf();
        let mut meter = Meter::new(opts);
        let extractor =
            tokio::task::spawn_blocking(move || unpack::extract_metered(reader, &dest, &mut meter));
        let pump = async move {
            // Ends when the extractor is done (the rest is tar's padding) or failed.
            while let Some(item) = body.next().await {
                let item = item.map_err(|e| std::io::Error::other(e.to_string()));
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        };
        let (extracted, ()) = futures::join!(extractor, pump);
        extracted.map_err(joined)?
    }
    .await;
    let _ = fs.remove(&archive, false).await;
    r.map_err(|e| {
        if e.op().is_none() {
            e.with_op("download")
        } else {
            e
        }
    })
}
