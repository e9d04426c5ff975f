//! Detached commands: `e2bx run --detach` (start, print the id, return), `ps`, `attach ID`
//! and `kill ID`, on subprocess-e2b's durable commands. The command's output (bounded) and
//! exit status are kept in the sandbox by its watching parent, so any later e2bx, on any
//! machine, can attach from byte 0 (or `--from N`), list or kill it; a start with an id in
//! use is refused and runs nothing. Ctrl-C on `attach` detaches (the command keeps
//! running); on `run` it still kills.

use std::time::{Duration, SystemTime};

use exec_world::{
    DurableId, DurableInfo, DurableSpec, DurableState, EnvBase, Error, ErrorKind, OutputOffsets,
    SpawnSpec, StdinMode, Subprocess as _, WorldPath,
};

use crate::cli::{AttachArgs, Cli, Command, RunArgs};
use crate::commands::run::{GRACE, exit_code, pump, status_text};
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;
use crate::target::Session;

/// `run --detach`, `ps`, `attach` and `kill` work on a sandbox that outlives e2bx: refuse
/// them without `--sandbox` (a fresh sandbox is deleted when e2bx exits).
pub fn needs_sandbox(cli: &Cli) -> CliResult<()> {
    let what = match &cli.command {
        Command::Run(a) if a.detach => "run --detach",
        Command::Ps => "ps",
        Command::Attach(_) => "attach",
        Command::Kill(_) => "kill",
        _ => return Ok(()),
    };
    if cli.global.sandbox.is_none() {
        return Err(CliError::msg(format!(
            "{what} needs --sandbox ID|NAME (detached commands live in a sandbox that outlives e2bx; create one with `e2bx sandbox create`)"
        )));
    }
    Ok(())
}

fn parse_id(id: &str) -> CliResult<DurableId> {
    DurableId::new(id).map_err(|_| {
        CliError::msg(format!(
            "command id {id:?} is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}$"
        ))
    })
}

/// One line for a failure of `what` on command `id`.
fn failure(session: &Session, what: &str, id: &DurableId, e: Error) -> CliError {
    match e.kind() {
        ErrorKind::NotFound => CliError::msg(format!(
            "no detached command {id} in sandbox {} (see e2bx ps)",
            session.id()
        )),
        ErrorKind::AlreadyExists => CliError::msg(format!(
            "command id {id} is already in use in sandbox {}; nothing was started (e2bx attach {id})",
            session.id()
        )),
        ErrorKind::Unsupported => CliError::msg(format!(
            "{what}: this sandbox cannot keep detached commands ({e})"
        )),
        _ => CliError::msg(format!("{what} {id} in sandbox {}: {e}", session.id())),
    }
}

/// `run --detach`: start the argv durable, print its id, return 0.
pub async fn start(session: &Session, args: &RunArgs, json: bool) -> CliResult {
    let (program, rest) = args.command.split_first().ok_or_else(|| {
        CliError::msg("no command given; usage: e2bx run --detach -- CMD [ARGS...]")
    })?;
    let id = match &args.id {
        Some(i) => parse_id(i)?,
        None => DurableId::random(),
    };
    let mut proc = session.subprocess(args.user.as_deref()).await?;
    if let Some(t) = args.timeout {
        // Kept in the sandbox: the command's whole tree is killed at the deadline.
        proc = proc.kill_after(Some(Duration::from_secs(t)));
    }
    let mut spec = SpawnSpec::new(program.clone())
        .args(rest.iter().cloned())
        .env_base(EnvBase::Inherit)
        .stdin(StdinMode::Null)
        .durable(DurableSpec::new(id.clone()));
    for (k, v) in &args.env {
        spec = spec.env(k.clone(), v.clone());
    }
    if let Some(cwd) = &args.cwd {
        let dir = WorldPath::new(cwd).map_err(|e| CliError::msg(format!("--cwd {cwd}: {e}")))?;
        spec = spec.cwd(dir);
    }
    let child = proc
        .spawn(spec)
        .map_err(|e| failure(session, "start", &id, e))?;
    let pid = child
        .started()
        .await
        .map_err(|e| failure(session, "start", &id, e))?;
    child.detach();
    if json {
        println!(
            "{}",
            serde_json::json!({ "id": id.as_str(), "sandboxId": session.id(), "pid": pid })
        );
    } else {
        println!("{id}");
    }
    Ok(0)
}

/// `running`, `exit N`, `signal: NAME`, `unknown`.
fn state_text(s: &DurableState) -> String {
    match s {
        DurableState::Running => "running".to_owned(),
        DurableState::Exited(st) => status_text(st),
        DurableState::Unknown => "unknown".to_owned(),
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The argv as one line (words with spaces or quotes quoted).
fn argv_line(d: &DurableInfo) -> String {
    std::iter::once(&d.program)
        .chain(&d.args)
        .map(|w| {
            if !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'"')
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ps`: one line per detached command (id, state, pid, start, argv), oldest first.
pub async fn ps(session: &Session, json: bool) -> CliResult {
    let proc = session.subprocess(None).await?;
    let mut list = proc
        .durable_list()
        .await
        .map_err(|e| CliError::msg(format!("ps in sandbox {}: {e}", session.id())))?;
    list.sort_by(|a, b| a.started.cmp(&b.started).then(a.id.cmp(&b.id)));
    if json {
        let items: Vec<serde_json::Value> = list
            .iter()
            .map(|d| {
                let (code, signal) = match d.state {
                    DurableState::Exited(s) => (s.code, s.signal),
                    _ => (None, None),
                };
                serde_json::json!({
                    "id": d.id.as_str(),
                    "tag": d.tag,
                    "state": match d.state {
                        DurableState::Running => "running",
                        DurableState::Exited(_) => "exited",
                        DurableState::Unknown => "unknown",
                    },
                    "exitCode": code,
                    "signal": signal,
                    "pid": d.pid,
                    "startedAt": unix_secs(d.started),
                    "program": d.program,
                    "args": d.args,
                    "cwd": d.cwd.as_str(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
        return Ok(0);
    }
    println!(
        "{:<18} {:<22} {:>8}  {:<10}  COMMAND",
        "ID", "STATE", "PID", "STARTED"
    );
    for d in &list {
        println!(
            "{:<18} {:<22} {:>8}  {:<10}  {}",
            d.id.as_str(),
            state_text(&d.state),
            d.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            unix_secs(d.started),
            argv_line(d)
        );
    }
    Ok(0)
}

/// `attach ID`: stream the kept output from the asked offsets, then live, until the
/// command ends (exit with its code) or Ctrl-C (detach: the command keeps running).
pub async fn attach(
    session: &Session,
    args: &AttachArgs,
    json: bool,
    interrupts: &mut Interrupts,
) -> CliResult {
    let id = parse_id(&args.id)?;
    let proc = session.subprocess(None).await?;
    let from = OutputOffsets {
        stdout: args.from,
        stderr: args.from_stderr,
    };
    let attaching = proc.durable_attach(&id, from);
    let mut a = tokio::select! {
        a = attaching => a.map_err(|e| failure(session, "attach", &id, e))?,
        sig = interrupts.recv() => return Err(CliError::Exit(128 + sig)),
    };
    if a.dropped != OutputOffsets::default() {
        eprintln!(
            "e2bx: {} bytes of stdout and {} of stderr were no longer kept (the sandbox keeps the newest); output starts at bytes {} and {}",
            a.dropped.stdout, a.dropped.stderr, a.start.stdout, a.start.stderr
        );
    }
    let out = pump(a.child.take_stdout(), tokio::io::stdout());
    let err = pump(a.child.take_stderr(), tokio::io::stderr());
    let ended = tokio::select! {
        s = a.child.wait() => Some(s),
        _ = interrupts.recv() => None,
    };
    let Some(status) = ended else {
        out.abort();
        err.abort();
        // Dropping the attached child ends only its reader, never the command.
        drop(a);
        eprintln!("e2bx: detached from {id}; it keeps running (e2bx attach {id})");
        if json {
            eprintln!(
                "{}",
                serde_json::json!({ "sandboxId": session.id(), "id": id.as_str(), "detached": true })
            );
        }
        return Ok(130);
    };
    let _ = out.await;
    let _ = err.await;
    a.child.detach();
    let (code, status) = match status {
        Ok(s) => (exit_code(&s), status_text(&s)),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
            return Err(CliError::msg(format!(
                "the end of {id} cannot be known ({e}); it was not run again"
            )));
        }
        Err(e) => return Err(failure(session, "attach", &id, e)),
    };
    if json {
        eprintln!(
            "{}",
            serde_json::json!({ "sandboxId": session.id(), "id": id.as_str(), "exitCode": code, "status": status, "detached": false })
        );
    }
    Ok(code)
}

/// `kill ID`: TERM to the command's tree, [`GRACE`], KILL; an ended command is fine.
pub async fn kill(session: &Session, id: &str) -> CliResult {
    let id = parse_id(id)?;
    let proc = session.subprocess(None).await?;
    let mut a = proc
        .durable_attach(&id, OutputOffsets::default())
        .await
        .map_err(|e| failure(session, "kill", &id, e))?;
    drop((a.child.take_stdout(), a.child.take_stderr()));
    let r = a.child.terminate(GRACE).await;
    a.child.detach();
    match r {
        Ok(_) => Ok(0),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => Ok(0),
        Err(e) => Err(failure(session, "kill", &id, e)),
    }
}
