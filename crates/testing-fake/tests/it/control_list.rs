//! `GET /v2/sandboxes` and the deprecated `GET /sandboxes`: filters (double-encoded
//! metadata, comma-form state, template), order, pagination across pages, validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeSet;

use e2b_proto::control::{ListedSandbox, SandboxState};
use reqwest::StatusCode;
use serde_json::json;
use support::Env;

fn items(a: &support::Answer) -> Vec<ListedSandbox> {
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    serde_json::from_value(a.json.clone()).unwrap()
}

#[tokio::test]
async fn pagination_with_metadata_and_state_filters() {
    let env = Env::start().await;
    let mut team = Vec::new();
    for i in 0..5 {
        let s = env
            .create(json!({"metadata": {"team": "a b&c=d", "n": i.to_string()}}))
            .await;
        team.push(s["sandboxID"].as_str().unwrap().to_owned());
    }
    let other = env.create(json!({"metadata": {"team": "other"}})).await;
    let other_id = other["sandboxID"].as_str().unwrap().to_owned();
    // pause two of the team
    for id in &team[..2] {
        let a = env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
        assert_eq!(a.status, StatusCode::NO_CONTENT);
    }
    // JS SDK encoding: pairs URL-encoded, joined, then the whole value encoded again.
    let inner = format!("{}={}", urlencode("team"), urlencode("a b&c=d"));
    let metadata = urlencode(&inner);

    // every state, 2 per page
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = format!("/v2/sandboxes?metadata={metadata}&state=running,paused&limit=2");
        if let Some(t) = &token {
            path.push_str(&format!("&nextToken={}", urlencode(t)));
        }
        let a = env.get(&path).await;
        let page = items(&a);
        assert!(page.len() <= 2);
        pages += 1;
        assert_eq!(
            a.headers.get("x-total-running").unwrap().to_str().unwrap(),
            "3"
        );
        seen.extend(page.iter().map(|s| s.sandbox_id.clone()));
        match a.headers.get("x-next-token") {
            Some(t) => token = Some(t.to_str().unwrap().to_owned()),
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 5);
    let uniq: BTreeSet<_> = seen.iter().collect();
    assert_eq!(uniq.len(), 5, "no duplicates across pages");
    assert!(!seen.contains(&other_id));
    // default order: newest first
    let mut newest_first = team.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    // asc order
    let a = env
        .get(&format!("/v2/sandboxes?metadata={metadata}&order=asc"))
        .await;
    let ids: Vec<String> = items(&a).into_iter().map(|s| s.sandbox_id).collect();
    assert_eq!(ids, team);
    assert!(a.headers.get("x-next-token").is_none());

    // state filter
    let a = env
        .get(&format!("/v2/sandboxes?metadata={metadata}&state=paused"))
        .await;
    let paused = items(&a);
    assert_eq!(paused.len(), 2);
    assert!(paused.iter().all(|s| s.state == SandboxState::Paused));
    assert!(a.headers.get("x-total-running").is_none());
    // exploded form works too
    let a = env.get("/v2/sandboxes?state=running&state=paused").await;
    assert_eq!(items(&a).len(), 6);

    // all: 6 sandboxes, 3 running team + other running = 4
    let a = env.get("/v2/sandboxes").await;
    assert_eq!(items(&a).len(), 6);
    assert_eq!(
        a.headers.get("x-total-running").unwrap().to_str().unwrap(),
        "4"
    );
    // template filter
    assert_eq!(
        items(&env.get("/v2/sandboxes?template=base").await).len(),
        6
    );
    assert_eq!(items(&env.get("/v2/sandboxes?template=zzz").await).len(), 0);
    env.get("/v2/sandboxes?template=base:latest")
        .await
        .assert_api_error(400);

    // deprecated list: running only, unpaginated
    let a = env.get(&format!("/sandboxes?metadata={metadata}")).await;
    let running = items(&a);
    assert_eq!(running.len(), 3);
    assert!(running.iter().all(|s| s.state == SandboxState::Running));
    env.emu.shutdown().await;
}

#[tokio::test]
async fn list_validation() {
    let env = Env::start().await;
    for q in [
        "limit=0",
        "limit=101",
        "limit=x",
        "order=sideways",
        "state=dead",
        "nextToken=%21%21not-a-token",
        "startedAfter=yesterday",
    ] {
        env.get(&format!("/v2/sandboxes?{q}"))
            .await
            .assert_api_error(400);
    }
    let a = env.get("/v2/sandboxes?limit=100&order=desc").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json, json!([]));
    assert!(a.headers.get("x-next-token").is_none());
    env.emu.shutdown().await;
}

fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
