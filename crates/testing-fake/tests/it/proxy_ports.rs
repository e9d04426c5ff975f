//! Sandbox ports through the proxy, over raw HTTP: a port is reached only when a process of
//! that sandbox listens on it (a listener of the host, or of another sandbox, is not), and
//! `Host: 49983-<id>.<domain>` reaches envd itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Env;

/// A GET to the emulator with `Host: <port>-<id>.e2b.test`.
async fn by_host(env: &Env, port: u16, id: &str, path: &str) -> (StatusCode, String) {
    let r = env
        .http
        .get(format!("{}{path}", env.emu.sandbox_url()))
        .header("Host", format!("{port}-{id}.e2b.test"))
        .send()
        .await
        .expect("the emulator answers");
    let status = r.status();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_sandboxs_own_listeners_are_reachable() {
    let env = Env::start().await;
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let a_id = a["sandboxID"].as_str().unwrap();
    let b_id = b["sandboxID"].as_str().unwrap();

    // A listener of the host (this test process): never reachable through a sandbox.
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host_port = host.local_addr().unwrap().port();
    let (status, body) = by_host(&env, host_port, a_id, "/").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!({"sandboxId": a_id, "message": "The sandbox is running but port is not open", "port": host_port, "code": 502})
    );

    // A server in sandbox A: reachable as A's port, not as B's.
    // A port no socket uses now (sandboxes share the host's loopback here).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let (_server, _pid) = env
        .start_process(
            &a,
            &format!("cd /tmp && echo from-a > a.txt && exec python3 -m http.server {port} --bind 127.0.0.1"),
        )
        .await;
    let mut got = (StatusCode::BAD_GATEWAY, String::new());
    for _ in 0..100 {
        got = by_host(&env, port, a_id, "/a.txt").await;
        if got.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got, (StatusCode::OK, "from-a\n".to_owned()));
    let (status, _) = by_host(&env, port, b_id, "/a.txt").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "B does not see A's server");

    // envd's own port by Host: /health without any routing header.
    let (status, _) = by_host(&env, 49983, a_id, "/health").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Killed: the proxy's 502 for a missing sandbox.
    env.delete(&format!("/sandboxes/{a_id}")).await;
    let (status, body) = by_host(&env, port, a_id, "/a.txt").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(body.contains("The sandbox was not found"), "{body}");
    drop(host);
    env.emu.shutdown().await;
}
