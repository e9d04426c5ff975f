//! Figures of the sandbox boundary's cost (ignored by default; figures, not assertions):
//! create to first command p50, exec p50, and memory per idle sandbox with 100 alive.
//! Run: `cargo test -p testing-fake --test it -- --ignored envd_bench:: --nocapture`.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use crate::envd_support::{boot, run};

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "figures; run by hand"]
async fn boundary_costs() {
    let mut create = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let f = boot("base", None).await;
        let (_, _, end) = run(&f, "true", Some("user")).await;
        assert_eq!(end.get("exitCode"), None, "{end}");
        create.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let f = boot("base", None).await;
    let mut exec = Vec::new();
    for _ in 0..60 {
        let t = Instant::now();
        run(&f, "true", Some("user")).await;
        exec.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(f);
    let me = std::process::id();
    let before = rss_kib(me);
    let mut alive = Vec::new();
    for _ in 0..100 {
        alive.push(boot("base", None).await);
    }
    let after = rss_kib(me);
    println!(
        "create-to-first-command p50 {:.1} ms; exec `true` p50 {:.2} ms; 100 idle sandboxes: emulator RSS +{} KiB ({:.0} KiB per sandbox)",
        p50(create),
        p50(exec),
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / 100.0,
    );
    drop(alive);
}
