//! `e2bx run`: start the argv through `subprocess-e2b` (its own session and process group,
//! argv never re-quoted), stream stdout and stderr as raw bytes while it runs, and return
//! its exit code. A termination signal to e2bx (Ctrl-C) or `--timeout` ends the command's
//! whole process tree in the sandbox (group, session and escaped descendants) before e2bx
//! exits 128+N (130 for Ctrl-C), or 124 for the timeout. When e2bx's stdin is not a
//! terminal (a pipe or a file) it is forwarded to the command, then closed (EOF); with a
//! terminal the command's stdin is empty (use `e2bx shell` for interactive work).

use std::io::IsTerminal as _;
use std::time::Duration;

use exec_world::{Child, EnvBase, ExitStatus, SpawnSpec, StdinMode, Subprocess as _, WorldPath};
use futures::StreamExt as _;
use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::task::JoinHandle;

use crate::cli::RunArgs;
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;
use crate::target::Session;

/// How long a command gets to end after SIGTERM before its tree is SIGKILLed.
pub const GRACE: Duration = Duration::from_secs(2);

/// The exit code a shell gives for a program it cannot find.
const COMMAND_NOT_FOUND: i32 = 127;

/// The exit code `timeout(1)` uses for a command that ran too long.
const TIMED_OUT: i32 = 124;

/// Run the command; returns the exit code to pass through.
pub async fn run(
    session: &Session,
    args: &RunArgs,
    json: bool,
    interrupts: &mut Interrupts,
) -> CliResult {
    let proc = session.subprocess(args.user.as_deref()).await?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| CliError::msg("no command given; usage: e2bx run -- CMD [ARGS...]"))?;
    let forward_stdin = !std::io::stdin().is_terminal();
    let mut spec = SpawnSpec::new(program.clone())
        .args(rest.iter().cloned())
        .env_base(EnvBase::Inherit)
        .stdin(if forward_stdin {
            StdinMode::Piped
        } else {
            StdinMode::Null
        });
    for (k, v) in &args.env {
        spec = spec.env(k.clone(), v.clone());
    }
    if let Some(cwd) = &args.cwd {
        let dir = WorldPath::new(cwd).map_err(|e| CliError::msg(format!("--cwd {cwd}: {e}")))?;
        spec = spec.cwd(dir);
    }
    let mut child = proc
        .spawn(spec)
        .map_err(|e| CliError::msg(format!("cannot start {program}: {e}")))?;
    let stdin_task = child.take_stdin().map(forward_stdin_to);
    let out = pump(child.take_stdout(), tokio::io::stdout());
    let err = pump(child.take_stderr(), tokio::io::stderr());
    let deadline = async {
        match args.timeout {
            Some(t) => tokio::time::sleep(Duration::from_secs(t)).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = child.wait() => match status {
            Ok(s) => Outcome::Ended(s),
            Err(e) if e.kind() == exec_world::ErrorKind::NotFound => {
                // What a shell does for a missing program: one line, exit 127.
                let _ = out.await;
                let _ = err.await;
                eprintln!("e2bx: {program}: command not found in the sandbox");
                return Ok(COMMAND_NOT_FOUND);
            }
            Err(e) => {
                end_tree(&child).await;
                return Err(CliError::msg(format!(
                    "lost the command {program} in sandbox {} ({e}); its processes were ended",
                    session.id()
                )));
            }
        },
        sig = interrupts.recv() => {
            end_tree(&child).await;
            Outcome::Interrupted(sig)
        }
        () = deadline => {
            end_tree(&child).await;
            Outcome::TimedOut
        }
    };
    if let Some(t) = stdin_task {
        t.abort();
    }
    // The output streams end once the tree is gone; what they still hold is printed.
    let out_ok = out.await.unwrap_or(Ok(()));
    let _ = err.await;
    if let Err(e) = out_ok {
        end_tree(&child).await;
        return Err(e.into());
    }
    let pid = child.pid();
    let (code, status, interrupted) = match &outcome {
        Outcome::Ended(s) => (exit_code(s), status_text(s), false),
        Outcome::Interrupted(sig) => (128 + sig, "interrupted".to_owned(), true),
        Outcome::TimedOut => {
            eprintln!(
                "e2bx: {program} ran longer than --timeout {}s and was killed",
                args.timeout.unwrap_or_default()
            );
            (TIMED_OUT, "timed out".to_owned(), false)
        }
    };
    if json {
        eprintln!(
            "{}",
            serde_json::json!({
                "sandboxId": session.id(),
                "pid": pid,
                "exitCode": code,
                "status": status,
                "interrupted": interrupted,
            })
        );
    }
    Ok(code)
}

enum Outcome {
    Ended(ExitStatus),
    Interrupted(i32),
    TimedOut,
}

/// End the command's whole tree in the sandbox (TERM, grace, KILL); a failure here is
/// reported by subprocess-e2b's own last resort (envd SIGKILL) and the drop of `child`.
pub async fn end_tree(child: &Child) {
    let _ = child.terminate(GRACE).await;
}

/// The shell's exit code for a status: the code, or 128+N for a death by signal N.
pub fn exit_code(s: &ExitStatus) -> i32 {
    match (s.code, s.signal) {
        (Some(c), _) => c.clamp(0, 255),
        (None, Some(sig)) => 128 + sig,
        (None, None) => 128 + 9,
    }
}

/// Go's wording of a status (`exit status 3`, `signal: killed`), as envd reports it.
pub fn status_text(s: &ExitStatus) -> String {
    match (s.code, s.signal) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("signal: {}", e2b_core::proto::signal::go_name(sig)),
        (None, None) => "unknown".to_owned(),
    }
}

/// Copy one output stream of the command to `w` as it arrives; the first local write
/// error (a closed pipe) ends the copy with that error.
pub fn pump<W: AsyncWrite + Unpin + Send + 'static>(
    stream: Option<exec_world::OutputStream>,
    mut w: W,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        let Some(mut stream) = stream else {
            return Ok(());
        };
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    w.write_all(&b).await?;
                    w.flush().await?;
                }
                // The stream's end is reported by `wait`; nothing more to print.
                Err(_) => break,
            }
        }
        Ok(())
    })
}

/// Copy e2bx's stdin to the command's stdin, then close it (EOF). The blocking reads run
/// on a plain thread so they never hold up the runtime's shutdown.
fn forward_stdin_to(mut sink: exec_world::InputSink) -> JoinHandle<()> {
    let mut rx = crate::tty::stdin_reader(64 * 1024);
    tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if sink.write_all(&bytes).await.is_err() {
                // The command closed its stdin or ended: nothing more to deliver.
                return;
            }
        }
        let _ = sink.shutdown().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(code: Option<i32>, signal: Option<i32>) -> ExitStatus {
        ExitStatus { code, signal }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&st(Some(0), None)), 0);
        assert_eq!(exit_code(&st(Some(7), None)), 7);
        assert_eq!(exit_code(&st(None, Some(9))), 137);
        assert_eq!(exit_code(&st(None, Some(15))), 143);
        assert_eq!(exit_code(&st(None, Some(40))), 168);
        assert_eq!(
            status_text(&st(None, Some(11))),
            "signal: segmentation fault"
        );
        assert_eq!(status_text(&st(Some(3), None)), "exit status 3");
    }
}
