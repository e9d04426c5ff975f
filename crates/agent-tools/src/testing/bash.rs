//! Shared tests of the bash tool: exit codes, streams, cwd/env, stdin, timeout and
//! cancellation killing the tree, background jobs, the output cap.

use std::time::Duration;

use super::{HANG, ToolWorld, gone_eventually, is_alive, read_pid};
use crate::bash::BashRequest;

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
/// the linger) and the call returns with the shell's exit code. On a backend whose `wait`
/// only returns once the output closes (`exit_before_output_eof` false, e.g. envd), the
/// call runs into its timeout instead, and the job is ended all the same.
pub async fn bash_background_job_ended_after_exit(world: &ToolWorld) {
    let pidfile = world.path("bg.pid");
    if !world.proc.capabilities().exit_before_output_eof {
        let out = world
            .bash()
            .run(
                BashRequest::new(format!(
                    "sleep 1000 & echo $! > \"{pidfile}\"; echo done; exit 4"
                ))
                .timeout(Duration::from_secs(3))
                .grace(Duration::from_millis(500)),
            )
            .await
            .expect("run");
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.stdout.text, "done\n");
        let pid = read_pid(world, "bg.pid").await;
        assert!(!is_alive(world, pid).await, "background job {pid} survived");
        return;
    }
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
