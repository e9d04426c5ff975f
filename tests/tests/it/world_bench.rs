//! `world-bench` in its tiny configuration: every contender (the official SDKs included)
//! runs every figure against one emulator, and the JSON report has the shape comparisons
//! across commits rely on, with no failed contender and no failed operation. Times are
//! never asserted; the emulator's request counters are (what reached envd is real work).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

const EXEC: &[&str] = &[
    "tokio", "local", "raw", "rawsh", "ours", "sandbox", "js", "py",
];
const FILES: &[&str] = &["curl", "raw", "ours", "sandbox", "js", "py"];
const FLOOD: &[&str] = &["tokio", "local", "raw", "ours", "js", "py"];
/// Contenders that run on this machine, without the emulator.
const HOST_ONLY: &[&str] = &["tokio", "local"];

#[test]
fn tiny_run_reports_every_contender_on_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_world-bench"))
        .arg("--tiny")
        .arg("--json")
        .arg(&json)
        .output()
        .expect("world-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "world-bench failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "world-bench/1");
    let figures = report["figures"].as_array().expect("figures");
    let ids: Vec<&str> = figures.iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "exec_seq",
            "exec_c4",
            "exec_c8",
            "files_small",
            "files_large",
            "flood"
        ]
    );
    for f in figures {
        let id = f["id"].as_str().unwrap();
        let want = match id {
            i if i.starts_with("exec") => EXEC,
            i if i.starts_with("files") => FILES,
            _ => FLOOD,
        };
        let contenders = f["contenders"].as_array().unwrap();
        let got: Vec<&str> = contenders
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(got, want, "{id}");
        for c in contenders {
            let who = format!("{id}/{}", c["id"]);
            assert!(c["error"].is_null(), "{who} failed: {}", c["error"]);
            assert_eq!(c["errors"], 0, "{who}");
            assert!(c["ops"].as_u64().unwrap() > 0, "{who}");
            assert!(c["value"].as_f64().unwrap() > 0.0, "{who}: {c}");
            assert!(c["peak_rss_mib"].as_f64().unwrap() > 0.0, "{who}");
            let reqs = c["requests_per_op"].as_f64().unwrap();
            if HOST_ONLY.contains(&c["id"].as_str().unwrap()) {
                assert_eq!(reqs, 0.0, "{who} never talks to the emulator");
            } else {
                assert!(reqs >= 1.0, "{who}: {reqs} emulator requests per op");
                let by_route = c["requests_per_op_by_route"].as_object().unwrap();
                assert!(
                    by_route.keys().all(|k| k.starts_with("envd ")),
                    "{who}: only envd requests in the timed part: {by_route:?}"
                );
            }
            if id.starts_with("files") || id == "flood" {
                assert!(c["bytes"].as_u64().unwrap() > 0, "{who}");
            }
        }
    }
    let targets = report["targets"].as_array().unwrap();
    assert!(targets.len() >= 10, "{targets:?}");
    assert!(targets.iter().all(|t| t["name"].is_string()));
    assert!(stdout.contains("== targets"), "{stdout}");
}
