//! Figures of the sandbox boundary's cost (ignored by default; figures, not assertions):
//! create to first command p50 (with internet access, through pasta, and without), exec
//! p50, and memory per idle sandbox with 100 alive (the emulator's, and pasta's).
//! Run: `cargo test -p testing-fake --test it -- --ignored envd_bench:: --nocapture`.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use crate::envd_support::{boot, boot_with, run};

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

/// Create to first command p50 (ms) over `n` sandboxes with or without internet access.
async fn create_p50(n: usize, internet: bool) -> f64 {
    let mut create = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let f = boot_with("base", None, internet).await;
        let (_, _, end) = run(&f, "true", Some("user")).await;
        assert_eq!(end.get("exitCode"), None, "{end}");
        create.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    p50(create)
}

/// Summed RSS (KiB) of the `pasta` processes whose parent is this process.
fn pasta_rss_kib() -> u64 {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                st.rsplit_once(") ").is_some_and(|(head, rest)| {
                    (head.ends_with("(pasta") || head.contains("(passt"))
                        && rest.split_whitespace().nth(1) == Some(me.as_str())
                })
            })
        })
        .map(rss_kib)
        .sum()
}

#[tokio::test]
#[ignore = "figures; run by hand"]
async fn boundary_costs() {
    let online = create_p50(15, true).await;
    let offline = create_p50(15, false).await;
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
    let pasta = pasta_rss_kib();
    println!(
        "create-to-first-command p50 {online:.1} ms with internet (pasta), {offline:.1} ms without ({:.2}x); exec `true` p50 {:.2} ms; 100 idle sandboxes: emulator RSS +{} KiB ({:.0} KiB per sandbox), their pasta processes {} KiB ({:.0} KiB per sandbox)",
        online / offline,
        p50(exec),
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / 100.0,
        pasta,
        pasta as f64 / 100.0,
    );
    drop(alive);
}
