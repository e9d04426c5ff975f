//! What `e2bx mcp` leaves behind when a client goes away in the middle of a command: on
//! stdio the client closes the pipe (or dies) while `bash` runs; the server must kill that
//! command's whole tree, then exit. Driven by rmcp's client over a child process
//! (`--local DIR`, so the command's pid is this machine's and can be checked here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use crate::mcp_support::{arg, tempdir};
use crate::support::bin;

/// True while `pid` exists and is not a zombie.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_ends_its_command_tree() {
    let dir = tempdir();
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(["mcp", "--local", &arg(dir.path())]);
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("e2bx mcp starts");
    let server_pid = transport.id().expect("pid");
    let client = ().serve(transport).await.expect("MCP initialize");
    let args = serde_json::json!({
        "command": "sleep 3023 & echo $! > tree.pid; wait",
        "timeout": 600
    });
    let call = {
        let peer = client.peer().clone();
        let args = args.as_object().cloned().unwrap();
        tokio::spawn(async move {
            peer.call_tool(CallToolRequestParams::new("bash").with_arguments(args))
                .await
        })
    };
    let pidfile = dir.path().join("tree.pid");
    let mut pid = None;
    for _ in 0..300 {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            pid = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the command started");
    assert!(running(pid));

    // The client goes away: its end of the pipes closes.
    call.abort();
    drop(client);
    for _ in 0..200 {
        if !running(pid) && !running(server_pid as i32) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "after the client left: command {pid} running {}, server {server_pid} running {}",
        running(pid),
        running(server_pid as i32)
    );
}

/// The HTTP server refuses browsers (any `Origin`) and non-loopback `Host`s, and refuses
/// to listen on a non-loopback address at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_refuses_browsers_foreign_hosts_and_public_addresses() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let dir = tempdir();
    let server =
        crate::mcp_support::HttpServer::start(&["--local".to_owned(), arg(dir.path())], &[]).await;
    let addr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let status = |host: &str, origin: Option<&str>| {
        let (addr, host) = (addr.clone(), host.to_owned());
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let req = format!(
                "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.expect("send");
            let mut head = vec![0u8; 12];
            s.read_exact(&mut head).await.expect("status line");
            String::from_utf8_lossy(&head[9..12]).into_owned()
        }
    };
    assert_eq!(status(&addr, None).await, "200", "a plain client is served");
    assert_eq!(status(&addr, Some("https://evil.example")).await, "403");
    assert_eq!(status("evil.example", None).await, "403");
    server.stop().await;

    let out = tokio::process::Command::new(bin())
        .args(["mcp", "--http", "0.0.0.0:0", "--local", &arg(dir.path())])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only loopback addresses"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
