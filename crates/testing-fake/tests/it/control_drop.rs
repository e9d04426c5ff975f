//! Stopping the emulator never leaves a sandbox's processes behind: neither `shutdown()`
//! nor dropping it without a shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Env;

/// Pids of live processes whose command line is exactly `sleep <arg>`.
fn sleepers(arg: &str) -> Vec<u32> {
    let want = format!("sleep\0{arg}\0");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline == want.as_bytes() && support::alive(pid) {
            out.push(pid);
        }
    }
    out
}

async fn wait_gone(arg: &str) {
    let start = Instant::now();
    while !sleepers(arg).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sleep {arg} still running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start_sleeper(env: &Env, arg: &str) {
    let sbx = env.create(json!({})).await;
    let (resp, _pid) = env.start_process(&sbx, &format!("exec sleep {arg}")).await;
    drop(resp);
    let start = Instant::now();
    while sleepers(arg).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sleep {arg} never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_and_drop_kill_every_process() {
    let arg_a = format!("{}1", std::process::id() % 100_000 + 700_000);
    let env = Env::start().await;
    start_sleeper(&env, &arg_a).await;
    env.emu.shutdown().await;
    wait_gone(&arg_a).await;

    let arg_b = format!("{}2", std::process::id() % 100_000 + 700_000);
    let env = Env::start().await;
    start_sleeper(&env, &arg_b).await;
    drop(env);
    wait_gone(&arg_b).await;
}

/// The same on a current-thread runtime, where `Drop` cannot lean on the caller's runtime.
#[tokio::test]
async fn drop_on_a_current_thread_runtime() {
    let arg = format!("{}3", std::process::id() % 100_000 + 700_000);
    let env = Env::start().await;
    start_sleeper(&env, &arg).await;
    let t = Instant::now();
    drop(env);
    assert!(t.elapsed() < Duration::from_secs(9), "drop did not hang");
    wait_gone(&arg).await;
}
