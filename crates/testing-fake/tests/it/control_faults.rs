//! envd routing answers of the proxy, every fault kind, counters, and the `/_emulator`
//! HTTP endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;
use support::{Env, read_frames};
use testing_fake::{FaultAction, FaultRule, Plane};

#[tokio::test]
async fn proxy_answers() {
    let env = Env::start().await;
    let url = format!("{}/health", env.emu.sandbox_url());
    // one routing header without the other
    for (h, v) in [("E2b-Sandbox-Id", "iabc"), ("E2b-Sandbox-Port", "49983")] {
        let r = env.http.get(&url).header(h, v).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.text().await.unwrap(), "missing header\n");
    }
    let r = env
        .http
        .get(&url)
        .header("E2b-Sandbox-Id", "iabc")
        .header("E2b-Sandbox-Port", "http")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // unknown sandbox
    let r = env
        .http
        .get(&url)
        .header("E2b-Sandbox-Id", "iunknown")
        .header("E2b-Sandbox-Port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"sandboxId":"iunknown","message":"The sandbox was not found","code":502})
    );
    // another port of a running sandbox
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    let r = env
        .http
        .get(&url)
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", "8080")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["port"], 8080);
    // paused, no auto-resume → the proxy cannot route: 502, as for a missing sandbox
    env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    let r = env.envd(Method::GET, "/health", &sbx).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"sandboxId": id, "message":"The sandbox was not found","code":502})
    );
    // killed → 502
    env.delete(&format!("/sandboxes/{id}")).await;
    let r = env.envd(Method::GET, "/health", &sbx).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);

    // auto-resume: traffic resumes a paused sandbox
    let sbx = env
        .create(json!({"autoPause": true, "autoResume": {"enabled": true}}))
        .await;
    let id = sbx["sandboxID"].as_str().unwrap();
    env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    assert_eq!(env.state(id).await.as_deref(), Some("paused"));
    let r = env.envd(Method::GET, "/health", &sbx).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(env.state(id).await.as_deref(), Some("running"));
    env.emu.shutdown().await;
}

#[tokio::test]
async fn status_delay_and_reset_faults() {
    let env = Env::start().await;
    // status, once, control plane only
    env.emu.faults().add(
        FaultRule::new(FaultAction::json(
            503,
            json!({"code": 503, "message": "no capacity"}),
        ))
        .surface(Plane::Control)
        .method("POST")
        .path_prefix("/v2/sandboxes")
        .times(1),
    );
    let a = env
        .post("/v2/sandboxes", json!({"templateID": "base"}))
        .await;
    a.assert_api_error(503);
    assert_eq!(a.json["message"], "no capacity");
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    assert!(env.emu.faults().rules().is_empty(), "times(1) rule retired");

    // delay, then proceed
    let fid = env.emu.faults().add(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(300)))
            .path_prefix("/sandboxes/")
            .sandbox(id),
    );
    let t = Instant::now();
    let a = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(env.emu.faults().remove(fid));

    // reset: the connection drops without a response
    env.emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .method("GET")
            .path_prefix("/v2/sandboxes")
            .times(2),
    );
    let err = env
        .http
        .get(format!("{}/v2/sandboxes", env.emu.api_url()))
        .header("X-API-KEY", env.emu.api_key())
        .send()
        .await;
    assert!(err.is_err(), "reset must not produce a response");
    // a fresh client (no pooled connection) sees the same
    let fresh = reqwest::Client::new();
    let err = fresh
        .get(format!("{}/v2/sandboxes", env.emu.api_url()))
        .header("X-API-KEY", env.emu.api_key())
        .send()
        .await;
    assert!(err.is_err());
    let a = env.get("/v2/sandboxes").await;
    assert_eq!(a.status, StatusCode::OK, "rule fired twice, then retired");

    // envd-surface status fault by sandbox id
    env.emu.faults().add(
        FaultRule::new(FaultAction::Status {
            status: 502,
            body: "bad gateway".into(),
            content_type: "text/plain".into(),
        })
        .surface(Plane::Envd)
        .sandbox(id)
        .times(1),
    );
    let r = env.envd(Method::GET, "/health", &sbx).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(r.text().await.unwrap(), "bad gateway");
    env.emu.faults().clear();
    env.emu.shutdown().await;
}

#[tokio::test]
async fn cut_stream_and_drop_token_faults() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    // a healthy run ends with an end-of-stream frame
    let (frames, ended) = env.run_frames(&sbx, "echo one; sleep 0.2; echo two").await;
    assert!(ended, "normal stream has its end frame: {frames:?}");
    assert!(frames.len() >= 3);

    env.emu.faults().add(
        FaultRule::new(FaultAction::CutStream { after_frames: 2 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let (frames, ended) = env.run_frames(&sbx, "echo one; sleep 0.2; echo two").await;
    assert!(!ended, "cut stream has no end-of-stream frame");
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(frames[0]["event"]["start"].is_object());

    // the token is dropped before envd: envd answers 401
    env.emu.faults().add(
        FaultRule::new(FaultAction::DropAccessToken)
            .surface(Plane::Envd)
            .path_prefix("/process.Process/")
            .times(1),
    );
    let r = env
        .envd(Method::POST, "/process.Process/List", &sbx)
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = env
        .envd(Method::POST, "/process.Process/List", &sbx)
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let _ = read_frames;
    env.emu.shutdown().await;
}

#[tokio::test]
async fn counters_count_every_request() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    env.get(&format!("/sandboxes/{id}")).await;
    env.get("/v2/sandboxes").await;
    env.send(Method::GET, "/v2/sandboxes", None, None).await; // 401 is counted too
    env.envd(Method::GET, "/health", &sbx).send().await.unwrap();
    let c = env.emu.counters();
    assert_eq!(c.get("POST /v2/sandboxes"), 1);
    assert_eq!(c.get("GET /sandboxes/{sandboxID}"), 1);
    assert_eq!(c.get("GET /v2/sandboxes"), 2);
    assert_eq!(c.get_on(Plane::Envd, "GET /health"), 1);
    assert_eq!(c.plane_total(Plane::Control), 4);
    assert_eq!(c.plane_total(Plane::Envd), 1);
    assert_eq!(c.total(), 5);
    let snap = c.snapshot();
    assert_eq!(snap.envd["GET /health"], 1);
    c.reset();
    assert_eq!(c.total(), 0);

    // over HTTP, with the API key; admin calls are not counted
    let admin = format!("{}/_emulator/counters", env.emu.api_url());
    let r = env.http.get(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    env.get("/v2/sandboxes").await;
    let r = env
        .http
        .get(&admin)
        .header("X-API-KEY", env.emu.api_key())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["total"], 1);
    assert_eq!(v["control"]["GET /v2/sandboxes"], 1);
    let r = env
        .http
        .delete(&admin)
        .header("X-API-KEY", env.emu.api_key())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(env.emu.counters().total(), 0);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn faults_over_http() {
    let env = Env::start().await;
    let url = format!("{}/_emulator/faults", env.emu.api_url());
    let key = env.emu.api_key().to_owned();
    let rule = json!({"surface": "control", "method": "GET", "pathPrefix": "/v2/sandboxes",
        "times": 1, "action": {"kind": "status", "status": 429,
        "body": "{\"code\":429,\"message\":\"Rate limit exceeded\"}"}});
    let r = env.http.post(&url).json(&rule).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = env
        .http
        .post(&url)
        .header("X-API-KEY", &key)
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"].clone();
    assert!(id.is_u64());
    let r = env
        .http
        .get(&url)
        .header("X-API-KEY", &key)
        .send()
        .await
        .unwrap();
    let listed: serde_json::Value = r.json().await.unwrap();
    assert_eq!(listed[0]["rule"]["action"]["kind"], "status");
    env.get("/v2/sandboxes").await.assert_api_error(429);
    assert_eq!(env.get("/v2/sandboxes").await.status, StatusCode::OK);
    // delay forever, then clear
    let r = env
        .http
        .post(&url)
        .header("X-API-KEY", &key)
        .json(&json!({"action": {"kind": "delay", "ms": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(env.emu.faults().rules().len(), 1);
    let r = env
        .http
        .delete(&url)
        .header("X-API-KEY", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(env.emu.faults().rules().is_empty());
    // bad rule → 400
    let r = env
        .http
        .post(&url)
        .header("X-API-KEY", &key)
        .json(&json!({"action": {"kind": "explode"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    env.emu.shutdown().await;
}
