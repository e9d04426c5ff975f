//! `e2bx mcp` driven by the official MCP clients (TypeScript and Python), each over stdio
//! and streamable HTTP, against the emulator and against `--local DIR`. Each run of
//! `tests/mcp/client.*` lists the tools, runs bash (exit code, stderr, env), writes, reads
//! and edits a file (0 and 2 matches refused), lists and searches, drives a terminal,
//! times a command out, cancels one and checks that its whole tree is gone, and opens a
//! second session that must not see the first one's sandbox files or terminals.
//! Here: the emulator's sandboxes are gone once the sessions end (HTTP: against an
//! emulator in this process, so its list can be read), the bytes are on disk for
//! `--local`, and a named conversation (`--provider local --conversation`) is found again
//! by a later session and a later server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2b_core::ListQuery;

use crate::mcp_support::{HttpServer, McpClient, Transport, arg, js, py, tempdir};
use crate::support::Remote;

fn remote_env(r: &Remote) -> Vec<(String, String)> {
    vec![
        ("E2B_API_URL".into(), r.emu.api_url()),
        ("E2B_SANDBOX_URL".into(), r.emu.sandbox_url()),
        ("E2B_API_KEY".into(), r.emu.api_key().to_owned()),
    ]
}

/// Waits until the emulator has no sandbox left (the server deleted each session's).
async fn all_sandboxes_deleted(r: &Remote) {
    let client = r.client();
    for _ in 0..100 {
        if client
            .list_all(ListQuery::new())
            .await
            .expect("list")
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "sandboxes left after the sessions ended: {:?}",
        client.list_all(ListQuery::new()).await
    );
}

/// stdio, embedded emulator (no E2B variables): the path a desktop agent takes.
async fn stdio_emulator(c: McpClient) {
    c.run("world", Transport::Stdio(&[]), &[]).await;
}

/// HTTP against an emulator of this process; each session's sandbox is deleted when the
/// client ends the session, and SIGTERM ends the server cleanly.
async fn http_emulator(c: McpClient) {
    let r = Remote::start().await;
    let env = remote_env(&r);
    let server = HttpServer::start(&[], &env).await;
    c.run("world", Transport::Http(&server.url), &env).await;
    all_sandboxes_deleted(&r).await;
    assert_eq!(server.stop().await, Some(128 + 15));
    r.emu.shutdown().await;
}

async fn local(c: McpClient, http: bool, sub: &str) {
    let dir = tempdir();
    let args = vec!["--local".to_owned(), arg(dir.path())];
    if http {
        let server = HttpServer::start(&args, &[]).await;
        c.run("world-local", Transport::Http(&server.url), &[])
            .await;
        server.stop().await;
    } else {
        c.run("world-local", Transport::Stdio(&args), &[]).await;
    }
    let written = std::fs::read_to_string(dir.path().join(sub).join("notes.txt")).unwrap();
    assert_eq!(written, "alpha\nbeta\ngamma\n");
}

/// A named conversation: written by one session, read by the next (and, on stdio, by a
/// new server process), in one sandbox of the local provider.
async fn conversation(c: McpClient, http: bool) {
    let state = tempdir();
    let args = vec![
        "--provider".to_owned(),
        "local".to_owned(),
        "--conversation".to_owned(),
        "chat-1".to_owned(),
        "--state-dir".to_owned(),
        arg(state.path()),
    ];
    if http {
        let server = HttpServer::start(&args, &[]).await;
        c.run("conv-write", Transport::Http(&server.url), &[]).await;
        c.run("conv-read", Transport::Http(&server.url), &[]).await;
        server.stop().await;
    } else {
        c.run("conv-write", Transport::Stdio(&args), &[]).await;
        c.run("conv-read", Transport::Stdio(&args), &[]).await;
    }
    let sandboxes = std::fs::read_dir(state.path().join("local-sandboxes"))
        .unwrap()
        .count();
    assert_eq!(sandboxes, 1, "one sandbox for the conversation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_stdio_emulator() {
    stdio_emulator(js().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_stdio_emulator() {
    stdio_emulator(py().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_http_emulator() {
    http_emulator(js().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_http_emulator() {
    http_emulator(py().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_stdio_local() {
    local(js().await, false, "js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_stdio_local() {
    local(py().await, false, "py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_http_local() {
    local(js().await, true, "js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_http_local() {
    local(py().await, true, "py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_conversation_reconnect_stdio() {
    conversation(js().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_conversation_reconnect_http() {
    conversation(js().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_conversation_reconnect_stdio() {
    conversation(py().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_conversation_reconnect_http() {
    conversation(py().await, true).await;
}

/// The E2B conversation provider (`sandbox-e2b`) on an emulator of this process, configured
/// by a file in the `sandbox@1` plugin's own keys: a file written by one server's session is
/// read by the next server's (the recorded sandbox is found again), and it stays one
/// sandbox, kept after the sessions end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn py_conversation_reconnect_e2b_provider() {
    let c = py().await;
    let r = Remote::start().await;
    let state = tempdir();
    let config = state.path().join("plugin.json");
    let plugin = serde_json::json!({
        "apiKey": r.emu.api_key(),
        "apiUrl": r.emu.api_url(),
        "template": "conversation",
        "timeoutSeconds": 600,
        "domainAllowlist": true,
        "allowOpenEgress": false,
    });
    std::fs::write(&config, plugin.to_string()).unwrap();
    let args = vec![
        "--provider".to_owned(),
        "e2b".to_owned(),
        "--conversation".to_owned(),
        "chat-e2b".to_owned(),
        "--config".to_owned(),
        arg(&config),
        "--state-dir".to_owned(),
        arg(state.path()),
        // Only envd's URL as a flag: the plugin has no key for it (E2B routes by domain),
        // and a stdio client passes the server a minimal environment.
        "--sandbox-url".to_owned(),
        r.emu.sandbox_url(),
    ];
    c.run("conv-write", Transport::Stdio(&args), &[]).await;
    c.run("conv-read", Transport::Stdio(&args), &[]).await;
    let listed = r.client().list_all(ListQuery::new()).await.expect("list");
    assert_eq!(
        listed.len(),
        1,
        "one conversation sandbox, kept: {listed:?}"
    );
    r.emu.shutdown().await;
}

/// Without `--conversation`, each session's conversation sandbox is its own and is
/// destroyed when the session ends (on HTTP: two sessions, two sandboxes, none left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_provider_sessions_get_their_own_sandbox_destroyed_at_the_end() {
    let c = js().await;
    let state = tempdir();
    let args = vec![
        "--provider".to_owned(),
        "local".to_owned(),
        "--state-dir".to_owned(),
        arg(state.path()),
    ];
    let server = HttpServer::start(&args, &[]).await;
    c.run("conv-write", Transport::Http(&server.url), &[]).await;
    // A second session does not find the first one's file.
    c.run("conv-missing", Transport::Http(&server.url), &[])
        .await;
    let sandboxes = state.path().join("local-sandboxes");
    for _ in 0..100 {
        if std::fs::read_dir(&sandboxes).unwrap().count() == 0 {
            server.stop().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "sandboxes left: {:?}",
        std::fs::read_dir(&sandboxes).unwrap().collect::<Vec<_>>()
    );
}
