//! Sandbox ports through the proxy, over raw HTTP: a port is reached only when a process of
//! that sandbox listens on it (a listener of the host, or of another sandbox, is not), two
//! sandboxes serve the same port each in its own network namespace, and
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

/// Poll `port` of sandbox `id` through the proxy until it answers 200 (10 s at most).
async fn wait_served(env: &Env, port: u16, id: &str, path: &str) -> (StatusCode, String) {
    let mut got = (StatusCode::BAD_GATEWAY, String::new());
    for _ in 0..100 {
        got = by_host(env, port, id, path).await;
        if got.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sandboxes_serve_the_same_port_and_the_proxy_reaches_each() {
    let env = Env::start().await;
    let a = env.create(json!({})).await;
    let b = env.create(json!({"allow_internet_access": false})).await;
    let port = 8000;
    let mut servers = Vec::new();
    for (sbx, name) in [(&a, "a"), (&b, "b")] {
        servers.push(
            env.start_process(
                sbx,
                &format!(
                    "cd /tmp && echo from-{name} > who.txt && exec python3 -m http.server {port} --bind 127.0.0.1"
                ),
            )
            .await,
        );
    }
    for (sbx, name) in [(&a, "a"), (&b, "b")] {
        let id = sbx["sandboxID"].as_str().unwrap();
        let got = wait_served(&env, port, id, "/who.txt").await;
        assert_eq!(got, (StatusCode::OK, format!("from-{name}\n")), "{name}");
    }
    // Inside A, its loopback port is its own server; the other sandbox's is not reachable
    // at all (it has no address A could reach), and nothing of theirs is on the host's.
    let (frames, _) = env
        .run_frames(
            &a,
            &format!("python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{port}/who.txt\").read().decode(), end=\"\")'"),
        )
        .await;
    assert_eq!(support::stdout_of(&frames), "from-a\n", "{frames:?}");
    let direct = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await;
    if let Ok(Ok(mut s)) = direct {
        // Some service of the host may hold the port: it is not a sandbox's server.
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let _ = s.write_all(b"GET /who.txt HTTP/1.0\r\n\r\n").await;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(
            !text.contains("from-"),
            "a sandbox's port on the host: {text}"
        );
    }
    drop(servers);
    env.emu.shutdown().await;
}
