//! envd without isolation (what a non-root run gets): template paths map under the sandbox
//! root on the host and everything else keeps working. Forced here with
//! `E2B_LOCAL_NO_ISOLATION=1`, so it runs the same as root or not.
#![allow(clippy::unwrap_used)]

#[path = "it/envd_support/mod.rs"]
mod envd_support;

use envd_support::{boot, run};
use serde_json::json;

fn degrade() {
    // SAFETY: set before any sandbox boots in this test binary; every test sets the same value.
    unsafe { std::env::set_var("E2B_LOCAL_NO_ISOLATION", "1") };
}

#[tokio::test]
async fn processes_and_files_work_without_isolation() {
    degrade();
    let fake = boot("base", None).await;
    assert!(!fake.envd.is_isolated());
    let (out, _, end) = run(&fake, "echo hi > ~/a.txt; cat ~/a.txt; echo $USER", None).await;
    assert_eq!(String::from_utf8(out).unwrap(), "hi\nuser\n");
    assert_eq!(end["exited"], true);
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"a.txt"}),
            None,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["entry"]["path"], "/home/user/a.txt");
    assert_eq!(b["entry"]["size"], "3");
    let r = fake
        .req(reqwest::Method::POST, "/files?path=/home/user/d/up.txt")
        .header("Content-Type", "application/octet-stream")
        .body("up")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"/home/user","depth":2}),
            None,
        )
        .await;
    let paths: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .filter(|p| !p.starts_with("/home/user/.")) // skeleton dotfiles
        .collect();
    assert_eq!(
        paths,
        ["/home/user/a.txt", "/home/user/d", "/home/user/d/up.txt"]
    );
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user/d/up.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"up");
}

/// Without isolation a command starts on the emulator's memory (`CLONE_VM`, no copy):
/// its PTY is its controlling terminal, a missing working directory is refused, and
/// many starts in a row each run their own program.
#[tokio::test]
async fn commands_start_on_the_emulators_memory_with_a_pty_and_a_cwd() {
    degrade();
    let fake = boot("base", None).await;
    assert!(!fake.envd.is_isolated());
    let body = json!({"process":{"cmd":"/bin/sh","args":["-c","tty; test -t 0 && echo term; ps -o sid= -p $$; echo $$"]},"pty":{"size":{"cols":80,"rows":24}}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, _) = s.collect().await;
    let (_, _, pty, end) = envd_support::outputs(&msgs);
    let text = String::from_utf8_lossy(&pty).replace('\r', "");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{text}");
    assert_eq!(lines[1], "term", "{text}");
    // It leads its own session (setsid before TIOCSCTTY).
    assert_eq!(lines[2], lines[3], "{text}");
    assert_eq!(end.unwrap()["status"], "exit status 0");
    let body = json!({"process":{"cmd":"/bin/true","cwd":"/nope"}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (_, end) = s.collect().await;
    assert_eq!(end["error"]["message"], "cwd '/nope' does not exist");
    for i in 0..50 {
        let (out, _, _) = run(&fake, &format!("echo {i}"), None).await;
        assert_eq!(String::from_utf8(out).unwrap(), format!("{i}\n"));
    }
}
