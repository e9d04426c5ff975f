//! The cost of MCP: a `bash` `true` round trip through `e2bx mcp` on stdio (rmcp's client,
//! a child process, JSON-RPC both ways) against the same call through agent-tools'
//! `BashTool` directly, both on one emulator (`e2bx serve`, its own process, so neither
//! contender shares a runtime with it), each in its own sandbox, calls interleaved so
//! drift hits both alike; p50 of many calls. Prints the figures and the difference;
//! asserts nothing about time (shared machines).
//!
//! `cargo test -p e2bx --test it mcp_bench -- --ignored --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use agent_tools::{BashRequest, BashTool};
use e2b_core::lifecycle::OwnerOptions;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use sandbox_e2b::E2bWorld;

use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::support::bin;

const WARMUP: usize = 20;
const CALLS: usize = 300;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn mcp_bench_bash_true_round_trip() {
    // The emulator in its own process; its three lines on stdout.
    let mut serve = tokio::process::Command::new(bin())
        .args(["serve", "--port", "0", "--quiet"])
        .env_remove("E2B_API_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("e2bx serve");
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    let mut env = Vec::new();
    while env.len() < 3 {
        let line = lines.next_line().await.unwrap().expect("three lines");
        let (k, v) = line.split_once('=').expect("K=V");
        env.push((k.to_owned(), v.to_owned()));
    }
    let var = |k: &str| env.iter().find(|(n, _)| n == k).unwrap().1.clone();
    let core = e2b_core::Client::new(
        e2b_core::Config::new()
            .with_api_key(var("E2B_API_KEY"))
            .with_api_url(var("E2B_API_URL"))
            .with_sandbox_url(var("E2B_SANDBOX_URL")),
    )
    .unwrap();

    let world = E2bWorld::create(&core, OwnerOptions::default())
        .await
        .expect("sandbox");
    let tool = BashTool::new(world.subprocess());

    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("mcp").env_remove("E2B_DOMAIN");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let client =
        ().serve(TokioChildProcess::new(cmd).expect("e2bx mcp starts"))
            .await
            .expect("MCP initialize");
    let args = serde_json::json!({ "command": "true" })
        .as_object()
        .cloned()
        .unwrap();

    let (mut direct, mut mcp) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let out = tool.run(BashRequest::new("true")).await.expect("bash");
        let d = t.elapsed();
        assert!(out.success());
        let t = Instant::now();
        let res = client
            .call_tool(CallToolRequestParams::new("bash").with_arguments(args.clone()))
            .await
            .expect("tools/call");
        let m = t.elapsed();
        assert_ne!(res.is_error, Some(true), "{res:?}");
        if i >= WARMUP {
            direct.push(d);
            mcp.push(m);
        }
    }
    client.cancel().await.expect("close");
    world.shutdown().await.expect("shutdown");

    let (d, m) = (p50(direct), p50(mcp));
    println!(
        "bash `true` p50 over {CALLS} calls: agent-tools direct {:.3} ms, via `e2bx mcp` stdio {:.3} ms, MCP adds {:+.3} ms ({:.2}x)",
        ms(d),
        ms(m),
        ms(m) - ms(d),
        m.as_secs_f64() / d.as_secs_f64()
    );
    let _ = serve.start_kill();
}
