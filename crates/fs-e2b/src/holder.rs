//! Holders: processes of the acting user that open a file with that user's rights and
//! keep it open while envd (root) reads or writes it through `/proc/PID/fd/FD`, so root
//! never follows a path the user controls (see [`crate::scripts::HOLDER_WRAPPER`]).
//!
//! A holder is started by a root `perl` wrapper that forks it; the holder becomes the
//! user without exec'ing (non-dumpable: the user's other processes can neither ptrace
//! it nor open its `/proc` entries), prints `ok PID FD …` once its file is open, and
//! waits on stdin. Its root parent reaps it only after the holder said root is done with
//! its descriptors, so a holder the user kills stays a zombie whose pid is not reused.
//! After envd opened the file, the caller tells the holder to go on (a line, or EOF);
//! that request fails when the wrapper is gone, and the transfer's bytes are then not
//! trusted.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector, Signal};
use exec_world::{Error, WorldPath};
use futures::StreamExt as _;

use crate::fs::Shared;
use crate::scripts;
use crate::shell::{EXIT_TOO_LARGE, ShellOutput, classify};

/// Most bytes kept of a holder's output (before its status line, and after it).
const MAX_OUTPUT: usize = 64 << 10;

/// A running holder (its root wrapper's process).
pub(crate) struct Holder {
    events: ProcessStream,
    api: Arc<dyn EnvdApi>,
    pid: u32,
    /// Told to go on (or its stdin closed): nothing left to end when dropped.
    released: bool,
    /// Output after the status line.
    out: Vec<u8>,
}

/// A started holder and what its status line said: `/proc/PID/fd/FD` and the fields
/// after them.
pub(crate) struct Held {
    pub holder: Holder,
    pub fd_path: String,
    pub rest: Vec<String>,
}

impl Holder {
    fn selector(&self) -> ProcessSelector {
        ProcessSelector::Pid(self.pid)
    }

    /// Sends `line` to the holder; fails when the wrapper is gone.
    pub(crate) async fn tell(
        &mut self,
        line: &str,
        abs: &WorldPath,
        what: &str,
    ) -> Result<(), Error> {
        self.released = true;
        self.api
            .send_input(
                self.selector(),
                ProcessInput::Stdin(format!("{line}\n").into_bytes()),
            )
            .await
            .map_err(|e| e.into_world(what).with_path(abs))
    }

    /// Closes the holder's stdin (it lets go of its file and ends); fails when the
    /// wrapper is gone.
    pub(crate) async fn release(&mut self, abs: &WorldPath, what: &str) -> Result<(), Error> {
        self.released = true;
        self.api
            .close_stdin(self.selector())
            .await
            .map_err(|e| e.into_world(what).with_path(abs))
    }

    /// Waits for the wrapper's exit: its exit code and output after the status line.
    pub(crate) async fn finish(
        mut self,
        abs: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        self.finish_ref(abs, what).await
    }

    /// [`Holder::finish`] without giving the holder up.
    pub(crate) async fn finish_ref(
        &mut self,
        abs: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        loop {
            match self.events.next().await {
                Some(Ok(ProcessEvent::Data(
                    DataEvent::Stdout(b) | DataEvent::Stderr(b) | DataEvent::Pty(b),
                ))) => keep(&mut self.out, &b),
                Some(Ok(ProcessEvent::End(end))) => {
                    self.released = true;
                    let out = std::mem::take(&mut self.out);
                    // The wrapper prints `eCODE` after a failure's cause: the cause is
                    // what classification reads.
                    return Ok(ShellOutput {
                        exit_code: end.exit_code,
                        stdout: out.clone(),
                        stderr: strip_code(out),
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into_world(what).with_path(abs)),
                None => {
                    return Err(
                        Error::other("the holder's stream ended without its exit status")
                            .with_op(what)
                            .with_path(abs),
                    );
                }
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let api = self.api.clone();
        let sel = self.selector();
        handle.spawn(async move {
            // EOF first: the holder lets go and ends, then its wrapper; the kill is for a
            // holder that cannot (stopped or killed by the user).
            let _ = api.close_stdin(sel.clone()).await;
            if let Err(e) = api.send_signal(sel, Signal::Sigkill).await {
                tracing::debug!(error = %e, "killing a holder's wrapper failed");
            }
        });
    }
}

/// Appends `b` to `out` up to [`MAX_OUTPUT`].
fn keep(out: &mut Vec<u8>, b: &[u8]) {
    let room = MAX_OUTPUT.saturating_sub(out.len());
    out.extend_from_slice(&b[..room.min(b.len())]);
}

/// `out` without a trailing `eCODE` line (a holder's status after a failure's cause).
pub(crate) fn strip_code(mut out: Vec<u8>) -> Vec<u8> {
    let body = out.strip_suffix(b"\n").unwrap_or(&out);
    let start = body.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
    let last = &body[start..];
    if last.len() > 1 && last[0] == b'e' && last[1..].iter().all(u8::is_ascii_digit) {
        out.truncate(start);
    }
    out
}

/// The error of a holder that printed `eCODE` after `text`.
pub(crate) fn failure(
    code: i32,
    text: &[u8],
    abs: &WorldPath,
    limit: Option<u64>,
    what: &str,
) -> Error {
    match (code, limit) {
        (EXIT_TOO_LARGE, Some(limit)) => Error::too_large(abs, limit).with_op(what),
        (scripts::EXIT_UNPROTECTED, _) => Error::other(format!(
            "the holder cannot be made unreachable by the user's other processes \
             (needs perl): {}",
            String::from_utf8_lossy(text).trim()
        ))
        .with_op(what)
        .with_path(abs),
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
async fn identity(sh: &Shared) -> Result<[String; 3], Error> {
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
            return Err(Error::other(format!("unexpected output {text:?}"))
                .with_op("identify the acting user"));
        }
    };
    if let Ok(mut g) = sh.identity.lock() {
        *g = Some(id.clone());
    }
    Ok(id)
}

/// The holder's first arguments: the acting user by name (the holder's root parent
/// looks it up, no request), or for envd's default user its uid, gid and groups (asked
/// once per handle).
pub(crate) async fn who(sh: &Shared) -> Result<[String; 3], Error> {
    match sh.user() {
        Some(name) => Ok([name.to_owned(), String::new(), String::new()]),
        None => identity(sh).await,
    }
}

/// How a holder's wrapper runs it (see [`scripts::HOLDER_WRAPPER`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// stderr on stdout, stdin a pipe the caller drives (or closed with a root
    /// staging file).
    Merge,
    /// stdout carries the file's bytes of a holder that answers inline, stderr its
    /// status.
    Split,
    /// As `Merge`, with stdin the bytes to write, encoded in the start request's
    /// environment (see [`inline_env`]).
    Inline,
}

impl Mode {
    fn word(self) -> &'static str {
        match self {
            Mode::Merge => "merge",
            Mode::Split => "split",
            Mode::Inline => "inline",
        }
    }
}

/// Starts `script` (a holder) with `args` after the acting user and `src` (a root
/// staging file whose bytes a write holder copies in, or empty) and waits for its status
/// line. `Ok(Err(output))`: the holder failed before holding anything (its code and
/// cause); `limit` makes code 68 `TooLarge`.
pub(crate) async fn start(
    sh: &Shared,
    script: &str,
    src: &str,
    args: &[&str],
    lifetime: Duration,
    abs: &WorldPath,
    what: &str,
) -> Result<Result<Held, (i32, Vec<u8>)>, Error> {
    match launch(
        sh,
        script,
        Mode::Merge,
        src,
        args,
        &[],
        lifetime,
        abs,
        what,
        0,
    )
    .await?
    {
        Started::Held(h) => Ok(Ok(h)),
        Started::Failed(code, text) => Ok(Err((code, text))),
        Started::Ended { .. } => Err(Error::other("the holder ended without its status")
            .with_op(what)
            .with_path(abs)),
    }
}

/// What a started holder said.
pub(crate) enum Started {
    /// It holds its file (`ok PID FD …`).
    Held(Held),
    /// It failed before holding anything: its code and cause.
    Failed(i32, Vec<u8>),
    /// ([`Mode::Split`] only) It ended with code 0 and no status line: `data` is its
    /// stdout (at most `data_cap` bytes kept, `over` when more came).
    Ended { data: Vec<u8>, over: bool },
}

/// Starts `script` in `mode` (see [`start`]); `envs` go into the start request's
/// environment (the wrapper's only: the holder runs with an empty one). In
/// [`Mode::Split`] the holder's stdout is kept (at most `data_cap` bytes) as the data
/// of a holder that answers inline.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn launch(
    sh: &Shared,
    script: &str,
    mode: Mode,
    src: &str,
    args: &[&str],
    envs: &[(String, String)],
    lifetime: Duration,
    abs: &WorldPath,
    what: &str,
    data_cap: usize,
) -> Result<Started, Error> {
    let [uid, gid, groups] = who(sh).await?;
    let mut argv: Vec<&str> = vec![script, mode.word(), &uid, &gid, &groups, src];
    argv.extend_from_slice(args);
    let events = sh
        .root_ctl
        .start(
            scripts::HOLDER_WRAPPER,
            &argv,
            envs,
            Some(lifetime),
            mode != Mode::Inline && src.is_empty(),
            abs,
            what,
        )
        .await?;
    let pid = events.pid();
    let mut h = Holder {
        events,
        api: sh.api.clone(),
        pid,
        released: false,
        out: Vec::new(),
    };
    let split = (mode == Mode::Split).then_some(data_cap);
    let (text, line) =
        match tokio::time::timeout(sh.command_timeout, status_line(&mut h, split, abs, what))
            .await
            .map_err(|_| {
                Error::timeout(what).with_path(abs).with_detail(format!(
                    "the holder's status after {:?}",
                    sh.command_timeout
                ))
            })?? {
            Status::Line(text, line) => (text, line),
            Status::Ended(data, over) => return Ok(Started::Ended { data, over }),
        };
    let bad = || {
        Error::other(format!("unreadable holder status {line:?}"))
            .with_op(what)
            .with_path(abs)
    };
    if let Some(code) = line.strip_prefix('e') {
        let code = code.parse::<i32>().map_err(|_| bad())?;
        h.released = true;
        return Ok(Started::Failed(code, text));
    }
    let mut f = line.strip_prefix("ok ").ok_or_else(bad)?.split(' ');
    let hpid = f
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(bad)?;
    let fd = f
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(bad)?;
    let rest = f.map(str::to_owned).collect();
    Ok(Started::Held(Held {
        holder: h,
        fd_path: format!("/proc/{hpid}/fd/{fd}"),
        rest,
    }))
}

/// Most bytes written inline (see [`inline_env`]): encoded, they fit the start
/// request's environment within Linux's smallest `ARG_MAX` for an 8 MiB stack (2 MiB),
/// each variable under `MAX_ARG_STRLEN` (128 KiB).
pub(crate) const INLINE_WRITE_MAX: usize = 1 << 20;

/// Variables the wrapper reads ([`scripts::HOLDER_WRAPPER`]: `FS_E2B_D0` …).
const INLINE_VARS: usize = 16;

/// Encoded lines per variable (61 bytes and a newline each: 124 KB).
const LINES_PER_VAR: usize = 2000;

/// `data` (at most [`INLINE_WRITE_MAX`] bytes) as the environment of an inline write:
/// uuencoded lines (what perl's `unpack "u"` reads, no module needed), split over
/// `FS_E2B_D0` … `FS_E2B_D15`. The wrapper feeds them to the holder's root parent on
/// stdin; only root can read a process's environment in the sandbox.
pub(crate) fn inline_env(data: &[u8]) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for (i, lines) in data
        .chunks(45 * LINES_PER_VAR)
        .enumerate()
        .take(INLINE_VARS)
    {
        let mut v = String::with_capacity(lines.len() / 45 * 62 + 64);
        for line in lines.chunks(45) {
            uu_line(line, &mut v);
        }
        vars.push((format!("FS_E2B_D{i}"), v));
    }
    vars
}

/// One uuencoded line of at most 45 bytes (a zero sextet as a backquote).
fn uu_line(line: &[u8], out: &mut String) {
    let c = |v: u8| char::from(if v == 0 { b'`' } else { v + 32 });
    out.push(c(line.len() as u8));
    for g in line.chunks(3) {
        let b = [
            g[0],
            g.get(1).copied().unwrap_or(0),
            g.get(2).copied().unwrap_or(0),
        ];
        out.push(c(b[0] >> 2));
        out.push(c(((b[0] & 3) << 4) | (b[1] >> 4)));
        out.push(c(((b[1] & 15) << 2) | (b[2] >> 6)));
        out.push(c(b[2] & 63));
    }
    out.push('\n');
}

/// What [`status_line`] found.
enum Status {
    /// The text before the status line, and the line.
    Line(Vec<u8>, String),
    /// ([`Mode::Split`]) The holder ended with code 0 before any status: its stdout
    /// (bounded) and whether more came.
    Ended(Vec<u8>, bool),
}

/// Output of the wrapper up to the holder's status line (`ok …` or `eCODE`): the text
/// before it and the line; what follows it is kept in the holder. With `split` (the
/// data cap), only stderr carries the status, stdout is data (kept up to the cap), and
/// an exit 0 with no status is the data.
async fn status_line(
    h: &mut Holder,
    split: Option<usize>,
    abs: &WorldPath,
    what: &str,
) -> Result<Status, Error> {
    let mut out = Vec::new();
    let mut data = Vec::new();
    let mut over = false;
    let mut scanned = 0;
    loop {
        while let Some(nl) = out[scanned..].iter().position(|&c| c == b'\n') {
            let end = scanned + nl;
            let line = String::from_utf8_lossy(&out[scanned..end]).into_owned();
            let code = line.strip_prefix('e').unwrap_or("");
            if line.starts_with("ok ")
                || (!code.is_empty() && code.bytes().all(|c| c.is_ascii_digit()))
            {
                h.out = out[end + 1..].to_vec();
                return Ok(Status::Line(out[..scanned].to_vec(), line));
            }
            scanned = end + 1;
        }
        if out.len() > MAX_OUTPUT {
            return Err(Error::other("the holder printed no status")
                .with_op(what)
                .with_path(abs));
        }
        match h.events.next().await {
            Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b)))) => match split {
                Some(cap) => {
                    let room = cap.saturating_sub(data.len());
                    over |= b.len() > room;
                    data.extend_from_slice(&b[..room.min(b.len())]);
                }
                None => out.extend_from_slice(&b),
            },
            Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b) | DataEvent::Pty(b)))) => {
                out.extend_from_slice(&b)
            }
            Some(Ok(ProcessEvent::End(end))) => {
                h.released = true;
                if split.is_some() && end.exit_code == 0 {
                    return Ok(Status::Ended(data, over));
                }
                return Err(failure(end.exit_code, &out, abs, None, what));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into_world(what).with_path(abs)),
            None => {
                return Err(Error::other("the holder's stream ended without its status")
                    .with_op(what)
                    .with_path(abs));
            }
        }
    }
}
