//! The shared tests of agent-tools (feature `testing`): async functions written only
//! against `Arc<dyn Fs>` / `Arc<dyn Subprocess>`, run unchanged against the local adapters
//! (`tests/local_*.rs`) and against the E2B adapters on the emulator or real E2B.
//!
//! Each test is `pub async fn name(world: &ToolWorld)` and panics on failure. Run them all
//! for a backend with [`agent_tools_tests!`](crate::agent_tools_tests), giving an async
//! constructor of a fresh [`ToolWorld`]:
//!
//! ```ignore
//! // tests/tests/agent_tools_e2b.rs
//! async fn world() -> agent_tools::testing::ToolWorld {
//!     let (fs, proc, scratch, sandbox) = /* E2bFs + E2bSubprocess, empty dir */;
//!     agent_tools::testing::ToolWorld::new(fs, proc, scratch)
//!         .with_lsp_cache("/home/user/.cache/agent-tools-lsp".parse().unwrap())
//!         .with_guard(sandbox)
//! }
//! agent_tools::agent_tools_tests!(world);
//! ```
//!
//! Programs the world must have: `bash` (or `sh`), `sleep`, `printf`, `head`, `cat`,
//! `kill`, `grep`, `stty`, `pwd`, and for the LSP test `python3` with `pip` and access to
//! PyPI (or an already filled cache, see [`ToolWorld::with_lsp_cache`]). No test asserts
//! on wall-clock time; timeouts only turn a hang into a failure.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use exec_world::{Fs, SpawnSpec, Subprocess, TerminalSpec, WorldPath, WriteOptions, bytes_stream};

use crate::bash::{BashRequest, BashTool};
use crate::lsp::{LspClient, LspOptions, default_client_capabilities};
use crate::terminal::{Key, TerminalSession};

/// Generous bound turning a hang into a failure (never a performance assertion).
const HANG: Duration = Duration::from_secs(60);

/// What a test runs against: `Fs` and `Subprocess` of one world, an empty scratch dir.
pub struct ToolWorld {
    /// The file system.
    pub fs: Arc<dyn Fs>,
    /// The processes (same world as `fs`).
    pub proc: Arc<dyn Subprocess>,
    /// An existing, empty, absolute directory private to this test.
    pub scratch: WorldPath,
    /// Where the LSP test installs python-lsp-server (default `scratch/lsp-cache`).
    pub lsp_cache: Option<WorldPath>,
    /// Bytes printed by [`bash_huge_output_is_bounded`] (default 200 MiB).
    pub huge_output_bytes: u64,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

impl ToolWorld {
    /// A world over `fs` and `proc` with scratch directory `scratch` (exists, empty).
    pub fn new(fs: Arc<dyn Fs>, proc: Arc<dyn Subprocess>, scratch: WorldPath) -> ToolWorld {
        ToolWorld {
            fs,
            proc,
            scratch,
            lsp_cache: None,
            huge_output_bytes: 200 * 1024 * 1024,
            _guard: None,
        }
    }

    /// Uses `dir` (absolute, in the world) as the pip `--target` cache of the LSP test:
    /// filled once if `pylsp`/`pyflakes` do not import from it, reused after. Keep it
    /// readable by the world's user (the test makes what it installs world-readable).
    pub fn with_lsp_cache(mut self, dir: WorldPath) -> ToolWorld {
        self.lsp_cache = Some(dir);
        self
    }

    /// Sets [`ToolWorld::huge_output_bytes`] (for a slow transport; keep it far above
    /// the 64 KiB cap the test uses).
    pub fn with_huge_output_bytes(mut self, bytes: u64) -> ToolWorld {
        self.huge_output_bytes = bytes;
        self
    }

    /// Keeps `guard` alive as long as the world (a temp dir, a sandbox handle…).
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> ToolWorld {
        self._guard = Some(Box::new(guard));
        self
    }

    /// `scratch/rel`.
    pub fn path(&self, rel: &str) -> WorldPath {
        self.scratch.join(rel).expect("valid scratch path")
    }

    fn bash(&self) -> BashTool {
        BashTool::new(self.proc.clone())
    }
}

/// Declares one `#[tokio::test]` per shared test, each on a fresh world from `$make`
/// (an `async fn() -> ToolWorld`). Needs `tokio` (with `macros`) in the caller's crate.
/// `agent_tools_tests!(world)` declares all of them; `agent_tools_tests!(world, bash)`,
/// `…, terminal)` and `…, lsp)` one group.
#[macro_export]
macro_rules! agent_tools_tests {
    ($make:path) => {
        $crate::agent_tools_tests!($make, bash);
        $crate::agent_tools_tests!($make, terminal);
        $crate::agent_tools_tests!($make, lsp);
    };
    ($make:path, bash) => {
        $crate::agent_tools_tests!(@each $make, [
            bash_exit_codes,
            bash_stderr_separate,
            bash_cwd_and_env,
            bash_timeout_kills_process_tree,
            bash_background_job_ended_after_exit,
            bash_keep_background,
            bash_stdin,
            bash_cancel_terminates,
            bash_output_cap_utf8_boundary,
            bash_output_non_utf8,
            bash_huge_output_is_bounded,
        ]);
    };
    ($make:path, terminal) => {
        $crate::agent_tools_tests!(@each $make, [
            terminal_type_and_read,
            terminal_resize_seen_by_stty,
            terminal_ctrl_c_interrupts_sleep,
            terminal_close_ends_every_process,
            terminal_ring_is_bounded,
            terminal_exit_reports_closed,
        ]);
    };
    ($make:path, lsp) => {
        $crate::agent_tools_tests!(@each $make, [lsp_bridge_scripted_server, lsp_pylsp_diagnostics]);
    };
    (@each $make:path, [$($name:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let world = $make().await;
                $crate::testing::$name(&world).await;
            }
        )*
    };
}

/// True while `pid` is a live (non-zombie) process in the world.
pub async fn is_alive(world: &ToolWorld, pid: u32) -> bool {
    let cmd = format!(
        "kill -0 {pid} 2>/dev/null || exit 1; \
         if grep -q '^State:[[:space:]]*[ZX]' /proc/{pid}/status 2>/dev/null; then exit 1; fi; exit 0"
    );
    let out = world
        .bash()
        .run(BashRequest::new(cmd).timeout(HANG))
        .await
        .expect("liveness check");
    out.exit_code == Some(0)
}

/// Reads a pid written by a command into `rel` under the scratch dir.
async fn read_pid(world: &ToolWorld, rel: &str) -> u32 {
    let data = world
        .fs
        .read(&world.path(rel), 64)
        .await
        .unwrap_or_else(|e| panic!("read pid file {rel}: {e}"));
    String::from_utf8_lossy(&data)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid file {rel} holds {data:?}: {e}"))
}

// ---------------------------------------------------------------------------------------
// bash

/// Exit codes are data: 0, 3 and 127 (unknown command) come back as `exit_code`.
pub async fn bash_exit_codes(world: &ToolWorld) {
    let tool = world.bash();
    let ok = tool.run(BashRequest::new("echo hi")).await.expect("run");
    assert_eq!(ok.exit_code, Some(0));
    assert_eq!(ok.stdout.text, "hi\n");
    assert!(ok.success() && !ok.timed_out && ok.signal.is_none());

    let three = tool
        .run(BashRequest::new("echo out; exit 3"))
        .await
        .expect("run");
    assert_eq!(three.exit_code, Some(3));
    assert_eq!(three.stdout.text, "out\n");
    assert!(!three.success());

    let missing = tool
        .run(BashRequest::new("definitely-not-a-command-xyz"))
        .await
        .expect("run");
    assert_eq!(missing.exit_code, Some(127));
    assert!(missing.stderr.text.contains("definitely-not-a-command-xyz"));

    let killed = tool.run(BashRequest::new("kill -9 $$")).await.expect("run");
    assert_eq!(killed.exit_code, None);
    assert_eq!(killed.signal, Some(9));

    let empty = tool.run(BashRequest::new("  ")).await;
    assert!(empty.is_err(), "an empty command is an invalid request");
}

/// Stdout and stderr are captured separately, each with its byte count.
pub async fn bash_stderr_separate(world: &ToolWorld) {
    let out = world
        .bash()
        .run(BashRequest::new(
            "echo to-out; echo to-err >&2; printf abc >&2",
        ))
        .await
        .expect("run");
    assert_eq!(out.stdout.text, "to-out\n");
    assert_eq!(out.stderr.text, "to-err\nabc");
    assert_eq!(out.stderr.total_bytes, 10);
    assert!(!out.stdout.truncated && !out.stderr.truncated);
    let json = serde_json::to_value(&out).expect("serializable");
    assert_eq!(json["stderr"]["text"], "to-err\nabc");
    assert_eq!(json["exit_code"], 0);
}

/// `cwd` (absolute and relative to the Subprocess cwd) and `env` reach the command.
pub async fn bash_cwd_and_env(world: &ToolWorld) {
    let dir = world.path("work dir");
    world.fs.mkdir(&dir, true).await.expect("mkdir");
    let out = world
        .bash()
        .run(
            BashRequest::new("pwd; printf '%s|%s' \"$GREETING\" \"$OTHER\"")
                .cwd(dir.as_str())
                .env("GREETING", "hello world")
                .env("OTHER", "é"),
        )
        .await
        .expect("run");
    assert_eq!(out.stdout.text, format!("{dir}\nhello world|é"));

    let bad = world
        .bash()
        .run(BashRequest::new("true").cwd(world.path("missing").as_str()))
        .await;
    assert!(bad.is_err(), "a missing cwd is an error, not an exit code");
}

/// On timeout the whole tree ends, a background grandchild included; output written
/// before the timeout is returned.
pub async fn bash_timeout_kills_process_tree(world: &ToolWorld) {
    let pidfile = world.path("grandchild.pid");
    // A child shell starts a grandchild `sleep`; the command waits until the pid file is
    // written, says so, then waits forever: it only returns by being terminated.
    let cmd = format!(
        "sh -c 'sleep 1000 & echo $! > \"{pidfile}\"; wait' & \
         while [ ! -s \"{pidfile}\" ]; do sleep 0.05; done; echo started; wait"
    );
    let out = world
        .bash()
        .run(
            BashRequest::new(cmd)
                .timeout(Duration::from_secs(3))
                .grace(Duration::from_millis(500)),
        )
        .await
        .expect("run");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None, "{out:?}");
    assert!(out.signal.is_some(), "{out:?}");
    assert_eq!(out.stdout.text, "started\n");
    let pid = read_pid(world, "grandchild.pid").await;
    assert!(
        !is_alive(world, pid).await,
        "grandchild {pid} survived the timeout"
    );
}

/// Cancelling a running command terminates its tree and returns the output so far with
/// `cancelled` set.
pub async fn bash_cancel_terminates(world: &ToolWorld) {
    let pidfile = world.path("cancel.pid");
    let cancel = tokio_util::sync::CancellationToken::new();
    let tool = world.bash();
    let req = BashRequest::new(format!(
        "sleep 1000 & echo $! > \"{pidfile}\"; echo running; wait"
    ))
    .timeout(HANG)
    .grace(Duration::from_millis(500));
    let canceller = async {
        // Cancel once the command has demonstrably started its child.
        while world.fs.stat(&pidfile).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(tool.run_cancellable(req, &cancel), canceller);
    let out = out.expect("run");
    assert!(out.cancelled && !out.timed_out && !out.success(), "{out:?}");
    let pid = read_pid(world, "cancel.pid").await;
    assert!(!is_alive(world, pid).await, "{pid} survived cancellation");
}

/// After the shell exits, a background job that still holds the output is ended (after
/// the linger) and the call returns with the shell's exit code.
pub async fn bash_background_job_ended_after_exit(world: &ToolWorld) {
    let pidfile = world.path("bg.pid");
    let out = world
        .bash()
        .run(
            BashRequest::new(format!(
                "sleep 1000 & echo $! > \"{pidfile}\"; echo done; exit 4"
            ))
            .timeout(HANG)
            .linger(Duration::from_millis(100))
            .grace(Duration::from_millis(500)),
        )
        .await
        .expect("run");
    assert!(!out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, Some(4));
    assert_eq!(out.stdout.text, "done\n");
    let pid = read_pid(world, "bg.pid").await;
    assert!(!is_alive(world, pid).await, "background job {pid} survived");
}

/// `stdin` text reaches the command, then EOF; a command that never reads a large input
/// still completes.
pub async fn bash_stdin(world: &ToolWorld) {
    if !world.proc.capabilities().stdin {
        eprintln!("skipped: backend does not claim piped stdin");
        return;
    }
    let out = world
        .bash()
        .run(BashRequest::new("tr a-z A-Z; echo eof").stdin("hello é\nworld"))
        .await
        .expect("run");
    assert_eq!(out.stdout.text, "HELLO é\nWORLDeof\n");
    let big = "z".repeat(4 << 20);
    let out = world
        .bash()
        .run(BashRequest::new("echo ignored").stdin(big).timeout(HANG))
        .await
        .expect("run");
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.text, "ignored\n");
}

/// With `keep_background`, a job started in the background (output redirected) keeps
/// running after the shell exits; without it, it is ended.
pub async fn bash_keep_background(world: &ToolWorld) {
    let pidfile = world.path("daemon.pid");
    let out = world
        .bash()
        .run(
            BashRequest::new(format!(
                "sleep 1000 >/dev/null 2>&1 & echo $! > \"{pidfile}\"; echo started"
            ))
            .keep_background(true)
            .timeout(HANG),
        )
        .await
        .expect("run");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout.text, "started\n");
    let pid = read_pid(world, "daemon.pid").await;
    assert!(
        is_alive(world, pid).await,
        "kept background job {pid} was ended"
    );
    let kill = world
        .bash()
        .run(BashRequest::new(format!("kill {pid}")).timeout(HANG))
        .await
        .expect("kill");
    assert!(kill.success(), "{kill:?}");
    assert!(gone_eventually(world, pid).await, "{pid} survived kill");
}

/// The cap cuts at a UTF-8 boundary: a two-byte `é` split by the cap is dropped whole,
/// `truncated` is set and `total_bytes` counts everything.
pub async fn bash_output_cap_utf8_boundary(world: &ToolWorld) {
    let tool = world.bash();
    // 9 ASCII bytes, then é (2 bytes) straddling the cap of 10, then 3 more.
    let out = tool
        .run(
            BashRequest::new(r"printf 'abcdefghi\303\251xyz'; printf 'éééééé' >&2")
                .max_output_bytes(10),
        )
        .await
        .expect("run");
    assert_eq!(out.stdout.bytes, b"abcdefghi");
    assert_eq!(out.stdout.text, "abcdefghi");
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.total_bytes, 14);
    // stderr: 6 × 2 bytes, cap 10 falls on a boundary: 5 whole characters.
    assert_eq!(out.stderr.text, "ééééé");
    assert!(out.stderr.truncated);
    assert_eq!(out.stderr.total_bytes, 12);

    // A 4-byte character cut after its second byte.
    let out = tool
        .run(BashRequest::new(r"printf 'ab\360\237\230\200'").max_output_bytes(4))
        .await
        .expect("run");
    assert_eq!(out.stdout.bytes, b"ab");
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.total_bytes, 6);

    // Exactly at the cap: not truncated.
    let out = tool
        .run(BashRequest::new("printf 0123456789").max_output_bytes(10))
        .await
        .expect("run");
    assert_eq!(out.stdout.text, "0123456789");
    assert!(!out.stdout.truncated);
}

/// Bytes that are not UTF-8 are kept raw in `bytes` and shown as U+FFFD in `text`, also
/// when the cap falls right after them.
pub async fn bash_output_non_utf8(world: &ToolWorld) {
    let out = world
        .bash()
        .run(BashRequest::new(r"printf 'a\377\376b'").max_output_bytes(100))
        .await
        .expect("run");
    assert_eq!(out.stdout.bytes, b"a\xff\xfeb");
    assert_eq!(out.stdout.text, "a\u{fffd}\u{fffd}b");
    assert!(!out.stdout.truncated);

    let out = world
        .bash()
        .run(BashRequest::new(r"printf 'abc\377\376xyz'").max_output_bytes(4))
        .await
        .expect("run");
    assert_eq!(
        out.stdout.bytes, b"abc\xff",
        "an invalid byte is data, not cut"
    );
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.total_bytes, 8);
}

/// 200 MiB (see [`ToolWorld::huge_output_bytes`]) on stdout: all of it is drained and
/// counted, at most the cap is kept.
pub async fn bash_huge_output_is_bounded(world: &ToolWorld) {
    let size = world.huge_output_bytes;
    let cap = 64 * 1024;
    let out = world
        .bash()
        .run(
            BashRequest::new(format!(
                "head -c {size} /dev/zero | tr '\\0' x; echo end >&2"
            ))
            .max_output_bytes(cap)
            .timeout(Duration::from_secs(300)),
        )
        .await
        .expect("run");
    assert!(!out.timed_out, "{:?}", out.stderr);
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.total_bytes, size);
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.bytes.len(), cap);
    assert!(out.stdout.bytes.iter().all(|b| *b == b'x'));
    assert_eq!(out.stderr.text, "end\n");
}

// ---------------------------------------------------------------------------------------
// terminal

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

// ---------------------------------------------------------------------------------------
// lsp

/// Makes sure `python-lsp-server` and `pyflakes` import from `cache` with `python`,
/// installing them with pip (`--target cache`) if not. Panics loudly if that fails.
pub async fn ensure_pylsp(world: &ToolWorld, python: &str, cache: &WorldPath) {
    let check = format!(
        "PYTHONPATH='{cache}' '{python}' -c 'import pylsp, pyflakes, pylsp.plugins.pyflakes_lint'"
    );
    let tool = world.bash();
    let probe = tool
        .run(BashRequest::new(check.clone()).timeout(HANG))
        .await
        .expect("probe pylsp");
    if probe.success() {
        return;
    }
    let install = format!(
        "mkdir -p '{cache}' && '{python}' -m pip install --disable-pip-version-check \
         --no-input --no-cache-dir -q --target '{cache}' python-lsp-server pyflakes \
         && chmod -R a+rX '{cache}'"
    );
    let out = tool
        .run(
            BashRequest::new(install)
                .timeout(Duration::from_secs(600))
                .max_output_bytes(256 * 1024),
        )
        .await
        .expect("run pip");
    assert!(
        out.success(),
        "installing python-lsp-server into {cache} failed (this test does not skip):\n\
         stdout: {}\nstderr: {}",
        out.stdout.text,
        out.stderr.text
    );
    let again = tool
        .run(BashRequest::new(check).timeout(HANG))
        .await
        .expect("probe pylsp");
    assert!(
        again.success(),
        "pylsp still does not import from {cache}: {}",
        again.stderr.text
    );
}

/// Against a real language server (python-lsp-server + pyflakes): initialize, a Python
/// file with an undefined name written through `Fs`, `didOpen`, non-empty
/// `publishDiagnostics` for its URI, shutdown, exit; the server process is gone after.
pub async fn lsp_pylsp_diagnostics(world: &ToolWorld) {
    let python = world
        .proc
        .which("python3")
        .await
        .expect("which python3")
        .expect("python3 must be on the world's PATH for the LSP test");
    let cache = world
        .lsp_cache
        .clone()
        .unwrap_or_else(|| world.path("lsp-cache"));
    ensure_pylsp(world, &python, &cache).await;

    let project = world.path("proj");
    world.fs.mkdir(&project, true).await.expect("mkdir project");
    let file = project.join("bad.py").expect("path");
    let text = "import os\n\nprint(undefined_name_xyz)\n";
    world
        .fs
        .write(&file, bytes_stream(text), WriteOptions::default())
        .await
        .expect("write bad.py");
    let root = world.fs.canonical(&project);
    let uri = world.fs.canonical(&file).uri();

    let spec = SpawnSpec::new(python.clone())
        .arg("-m")
        .arg("pylsp")
        .env("PYTHONPATH", cache.as_str())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .cwd(project.clone());
    // Record the server's own requests (answered by the default handler).
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let handler = {
        let asked = asked.clone();
        move |method: &str, params: &serde_json::Value| {
            if let Ok(mut a) = asked.lock() {
                a.push(method.to_string());
            }
            crate::lsp::ServerRequestHandler::handle(&crate::lsp::DefaultHandler, method, params)
        }
    };
    let lsp = LspClient::spawn(
        world.proc.as_ref(),
        spec,
        LspOptions::default().request_timeout(HANG).handler(handler),
    )
    .expect("spawn pylsp");
    let pid = lsp.pid();
    let mut notes = lsp.subscribe();

    let init = lsp
        .initialize(&root, default_client_capabilities())
        .await
        .expect("initialize");
    assert!(
        init.pointer("/capabilities/textDocumentSync").is_some(),
        "InitializeResult without textDocumentSync: {init}"
    );
    lsp.initialized().await.expect("initialized");
    let opened = lsp
        .open_document(world.fs.as_ref(), &file, "python", 1 << 20)
        .await
        .expect("didOpen");
    assert_eq!(opened, uri);
    let diags = lsp
        .wait_for_diagnostics(&uri, HANG, |d| !d.is_empty())
        .await
        .expect("diagnostics");
    let messages: Vec<&str> = diags
        .iter()
        .filter_map(|d| d.get("message").and_then(|m| m.as_str()))
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("undefined_name_xyz")),
        "no undefined-name diagnostic in {diags:?}"
    );
    // The same notification went to subscribers too.
    let mut saw = false;
    while let Ok(n) = notes.try_recv() {
        if n.method == "textDocument/publishDiagnostics" && n.params["uri"] == uri.as_str() {
            saw = true;
        }
    }
    assert!(saw, "publishDiagnostics not broadcast to subscribers");

    // pylsp reports linting progress: it asked us to create a progress token first.
    let asked = asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(
        asked.iter().any(|m| m == "window/workDoneProgress/create"),
        "pylsp sent no window/workDoneProgress/create (it does when the client supports \
         workDoneProgress); server requests seen: {asked:?}"
    );

    // A request the server does not know is a typed server error, not a hang.
    let err = lsp
        .request_value("agentTools/noSuchMethod", serde_json::json!({}), HANG)
        .await
        .expect_err("unknown method");
    assert!(
        matches!(err, crate::lsp::LspError::Server { .. }),
        "unexpected error {err:?}"
    );

    lsp.shutdown().await.expect("shutdown");
    lsp.exit().await.expect("exit");
    let status = tokio::time::timeout(HANG, lsp.wait())
        .await
        .expect("server exits after exit")
        .expect("wait");
    assert_eq!(status.code, Some(0), "pylsp exit status {status:?}");
    drop(lsp);
    if let Some(pid) = pid {
        assert!(!is_alive(world, pid).await, "pylsp {pid} still running");
    }
}

/// The scripted JSON-RPC server (`src/testing_assets/scripted_lsp.py`, stdlib Python).
const SCRIPTED_SERVER: &str = include_str!("testing_assets/scripted_lsp.py");

/// Starts the scripted server from `script` with the bridge options `opts`.
fn scripted(world: &ToolWorld, python: &str, script: &WorldPath, opts: LspOptions) -> LspClient {
    let spec = SpawnSpec::new(python.to_string())
        .arg(script.as_str().to_string())
        .cwd(world.scratch.clone());
    LspClient::spawn(world.proc.as_ref(), spec, opts).expect("spawn scripted server")
}

/// Waits (bounded) until `pid` is gone; false if it is still alive after [`HANG`].
async fn gone_eventually(world: &ToolWorld, pid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + HANG;
    while tokio::time::Instant::now() < deadline {
        if !is_alive(world, pid).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The bridge against a scripted server: concurrent requests answered out of order,
/// typed server errors, server→client requests answered by the handler (and
/// `MethodNotFound` for unknown ones), frames split and merged across reads with a
/// `Content-Type` header, an oversize response skipped without losing the stream, a
/// timeout that sends `$/cancelRequest`, a stalled server (a request given up while its
/// frame is being written leaves the stream intact), a crash failing pending requests with `Closed`,
/// `close` (shutdown + exit), and drop killing the server.
pub async fn lsp_bridge_scripted_server(world: &ToolWorld) {
    use crate::lsp::{DefaultHandler, LspError, ResponseError, ServerRequestHandler};
    use serde_json::{Value, json};

    let python = world
        .proc
        .which("python3")
        .await
        .expect("which python3")
        .expect("python3 must be on the world's PATH for the LSP tests");
    let script = world.path("scripted_lsp.py");
    world
        .fs
        .write(
            &script,
            bytes_stream(SCRIPTED_SERVER),
            WriteOptions::default(),
        )
        .await
        .expect("write script");
    let handler = |method: &str, params: &Value| match method {
        "custom/hello" => Ok(json!({"hello": params["name"]})),
        other => DefaultHandler.handle(other, params),
    };
    let opts = LspOptions::default()
        .max_body(4096)
        .request_timeout(HANG)
        .handler(handler);
    let lsp = scripted(world, &python, &script, opts.clone());
    let mut notes = lsp.subscribe();

    // Concurrent requests, answered in the reverse order of sending.
    let (a, b, c) = tokio::join!(
        lsp.request::<_, Value>("echo", json!({"delay": 0.4, "tag": "a"})),
        lsp.request::<_, Value>("echo", json!({"delay": 0.2, "tag": "b"})),
        lsp.request::<_, Value>("echo", json!({"delay": 0.0, "tag": "c"})),
    );
    assert_eq!(a.expect("a")["tag"], "a");
    assert_eq!(b.expect("b")["tag"], "b");
    assert_eq!(c.expect("c")["tag"], "c");

    // A server error is typed, with code, message and data.
    match lsp.request::<_, Value>("fail", json!({})).await {
        Err(LspError::Server { method, error }) => {
            assert_eq!(method, "fail");
            assert_eq!(error.code, -32001);
            assert_eq!(error.message, "nope");
            assert_eq!(error.data, Some(json!({"why": "asked"})));
        }
        other => panic!("expected a server error, got {other:?}"),
    }

    // Server→client requests: default answers, a custom one, an unknown one.
    let ask = |method: &str, params: Value| {
        lsp.request::<_, Value>("ask", json!({"method": method, "params": params}))
    };
    let r = ask("workspace/configuration", json!({"items": [{}, {}]}))
        .await
        .expect("ask");
    assert_eq!(r["result"], json!([null, null]));
    let r = ask("window/workDoneProgress/create", json!({"token": "t"}))
        .await
        .expect("ask");
    assert_eq!(r, json!({"result": null, "error": null}));
    let r = ask("custom/hello", json!({"name": "world"}))
        .await
        .expect("ask");
    assert_eq!(r["result"], json!({"hello": "world"}));
    let r = ask("custom/unknown", json!({})).await.expect("ask");
    assert_eq!(r["error"]["code"], ResponseError::METHOD_NOT_FOUND);

    // Split and merged frames, Content-Type tolerated; notifications arrive in order.
    let done: String = lsp.request("burst", json!({})).await.expect("burst");
    assert_eq!(done, "burst-done");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let n = tokio::time::timeout(HANG, notes.recv())
            .await
            .expect("notification in time")
            .expect("notification");
        if n.method == "note" {
            seen.push(n.params["n"].clone());
        }
    }
    assert_eq!(seen, vec![json!(1), json!(2)]);

    // An oversize response is skipped (its request times out); the stream goes on.
    let big = lsp
        .request_value("big", json!({"size": 20000}), Duration::from_secs(2))
        .await;
    assert!(matches!(big, Err(LspError::Timeout { .. })), "{big:?}");
    loop {
        let n = tokio::time::timeout(HANG, notes.recv())
            .await
            .expect("after-big in time")
            .expect("notification");
        if n.method == "after-big" {
            break;
        }
    }
    let after: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "after"}))
        .await
        .expect("echo after big");
    assert_eq!(after["tag"], "after");

    // A timeout cancels the request on the server.
    let never = lsp
        .request_value("never", json!({}), Duration::from_millis(300))
        .await;
    assert!(matches!(never, Err(LspError::Timeout { .. })), "{never:?}");
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let ids: Vec<Value> = lsp.request("cancelled", json!({})).await.expect("ids");
        if !ids.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no $/cancelRequest reached the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A server that stops reading: a 1 MiB request times out (its frame is still written
    // whole by the writer task), and the stream is intact once the server reads again.
    lsp.notify("stall", json!({"secs": 3}))
        .await
        .expect("stall");
    let pad = "y".repeat(1 << 20);
    let stalled = lsp
        .request_value(
            "echo",
            json!({"delay": 0, "pad": pad}),
            Duration::from_millis(300),
        )
        .await;
    assert!(
        matches!(stalled, Err(LspError::Timeout { .. })),
        "{stalled:?}"
    );
    let after: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "after-stall"}))
        .await
        .expect("echo after stall");
    assert_eq!(after["tag"], "after-stall");

    // A crash fails the pending request and every later one with Closed.
    let (pending, _) = tokio::join!(lsp.request_value("never", json!({}), HANG), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = lsp.notify("crash", json!({})).await;
    });
    assert!(
        matches!(pending, Err(LspError::Closed { .. })),
        "{pending:?}"
    );
    let later = lsp.request_value("echo", json!({"delay": 0}), HANG).await;
    assert!(matches!(later, Err(LspError::Closed { .. })), "{later:?}");
    let status = tokio::time::timeout(HANG, lsp.wait())
        .await
        .expect("exit in time")
        .expect("wait");
    assert_eq!(status.code, Some(3));
    drop(lsp);

    // close(): shutdown + exit, the server exits 0.
    let lsp = scripted(world, &python, &script, opts.clone());
    let status = lsp.close(Duration::from_secs(5)).await.expect("close");
    assert_eq!(status.code, Some(0), "{status:?}");

    // Drop kills the server.
    let lsp = scripted(world, &python, &script, opts);
    let pid = lsp.pid();
    let r: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "alive"}))
        .await
        .expect("echo");
    assert_eq!(r["tag"], "alive");
    drop(lsp);
    if let Some(pid) = pid {
        assert!(
            gone_eventually(world, pid).await,
            "server {pid} survived drop"
        );
    }
}
