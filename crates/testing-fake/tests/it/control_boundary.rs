//! The emulator fails closed: a sandbox whose boundary cannot be built is not created, the
//! error names the missing part and how to get it; the explicit opt-out is announced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// `e2b-local` started with `envs`, its API URL and key.
fn start(root: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> (Child, String, String) {
    let (child, api, _sandbox, key) = start_local(root, args, envs);
    (child, api, key)
}

/// `e2b-local` started with `envs`: the child, its API URL, sandbox URL and key.
pub(crate) fn start_local(
    root: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Child, String, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e2b-local"));
    cmd.args(["--port", "0", "--root"])
        .arg(root)
        .args(args)
        .env_remove("E2B_LOCAL_NO_ISOLATION")
        .env_remove("E2B_LOCAL_DENY_STEP")
        .env_remove("E2B_LOCAL_DENY_LIMIT")
        .env_remove("E2B_LOCAL_PASTA")
        .env_remove("E2B_LOCAL_UPLINK_NETNS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("e2b-local starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().expect("a line").expect("utf-8");
    let api = next().trim_start_matches("E2B_API_URL=").to_owned();
    let sandbox = next().trim_start_matches("E2B_SANDBOX_URL=").to_owned();
    let key = next().trim_start_matches("E2B_API_KEY=").to_owned();
    (child, api, sandbox, key)
}

/// SIGTERM, wait, and the child's stderr.
pub(crate) fn stop(mut child: Child) -> String {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) on the child we spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    err
}

async fn create(api: &str, key: &str) -> (u16, String) {
    create_with(api, key, serde_json::json!({"templateID": "base"})).await
}

/// `POST /v2/sandboxes` with `body`: (status, answer text).
pub(crate) async fn create_with(api: &str, key: &str, body: serde_json::Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{api}/v2/sandboxes"))
        .header("X-API-KEY", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_denied_namespace_fails_the_create_and_names_it() {
    for (step, hint) in [
        ("user-namespace", "user namespaces must be enabled"),
        ("overlay", "overlayfs"),
        ("idmapped-mount", "idmapped mounts"),
        ("network-namespace", "allowed to create namespaces"),
        ("uts-namespace", "allowed to create namespaces"),
        ("user-mode-network", "apt-get install passt"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let (child, api, key) = start(root.path(), &[], &[("E2B_LOCAL_DENY_STEP", step)]);
        let (status, body) = create(&api, &key).await;
        let listed = reqwest::Client::new()
            .get(format!("{api}/sandboxes"))
            .header("X-API-KEY", &key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let err = stop(child);
        assert_eq!(status, 500, "{step}: {body}");
        assert!(
            body.contains(&format!("cannot build the sandbox boundary ({step})")),
            "{step}: {body}"
        );
        assert!(body.contains(hint), "{step}: how to get it: {body}");
        assert!(body.contains("--no-isolation"), "{body}");
        assert_eq!(listed.trim(), "[]", "{step}: nothing runs: {listed}");
        assert!(!err.contains("ISOLATION IS OFF"), "{err}");
    }
}

#[tokio::test]
async fn the_opt_out_is_announced_at_start() {
    let root = tempfile::tempdir().unwrap();
    let (child, _, _) = start(root.path(), &["--no-isolation"], &[]);
    let err = stop(child);
    assert!(err.contains("sandbox isolation is OFF"), "{err}");
    let (child, _, _) = start(root.path(), &[], &[("E2B_LOCAL_NO_ISOLATION", "1")]);
    let err = stop(child);
    assert!(err.contains("sandbox isolation is OFF"), "{err}");
}

/// `GET /sandboxes/{id}` as JSON.
async fn info(api: &str, key: &str, id: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{api}/sandboxes/{id}"))
        .header("X-API-KEY", key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_limit_the_host_cannot_apply_is_named_once_and_in_the_sandbox_info() {
    let root = tempfile::tempdir().unwrap();
    let (child, api, key) = start(root.path(), &[], &[("E2B_LOCAL_DENY_LIMIT", "memory")]);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, body) = create(&api, &key).await;
        assert_eq!(status, 201, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        ids.push(v["sandboxID"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let v = info(&api, &key, id).await;
        assert_eq!(v["missingLimits"], serde_json::json!(["memory"]), "{v}");
    }
    let err = stop(child);
    assert_eq!(
        err.matches("sandboxes run without these limits").count(),
        1,
        "said once: {err}"
    );
    assert!(
        err.contains("memory: denied by E2B_LOCAL_DENY_LIMIT"),
        "{err}"
    );
    // Where every limit applies, the field is absent (the SDKs' shape is E2B's).
    let root = tempfile::tempdir().unwrap();
    let (child, api, key) = start(root.path(), &[], &[]);
    let (status, body) = create(&api, &key).await;
    assert_eq!(status, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let v = info(&api, &key, v["sandboxID"].as_str().unwrap()).await;
    let err = stop(child);
    if err.contains("sandboxes run without these limits") {
        eprintln!("SKIPPED: this host applies no limits itself: {err}");
        return;
    }
    assert!(v.get("missingLimits").is_none(), "{v}");
}
