//! Control-plane conformance against the emulator, with
//! raw HTTP and the shared proto types.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use e2b_proto::control::{ListedSandbox, Sandbox, SandboxDetail, SandboxState};
use reqwest::{Method, StatusCode};
use serde_json::json;
use support::Env;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

fn is_semver(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok())
}

#[tokio::test]
async fn api_key_is_required_and_errors_are_json() {
    let env = Env::start().await;
    assert!(env.emu.api_key().starts_with("e2b_"));
    assert_eq!(env.emu.api_key().len(), 44);
    let a = env.send(Method::GET, "/v2/sandboxes", None, None).await;
    a.assert_api_error(401);
    let a = env
        .send(
            Method::POST,
            "/v2/sandboxes",
            Some("e2b_00"),
            Some(json!({"templateID":"base"})),
        )
        .await;
    a.assert_api_error(401);
    assert_eq!(
        a.json["message"],
        "Invalid API key, please visit https://e2b.dev/docs/api-key for more information."
    );
    // health needs no key
    let a = env.send(Method::GET, "/health", None, None).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.text, "Health check successful");
    // unknown route: still JSON with code == status
    env.get("/nope").await.assert_api_error(404);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn create_v1_and_v2() {
    let env = Env::start().await;
    let a = env
        .post(
            "/sandboxes",
            json!({"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let s: Sandbox = serde_json::from_value(a.json.clone()).unwrap();
    assert_eq!(s.sandbox_id.len(), 21);
    assert!(s.sandbox_id.starts_with('i'));
    assert!(
        s.sandbox_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
    assert_eq!(s.client_id, "6532622b");
    assert_eq!(s.envd_version, "0.6.13");
    assert!(is_semver(&s.envd_version));
    assert!(!s.template_id.is_empty());
    assert_eq!(s.alias.as_deref(), Some("base"));
    let token = s.envd_access_token.clone().expect("secure → token");
    assert_eq!(token.len(), 64);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );

    // v2: always secured, default timeout 300
    let a = env
        .post("/v2/sandboxes", json!({"templateID":"base"}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert!(a.json["envdAccessToken"].is_string());
    let id = a.json["sandboxID"].as_str().unwrap();
    let d: SandboxDetail =
        serde_json::from_value(env.get(&format!("/sandboxes/{id}")).await.json).unwrap();
    let end = OffsetDateTime::parse(&d.listed.end_at, &Rfc3339).unwrap();
    let left = end - OffsetDateTime::now_utc();
    assert!(left > time::Duration::seconds(250) && left <= time::Duration::seconds(300));

    // a retry with the same Idempotency-Key gets the same sandbox
    let create_keyed = || {
        env.http
            .post(format!("{}/v2/sandboxes", env.emu.api_url()))
            .header("X-API-KEY", env.emu.api_key())
            .header("Idempotency-Key", "retry-1")
            .json(&json!({"templateID":"base"}))
            .send()
    };
    let first: Sandbox = create_keyed().await.unwrap().json().await.unwrap();
    let again = create_keyed().await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    let again: Sandbox = again.json().await.unwrap();
    assert_eq!(first.sandbox_id, again.sandbox_id);

    // v1 without secure: false → no token
    let a = env
        .post("/sandboxes", json!({"templateID":"base","secure":false}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert!(a.json.get("envdAccessToken").is_none());

    // the conversation template by alias
    let a = env
        .post("/v2/sandboxes", json!({"templateID":"conversation"}))
        .await;
    if a.status != StatusCode::NOT_FOUND {
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    env.emu.shutdown().await;
}

#[tokio::test]
async fn create_validation() {
    let env = Env::start().await;
    for path in ["/sandboxes", "/v2/sandboxes"] {
        env.post(path, json!({"templateID":"base","timeout":0}))
            .await
            .assert_api_error(400);
        env.post(path, json!({"templateID":"base","timeout":-5}))
            .await
            .assert_api_error(400);
        let a = env
            .post(path, json!({"templateID":"base","timeout":24 * 3600 + 1}))
            .await;
        a.assert_api_error(400);
        assert_eq!(a.json["message"], "Timeout cannot be greater than 24 hours");
        env.post(path, json!({"timeout":10}))
            .await
            .assert_api_error(400);
        env.post(path, json!({"templateID":"no-such-template"}))
            .await
            .assert_api_error(404);
        env.post(path, json!({"templateID":"base","autoPauseMemory":false}))
            .await
            .assert_api_error(400);
        env.post(
            path,
            json!({"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}),
        )
        .await
        .assert_api_error(400);
        let a = env.api(Method::POST, path, None).await;
        a.assert_api_error(400);
    }
    // malformed JSON
    let a = env
        .http
        .post(format!("{}/v2/sandboxes", env.emu.api_url()))
        .header("X-API-KEY", env.emu.api_key())
        .header("Content-Type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), StatusCode::BAD_REQUEST);
    let v: serde_json::Value = a.json().await.unwrap();
    assert_eq!(v["code"], 400);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn info_kill_and_ids() {
    let env = Env::start().await;
    let sbx = env
        .create(json!({"metadata": {"user": "abc"}, "autoPause": true}))
        .await;
    let id = sbx["sandboxID"].as_str().unwrap();

    let a = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(a.status, StatusCode::OK);
    let d: SandboxDetail = serde_json::from_value(a.json.clone()).unwrap();
    assert_eq!(d.listed.sandbox_id, id);
    assert_eq!(d.listed.state, SandboxState::Running);
    assert_eq!(d.listed.metadata.as_ref().unwrap()["user"], "abc");
    assert!(d.listed.cpu_count >= 1 && d.listed.memory_mb >= 128);
    assert_eq!(d.lifecycle.as_ref().unwrap().on_timeout, "pause");
    assert_eq!(
        d.envd_access_token,
        sbx["envdAccessToken"].as_str().map(str::to_owned)
    );
    // network update replaces the egress settings and shows in the detail
    let a = env
        .api(
            Method::PUT,
            &format!("/sandboxes/{id}/network"),
            Some(json!({"allowOut": ["example.com"], "egressProxy": {"address": "p:1", "password": "pw-secret"}, "allow_internet_access": false})),
        )
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text);
    let a = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(a.json["network"]["allowOut"], json!(["example.com"]));
    assert_eq!(a.json["allowInternetAccess"], json!(false));
    assert!(
        !a.text.contains("pw-secret"),
        "proxy password is never returned"
    );
    // legacy `<id>-<clientID>` form is accepted
    let a = env.get(&format!("/sandboxes/{id}-6532622b")).await;
    assert_eq!(a.status, StatusCode::OK);
    // bad ids
    let a = env.get("/sandboxes/BAD_ID").await;
    a.assert_api_error(400);
    assert_eq!(a.json["message"], "Invalid sandbox ID");
    env.get("/sandboxes/a-b-c").await.assert_api_error(400);
    env.get("/sandboxes/iunknown00000000000000")
        .await
        .assert_api_error(404);

    // kill: 204 once, then 404
    let a = env.delete(&format!("/sandboxes/{id}")).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    env.delete(&format!("/sandboxes/{id}"))
        .await
        .assert_api_error(404);
    env.get(&format!("/sandboxes/{id}"))
        .await
        .assert_api_error(404);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn timeout_and_refreshes() {
    let env = Env::start().await;
    let sbx = env.create(json!({"timeout": 600})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    let end_at = |a: &support::Answer| {
        OffsetDateTime::parse(a.json["endAt"].as_str().unwrap(), &Rfc3339).unwrap()
    };
    // shorten to 100 s
    let a = env
        .post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 100}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text);
    let left = end_at(&env.get(&format!("/sandboxes/{id}")).await) - OffsetDateTime::now_utc();
    assert!(left <= time::Duration::seconds(100) && left > time::Duration::seconds(90));
    // refresh below 15 s becomes 15 s and never shortens
    let a = env
        .post(
            &format!("/sandboxes/{id}/refreshes"),
            json!({"duration": 1}),
        )
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let left = end_at(&env.get(&format!("/sandboxes/{id}")).await) - OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::seconds(90),
        "refresh shortened: {left}"
    );
    env.post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 5}))
        .await;
    let a = env
        .post(&format!("/sandboxes/{id}/refreshes"), json!({}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let left = end_at(&env.get(&format!("/sandboxes/{id}")).await) - OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::seconds(10),
        "refresh to 15 s: {left}"
    );
    env.post(
        &format!("/sandboxes/{id}/refreshes"),
        json!({"duration": 4000}),
    )
    .await
    .assert_api_error(400);
    // timeout body is required; unknown sandbox → 404
    env.api(Method::POST, &format!("/sandboxes/{id}/timeout"), None)
        .await
        .assert_api_error(400);
    env.post("/sandboxes/iunknown/timeout", json!({"timeout": 5}))
        .await
        .assert_api_error(404);
    // paused → 404 for timeout
    env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    env.post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 50}))
        .await
        .assert_api_error(404);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn pause_connect_resume() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();

    // connect on running → 200 with the same sandbox
    for path in ["/sandboxes/{id}/connect", "/v2/sandboxes/{id}/connect"] {
        let a = env
            .post(&path.replace("{id}", id), json!({"timeout": 60}))
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        let s: Sandbox = serde_json::from_value(a.json).unwrap();
        assert_eq!(s.sandbox_id, id);
        assert_eq!(
            s.envd_access_token.as_deref(),
            sbx["envdAccessToken"].as_str()
        );
    }
    // v1 connect requires timeout; v2 defaults it
    env.post(&format!("/sandboxes/{id}/connect"), json!({}))
        .await
        .assert_api_error(400);
    let a = env
        .post(&format!("/v2/sandboxes/{id}/connect"), json!({}))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    // deprecated resume on running → 409
    env.post(&format!("/sandboxes/{id}/resume"), json!({}))
        .await
        .assert_api_error(409);

    // pause 204, then 409 with the exact message
    let a = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"memory": true}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text);
    let a = env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    a.assert_api_error(409);
    assert_eq!(
        a.json["message"],
        format!("Error pausing sandbox - sandbox '{id}' is already paused")
    );
    assert_eq!(env.state(id).await.as_deref(), Some("paused"));
    let a = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(a.json["pauseMode"], "full");
    // paused sandboxes are listed as paused, with endAt = pause time
    let a = env.get("/v2/sandboxes?state=paused").await;
    let items: Vec<ListedSandbox> = serde_json::from_value(a.json).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].state, SandboxState::Paused);

    // connect on paused → 201, running again
    let a = env
        .post(
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(env.state(id).await.as_deref(), Some("running"));

    // deprecated resume on paused → 201
    env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    let a = env
        .post(&format!("/sandboxes/{id}/resume"), json!({"timeout": 30}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);

    // unknown → 404 everywhere
    for path in [
        "/sandboxes/iunknown/connect",
        "/v2/sandboxes/iunknown/connect",
        "/sandboxes/iunknown/pause",
        "/sandboxes/iunknown/resume",
    ] {
        env.post(path, json!({"timeout": 10}))
            .await
            .assert_api_error(404);
    }
    // over the plan max → 400
    env.post(
        &format!("/v2/sandboxes/{id}/connect"),
        json!({"timeout": 100_000}),
    )
    .await
    .assert_api_error(400);
    env.emu.shutdown().await;
}

#[tokio::test]
async fn metrics_and_health() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    let a = env.get(&format!("/sandboxes/{id}/metrics")).await;
    assert_eq!(a.status, StatusCode::OK);
    let m = &a.json[0];
    assert!(m["cpuCount"].as_u64().unwrap() >= 1);
    assert!(m["memTotal"].as_u64().unwrap() > 0);
    assert!(m["timestampUnix"].is_i64());
    let a = env
        .get(&format!("/sandboxes/metrics?sandbox_ids={id},iother"))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.json["sandboxes"][id].is_object());
    let a = env.get(&format!("/v2/sandboxes/{id}/logs")).await;
    assert_eq!(a.json, json!({"logs": []}));
    env.get("/sandboxes/iunknown/logs")
        .await
        .assert_api_error(404);

    // envd /health is routed by E2b-Sandbox-Id: 204, empty, no token needed
    let r = env
        .http
        .get(format!("{}/health", env.emu.sandbox_url()))
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(r.text().await.unwrap().is_empty());
    let _ = Duration::ZERO;
    env.emu.shutdown().await;
}
