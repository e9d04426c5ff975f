//! `e2bx shell`: an interactive `bash -i -l` on a PTY in the sandbox. The local terminal
//! goes to raw mode (restored by a guard on every way out), stdin bytes are forwarded with
//! `SendInput`, SIGWINCH resizes the remote PTY, and e2bx exits with the shell's code when
//! the remote shell ends.

use std::io::IsTerminal as _;

use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector, PtySize};
use e2b_core::{EnvdApi as _, Sandbox, StartProcess};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::cli::ShellArgs;
use crate::error::{CliError, CliResult};
use crate::remote::{exit_code, kill_group};
use crate::signals::Interrupts;
use crate::tty::{self, RawMode};

/// Run the interactive shell; returns its exit code.
pub async fn shell(
    sandbox: &Sandbox,
    args: &ShellArgs,
    json: bool,
    interrupts: &mut Interrupts,
) -> CliResult {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::msg(
            "`e2bx shell` needs a terminal on stdin; for scripts use `e2bx run -- CMD`",
        ));
    }
    let (cols, rows) = tty::size();
    let term = std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty() && t != "dumb")
        .unwrap_or_else(|| "xterm-256color".to_owned());
    let mut spec = StartProcess::new("/bin/bash")
        .args(["-i", "-l"])
        .pty(cols, rows)
        .env("TERM", term);
    if let Some(cwd) = &args.cwd {
        spec = spec.cwd(cwd.clone());
    }
    if let Some(user) = &args.user {
        spec = spec.user(user.clone());
    }
    let mut stream = sandbox.start_process(spec).await?;
    let pid = stream.pid();
    let mut winch = signal(SignalKind::window_change())?;
    let raw = RawMode::enable()?;

    // stdin is read on a plain thread: a blocking read cannot be cancelled, and this way
    // it never holds up the runtime's shutdown.
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    std::thread::Builder::new()
        .name("e2bx-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match rustix::io::read(rustix::stdio::stdin(), &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    Err(_) => break,
                }
            }
        })?;
    let input = {
        let sb = sandbox.clone();
        tokio::spawn(async move {
            while let Some(mut bytes) = rx.recv().await {
                // Whatever queued up meanwhile goes in the same request.
                while let Ok(more) = rx.try_recv() {
                    bytes.extend_from_slice(&more);
                }
                let sent = sb
                    .send_input(ProcessSelector::Pid(pid), ProcessInput::Pty(bytes))
                    .await;
                if sent.is_err() {
                    break;
                }
            }
        })
    };

    let mut stdout = tokio::io::stdout();
    let result = loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(ProcessEvent::Data(DataEvent::Pty(b) | DataEvent::Stdout(b) | DataEvent::Stderr(b)))) => {
                    let w = async {
                        stdout.write_all(&b).await?;
                        stdout.flush().await
                    };
                    if let Err(e) = w.await {
                        kill_group(sandbox.clone().into_api(), pid).await;
                        break Err(e.into());
                    }
                }
                Some(Ok(ProcessEvent::End(end))) => break Ok((exit_code(&end), end.status)),
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(CliError::msg(format!(
                    "lost the shell's stream: {}",
                    crate::error::describe(&e)
                ))),
                None => break Err(CliError::msg("the shell's stream ended without an exit status")),
            },
            _ = winch.recv() => {
                let (cols, rows) = tty::size();
                let _ = sandbox
                    .resize_pty(ProcessSelector::Pid(pid), PtySize { cols, rows })
                    .await;
            }
            sig = interrupts.recv() => {
                kill_group(sandbox.clone().into_api(), pid).await;
                break Ok((128 + sig, "interrupted".to_owned()));
            }
        }
    };
    input.abort();
    drop(raw);
    let (code, status) = result?;
    if json {
        eprintln!(
            "{}",
            serde_json::json!({"sandboxId": sandbox.id(), "pid": pid, "exitCode": code, "status": status})
        );
    }
    Ok(code)
}
