//! Shared tests of the terminal session: typing and reading, resize, Ctrl-C, the bounded
//! ring, exit and close.

use std::time::Duration;

use exec_world::TerminalSpec;

use super::{HANG, ToolWorld, is_alive};
use crate::terminal::{Key, TerminalSession};

/// The test shells' prompt (typed commands never contain it).
const PROMPT: &str = "agent-prompt> ";

/// An interactive shell on a terminal: bash without rc files (prompt `$ `), else sh.
async fn shell_session(world: &ToolWorld) -> TerminalSession {
    let spec = match world.proc.which("bash").await.expect("which bash") {
        Some(bash) => TerminalSpec::new(bash)
            .arg("--noprofile")
            .arg("--norc")
            .arg("-i"),
        None => TerminalSpec::new("sh").arg("-i"),
    };
    let spec = spec.env("PS1", PROMPT).cwd(world.scratch.clone());
    let mut term = TerminalSession::spawn(world.proc.as_ref(), spec).expect("spawn terminal");
    // A marker only the shell's output (not the echo of the typed line) contains.
    term.write_line("echo \"rea\"\"dy\"").await.expect("type");
    term.read_until(b"ready", HANG).await.expect("shell ready");
    term
}

/// Types a command, reads its output.
pub async fn terminal_type_and_read(world: &ToolWorld) {
    let mut term = shell_session(world).await;
    term.write_line("echo hello-$((6*7))").await.expect("type");
    let seen = term.read_until(b"hello-42", HANG).await.expect("output");
    assert!(String::from_utf8_lossy(&seen).contains("hello-42"));
    // The ring still shows it, and the cursor moved past it.
    assert!(String::from_utf8_lossy(&term.screen()).contains("hello-42"));
    term.write(b"printf 'a%sb\\n' -").await.expect("type");
    term.key(Key::Enter).await.expect("enter");
    term.read_until(b"a-b", HANG).await.expect("output");
    term.close(Duration::from_secs(1)).await.expect("close");
}

/// A resize is seen by `stty size` (rows cols).
pub async fn terminal_resize_seen_by_stty(world: &ToolWorld) {
    if !world.proc.capabilities().terminal_resize {
        eprintln!("skipped: backend does not claim terminal_resize");
        return;
    }
    let mut term = shell_session(world).await;
    // Readline reads the size and writes it back while it prepares the terminal for a
    // line (`set_winsize` in its rltty.c), before it prints the prompt: a resize landing
    // in between is undone. So resize once the prompt is out.
    term.read_until(PROMPT.as_bytes(), HANG)
        .await
        .expect("prompt");
    term.resize(100, 37).await.expect("resize");
    term.write_line("stty size").await.expect("type");
    term.read_until(b"37 100", HANG).await.expect("stty size");
    term.close(Duration::from_secs(1)).await.expect("close");
}

/// Ctrl-C interrupts a foreground `sleep`; the shell survives and reports status 130.
pub async fn terminal_ctrl_c_interrupts_sleep(world: &ToolWorld) {
    let mut term = shell_session(world).await;
    // The job itself announces that it runs (it already owns the terminal then), and
    // becomes `sleep` by exec, so the interrupt reaches sleep and `$?` is 128 + SIGINT.
    term.write_line("sh -c 'echo \"sle\"\"eping\"; exec sleep 1000'")
        .await
        .expect("type");
    term.read_until(b"sleeping\r\n", HANG)
        .await
        .expect("started");
    // The announcement may still precede `exec`; a ^C landing before it is harmless
    // (the job dies with SIGINT too), so one ^C suffices, but a lost one is retried
    // rather than hanging the test.
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        term.key(Key::CtrlC).await.expect("ctrl-c");
        // Wait for the shell to take the terminal back before typing (typeahead sent
        // while the interrupted job still owns the terminal is flushed by the tty).
        match term
            .read_until(PROMPT.as_bytes(), Duration::from_secs(2))
            .await
        {
            Ok(_) => break,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("no prompt after ^C yet ({e}), sending it again");
            }
            Err(e) => panic!("sleep not interrupted by ^C: {e}"),
        }
    }
    term.write_line("echo \"st\"\"atus=$?\"")
        .await
        .expect("type");
    term.read_until(b"status=130", HANG)
        .await
        .expect("sleep interrupted");
    term.close(Duration::from_secs(1)).await.expect("close");
}

/// A chatty program does not grow the ring past its size; `read_until` still finds a
/// marker printed after the flood, and `total_bytes` counts everything.
pub async fn terminal_ring_is_bounded(world: &ToolWorld) {
    let spec = TerminalSpec::new("sh")
        .arg("-c")
        .arg("head -c 1048576 /dev/zero | tr '\\0' x; echo; echo \"fl\"\"ood-done\"; sleep 1000")
        .cwd(world.scratch.clone());
    let mut term = TerminalSession::spawn_with_buffer(world.proc.as_ref(), spec, 4096)
        .expect("spawn terminal");
    term.read_until(b"flood-done", HANG).await.expect("marker");
    assert!(
        term.screen().len() <= 4096,
        "ring grew to {}",
        term.screen().len()
    );
    assert!(
        term.total_bytes() >= 1 << 20,
        "total {}",
        term.total_bytes()
    );
    term.close(Duration::from_millis(500)).await.expect("close");
}

/// When the session exits, `read_until` reports `Closed` (not a timeout) with the output.
pub async fn terminal_exit_reports_closed(world: &ToolWorld) {
    let mut term = shell_session(world).await;
    term.write_line("echo \"by\"\"e\"; exit 7")
        .await
        .expect("type");
    match term.read_until(b"never-printed", HANG).await {
        Err(crate::terminal::TerminalError::Closed { output, .. }) => {
            assert!(output.contains("bye"), "{output:?}")
        }
        other => panic!("expected Closed, got {other:?}"),
    }
    assert!(term.is_closed());
    let status = term.wait().await.expect("wait");
    assert_eq!(status.code, Some(7));
}

/// `close` ends every process group of the session, background jobs included.
pub async fn terminal_close_ends_every_process(world: &ToolWorld) {
    let mut term = shell_session(world).await;
    let leader = term.pid();
    term.write_line("sleep 1000 & echo \"p\"\"id=$!;\"")
        .await
        .expect("type");
    term.read_until(b"pid=", HANG).await.expect("pid");
    let rest = term.read_until(b";", HANG).await.expect("pid end");
    let text = String::from_utf8_lossy(&rest);
    let pid: u32 = text
        .trim_end_matches(';')
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid from {text:?}: {e}"));
    assert!(is_alive(world, pid).await, "background sleep should run");
    let status = term.close(Duration::from_millis(500)).await.expect("close");
    assert!(!status.success(), "{status:?}");
    assert!(
        !is_alive(world, pid).await,
        "background job {pid} survived close"
    );
    if let Some(leader) = leader {
        assert!(
            !is_alive(world, leader).await,
            "shell {leader} survived close"
        );
    }
}
