//! `world-bench --trees --tiny`: the tree transfer figures (ours, tar + curl, both
//! official SDKs, both directions) and the watch latency run on a tiny tree, every
//! transfer checked by digest (world-bench fails a contender whose tree differs), and the
//! report's shape and targets are there. No time is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

#[test]
fn tiny_tree_run_moves_every_tree_and_reports_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trees.json");
    let out = Command::new(env!("CARGO_BIN_EXE_world-bench"))
        .args(["--trees", "--tiny", "--json"])
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
    let figures = report["figures"].as_array().expect("figures");
    let ids: Vec<&str> = figures.iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["tree_up", "tree_down", "op_watch"]);
    // The tiny tree: 30 files of 4 KiB and 2 of 64 KiB.
    let tree_bytes = 30 * 4096 + 2 * 65536;
    for f in figures {
        let id = f["id"].as_str().unwrap();
        let want: &[&str] = if id == "op_watch" {
            &["ours"]
        } else {
            &["tarcurl", "ours", "js", "py"]
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
            assert!(c["value"].as_f64().unwrap() > 0.0, "{who}: {c}");
            assert!(c["peak_rss_mib"].as_f64().unwrap() > 0.0, "{who}");
            let reqs = c["requests_per_op"].as_f64().unwrap();
            if id == "op_watch" {
                // 5 events, each with its own latency sample.
                assert_eq!(c["ops"], 5, "{who}");
            } else {
                assert_eq!(c["bytes"].as_u64().unwrap(), tree_bytes, "{who}");
                assert!(reqs >= 1.0, "{who}: {reqs} emulator requests");
            }
        }
    }
    let names: Vec<&str> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for want in [
        "tree_up: fs-e2b >= 0.8x tar + curl /files",
        "tree_down: fs-e2b >= 0.8x tar + curl /files",
        "tree_up: fs-e2b >= 5x JS SDK",
        "tree_down: fs-e2b >= 5x Python SDK",
        "tree_up: fs-e2b host RSS < 32 MiB",
        "tree_down: fs-e2b host RSS < 32 MiB",
        "op_watch: fs-e2b event p99 <= 50 ms",
    ] {
        assert!(names.contains(&want), "no target {want}: {names:?}");
    }
    assert!(stdout.contains("== targets"), "{stdout}");
}
