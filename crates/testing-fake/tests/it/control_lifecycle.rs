//! Lifecycle with real processes: timeout expiry (kill and auto-pause), pause with memory
//! (processes frozen, then thawed by connect) and cold boot (`memory: false`: every process
//! ends, files stay).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use support::Env;

/// A background loop that rewrites a file every 100 ms; its content tells whether the
/// sandbox's processes run, are frozen, or are gone. It writes by rename, so a download never
/// races a truncation (a short body under a longer `Content-Length` aborts the response).
const TICKER: &str = "nohup bash -c 'while true; do date +%s%N > /home/user/tick.tmp; mv /home/user/tick.tmp /home/user/tick; sleep 0.1; done' >/dev/null 2>&1 &";

async fn tick(env: &Env, sbx: &serde_json::Value) -> String {
    let (status, body) = env.read_file(sbx, "/home/user/tick").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn ticking(env: &Env, sbx: &serde_json::Value) -> bool {
    let a = tick(env, sbx).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    a != tick(env, sbx).await
}

#[tokio::test]
async fn timeout_expiry_kills_or_pauses() {
    let env = Env::start().await;
    let kill = env.create(json!({"timeout": 1})).await;
    let pause = env.create(json!({"timeout": 1, "autoPause": true})).await;
    let pause_fs = env
        .create(json!({"timeout": 1, "autoPause": true, "autoPauseMemory": false}))
        .await;
    let id = |s: &serde_json::Value| s["sandboxID"].as_str().unwrap().to_owned();
    let limit = Duration::from_secs(15);
    env.wait_state(&id(&kill), None, limit).await;
    env.wait_state(&id(&pause), Some("paused"), limit).await;
    env.wait_state(&id(&pause_fs), Some("paused"), limit).await;
    // the killed one is gone for envd too
    let r = env
        .envd(reqwest::Method::GET, "/health", &kill)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    // paused sandboxes stay paused (no expiry while paused) and can be connected
    let a = env
        .post(
            &format!("/v2/sandboxes/{}/connect", id(&pause)),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    // setTimeout extends a running sandbox past its old end
    let s = env.create(json!({"timeout": 1})).await;
    env.post(
        &format!("/sandboxes/{}/timeout", id(&s)),
        json!({"timeout": 60}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(env.state(&id(&s)).await.as_deref(), Some("running"));
    env.emu.shutdown().await;
}

#[tokio::test]
async fn pause_with_memory_freezes_and_connect_thaws() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    let (frames, ended) = env.run_frames(&sbx, TICKER).await;
    assert!(ended, "{frames:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ticking(&env, &sbx).await, "ticker runs");

    let a = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"memory": true}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = env
        .post(
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert!(
        ticking(&env, &sbx).await,
        "the same process runs again after a memory resume"
    );
    env.emu.shutdown().await;
}

#[tokio::test]
async fn cold_boot_ends_processes_and_keeps_files() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    assert_eq!(
        env.write_file(&sbx, "/home/user/keep.txt", "kept across cold boot")
            .await,
        StatusCode::OK
    );
    let (frames, ended) = env.run_frames(&sbx, TICKER).await;
    assert!(ended, "{frames:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ticking(&env, &sbx).await);

    let a = env.pause_and_resume_cold(id).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert!(!ticking(&env, &sbx).await, "cold boot ended the ticker");
    let (status, body) = env.read_file(&sbx, "/home/user/keep.txt").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "kept across cold boot");
    // the token still works after the cold boot, and new processes run
    let (frames, ended) = env.run_frames(&sbx, "echo again").await;
    assert!(ended, "{frames:?}");

    // pause without memory, then a plain connect: also a cold boot
    let (_, ended) = env.run_frames(&sbx, TICKER).await;
    assert!(ended);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"memory": false}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 60}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert!(
        !ticking(&env, &sbx).await,
        "files-only pause ends processes"
    );
    env.emu.shutdown().await;
}
