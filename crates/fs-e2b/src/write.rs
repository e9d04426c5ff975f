//! Atomic `write` and no-replace `create_if_absent`, with the acting user's permissions
//! only. One holder process of that user (see [`crate::holder`]) checks the parent and
//! the target, makes a random sibling staging directory (0700) and creates `data` in it;
//! envd's `POST /files` (root) then writes `/proc/PID/fd/FD`, the file that holder
//! created and holds, never a path the user controls; told `commit`, the holder renames
//! it over the target (`create_if_absent`: hard-links it, which fails if anything is
//! there) and prints the record of the new inode. Requests per write: the holder's
//! start, the upload, the `commit` line. A write of at most
//! [`holder::INLINE_WRITE_MAX`] bytes is one request: on the warm worker (see
//! [`crate::warm`]) when it is idle, a `SendInput` carrying the bytes to a process of
//! the user that does the holder's work; else the holder's start carries the
//! bytes (in its root wrapper's environment, which only root can read), the holder
//! writes them into its staging file itself and commits at once. The staging directory is removed on every
//! failure path, and from a background task when the future is dropped midway.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use e2b_core::trusted_shell::random_suffix;
use exec_world::{ByteStream, Created, Error, Version, WorldPath, WriteOptions};
use futures::StreamExt as _;

use crate::fs::Shared;
use crate::holder::{self, Holder};
use crate::meta::parse_records;
use crate::scripts;
use crate::shell::{EXIT_EXISTS, ShellOutput, classify};

/// How long a write holder may live (the upload happens while it waits).
const HOLDER_LIFETIME: Duration = Duration::from_secs(3600);

/// A staging directory (the user's) removed unless disarmed: awaited by
/// [`Stage::cleanup`], or from a spawned task when dropped armed.
struct Stage {
    sh: Arc<Shared>,
    dir: WorldPath,
    armed: bool,
}

/// Removes the staging directory as the acting user (root never follows its path).
async fn remove_stage(sh: &Shared, dir: &WorldPath) {
    if let Err(e) = sh
        .ctl
        .run_ok(
            scripts::REMOVE_TREE,
            &[dir.as_str()],
            dir,
            "remove staging dir",
        )
        .await
    {
        tracing::warn!(dir = %dir, error = %e, "removing a staging directory failed");
    }
}

impl Stage {
    /// A new (not yet created) staging directory next to `target`.
    fn next_to(sh: &Arc<Shared>, target: &WorldPath) -> Result<Stage, Error> {
        let parent = target
            .parent()
            .ok_or_else(|| Error::is_a_directory(target).with_op("write"))?;
        let dir = parent.join(&format!("{}{}", sh.staging_prefix, random_suffix()))?;
        Ok(Stage {
            sh: sh.clone(),
            dir,
            armed: true,
        })
    }

    /// Removes it now (best effort) and disarms.
    async fn cleanup(mut self) {
        self.armed = false;
        remove_stage(&self.sh, &self.dir).await;
    }

    /// The holder removed it (or never made it): nothing to do.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.armed || !self.sh.background_cleanup {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(dir = %self.dir, "staging directory left behind (no runtime)");
            return;
        };
        let sh = self.sh.clone();
        let dir = self.dir.clone();
        handle.spawn(async move {
            // After the holder's own cleanup (it ends on EOF), in case it could not.
            tokio::time::sleep(Duration::from_millis(500)).await;
            remove_stage(&sh, &dir).await;
        });
    }
}

/// Uploads `data` into the holder's file `fd_path`; an error item of `data` is
/// returned as itself.
async fn upload(
    sh: &Shared,
    target: &WorldPath,
    fd_path: &str,
    user: Option<&str>,
    data: ByteStream,
) -> Result<(), Error> {
    let failed: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
    let slot = failed.clone();
    let body = data.map(move |item| {
        item.map_err(|e| {
            let msg = e.to_string();
            if let Ok(mut s) = slot.lock() {
                s.get_or_insert(e);
            }
            io::Error::other(msg)
        })
    });
    match sh.api.upload(fd_path, user, Box::pin(body)).await {
        Ok(_) => Ok(()),
        Err(e) => {
            if let Some(src) = failed.lock().ok().and_then(|mut s| s.take()) {
                return Err(src);
            }
            Err(e.into_world("upload").with_path(target))
        }
    }
}

/// Runs one write holder: start (refusals come back as `Ok(Err(output))`), upload,
/// `commit`, exit.
#[allow(clippy::too_many_arguments)]
async fn run(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    mode: &str,
    create_parents: bool,
    create: bool,
    follow: bool,
    what: &'static str,
) -> Result<ShellOutput, Error> {
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let stage = Stage::next_to(sh, abs)?;
    let stage_dir = stage.dir.clone();
    let args = [
        abs.as_str(),
        parent.as_str(),
        stage_dir.as_str(),
        if create_parents { "1" } else { "0" },
        mode,
        if create { "1" } else { "0" },
        scripts::RECORD_FORMAT,
        if follow { "1" } else { "0" },
    ];
    let data = match small(data).await {
        Ok(Ok(bytes)) => {
            return match run_warm(sh, abs, &bytes, &args, what).await {
                Ok(Some(out)) => {
                    // The user's process removed its staging dir on every path.
                    stage.disarm();
                    Ok(out)
                }
                Ok(None) => run_inline(sh, abs, &bytes, &args, stage, what).await,
                // A lost answer: the armed stage is removed in the background.
                Err(e) => Err(e),
            };
        }
        Ok(Err(data)) => data,
        Err(e) => {
            stage.disarm();
            return Err(e);
        }
    };
    if let Some(dir) = sh.root_staging.clone() {
        return run_staged(sh, abs, &dir, data, &args, stage, what).await;
    }
    let started = holder::start(
        sh,
        scripts::WRITE_HOLDER,
        "",
        &args,
        HOLDER_LIFETIME.max(sh.command_timeout),
        abs,
        what,
    )
    .await;
    let held = match started {
        Ok(Ok(held)) => held,
        Ok(Err((code, text))) => {
            stage.disarm();
            return Ok(ShellOutput {
                exit_code: code,
                stdout: Vec::new(),
                stderr: text,
            });
        }
        Err(e) => {
            stage.cleanup().await;
            return Err(e);
        }
    };
    let mut h: Holder = held.holder;
    if let Err(e) = upload(sh, abs, &held.fd_path, sh.user(), data).await {
        // The holder removes its staging dir when told anything but `commit`.
        let code = match h.tell("abort", abs, what).await {
            Ok(()) => h.finish(abs, what).await.ok().map(|o| o.exit_code),
            Err(_) => None,
        };
        if code == Some(scripts::EXIT_ABORTED) {
            stage.disarm();
        } else {
            stage.cleanup().await;
        }
        if code == Some(scripts::EXIT_INTERRUPTED) {
            // The holder was stopped or killed: its descriptor was gone, not the file.
            return Err(Error::interrupted(what)
                .with_path(abs)
                .with_detail("the holder was stopped or killed before the upload")
                .with_source(e));
        }
        return Err(e);
    }
    if let Err(e) = h.tell("commit", abs, what).await {
        stage.cleanup().await;
        return Err(Error::other(format!(
            "the holder ended before its file was written: {}",
            e.detail().unwrap_or(e.kind().as_str())
        ))
        .with_op(what)
        .with_path(abs)
        .with_source(e));
    }
    let out = h.finish(abs, what).await;
    match &out {
        Ok(o) if o.exit_code == 0 => stage.disarm(),
        _ => stage.cleanup().await,
    }
    out
}

/// All of `data` when it has at most [`holder::INLINE_WRITE_MAX`] bytes, else a stream
/// of the same bytes (those read so far first); an error item is returned as itself.
/// A stream of one chunk gives that chunk itself (no copy); more are joined once.
async fn small(mut data: ByteStream) -> Result<Result<Bytes, ByteStream>, Error> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0;
    while let Some(item) = data.next().await {
        let item = item?;
        len += item.len();
        chunks.push(item);
        if len > holder::INLINE_WRITE_MAX {
            let head = futures::stream::iter(chunks.into_iter().map(Ok));
            return Ok(Err(Box::pin(head.chain(data))));
        }
    }
    Ok(Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => Bytes::from(chunks.concat()),
    }))
}

/// The write of a small file on the warm worker (one `SendInput` carrying the bytes, see
/// [`crate::warm`]): the write holder's work, run by a process of the user that reads
/// them on stdin. `Ok(None)`: the worker was not used (make the write the ordinary way);
/// a lost answer is [`ErrorKind::OutcomeUnknown`](exec_world::ErrorKind), never a second
/// write. The answer is the holder's: the record on stdout, a failure's cause on stderr.
async fn run_warm(
    sh: &Shared,
    abs: &WorldPath,
    data: &[u8],
    args: &[&str],
    what: &'static str,
) -> Result<Option<ShellOutput>, Error> {
    let len = data.len().to_string();
    let mut argv = vec![scripts::WRITE_USER_PL, len.as_str()];
    argv.extend_from_slice(args);
    let Some(mut out) = sh
        .ctl
        .warm_once(scripts::PERL_AS_USER, &argv, Some(data), abs, what)
        .await?
    else {
        return Ok(None);
    };
    if out.exit_code == 0 {
        // `ok PID FD` (the holder's hand-over line, unused here), then the record.
        if out.stdout.starts_with(b"ok ") {
            let end = out
                .stdout
                .iter()
                .position(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            out.stdout.drain(..end);
        }
    } else {
        out.stderr = holder::strip_code(std::mem::take(&mut out.stderr));
    }
    Ok(Some(out))
}

/// The write of a small file in one request: the holder's start carries the bytes
/// (see [`holder::inline_env`]); its root parent reads them from the wrapper before it
/// forks, the user's process writes them into its staging file and commits at once.
async fn run_inline(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: &[u8],
    args: &[&str],
    stage: Stage,
    what: &'static str,
) -> Result<ShellOutput, Error> {
    let envs = holder::inline_env(data);
    let src = format!("-{}", data.len());
    let started = holder::launch(
        sh,
        scripts::WRITE_HOLDER,
        holder::Mode::Inline,
        &src,
        args,
        &envs,
        HOLDER_LIFETIME.max(sh.command_timeout),
        abs,
        what,
        0,
    )
    .await;
    match started {
        Ok(holder::Started::Held(held)) => {
            let out = held.holder.finish(abs, what).await;
            // The holder removes its own staging dir on every path.
            stage.disarm();
            out
        }
        Ok(holder::Started::Failed(code, text)) => {
            stage.disarm();
            Ok(ShellOutput {
                exit_code: code,
                stdout: Vec::new(),
                stderr: text,
            })
        }
        Ok(holder::Started::Ended { .. }) => {
            stage.cleanup().await;
            Err(Error::other("the holder ended without its status")
                .with_op(what)
                .with_path(abs))
        }
        Err(e) => {
            stage.cleanup().await;
            Err(e)
        }
    }
}

/// The write with a root staging directory: envd's `POST /files` puts the bytes, as
/// root, into a fresh file there (a root-only directory: no path the user controls),
/// then one holder start does the rest (its root parent opens and unlinks that file, the
/// user's process copies it into its staging file and commits): two requests.
async fn run_staged(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    dir: &str,
    data: ByteStream,
    args: &[&str],
    stage: Stage,
    what: &'static str,
) -> Result<ShellOutput, Error> {
    let staged = format!("{}/{}", dir.trim_end_matches('/'), random_suffix());
    let remove_staged = || async {
        let root = WorldPath::root();
        if let Err(e) = sh
            .root_ctl
            .run_ok(
                r#"exec rm -f -- "$1""#,
                &[&staged],
                &root,
                "remove staged data",
            )
            .await
        {
            tracing::warn!(error = %e, "removing staged data failed");
        }
    };
    if let Err(e) = upload(sh, abs, &staged, Some("root"), data).await {
        // The holder never ran: no user staging dir exists; the upload may have left part.
        stage.disarm();
        remove_staged().await;
        return Err(e);
    }
    let started = holder::start(
        sh,
        scripts::WRITE_HOLDER,
        &staged,
        args,
        HOLDER_LIFETIME.max(sh.command_timeout),
        abs,
        what,
    )
    .await;
    match started {
        Ok(Ok(held)) => {
            let out = held.holder.finish(abs, what).await;
            // The holder removes its own staging dir on every path.
            stage.disarm();
            out
        }
        Ok(Err((code, text))) => {
            stage.disarm();
            Ok(ShellOutput {
                exit_code: code,
                stdout: Vec::new(),
                stderr: text,
            })
        }
        Err(e) => {
            stage.disarm();
            remove_staged().await;
            Err(e)
        }
    }
}

/// See [`exec_world::Fs::write`].
pub(crate) async fn write(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    opts: WriteOptions,
) -> Result<Version, Error> {
    write_with(sh, abs, data, opts, false).await
}

/// [`write`], a final link followed when `follow` (see [`crate::E2bFs::write_file`]).
pub(crate) async fn write_with(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    opts: WriteOptions,
    follow: bool,
) -> Result<Version, Error> {
    let mode = opts
        .mode
        .map(|m| format!("{:o}", m & 0o7777))
        .unwrap_or_default();
    let out = run(
        sh,
        abs,
        data,
        &mode,
        opts.create_parents,
        false,
        follow,
        "write",
    )
    .await?;
    if out.exit_code != 0 {
        return Err(classify(&out, abs, "write"));
    }
    let rec = parse_records(&out.stdout)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::other("no record of the new file")
                .with_op("write")
                .with_path(abs)
        })?;
    Ok(rec.version())
}

/// See [`exec_world::Fs::create_if_absent`].
pub(crate) async fn create_if_absent(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: Bytes,
) -> Result<Created, Error> {
    let data = exec_world::bytes_stream(data);
    let out = run(sh, abs, data, "", false, true, false, "create_if_absent").await?;
    match out.exit_code {
        0 => Ok(Created::Created),
        EXIT_EXISTS => Ok(Created::AlreadyExisted),
        _ => Err(classify(&out, abs, "create_if_absent")),
    }
}
