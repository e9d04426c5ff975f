//! The `e2b-local` binary: prints the three `export`-ready lines, serves, and cleans up on
//! SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[tokio::test]
async fn e2b_local_prints_env_and_stops_on_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b-local"))
        .args(["--port", "0", "--root"])
        .arg(root.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("e2b-local starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut next = || lines.next().expect("a line").expect("utf-8");
    let api = next();
    let sandbox = next();
    let key = next();
    let api_url = api.strip_prefix("E2B_API_URL=http://127.0.0.1:").map(|p| {
        assert!(p.parse::<u16>().is_ok_and(|p| p > 0), "{api}");
        api.trim_start_matches("E2B_API_URL=").to_owned()
    });
    let api_url = api_url.unwrap_or_else(|| panic!("bad first line {api}"));
    assert_eq!(sandbox, format!("E2B_SANDBOX_URL={api_url}"));
    let key = key
        .strip_prefix("E2B_API_KEY=e2b_")
        .map(str::to_owned)
        .unwrap();
    assert_eq!(key.len(), 40);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    let key = format!("e2b_{key}");

    let http = reqwest::Client::new();
    let r = http.get(format!("{api_url}/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{api_url}/v2/sandboxes"))
        .header("X-API-KEY", &key)
        .json(&serde_json::json!({"templateID": "base"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The sandbox's directory (a spare prepared for the next create is a dot entry).
    let sandboxes = root.path().join("sandboxes").read_dir().unwrap();
    let named = sandboxes
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(named, 1);

    let mut child_stderr = child.stderr.take().unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) on the child we spawned.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child_stderr, &mut stderr).unwrap();
    assert!(stderr.contains("listening"), "logs go to stderr: {stderr}");
    let left = root
        .path()
        .join("sandboxes")
        .read_dir()
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "sandbox trees removed on shutdown");
    assert!(!stderr.contains(&key), "the key is never logged");
}
