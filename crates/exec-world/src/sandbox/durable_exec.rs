//! The durable side of the `sandbox@1` exec: an exec started with
//! [`SandboxProvider::exec_start`](super::SandboxProvider::exec_start) outlives the host
//! that started it, is found again by id from any provider instance
//! ([`SandboxProvider::exec_list`](super::SandboxProvider::exec_list),
//! [`SandboxProvider::exec_attach`](super::SandboxProvider::exec_attach),
//! [`SandboxProvider::exec_kill`](super::SandboxProvider::exec_kill)), and is never run
//! twice for one id.
//!
//! Both providers build it on the [`Subprocess`](crate::Subprocess) durable API
//! ([`crate::durable`]): the command runs as `timeout -s KILL SECS bash -c COMMAND`
//! ([`durable_program`]), so its time limit holds in the sandbox with no host attached
//! (the whole process group is killed at the deadline), and the record the command's
//! supervising parent keeps (program, arguments, start time, status, bounded output)
//! says everything [`ExecInfo`] shows. This module holds what the providers share: the
//! spawn, the parse of a record back into an [`ExecInfo`], and the event stream of an
//! attach.

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt as _};

use super::{ExecSpec, SandboxError, failed_by, invalid};
use crate::durable::{Attached, DurableInfo, DurableSpec, DurableState, OutputOffsets};
use crate::{DurableId, ErrorKind, ExitStatus, OutputStream};

/// An exec's id: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$` (the durable id of its command).
pub type ExecId = DurableId;

/// The watchdog every durable exec runs under (coreutils `timeout`).
pub const TIMEOUT_PROGRAM: &str = "/usr/bin/timeout";

/// The in-sandbox time limit's signal: the whole process group of the command.
const TIMEOUT_SIGNAL: i32 = 9;

/// How a durable exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecEnd {
    /// It ended by itself or by a signal (an [`exec_kill`](super::SandboxProvider::exec_kill),
    /// a `kill_tagged`): its status.
    Exited(ExitStatus),
    /// It was killed at its timeout (in the sandbox, with no host needed).
    TimedOut,
    /// Its end cannot be known (its record is gone, its supervisor was killed, the
    /// sandbox rebooted): never a guess, never a rerun.
    Unknown,
}

impl ExecEnd {
    /// The exit code a shell would show ([`exit_code_of`](super::exit_code_of)); `None`
    /// on timeout and unknown ends.
    ///
    /// ```
    /// use exec_world::{ExitStatus, sandbox::ExecEnd};
    /// assert_eq!(ExecEnd::Exited(ExitStatus { code: Some(3), signal: None }).exit_code(), Some(3));
    /// assert_eq!(ExecEnd::TimedOut.exit_code(), None);
    /// ```
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            ExecEnd::Exited(s) => super::exit_code_of(s),
            ExecEnd::TimedOut | ExecEnd::Unknown => None,
        }
    }
}

/// Where a durable exec is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecState {
    /// It runs.
    Running,
    /// It ended.
    Ended(ExecEnd),
}

/// A durable exec as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecInfo {
    /// Its id.
    pub id: ExecId,
    /// The `bash -c` command line.
    pub command: String,
    /// The holder's tag it was started with.
    pub tag: Option<String>,
    /// Its working directory (sandbox path).
    pub cwd: String,
    /// When it started.
    pub started: SystemTime,
    /// Its time limit.
    pub timeout: Duration,
    /// Running or ended (and how).
    pub state: ExecState,
}

/// One event of [`SandboxProvider::exec_attach`](super::SandboxProvider::exec_attach).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Bytes of stdout starting at byte `offset` of everything the command wrote there.
    Stdout {
        /// Offset of `data[0]`.
        offset: u64,
        /// The bytes.
        data: bytes::Bytes,
    },
    /// Bytes of stderr starting at byte `offset`.
    Stderr {
        /// Offset of `data[0]`.
        offset: u64,
        /// The bytes.
        data: bytes::Bytes,
    },
    /// Bytes between the asked offsets and the first bytes sent that the sandbox's
    /// bounded record no longer had (first event, only when non-zero).
    Dropped {
        /// Dropped stdout bytes.
        stdout: u64,
        /// Dropped stderr bytes.
        stderr: u64,
    },
    /// The last event.
    End(ExecEnd),
}

/// The events of an attach: output (from the asked offsets, then live), then one
/// [`ExecEvent::End`]. An `Err` item (a cut connection) ends it; attach again from the
/// offsets received so far to go on with nothing lost or doubled.
pub type ExecStream = Pin<Box<dyn Stream<Item = Result<ExecEvent, SandboxError>> + Send>>;

/// The program and arguments of a durable exec: `timeout -s KILL SECS /bin/bash -c COMMAND`.
///
/// ```
/// use std::time::Duration;
/// use exec_world::sandbox::{ExecSpec, durable_program};
/// let (prog, args) = durable_program(&ExecSpec::new("make").timeout(Duration::from_millis(1500)));
/// assert_eq!(prog, "/usr/bin/timeout");
/// assert_eq!(args, ["-s", "KILL", "1.500", "/bin/bash", "-c", "make"]);
/// ```
pub fn durable_program(spec: &ExecSpec) -> (String, Vec<String>) {
    let t = spec.timeout;
    (
        TIMEOUT_PROGRAM.to_owned(),
        vec![
            "-s".into(),
            "KILL".into(),
            format!("{}.{:03}", t.as_secs(), t.subsec_millis()),
            "/bin/bash".into(),
            "-c".into(),
            spec.command.clone(),
        ],
    )
}

/// The durable part of a spawn for `spec` (its id, its tag, the kept-output cap), or
/// InvalidSpec naming `op` when it has no id or a bad one.
pub fn durable_spec(op: &'static str, spec: &ExecSpec) -> Result<DurableSpec, SandboxError> {
    let id = exec_id(op, spec)?;
    let mut d = DurableSpec::new(id).output_cap(spec.kept_output_bytes);
    d.tag = spec.tag.clone();
    Ok(d)
}

/// `spec.id` as an [`ExecId`] (InvalidSpec naming `op` when missing or malformed).
pub fn exec_id(op: &'static str, spec: &ExecSpec) -> Result<ExecId, SandboxError> {
    let Some(id) = spec.id.as_deref() else {
        return Err(invalid(op, "exec id", "none was given"));
    };
    DurableId::new(id).map_err(|_| {
        invalid(
            op,
            format!("exec id {:?}", id.chars().take(80).collect::<String>()),
            "it must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        )
    })
}

/// The time limit a durable exec's arguments carry, and its command; `None` when the
/// record is not a sandbox exec (another durable command of the world).
fn parse_program(program: &str, args: &[String]) -> Option<(Duration, String)> {
    match args {
        [s, k, secs, bash, c, cmd]
            if program == TIMEOUT_PROGRAM
                && s == "-s"
                && k == "KILL"
                && bash == "/bin/bash"
                && c == "-c" =>
        {
            let t = Duration::try_from_secs_f64(secs.parse::<f64>().ok()?).ok()?;
            Some((t, cmd.clone()))
        }
        _ => None,
    }
}

/// How the command with this record ended, given its status: killed by the watchdog's
/// signal once its time limit had passed is a timeout (a kill from elsewhere ends it by
/// SIGTERM first: see `exec_kill`), anything else is its status.
fn end_of(status: ExitStatus, started: SystemTime, timeout: Duration) -> ExecEnd {
    let past_deadline = SystemTime::now()
        .duration_since(started)
        .is_ok_and(|ran| ran >= timeout);
    if status.code.is_none() && status.signal == Some(TIMEOUT_SIGNAL) && past_deadline {
        ExecEnd::TimedOut
    } else {
        ExecEnd::Exited(status)
    }
}

/// The record `d` as an [`ExecInfo`] (`None` when it is not a sandbox exec); `cwd`
/// turns the world's cwd into the sandbox's view.
pub fn exec_info(d: &DurableInfo, cwd: impl Fn(&str) -> String) -> Option<ExecInfo> {
    let (timeout, command) = parse_program(&d.program, &d.args)?;
    let state = match d.state {
        DurableState::Running => ExecState::Running,
        DurableState::Exited(s) => ExecState::Ended(end_of(s, d.started, timeout)),
        DurableState::Unknown => ExecState::Ended(ExecEnd::Unknown),
    };
    Some(ExecInfo {
        id: d.id.clone(),
        command,
        tag: d.tag.clone(),
        cwd: cwd(d.cwd.as_str()),
        started: d.started,
        timeout,
        state,
    })
}

/// NotFound for `id` when an attached record is not a sandbox exec.
pub fn not_an_exec(op: &'static str, id: &ExecId) -> SandboxError {
    crate::Error::new(ErrorKind::NotFound)
        .with_op(op)
        .with_detail(format!("exec {id}: no such exec in this sandbox"))
}

/// The events of `a` (a durable attach of a sandbox exec): `Dropped` when the record
/// lost bytes, stdout and stderr chunks with their offsets as they come, then the end
/// (its status; `Unknown` when the backend says the outcome cannot be known). `op`
/// names the errors.
pub fn exec_events(op: &'static str, mut a: Attached) -> ExecStream {
    let timeout = parse_program(&a.info.program, &a.info.args)
        .map(|(t, _)| t)
        .unwrap_or(Duration::MAX);
    let started = a.info.started;
    let out = a.child.take_stdout();
    let err = a.child.take_stderr();
    let child = a.child;
    let mut head = Vec::new();
    if a.dropped != OutputOffsets::default() {
        head.push(Ok(ExecEvent::Dropped {
            stdout: a.dropped.stdout,
            stderr: a.dropped.stderr,
        }));
    }
    let chunks = |s: Option<OutputStream>, start: u64, stdout: bool| {
        let s = s.unwrap_or_else(|| Box::pin(futures::stream::empty()));
        s.scan(start, move |off, item| {
            let ev = item.map(|data| {
                let offset = *off;
                *off += data.len() as u64;
                if stdout {
                    ExecEvent::Stdout { offset, data }
                } else {
                    ExecEvent::Stderr { offset, data }
                }
            });
            futures::future::ready(Some(ev.map_err(|e| failed_by(op, None, e))))
        })
    };
    let output = futures::stream::select(
        chunks(out, a.start.stdout, true),
        chunks(err, a.start.stderr, false),
    );
    let end = futures::stream::once(async move {
        let r = match child.wait().await {
            Ok(s) => Ok(ExecEvent::End(end_of(s, started, timeout))),
            Err(e) if e.kind() == ErrorKind::OutcomeUnknown => Ok(ExecEvent::End(ExecEnd::Unknown)),
            Err(e) => Err(failed_by(op, None, e)),
        };
        // The handle goes; the command (durable) is left as it is.
        child.detach();
        r
    });
    // Stop after the first error: the caller attaches again from its offsets.
    let mut failed = false;
    Box::pin(
        futures::stream::iter(head)
            .chain(output)
            .chain(end)
            .take_while(move |item| {
                let go = !failed;
                failed |= item.is_err();
                futures::future::ready(go)
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_round_trips() {
        let spec = ExecSpec::new("echo 'a b'").timeout(Duration::from_millis(2500));
        let (p, a) = durable_program(&spec);
        assert_eq!(
            parse_program(&p, &a),
            Some((Duration::from_millis(2500), "echo 'a b'".to_owned()))
        );
        assert_eq!(parse_program("/bin/bash", &a), None);
        assert_eq!(parse_program(&p, &a[1..]), None);
    }

    #[test]
    fn timeout_only_past_the_deadline() {
        let killed = ExitStatus {
            code: None,
            signal: Some(9),
        };
        let t = Duration::from_secs(60);
        assert_eq!(
            end_of(killed, SystemTime::now(), t),
            ExecEnd::Exited(killed)
        );
        let long_ago = SystemTime::now() - Duration::from_secs(120);
        assert_eq!(end_of(killed, long_ago, t), ExecEnd::TimedOut);
        let ok = ExitStatus {
            code: Some(0),
            signal: None,
        };
        assert_eq!(end_of(ok, long_ago, t), ExecEnd::Exited(ok));
    }
}
