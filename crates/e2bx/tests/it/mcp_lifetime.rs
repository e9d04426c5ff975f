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
