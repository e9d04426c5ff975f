//! e2bx's detached commands against an emulator in the test process: `run --detach`
//! prints the id and returns while the command runs; a retried start with the same id is
//! refused and runs nothing (a counter file); `ps` lists (table and --json); `attach`
//! streams from byte 0 or `--from N` and exits with the command's code; `kill` ends the
//! command's tree; Ctrl-C (SIGINT) on `attach` detaches and leaves the command running.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use support::Remote;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// `e2bx --sandbox SB ARGS...` to completion.
async fn on(r: &Remote, sb: &str, args: &[&str]) -> support::Out {
    let mut all = vec!["--sandbox", sb];
    all.extend_from_slice(args);
    r.out(&all).await
}

/// Waits (bounded) until `path` exists in the sandbox.
async fn wait_for(r: &Remote, sb: &str, path: &str) {
    for _ in 0..600 {
        if on(r, sb, &["run", "--", "test", "-e", path]).await.code == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never appeared");
}

/// The `ps --json` entry of `id`.
async fn ps_entry(r: &Remote, sb: &str, id: &str) -> serde_json::Value {
    let list = on(r, sb, &["--json", "ps"]).await.json();
    list.as_array()
        .and_then(|a| a.iter().find(|e| e["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_ps_attach_kill() {
    let r = Remote::start().await;
    let sb = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let script = "echo run >> /tmp/counter; echo one; echo err >&2; \
                  while [ ! -e /tmp/go ]; do sleep 0.05; done; echo two; exit 7";
    let job = ["run", "--detach", "--id", "job-1", "--", "sh", "-c", script];
    let started = on(&r, &sb, &job).await;
    assert_eq!(started.ok(), "job-1\n");
    let again = on(&r, &sb, &job).await;
    assert!(
        again.one_line_error().contains("already in use"),
        "{}",
        again.stderr
    );

    let table = on(&r, &sb, &["ps"]).await.ok();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("job-1 ") && l.contains("running") && l.contains("sh -c")),
        "{table}"
    );
    let e = ps_entry(&r, &sb, "job-1").await;
    assert_eq!(
        (e["state"].as_str(), e["program"].as_str()),
        (Some("running"), Some("sh"))
    );

    on(&r, &sb, &["run", "--", "touch", "/tmp/go"]).await.ok();
    let att = on(&r, &sb, &["attach", "job-1"]).await;
    assert_eq!(att.code, 7, "{}", att.stderr);
    assert_eq!(att.text(), "one\ntwo\n");
    assert!(att.stderr.contains("err\n"), "{}", att.stderr);
    let tail = on(
        &r,
        &sb,
        &["attach", "job-1", "--from", "4", "--from-stderr", "4"],
    )
    .await;
    assert_eq!((tail.code, tail.text().as_str()), (7, "two\n"));
    assert!(!tail.stderr.contains("err"), "{}", tail.stderr);
    let e = ps_entry(&r, &sb, "job-1").await;
    assert_eq!(
        (e["state"].as_str(), e["exitCode"].as_i64()),
        (Some("exited"), Some(7))
    );
    assert_eq!(
        on(&r, &sb, &job).await.code,
        1,
        "an ended id is still in use"
    );
    let counter = on(&r, &sb, &["run", "--", "cat", "/tmp/counter"])
        .await
        .ok();
    assert_eq!(counter, "run\n", "the command ran more than once");

    let sleeper = [
        "run",
        "--detach",
        "--id",
        "sleeper",
        "--",
        "sh",
        "-c",
        "sleep 300 & echo $! > /tmp/sl; echo $$ >> /tmp/sl; touch /tmp/sl-ready; wait",
    ];
    on(&r, &sb, &sleeper).await.ok();
    wait_for(&r, &sb, "/tmp/sl-ready").await;
    on(&r, &sb, &["kill", "sleeper"]).await.ok();
    let e = ps_entry(&r, &sb, "sleeper").await;
    assert_eq!(e["state"].as_str(), Some("exited"), "{e}");
    let alive = on(
        &r,
        &sb,
        &[
            "run", "--", "sh", "-c",
            "for p in $(cat /tmp/sl); do if [ -e /proc/$p ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status; then echo $p; fi; done",
        ],
    )
    .await
    .ok();
    assert_eq!(alive, "", "survivors after kill");
    let missing = on(&r, &sb, &["kill", "no-such"]).await;
    assert!(missing.one_line_error().contains("no detached command"));
    let fresh = r.out(&["run", "--detach", "--", "true"]).await;
    assert!(fresh.one_line_error().contains("needs --sandbox"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_attach_detaches_and_the_command_goes_on() {
    let r = Remote::start().await;
    let sb = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let script = "while [ ! -e /tmp/stop ]; do echo tick; sleep 0.1; done; echo end; exit 5";
    let id = on(&r, &sb, &["run", "--detach", "--", "sh", "-c", script])
        .await
        .ok()
        .trim()
        .to_owned();
    assert_eq!(id.len(), 16, "a random id: {id}");
    let mut child = r
        .cmd()
        .args(["--sandbox", &sb, "attach", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next_line().await.expect("read").expect("a line");
    assert_eq!(first, "tick");
    let pid = child.id().expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let status = child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(130));
    let e = ps_entry(&r, &sb, &id).await;
    assert_eq!(
        e["state"].as_str(),
        Some("running"),
        "Ctrl-C on attach killed it: {e}"
    );
    let n = |s: &str| s.lines().filter(|l| *l == "tick").count();
    // It ticks on; stop it, and a new attach sees everything from byte 0 and its code.
    tokio::time::sleep(Duration::from_millis(300)).await;
    on(&r, &sb, &["run", "--", "touch", "/tmp/stop"]).await.ok();
    let all = on(&r, &sb, &["attach", &id, "--from", "0"]).await;
    assert_eq!(all.code, 5, "{}", all.stderr);
    let text = all.text();
    assert!(
        text.starts_with("tick\n") && text.ends_with("end\n"),
        "{text}"
    );
    assert!(n(&text) >= 2, "{text}");
}
