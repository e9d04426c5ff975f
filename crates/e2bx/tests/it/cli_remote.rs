//! e2bx against an emulator started in the test process (E2B_API_URL / E2B_SANDBOX_URL /
//! E2B_API_KEY): sandbox create/list/pause/resume/kill by id and name, --json outputs,
//! cp up and down of a multi-MiB file checked by hash, ls/cat/stat, errors (one line,
//! exit 1, no backtrace, no key), Ctrl-C killing the remote process group, and `serve`.

use crate::support;

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use e2b_core::{EnvdApi as _, ListQuery};
use sha2::{Digest as _, Sha256};
use support::{Remote, bin};
use tokio::io::{AsyncBufReadExt as _, BufReader};

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_lifecycle_by_name_with_json() {
    let r = Remote::start().await;
    let created = r
        .out(&[
            "--json",
            "sandbox",
            "create",
            "--name",
            "dev",
            "--metadata",
            "team=a",
            "--timeout",
            "600",
        ])
        .await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    let v = created.json();
    let id = v["sandboxId"].as_str().expect("id").to_owned();
    assert_eq!(v["name"], "dev");

    let dup = r.out(&["sandbox", "create", "--name", "dev"]).await;
    assert!(dup.one_line_error().contains("already used"));

    let state = |list: &serde_json::Value| -> Option<String> {
        list.as_array()?
            .iter()
            .find(|s| s["sandboxId"] == id.as_str())
            .map(|s| s["state"].as_str().unwrap_or_default().to_owned())
    };
    let list = r.out(&["--json", "sandbox", "list"]).await.json();
    assert_eq!(state(&list).as_deref(), Some("running"));
    let entry = list
        .as_array()
        .and_then(|a| a.iter().find(|s| s["sandboxId"] == id.as_str()))
        .expect("listed");
    assert_eq!(entry["name"], "dev");
    assert_eq!(entry["metadata"]["team"], "a");
    let table = r.out(&["sandbox", "list"]).await.ok();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("dev")),
        "{table}"
    );

    r.out(&["sandbox", "pause", "dev"]).await.ok();
    let list = r.out(&["--json", "sandbox", "list"]).await.json();
    assert_eq!(state(&list).as_deref(), Some("paused"));
    let again = r.out(&["sandbox", "pause", &id]).await;
    assert!(again.one_line_error().contains("cannot be paused"));

    r.out(&["sandbox", "resume", "dev"]).await.ok();
    let list = r.out(&["--json", "sandbox", "list"]).await.json();
    assert_eq!(state(&list).as_deref(), Some("running"));

    // a paused sandbox named by --sandbox is resumed for the command
    r.out(&["sandbox", "pause", "dev"]).await.ok();
    let o = r
        .out(&["--sandbox", "dev", "run", "--", "echo", "back"])
        .await;
    assert_eq!(o.ok(), "back\n");

    r.out(&["sandbox", "kill", "dev"]).await.ok();
    let list = r.out(&["--json", "sandbox", "list"]).await.json();
    assert_eq!(state(&list), None);
    let gone = r.out(&["sandbox", "kill", &id]).await;
    let line = gone.one_line_error();
    assert!(
        line.starts_with(&format!("e2bx: sandbox {id} not found")),
        "{line}"
    );
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_up_and_down_by_hash_then_ls_cat_stat() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("big.bin");
    let mut data = Vec::with_capacity(6 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < (6 << 20) + 123 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::File::create(&src)
        .and_then(|mut f| f.write_all(&data))
        .expect("write source");
    let src_s = src.to_str().expect("utf-8 path");

    r.out(&["--sandbox", &id, "cp", src_s, "sbx:data/"])
        .await
        .ok();
    let back = dir.path().join("back.bin");
    r.out(&[
        "--sandbox",
        &id,
        "cp",
        ":data/big.bin",
        back.to_str().expect("path"),
    ])
    .await
    .ok();
    assert_eq!(sha(&std::fs::read(&back).expect("downloaded")), sha(&data));
    // into an existing local directory, keeping the name
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    r.out(&[
        "--sandbox",
        &id,
        "cp",
        "sbx:/home/user/data/big.bin",
        sub.to_str().expect("path"),
    ])
    .await
    .ok();
    assert_eq!(
        sha(&std::fs::read(sub.join("big.bin")).expect("downloaded")),
        sha(&data)
    );

    let ls = r
        .out(&["--sandbox", &id, "--json", "ls", "data"])
        .await
        .json();
    let e = &ls.as_array().expect("array")[0];
    assert_eq!(e["name"], "big.bin");
    assert_eq!(e["type"], "file");
    assert_eq!(e["size"].as_i64(), i64::try_from(data.len()).ok());
    let text = r.out(&["--sandbox", &id, "ls"]).await.ok();
    assert!(
        text.lines()
            .any(|l| l.starts_with('d') && l.ends_with(" data/")),
        "{text}"
    );

    let st = r
        .out(&["--sandbox", &id, "--json", "stat", "sbx:data/big.bin"])
        .await
        .json();
    assert_eq!(st["path"], "/home/user/data/big.bin");
    assert_eq!(st["owner"], "user");
    let st = r.out(&["--sandbox", &id, "stat", "data"]).await.ok();
    assert!(st.contains("type: dir"), "{st}");

    let cat = r.out(&["--sandbox", &id, "cat", "data/big.bin"]).await;
    assert_eq!(cat.code, 0, "{}", cat.stderr);
    assert_eq!(sha(&cat.stdout), sha(&data));

    let missing = r.out(&["--sandbox", &id, "cat", "nope.txt"]).await;
    assert!(missing.one_line_error().contains("nope.txt: no such file"));
    let denied = r
        // cp writes as the sandbox user (fs-e2b), so a root-owned directory refuses it
        // (envd's own root upload would have written there).
        .out(&["--sandbox", &id, "cp", src_s, "sbx:/etc/big.bin"])
        .await;
    assert!(
        denied.one_line_error().contains("permission denied"),
        "{}",
        denied.stderr
    );
    let both_local = r.out(&["--sandbox", &id, "cp", "a", "b"]).await;
    assert!(both_local.one_line_error().contains("sbx:"));
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_without_secrets() {
    let r = Remote::start().await;
    let o = r.out(&["--sandbox", "i123", "run", "--", "true"]).await;
    let line = o.one_line_error();
    assert!(
        line.starts_with("e2bx: sandbox i123 not found (it may have timed out)"),
        "{line}"
    );
    assert!(!o.stderr.contains(r.emu.api_key()));
    let o = r
        .out(&["--template", "no-such-template", "run", "--", "true"])
        .await;
    assert!(
        o.one_line_error()
            .contains("template no-such-template not found")
    );
    let o = support::Out::of(
        r.cmd()
            .env("E2B_API_KEY", "e2b_wrong_key_value")
            .args(["sandbox", "list"]),
    )
    .await;
    assert!(o.one_line_error().contains("E2B_API_KEY"));
    assert!(!o.stderr.contains("e2b_wrong_key_value"));
    r.emu.shutdown().await;
}

/// The process `pid` (as the sandbox numbers it: sandboxes have PID namespaces of their
/// own) is gone or a zombie, read from the sandbox's own `/proc` through envd.
async fn dead(sb: &impl e2b_core::EnvdApi, pid: u32) -> bool {
    match sb
        .download_bytes(&format!("/proc/{pid}/stat"), Some("root"), 4096)
        .await
    {
        Err(_) => true,
        Ok(s) => String::from_utf8_lossy(&s)
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_kills_the_remote_process_group() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let mut child = r
        .cmd()
        .args([
            "--sandbox",
            &id,
            "run",
            "--",
            "sh",
            "-c",
            "sleep 100 & echo $! > /tmp/pids; echo $$ >> /tmp/pids; echo ready; sleep 100; wait",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next_line().await.expect("read").expect("a line");
    assert_eq!(first, "ready");
    let pid = child.id().expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let status = child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(130));

    let client = r.client();
    let sb = client
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    let pids: Vec<u32> = String::from_utf8(
        sb.download_bytes("/tmp/pids", None, 1024)
            .await
            .expect("pids"),
    )
    .expect("utf-8")
    .split_whitespace()
    .map(|p| p.parse().expect("pid"))
    .collect();
    assert_eq!(pids.len(), 2);
    // The kill is done before e2bx exits; allow the kernel a moment to tear down.
    let mut survivors = pids.clone();
    for _ in 0..200 {
        let mut left = Vec::new();
        for p in &survivors {
            if !dead(&sb, *p).await {
                left.push(*p);
            }
        }
        survivors = left;
        if survivors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        survivors.is_empty(),
        "processes {survivors:?} survived Ctrl-C"
    );
    let procs = sb.list_processes().await.expect("list");
    assert!(
        procs.iter().all(|p| !pids.contains(&p.pid)),
        "envd still lists {procs:?}"
    );
    // the sandbox itself is kept (it was named with --sandbox)
    let listed = client.list_all(ListQuery::new()).await.expect("list");
    assert!(listed.iter().any(|s| s.sandbox_id == id));
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_env_lines_usable_by_our_client_and_stops_on_sigterm() {
    let mut child = support::embedded()
        .args(["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut env = std::collections::BTreeMap::new();
    for _ in 0..3 {
        let line = lines.next_line().await.expect("read").expect("a line");
        let (k, v) = line.split_once('=').expect("K=V");
        env.insert(k.to_owned(), v.to_owned());
    }
    let keys: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(keys, ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"]);
    assert!(env["E2B_API_URL"].starts_with("http://127.0.0.1:"));

    let client = e2b_core::Client::new(
        e2b_core::Config::new()
            .with_api_key(env["E2B_API_KEY"].as_str())
            .with_api_url(env["E2B_API_URL"].as_str())
            .with_sandbox_url(env["E2B_SANDBOX_URL"].as_str()),
    )
    .expect("client");
    let sb = client
        .create(&e2b_core::CreateOptions::default())
        .await
        .expect("create on serve");
    let out = sb
        .run(e2b_core::StartProcess::new("echo").args(["served"]))
        .await
        .expect("run");
    assert_eq!(out.stdout, b"served\n");

    // e2bx itself works against it too, and a sandbox persists between commands
    let mut cmd = tokio::process::Command::new(bin());
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let o = support::Out::of(cmd.args(["--sandbox", sb.id(), "run", "--", "echo", "again"])).await;
    assert_eq!(o.ok(), "again\n");

    let pid = child.id().expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let status = child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(lines.next_line().await.expect("read").is_none());
}

/// One HTTP/1.1 GET to the emulator with `Host` taken from `url` (`*.localhost` names are
/// not resolved by every resolver; the emulator routes by the Host header).
async fn get_via_emulator(emu: &testing_fake::Emulator, url: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http URL");
    let mut s = tokio::net::TcpStream::connect(emu.addr())
        .await
        .expect("connect");
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_url_reaches_a_server_in_the_sandbox() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    // A port no socket uses now (sandboxes share the host's loopback here).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let sbx = r
        .client()
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    sbx.make_dir("/home/user/site", None).await.expect("mkdir");
    let server = sbx
        .start_process(e2b_core::StartProcess::shell(format!(
            "cd /home/user/site && echo previewed > index.html && exec python3 -m http.server {port} --bind 127.0.0.1"
        )))
        .await
        .expect("start http.server");

    let url = r
        .out(&["sandbox", "url", &id, &port.to_string()])
        .await
        .ok();
    let url = url.trim();
    let emu_port = r.emu.addr().port();
    assert_eq!(url, format!("http://{port}-{id}.localhost:{emu_port}"));
    let json = r
        .out(&["--json", "sandbox", "url", &id, &port.to_string()])
        .await
        .json();
    assert_eq!(json["url"], url);

    let mut answer = String::new();
    for _ in 0..100 {
        answer = get_via_emulator(&r.emu, url).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("previewed\n"), "{answer}");
    drop(server);
    r.emu.shutdown().await;
}
