//! Reading files as the acting user, at the speed of envd's `GET /files`: a process of
//! that user opens the file and holds it, and envd (root) reads only through that open
//! file, `/proc/PID/fd/3`, never through a path the user controls.
//!
//! How (see [`READ_HOLDER`](crate::scripts::READ_HOLDER)): a root process forks the
//! holder, which becomes the acting user (uid, gid, groups) without exec'ing, so the
//! kernel keeps it non-dumpable: the user's other processes can neither ptrace it nor
//! open its `/proc` entries, so none can make it hold another file (it checks this, else
//! the read fails). The holder opens the file with the user's rights (a root-only file
//! is `PermissionDenied`, a planted link reaches only what the user may read, a FIFO or
//! device is refused) and prints its pid, descriptor and the size of the open file
//! (`TooLarge` before a byte moves). Its root parent never reaps it, so the pid cannot be
//! reused while the parent lives; after the response headers we tell the holder to let
//! go, which also proves the parent was alive when envd opened `/proc/PID/fd/FD` (else
//! the bytes are discarded). The parent is killed when the read ends or its stream is
//! dropped.
//!
//! Memory stays bounded (the download is a stream; `read` keeps at most `max` bytes and
//! stops at `max + 1`).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector, Signal};
use exec_world::{ByteStream, FsError, WorldPath};
use futures::StreamExt as _;

use crate::error::map_error;
use crate::fs::Shared;
use crate::scripts;
use crate::shell::{EXIT_TOO_LARGE, ShellOutput, classify};

/// Largest chunk `read_stream` yields.
pub(crate) const CHUNK: usize = 1 << 20;

/// Most bytes kept of the wrapper's output before the holder's status line.
const MAX_HEADER: usize = 64 << 10;

/// Limits at or past this are sent as "no limit" (the shell's arithmetic is signed 64-bit).
const NO_LIMIT_FROM: u64 = 1 << 62;

/// How long a `read_stream` wrapper may live (it is killed when its stream ends or is
/// dropped earlier).
const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// The root parent of one read's holder; killed (the holder let go first) when dropped.
struct Wrapper {
    events: ProcessStream,
    api: Arc<dyn EnvdApi>,
    pid: u32,
}

impl Wrapper {
    fn selector(&self) -> ProcessSelector {
        ProcessSelector::Pid(self.pid)
    }

    /// Lets the holder go (a line on its stdin); fails when the wrapper is gone.
    fn release(&self) -> impl Future<Output = Result<(), e2b_core::Error>> + Send + 'static {
        let (api, sel) = (self.api.clone(), self.selector());
        async move {
            api.send_input(sel, ProcessInput::Stdin(b"\n".to_vec()))
                .await
        }
    }
}

impl Drop for Wrapper {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let api = self.api.clone();
        let sel = self.selector();
        handle.spawn(async move {
            // EOF first: the holder exits (a zombie until the wrapper dies), then the
            // wrapper.
            let _ = api.close_stdin(sel.clone()).await;
            if let Err(e) = api.send_signal(sel, Signal::Sigkill).await {
                tracing::debug!(error = %e, "killing a reader wrapper failed");
            }
        });
    }
}

/// The error of a reader that printed `eCODE` after `text`.
fn failure(code: i32, text: &[u8], abs: &WorldPath, limit: Option<u64>, what: &str) -> FsError {
    match (code, limit) {
        (EXIT_TOO_LARGE, Some(limit)) => FsError::TooLarge {
            path: abs.clone(),
            limit,
        },
        (scripts::EXIT_UNPROTECTED, _) => FsError::other(format!(
            "{what} {abs}: the reader cannot be made unreachable by the user's other processes \
             (needs perl): {}",
            String::from_utf8_lossy(text).trim()
        )),
        _ => classify(
            &ShellOutput {
                exit_code: code,
                stdout: Vec::new(),
                stderr: text.to_vec(),
            },
            abs,
            what,
        ),
    }
}

/// The acting user's uid, gid and groups, asked once per handle.
async fn identity(sh: &Shared) -> Result<[String; 3], FsError> {
    if let Some(id) = sh.identity.lock().ok().and_then(|g| g.clone()) {
        return Ok(id);
    }
    let root = WorldPath::root();
    let out = sh
        .ctl
        .run_ok(scripts::IDENTITY, &[], &root, "identify the acting user")
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = |s: &&str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit() || c == b' ');
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let id = match lines[..] {
        [u, g, groups] if ok(&u) && ok(&g) && ok(&groups) => {
            [u.to_owned(), g.to_owned(), groups.to_owned()]
        }
        _ => {
            return Err(FsError::other(format!(
                "identify the acting user: unexpected output {text:?}"
            )));
        }
    };
    if let Ok(mut g) = sh.identity.lock() {
        *g = Some(id.clone());
    }
    Ok(id)
}

/// Starts the wrapper and waits for the holder's status line: the wrapper, the holder's
/// pid and the size of the open file. Errors (missing, denied, directory, FIFO, too
/// large) come here.
async fn hold(
    sh: &Shared,
    abs: &WorldPath,
    limit: Option<u64>,
    what: &'static str,
) -> Result<(Wrapper, String, u64), FsError> {
    let [uid, gid, groups] = identity(sh).await?;
    let limit_arg = match limit {
        Some(l) if l < NO_LIMIT_FROM => l.to_string(),
        _ => String::new(),
    };
    let lifetime = match limit {
        Some(_) => sh.command_timeout,
        None => STREAM_LIFETIME.max(sh.command_timeout),
    };
    let events = sh
        .root_ctl
        .start(
            scripts::READ_WRAPPER,
            &[
                scripts::READ_HOLDER,
                &uid,
                &gid,
                &groups,
                abs.as_str(),
                &limit_arg,
            ],
            Some(lifetime),
            true,
            abs,
            what,
        )
        .await?;
    let pid = events.pid();
    let mut w = Wrapper {
        events,
        api: sh.api.clone(),
        pid,
    };
    let status = tokio::time::timeout(sh.command_timeout, status_line(&mut w, abs, what))
        .await
        .map_err(|_| FsError::Timeout {
            context: format!(
                "{what} {abs}: the reader's status after {:?}",
                sh.command_timeout
            ),
        })??;
    let (text, line) = status;
    let bad = || FsError::other(format!("{what} {abs}: unreadable reader status {line:?}"));
    if let Some(code) = line.strip_prefix('e') {
        let code = code.parse::<i32>().map_err(|_| bad())?;
        return Err(failure(code, &text, abs, limit, what));
    }
    let mut f = line.strip_prefix("ok ").ok_or_else(bad)?.split(' ');
    let pid = f
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(bad)?;
    let fd = f
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(bad)?;
    let size = f
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(bad)?;
    Ok((w, format!("/proc/{pid}/fd/{fd}"), size))
}

/// Output of the wrapper up to the holder's status line (`ok …` or `eCODE`): the text
/// before it and the line.
async fn status_line(
    w: &mut Wrapper,
    abs: &WorldPath,
    what: &str,
) -> Result<(Vec<u8>, String), FsError> {
    let mut out = Vec::new();
    loop {
        if let Some(nl) = out.iter().rposition(|&c| c == b'\n') {
            let head = &out[..nl];
            let start = head.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
            let line = String::from_utf8_lossy(&head[start..]).into_owned();
            let code = line.strip_prefix('e').unwrap_or("");
            if line.starts_with("ok ")
                || (!code.is_empty() && code.bytes().all(|c| c.is_ascii_digit()))
            {
                return Ok((head[..start].to_vec(), line));
            }
        }
        if out.len() > MAX_HEADER {
            return Err(FsError::other(format!(
                "{what} {abs}: the reader printed no status"
            )));
        }
        match w.events.next().await {
            Some(Ok(ProcessEvent::Data(
                DataEvent::Stdout(b) | DataEvent::Stderr(b) | DataEvent::Pty(b),
            ))) => out.extend_from_slice(&b),
            Some(Ok(ProcessEvent::End(end))) => {
                return Err(failure(end.exit_code, &out, abs, None, what));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(map_error(e, abs, what)),
            None => {
                return Err(FsError::other(format!(
                    "{what} {abs}: the reader's stream ended without its status"
                )));
            }
        }
    }
}

/// Holds `abs` and starts envd's download of the holder's descriptor; the bytes are
/// released only once the wrapper was seen alive after envd opened the file.
async fn open(
    sh: &Shared,
    abs: &WorldPath,
    limit: Option<u64>,
    what: &'static str,
) -> Result<(Wrapper, u64, e2b_core::envd::Download), FsError> {
    let (w, fd, size) = hold(sh, abs, limit, what).await?;
    let dl = sh
        .api
        .download(&fd, sh.user())
        .await
        .map_err(|e| map_error(e, abs, what))?;
    w.release().await.map_err(|e| {
        FsError::other(format!(
            "{what} {abs}: the reader ended before its file was read ({e})"
        ))
    })?;
    Ok((w, size, dl))
}

/// The whole file if it has at most `max` bytes: TooLarge from the size of the opened
/// file before any byte is sent, and again if it grew since (the download is cut).
pub(crate) async fn read_bounded(sh: &Shared, abs: &WorldPath, max: u64) -> Result<Bytes, FsError> {
    let (w, size, mut dl) = open(sh, abs, Some(max), "read").await?;
    let mut buf = BytesMut::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    while let Some(piece) = dl.next().await {
        let piece = piece.map_err(|e| map_error(e, abs, "read"))?;
        if (buf.len() as u64).saturating_add(piece.len() as u64) > max {
            return Err(FsError::TooLarge {
                path: abs.clone(),
                limit: max,
            });
        }
        buf.extend_from_slice(&piece);
    }
    drop(w);
    Ok(buf.freeze())
}

/// Splits `b` into pieces of at most [`CHUNK`] bytes.
fn chunks(mut b: Bytes) -> Vec<Result<Bytes, FsError>> {
    let mut parts = Vec::with_capacity(b.len() / CHUNK + 1);
    while b.len() > CHUNK {
        parts.push(Ok(b.split_to(CHUNK)));
    }
    if !b.is_empty() {
        parts.push(Ok(b));
    }
    parts
}

/// The file as a stream of chunks of at most [`CHUNK`] bytes; the wrapper is killed when
/// the stream ends or is dropped.
pub(crate) async fn read_stream(sh: &Shared, abs: &WorldPath) -> Result<ByteStream, FsError> {
    let (w, _size, dl) = open(sh, abs, None, "read_stream").await?;
    let path = abs.clone();
    let s = futures::stream::unfold(Some((dl, w)), move |state| {
        let path = path.clone();
        async move {
            let (mut dl, w) = state?;
            match dl.next().await {
                Some(Ok(b)) => Some((futures::stream::iter(chunks(b)), Some((dl, w)))),
                Some(Err(e)) => {
                    let e = map_error(e, &path, "read_stream");
                    Some((futures::stream::iter(vec![Err(e)]), None))
                }
                None => None,
            }
        }
    })
    .flatten();
    Ok(Box::pin(s))
}
