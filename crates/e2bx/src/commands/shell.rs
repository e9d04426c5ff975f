//! `e2bx shell`: an interactive `bash -i -l` on a terminal in the sandbox, through
//! `subprocess-e2b`'s `Terminal`. The local terminal goes to raw mode (restored by a guard
//! on every way out), stdin bytes are written to the terminal, SIGWINCH resizes it, and
//! e2bx exits with the shell's code when the remote shell ends. Ctrl-C (as a signal to e2bx,
//! not a typed key) ends every process of the terminal's session.

use std::io::IsTerminal as _;

use exec_world::{EnvBase, Subprocess as _, TermSize, TerminalSpec, WorldPath};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::ShellArgs;
use crate::commands::run::{GRACE, exit_code, pump, status_text};
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;
use crate::target::Session;
use crate::tty::{self, RawMode};

/// Run the interactive shell; returns its exit code.
pub async fn shell(
    session: &Session,
    args: &ShellArgs,
    json: bool,
    interrupts: &mut Interrupts,
) -> CliResult {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::msg(
            "`e2bx shell` needs a terminal on stdin; for scripts use `e2bx run -- CMD`",
        ));
    }
    let proc = session.subprocess(args.user.as_deref()).await?;
    let term = std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty() && t != "dumb")
        .unwrap_or_else(|| "xterm-256color".to_owned());
    let mut spec = TerminalSpec::new("/bin/bash")
        .arg("-i")
        .arg("-l")
        .env_base(EnvBase::Inherit)
        .env("TERM", term)
        .size(local_size());
    if let Some(cwd) = &args.cwd {
        let dir = WorldPath::new(cwd).map_err(|e| CliError::msg(format!("--cwd {cwd}: {e}")))?;
        spec = spec.cwd(dir);
    }
    let mut terminal = proc
        .spawn_terminal(spec)
        .map_err(|e| CliError::msg(format!("cannot start the shell: {e}")))?;
    let mut winch = signal(SignalKind::window_change())?;
    let raw = RawMode::enable()?;
    let mut keys = tty::stdin_reader(4096);
    let output = pump(terminal.take_output(), tokio::io::stdout());
    let mut keys_open = true;
    let result = loop {
        tokio::select! {
            status = terminal.wait() => match status {
                Ok(s) => break Ok((exit_code(&s), status_text(&s))),
                Err(e) => {
                    let _ = terminal.terminate(GRACE).await;
                    break Err(CliError::msg(format!("lost the shell ({e}); its processes were ended")));
                }
            },
            k = keys.recv(), if keys_open => match k {
                Some(mut bytes) => {
                    // Whatever queued up meanwhile goes in the same request.
                    while let Ok(more) = keys.try_recv() {
                        bytes.extend_from_slice(&more);
                    }
                    if terminal.write(&bytes).await.is_err() {
                        keys_open = false;
                    }
                }
                None => keys_open = false,
            },
            _ = winch.recv() => {
                let _ = terminal.resize(local_size()).await;
            }
            sig = interrupts.recv() => {
                let _ = terminal.terminate(GRACE).await;
                break Ok((128 + sig, "interrupted".to_owned()));
            }
        }
    };
    // The output ends with the session; a local write error means our stdout went away.
    let _ = output.await;
    drop(raw);
    let (code, status) = result?;
    if json {
        eprintln!(
            "{}",
            serde_json::json!({"sandboxId": session.id(), "pid": terminal.pid(), "exitCode": code, "status": status})
        );
    }
    Ok(code)
}

/// The local terminal's size as a [`TermSize`] (80x24 when unknown).
fn local_size() -> TermSize {
    let (cols, rows) = tty::size();
    TermSize {
        cols: u16::try_from(cols).unwrap_or(u16::MAX),
        rows: u16::try_from(rows).unwrap_or(u16::MAX),
    }
}
