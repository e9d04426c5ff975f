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
const EXIT_DENIED: i32 = 94;
const EXIT_NO_SPACE: i32 = 95;

/// Shell functions that name why `tar` failed by an exit code, from the file system's
/// state rather than from tar's message text: `denied SRC` exits [`EXIT_DENIED`] when
/// some entry below `SRC` is unreadable to the acting user (or a directory not
/// searchable); `full DIR` exits [`EXIT_NO_SPACE`] when `DIR`'s file system has no
/// block left for the user. Both return when the cause is something else.
macro_rules! why_fns {
    () => {
        r#"denied() {
  find "$1" ! -type l \( ! -readable -o -type d ! -executable \) -print 2>/dev/null | head -n 1 | grep -q . && exit 94
  return 0
}
full() {
  a=$(df -P -- "$1" 2>/dev/null | awk 'NR == 2 { print $4 }')
  [ "$a" = 0 ] && exit 95
  return 0
}
"#
    };
}

/// The shell function `sweep DIR`: removes the staging entries in `DIR` that a transfer
/// left when it was cancelled (its future dropped, its token cancelled, its connection
/// lost: the process that owned them was killed before its cleanup ran). A staging entry
/// is named `….ew-tree-PID-XXXXXXXXXX` after the world process that owns it; it is stale
/// when that process no longer exists. Only the acting user's own entries are touched,
/// links are removed, never followed. (A pid reused by a live process keeps its stale
/// entry until that process ends; a live transfer's entry is never removed.)
macro_rules! sweep_fn {
    () => {
        r#"sweep() {
  for f in "$1"/.*ew-tree-[0-9]*-??????????; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    p=${f##*ew-tree-}; p=${p%%-*}
    case $p in ''|*[!0-9]*) continue ;; esac
    [ "$p" != "$$" ] && [ ! -d "/proc/$p" ] || continue
    [ -L "$f" ] || [ -O "$f" ] || continue
    rm -rf -- "$f" 2>/dev/null && swept=$((swept + 1))
  done
}
swept=0
"#
    };
}

/// The destination checks of an upload (absent or an empty directory, not a symlink,
/// its parent a directory), setting `dest`, `parent` and `name`.
macro_rules! upload_checks {
    () => {
        r#"set -u
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
[ -w "$parent" ] && [ -x "$parent" ] || { echo "the destination's parent directory is not writable" >&2; exit 94; }
"#
    };
}

/// Upload: check the destination, sweep stale staging entries beside it, extract stdin
/// into a fresh 0700 sibling directory, rename it onto the destination. The staging
/// directory goes away on any failure (and, when the process is killed, at the next
/// transfer's sweep).
const UPLOAD: &str = concat!(
    sweep_fn!(),
    why_fns!(),
    upload_checks!(),
    r#"sweep "$parent"
stage=$(mktemp -d -- "$parent/.$name.ew-tree-$$-XXXXXXXXXX") || exit 1
trap 'rm -rf -- "$stage"' EXIT
trap 'exit 1' HUP INT TERM PIPE
tar -x -p --no-same-owner -f - -C "$stage" || { full "$parent"; exit 1; }
mv -T -- "$stage" "$dest" || exit 1
trap - EXIT
"#
);

/// Upload through a file: check the destination, sweep, make the private archive file
/// (named after this process, which owns it) and print its path; then wait for `go` on
/// stdin (the archive written) and extract it as [`UPLOAD`] does. Without `go` (stdin
/// closed: the host gave up) everything is removed.
const UPLOAD_VIA_FILE: &str = concat!(
    sweep_fn!(),
    why_fns!(),
    upload_checks!(),
    r#"sweep "$parent"
stage=
arc=$(mktemp -- "$parent/.$name.ew-tree-$$-XXXXXXXXXX") || exit 1
trap 'rm -rf -- "$arc" ${stage:+"$stage"}' EXIT
trap 'exit 1' HUP INT TERM PIPE
printf '%s\n' "$arc"
IFS= read -r go || exit 1
[ "$go" = go ] || exit 1
stage=$(mktemp -d -- "$parent/.$name.ew-tree-$$-XXXXXXXXXX") || exit 1
tar -x -p --no-same-owner -f "$arc" -C "$stage" || { full "$parent"; exit 1; }
rm -f -- "$arc"
mv -T -- "$stage" "$dest" || exit 1
trap - EXIT
"#
);

/// Download: the directory as a tar stream on stdout.
const DOWNLOAD: &str = concat!(
    why_fns!(),
    r#"set -u
src=$1
[ -e "$src" ] || { echo "the source does not exist" >&2; exit 93; }
[ -d "$src" ] || { echo "the source is not a directory" >&2; exit 91; }
tar -c -f - -C "$src" . && exit 0
denied "$src"
exit 1
"#
);

/// Download through a file: sweep the temp directory, archive the directory into a
/// fresh private file there (named after this process) and print its path; the file is
/// removed when stdin ends (the host has read it, or gave up).
const DOWNLOAD_TO_FILE: &str = concat!(
    sweep_fn!(),
    why_fns!(),
    r#"set -u
src=$1
[ -e "$src" ] || { echo "the source does not exist" >&2; exit 93; }
[ -d "$src" ] || { echo "the source is not a directory" >&2; exit 91; }
tmp=${TMPDIR:-/tmp}
sweep "$tmp"
f=$(mktemp -- "$tmp/.ew-tree-$$-XXXXXXXXXX") || exit 1
trap 'rm -f -- "$f"' EXIT
trap 'exit 1' HUP INT TERM PIPE
tar -c -f "$f" -C "$src" . || { denied "$src"; full "$tmp"; exit 1; }
printf '%s\n' "$f"
IFS= read -r _ || :
"#
);

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
        Some(EXIT_DENIED) => ErrorKind::PermissionDenied,
        Some(EXIT_NO_SPACE) => ErrorKind::TooLarge,
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
/// per 64 KiB): one process of the acting user makes a private archive file beside the
/// destination and prints its path; the archive is written there through `fs` (for
/// fs-e2b: envd's `/files` into a file a process of the acting user holds, streamed,
/// atomic); then that process extracts it and removes it. `fs` and `world` must see the
/// same paths. Same contract as [`upload`]; the world briefly holds the archive too (the
/// tree's size again). Cancelled (the future dropped, the connection lost), the world
/// process is ended and the staging file and directory go with it or, when it was
/// killed before its cleanup, at the next transfer beside the same destination (see
/// [`sweep`]).
pub async fn upload_via_file(
    fs: &dyn crate::Fs,
    world: &dyn Subprocess,
    local: &Path,
    dest: &WorldPath,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    let mut child =
        spawn_with(world, UPLOAD_VIA_FILE, &[dest.as_str()], true).map_err(upload_op)?;
    let mut stdin = child
        .take_stdin()
        .ok_or_else(|| Error::other("upload: the tar process has no stdin"))?;
    let mut stdout = child.take_stdout();
    let stderr = child.take_stderr();
    let flow = async {
        // The limits are checked while the world process starts (a round trip on E2B);
        // refused, the process gets no `go` and removes what it made.
        let (line, surveyed) = futures::join!(first_line(&mut stdout), survey_limits(local, opts));
        if let Err(e) = surveyed {
            let _ = stdin.shutdown().await;
            drop(stdin);
            let _ = child.wait().await;
            return Err(Fail::Err(e));
        }
        let Some(line) = line else {
            let _ = stdin.shutdown().await;
            drop(stdin);
            let st = child.wait().await.map_err(Fail::Err)?;
            return Err(Fail::Script(st.code));
        };
        let archive = WorldPath::new(line.as_str()).map_err(Fail::Err)?;
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
        let packed = packer.await.map_err(joined).and_then(|r| r);
        let go = match (packed, written) {
            (Ok(sum), Ok(_)) => Ok(sum),
            (p, w) => Err(p
                .err()
                .or(w.err())
                .unwrap_or_else(|| Error::other("upload failed"))),
        };
        // `go` lets the process extract; without it (stdin closed) it removes the archive.
        let fed = match &go {
            Ok(_) => stdin.write_all(b"go\n").await,
            Err(_) => Ok(()),
        };
        let _ = stdin.shutdown().await;
        drop(stdin);
        drain(stdout).await;
        let st = child.wait().await.map_err(Fail::Err)?;
        let sum = go.map_err(Fail::Err)?;
        if !st.success() {
            return Err(Fail::Script(st.code));
        }
        fed.map_err(|e| Fail::Err(Error::io("upload: starting the extraction", e)))?;
        Ok(sum)
    };
    let (r, err_text) = futures::join!(flow, drain_stderr(stderr));
    r.map_err(|f| f.into_error("upload", dest, &err_text))
        .map_err(upload_op)
}

/// Removes the staging entries that cancelled transfers left in the world directory
/// `dir` (as the acting user, only theirs): archives and staging directories whose
/// owning world process is gone. Every upload does this beside its destination and
/// every download in the world's temp directory; call it for a directory no transfer
/// will touch again. Returns how many entries were removed.
///
/// ```no_run
/// # async fn demo(world: &dyn exec_world::Subprocess) -> Result<(), exec_world::Error> {
/// let n = exec_world::tree::sweep(world, &exec_world::WorldPath::new("/home/user")?).await?;
/// # let _ = n; Ok(()) }
/// ```
pub async fn sweep(world: &dyn Subprocess, dir: &WorldPath) -> Result<u64, Error> {
    const SWEEP: &str = concat!(
        sweep_fn!(),
        r#"set -u
[ -d "$1" ] || { echo "not a directory" >&2; exit 91; }
sweep "$1"
echo "$swept"
"#
    );
    let mut child =
        spawn_with(world, SWEEP, &[dir.as_str()], false).map_err(|e| e.with_op("sweep"))?;
    let mut stdout = child.take_stdout();
    let (line, err_text) = futures::join!(
        async {
            let l = first_line(&mut stdout).await;
            drain(stdout).await;
            l
        },
        drain_stderr(child.take_stderr())
    );
    let st = child.wait().await.map_err(|e| e.with_op("sweep"))?;
    if !st.success() {
        return Err(script_error("sweep", dir, st.code, &err_text));
    }
    Ok(line.and_then(|l| l.trim().parse().ok()).unwrap_or(0))
}

/// How a transfer through a file failed: its script's exit (its stderr, once drained,
/// is the detail), or an error of its own.
enum Fail {
    Script(Option<i32>),
    Err(Error),
}

impl Fail {
    fn into_error(self, op: &str, path: &WorldPath, stderr: &str) -> Error {
        match self {
            Fail::Script(code) => script_error(op, path, code, stderr),
            Fail::Err(e) => e,
        }
    }
}

/// The first line of a process's stdout (the path its script prints), at most 8 KiB.
async fn first_line(stdout: &mut Option<OutputStream>) -> Option<String> {
    let s = stdout.as_mut()?;
    let mut buf = Vec::new();
    while let Some(Ok(c)) = s.next().await {
        buf.extend_from_slice(&c);
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(i);
            return String::from_utf8(buf).ok();
        }
        if buf.len() > 8 << 10 {
            return None;
        }
    }
    None
}

async fn drain(stdout: Option<OutputStream>) {
    if let Some(mut s) = stdout {
        while s.next().await.is_some() {}
    }
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
/// process of the acting user archives the directory into a private temp file and
/// prints its path; the file is read through `fs` (for fs-e2b: held open by a process of
/// the user and streamed by envd's `/files`) and extracted by
/// [`extract`](super::extract)'s rules; then that process removes it. `fs` and `world`
/// must see the same paths. Same contract as [`download`]; a cancelled download's
/// archive goes with its process or at the next download's [`sweep`] of the temp
/// directory.
pub async fn download_via_file(
    fs: &dyn crate::Fs,
    world: &dyn Subprocess,
    src: &WorldPath,
    local: &Path,
    opts: &TreeOptions,
) -> Result<TreeSummary, Error> {
    let mut child = spawn(world, DOWNLOAD_TO_FILE, src, true).map_err(|e| e.with_op("download"))?;
    let mut stdin = child
        .take_stdin()
        .ok_or_else(|| Error::other("download: the tar process has no stdin"))?;
    let mut stdout = child.take_stdout();
    let stderr = child.take_stderr();
    let flow = async {
        let Some(line) = first_line(&mut stdout).await else {
            let _ = stdin.shutdown().await;
            drop(stdin);
            let st = child.wait().await.map_err(Fail::Err)?;
            return Err(Fail::Script(st.code));
        };
        let r = async {
            let archive = WorldPath::new(line.as_str())?;
            let mut body = fs.read_stream(&archive).await?;
            let (tx, reader) = ChanReader::new();
            let dest = local.to_path_buf();
            let mut meter = Meter::new(opts);
            let extractor = tokio::task::spawn_blocking(move || {
                unpack::extract_metered(reader, &dest, &mut meter)
            });
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
        // The end of stdin tells the process to remove the archive and end.
        let _ = stdin.shutdown().await;
        drop(stdin);
        drain(stdout).await;
        let _ = child.wait().await;
        r.map_err(Fail::Err)
    };
    let (r, err_text) = futures::join!(flow, drain_stderr(stderr));
    r.map_err(|f| f.into_error("download", src, &err_text))
        .map_err(|e| {
            if e.op().is_none() {
                e.with_op("download")
            } else {
                e
            }
        })
}
