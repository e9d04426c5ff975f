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
