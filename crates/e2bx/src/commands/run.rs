//! `e2bx run`: start the argv under the setsid wrapper, stream stdout and stderr as raw
//! bytes while it runs, and return its exit code. A termination signal to e2bx (Ctrl-C)
//! kills the remote process group and exits 128+N (130 for Ctrl-C). When e2bx's stdin is
//! not a terminal (a pipe or a file) it is forwarded to the command, then closed (EOF);
//! with a terminal the command's stdin is empty (use `e2bx shell` for interactive work).

use std::io::IsTerminal as _;

use std::time::Duration;

use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector};
use e2b_core::{EnvdApi as _, Sandbox, StartProcess};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::cli::RunArgs;
use crate::error::{CliError, CliResult};
use crate::remote::{SETSID_WRAPPER, exit_code, kill_group};
use crate::signals::Interrupts;

/// Run the command; returns the exit code to pass through.
pub async fn run(
    sandbox: &Sandbox,
    args: &RunArgs,
    json: bool,
    interrupts: &mut Interrupts,
) -> CliResult {
    let mut argv = vec!["-c".to_owned(), SETSID_WRAPPER.to_owned(), "sh".to_owned()];
    argv.extend(args.command.iter().cloned());
    let mut spec = StartProcess::new("/bin/sh").args(argv);
    for (k, v) in &args.env {
        spec = spec.env(k.clone(), v.clone());
    }
    if let Some(cwd) = &args.cwd {
        spec = spec.cwd(cwd.clone());
    }
    if let Some(user) = &args.user {
        spec = spec.user(user.clone());
    }
    if let Some(t) = args.timeout {
        spec = spec.timeout(Duration::from_secs(t));
    }
    let forward_stdin = !std::io::stdin().is_terminal();
    spec = spec.stdin(forward_stdin);
    let mut stream = sandbox.start_process(spec).await.map_err(|e| {
        if e.connect_code() == Some(e2b_core::proto::connect::Code::InvalidArgument) {
            CliError::msg(format!("cannot start the command: {e}"))
        } else {
            e.into()
        }
    })?;
    let pid = stream.pid();
    let stdin_task = forward_stdin.then(|| forward(sandbox.clone(), pid));
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let outcome = loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b)))) => {
                    if let Err(e) = write_all(&mut stdout, &b).await {
                        kill_group(sandbox.clone().into_api(), pid).await;
                        return Err(e.into());
                    }
                }
                Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b) | DataEvent::Pty(b)))) => {
                    let _ = write_all(&mut stderr, &b).await;
                }
                Some(Ok(ProcessEvent::End(end))) => break Outcome::Ended(end),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Err(CliError::msg(format!(
                        "lost the command's output stream ({}); it may still be running in sandbox {}",
                        crate::error::describe(&e),
                        sandbox.id()
                    )));
                }
                None => {
                    return Err(CliError::msg(
                        "the command's output stream ended without an exit status",
                    ));
                }
            },
            sig = interrupts.recv() => {
                kill_group(sandbox.clone().into_api(), pid).await;
                break Outcome::Interrupted(sig);
            }
        }
    };
    if let Some(t) = stdin_task {
        t.abort();
    }
    let (code, summary) = match &outcome {
        Outcome::Ended(end) => (
            exit_code(end),
            serde_json::json!({
                "sandboxId": sandbox.id(),
                "pid": pid,
                "exitCode": exit_code(end),
                "status": end.status,
                "interrupted": false,
            }),
        ),
        Outcome::Interrupted(sig) => (
            128 + sig,
            serde_json::json!({
                "sandboxId": sandbox.id(),
                "pid": pid,
                "exitCode": 128 + sig,
                "status": "interrupted",
                "interrupted": true,
            }),
        ),
    };
    if json {
        eprintln!("{summary}");
    }
    Ok(code)
}

/// Copy e2bx's stdin to the process's stdin pipe, then close it. The blocking reads run on
/// a plain thread so they never hold up the runtime's shutdown.
fn forward(sandbox: Sandbox, pid: u32) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let reader = std::thread::Builder::new()
        .name("e2bx-stdin".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match rustix::io::read(rustix::stdio::stdin(), &mut buf[..]) {
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
        });
    tokio::spawn(async move {
        if reader.is_ok() {
            while let Some(bytes) = rx.recv().await {
                let sent = sandbox
                    .send_input(ProcessSelector::Pid(pid), ProcessInput::Stdin(bytes))
                    .await;
                if sent.is_err() {
                    // The process ended or closed its stdin: nothing more to deliver.
                    return;
                }
            }
        }
        let _ = sandbox.close_stdin(ProcessSelector::Pid(pid)).await;
    })
}

enum Outcome {
    Ended(e2b_core::proto::process::EndEvent),
    Interrupted(i32),
}

async fn write_all<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, b: &[u8]) -> std::io::Result<()> {
    w.write_all(b).await?;
    w.flush().await
}
