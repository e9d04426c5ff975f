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
/// The durable figures: subprocess-e2b's exec / fs-e2b's read beside the durable ones.
const DURABLE: &[&str] = &["ours", "durable"];
/// `exec_bg`: ours against the SDKs' background run + connect.
const BACKGROUND: &[&str] = &["durable", "js", "py"];
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
            "flood",
            "exec_durable",
            "exec_bg",
            "attach_64m"
        ]
    );
    for f in figures {
        let id = f["id"].as_str().unwrap();
        let want = match id {
            "exec_durable" | "attach_64m" => DURABLE,
            "exec_bg" => BACKGROUND,
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
            if id.starts_with("files") || id == "flood" || id == "attach_64m" {
                assert!(c["bytes"].as_u64().unwrap() > 0, "{who}");
            }
        }
    }
    let targets = report["targets"].as_array().unwrap();
    assert!(targets.len() >= 10, "{targets:?}");
    assert!(targets.iter().all(|t| t["name"].is_string()));
    assert!(stdout.contains("== targets"), "{stdout}");
}

/// The latency mode's operations, in the order they print.
const OPS: &[&str] = &[
    "op_exec",
    "op_read_4k",
    "op_read_1m",
    "op_write_4k",
    "op_write_1m",
    "op_stat",
    "op_list",
    "op_mkdir",
    "op_remove",
    "op_rename",
    "op_create",
    "op_connect",
];

#[test]
fn tiny_latency_run_reports_round_trips_for_every_contender() {
    let rtt_ms = 5.0;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("latency.json");
    let out = Command::new(env!("CARGO_BIN_EXE_world-bench"))
        .args(["--tiny", "--rtt-ms", "5", "--json"])
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
    assert_eq!(report["options"]["rtt_ms"], 5);
    let figures = report["figures"].as_array().expect("figures");
    let ids: Vec<&str> = figures.iter().map(|f| f["id"].as_str().unwrap()).collect();
    let mut want_ids = OPS.to_vec();
    want_ids.extend(["bw_up", "bw_down"]);
    assert_eq!(ids, want_ids);
    for f in figures {
        let id = f["id"].as_str().unwrap();
        let want: &[&str] = match id {
            "op_exec" | "op_stat" | "op_create" => &["raw", "ours", "sandbox", "js", "py"],
            i if i.starts_with("op_read") || i.starts_with("op_write") => {
                &["curl", "raw", "ours", "sandbox", "js", "py"]
            }
            i if i.starts_with("bw_") => &["curl", "raw", "ours", "js", "py"],
            _ => &["raw", "ours", "js", "py"],
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
            assert!(c["ops"].as_u64().unwrap() > 0, "{who}");
            assert!(c["value"].as_f64().unwrap() > 0.0, "{who}: {c}");
            let reqs = c["requests_per_op"].as_f64().unwrap();
            assert!(reqs >= 1.0, "{who}: {reqs} emulator requests per op");
            if id.starts_with("op_") {
                // Every request crosses the link: an operation takes at least one round
                // trip (a floor the link sets, not a speed asserted).
                let rt = c["round_trips_p50"].as_f64().unwrap();
                assert!(rt >= 1.0, "{who}: p50 of {rt} round trips of {rtt_ms} ms");
                assert!(
                    c["p50_ms"].as_f64().unwrap() >= rtt_ms,
                    "{who}: faster than the link"
                );
            } else {
                assert_eq!(c["bytes"].as_u64().unwrap(), 1 << 20, "{who}");
                assert!(c["round_trips_p50"].is_null(), "{who}");
            }
        }
    }
    // The tables print the round-trip columns, and the summary has a row per operation
    // with a cell per contender.
    assert!(
        stdout.contains("xRTT") && stdout.contains(" seq "),
        "{stdout}"
    );
    let summary = stdout
        .split("== sequential round trips per operation")
        .nth(1)
        .expect("the round-trip summary");
    for op in OPS {
        let name = op.trim_start_matches("op_");
        let row = summary
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{summary}"));
        assert!(row.contains('(') && !row.contains("failed"), "{row}");
    }
    let targets = report["targets"].as_array().unwrap();
    assert!(
        targets
            .iter()
            .any(|t| t["name"].as_str().unwrap().contains("round trips <=")),
        "{targets:?}"
    );
    assert!(
        targets
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("bw_up")),
        "{targets:?}"
    );
    assert!(targets.iter().all(|t| !t["holds"].is_null()), "{targets:?}");
    assert!(stdout.contains("== targets"), "{stdout}");
}
