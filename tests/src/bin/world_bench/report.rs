//! The results of a run: one table per figure with ratios against the baselines,
//! the targets (which hold), and the JSON for comparisons across commits.

use serde_json::{Value, json};

use super::opts::Opts;
use super::plan::{Figure, Kind, display};
use super::runner::Measure;

/// One figure's measures.
pub struct FigureResult {
    /// The figure.
    pub figure: Figure,
    /// One per contender, in plan order.
    pub measures: Vec<Measure>,
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

/// The headline value: p50 ms for execs, MiB/s for transfers; NaN when it did not run.
fn value(kind: Kind, m: &Measure) -> f64 {
    if m.outcome.error.is_some() {
        return f64::NAN;
    }
    match kind {
        Kind::Latency => percentile(&m.outcome.samples_ms, 0.5),
        Kind::Throughput => m.outcome.bytes as f64 / (1024.0 * 1024.0) / m.outcome.secs,
    }
}

impl FigureResult {
    fn get(&self, contender: &str) -> Option<&Measure> {
        self.measures.iter().find(|m| m.contender == contender)
    }

    fn value_of(&self, contender: &str) -> f64 {
        self.get(contender)
            .map_or(f64::NAN, |m| value(self.figure.kind(), m))
    }

    fn baselines(&self) -> &'static [&'static str] {
        match self.figure.id.as_str() {
            "exec_durable" | "attach_64m" => &["ours"],
            "exec_bg" => &["js", "py"],
            f if f.starts_with("exec") => &["raw", "rawsh", "js", "py", "local", "tokio"],
            f if f.starts_with("files") || f.starts_with("bw_") => &["curl", "raw"],
            f if f.starts_with("tree_") => &["tarcurl", "js", "py"],
            f if f.starts_with("op_") => &["js", "py"],
            _ => &["raw"],
        }
    }
}

fn per_op(n: f64, ops: u64) -> f64 {
    if ops == 0 { f64::NAN } else { n / ops as f64 }
}

/// p50 in round trips (`p50 / rtt`); NaN without a link or a latency figure.
fn round_trips(kind: Kind, m: &Measure, rtt_ms: u64) -> f64 {
    if rtt_ms == 0 || kind != Kind::Latency {
        return f64::NAN;
    }
    value(kind, m) / rtt_ms as f64
}

/// The sequential round trips of an operation: its p50 in round trips, rounded.
fn sequential(kind: Kind, m: &Measure, rtt_ms: u64) -> Option<u64> {
    let x = round_trips(kind, m, rtt_ms);
    x.is_finite().then(|| x.round() as u64)
}

/// Prints the tables (with the round-trip columns `xRTT`, p50 / RTT, and `seq`, that
/// rounded, when `rtt_ms` is above 0).
pub fn print(results: &[FigureResult], rtt_ms: u64) {
    for r in results {
        let kind = r.figure.kind();
        let rt_cols = rtt_ms > 0 && kind == Kind::Latency;
        println!("\n== {}", r.figure.title);
        println!(
            "  {:<22} {:>9} {:>9}{} {:>6} {:>9} {:>8} {:>9} {:>9}  ratios",
            "contender",
            if kind == Kind::Latency {
                "p50 ms"
            } else {
                "MiB/s"
            },
            if kind == Kind::Latency { "p99 ms" } else { "" },
            if rt_cols {
                format!(" {:>6} {:>4}", "xRTT", "seq")
            } else {
                String::new()
            },
            "errors",
            "RSS MiB",
            "req/op",
            "emuCPU/op",
            "cliCPU/op"
        );
        for m in &r.measures {
            let name = display(&m.contender, &r.figure.id);
            if let Some(e) = &m.outcome.error {
                println!(
                    "  {name:<22} failed: {}",
                    e.chars().take(160).collect::<String>()
                );
                continue;
            }
            let v = value(kind, m);
            let p99 = if kind == Kind::Latency {
                format!("{:.2}", percentile(&m.outcome.samples_ms, 0.99))
            } else {
                String::new()
            };
            let reqs: u64 = m.requests.values().sum();
            let ratios: Vec<String> = r
                .baselines()
                .iter()
                .filter(|b| **b != m.contender)
                .filter_map(|b| {
                    let base = r.value_of(b);
                    (base.is_finite() && base > 0.0)
                        .then(|| format!("{:.2}x {}", v / base, display(b, &r.figure.id)))
                })
                .collect();
            let rt = if rt_cols {
                format!(
                    " {:>6.2} {:>4}",
                    round_trips(kind, m, rtt_ms),
                    sequential(kind, m, rtt_ms).map_or("-".into(), |n| n.to_string())
                )
            } else {
                String::new()
            };
            println!(
                "  {name:<22} {v:>9.2} {p99:>9}{rt} {:>6} {:>9.1} {:>8.2} {:>9.2} {:>9.2}  {}",
                m.outcome.errors,
                m.peak_rss_mib,
                per_op(reqs as f64, m.outcome.ops),
                per_op(m.emulator_cpu_ms, m.outcome.ops),
                per_op(m.client_cpu_ms, m.outcome.ops),
                ratios.join(", ")
            );
        }
    }
}

/// One of the targets, evaluated.
pub struct Target {
    /// What it says.
    pub name: String,
    /// `None` when a figure it needs was not measured.
    pub holds: Option<bool>,
    /// The measured numbers.
    pub detail: String,
}

fn ratio_target(
    results: &[FigureResult],
    fig: &str,
    a: &str,
    b: &str,
    le: bool,
    limit: f64,
) -> Option<Target> {
    let r = results.iter().find(|r| r.figure.id == fig)?;
    let (va, vb) = (r.value_of(a), r.value_of(b));
    let (na, nb) = (display(a, fig), display(b, fig));
    let name = format!("{fig}: {na} {} {limit}x {nb}", if le { "<=" } else { ">=" });
    let x = va / vb;
    let holds = (x.is_finite()).then_some(if le { x <= limit } else { x >= limit });
    Some(Target {
        name,
        holds,
        detail: format!("{x:.2}x ({va:.2} vs {vb:.2})"),
    })
}

fn check(
    results: &[FigureResult],
    fig: &str,
    c: &str,
    what: &str,
    f: impl Fn(&Measure) -> (bool, String),
) -> Option<Target> {
    let r = results.iter().find(|r| r.figure.id == fig)?;
    let m = r.get(c)?;
    let (holds, detail) = f(m);
    Some(Target {
        name: format!("{fig}: {} {what}", display(c, fig)),
        holds: m.outcome.error.is_none().then_some(holds),
        detail,
    })
}

/// The speed and memory targets that this run's figures decide.
pub fn targets(results: &[FigureResult]) -> Vec<Target> {
    let mut t = Vec::new();
    // "<= 1.5x a raw envd Start of the same program": subprocess-e2b runs `true`, the
    // provider a shell command (`/bin/bash -c true`, what `rawsh` starts).
    for (c, same) in [("ours", "raw"), ("sandbox", "rawsh")] {
        for (b, lim) in [("js", 0.4), ("py", 0.8), (same, 1.5), ("local", 2.0)] {
            t.extend(ratio_target(results, "exec_seq", c, b, true, lim));
        }
    }
    t.extend(ratio_target(
        results, "exec_seq", "local", "tokio", true, 1.5,
    ));
    let levels: Vec<&FigureResult> = results
        .iter()
        .filter(|r| r.figure.id.starts_with("exec_c"))
        .collect();
    if let Some(first) = levels.first() {
        t.extend(ratio_target(
            results,
            &first.figure.id,
            "ours",
            "py",
            true,
            0.6,
        ));
    }
    for r in &levels {
        for c in ["ours", "sandbox"] {
            t.extend(check(results, &r.figure.id, c, "0 errors", |m| {
                (
                    m.outcome.errors == 0,
                    format!("{} errors", m.outcome.errors),
                )
            }));
        }
    }
    t.extend(ratio_target(
        results,
        "files_large",
        "ours",
        "curl",
        false,
        0.9,
    ));
    t.extend(ratio_target(
        results,
        "files_small",
        "ours",
        "curl",
        false,
        0.5,
    ));
    for fig in ["files_small", "files_large"] {
        t.extend(check(results, fig, "ours", "host RSS < 32 MiB", |m| {
            (m.peak_rss_mib < 32.0, format!("{:.1} MiB", m.peak_rss_mib))
        }));
    }
    t.extend(ratio_target(results, "flood", "ours", "raw", false, 0.8));
    // Durable commands: a start + attach of `true` costs at most one request more than
    // an exec; an attach of a finished 64 MiB record reads at least 0.8x an fs-e2b read.
    if let Some(r) = results.iter().find(|r| r.figure.id == "exec_durable") {
        let (exec, durable) = (r.get("ours"), r.get("durable"));
        if let (Some(e), Some(d)) = (exec, durable) {
            let (re, rd) = (requests_per_op(e), requests_per_op(d));
            t.push(Target {
                name: "exec_durable: durable start+attach <= exec + 1 request".into(),
                holds: (re.is_finite() && rd.is_finite()).then_some(rd <= re + 1.0),
                detail: format!("{rd:.2} vs {re:.2} requests per op"),
            });
        }
    }
    t.extend(ratio_target(
        results,
        "attach_64m",
        "durable",
        "ours",
        false,
        0.8,
    ));
    t.extend(check(results, "flood", "ours", "host RSS < 16 MiB", |m| {
        (m.peak_rss_mib < 16.0, format!("{:.1} MiB", m.peak_rss_mib))
    }));
    t
}

/// Emulator requests per operation (all routes, both planes); NaN when it failed.
fn requests_per_op(m: &Measure) -> f64 {
    if m.outcome.error.is_some() {
        return f64::NAN;
    }
    per_op(m.requests.values().sum::<u64>() as f64, m.outcome.ops)
}

/// The columns of the round-trip summary.
const RT_COLUMNS: &[(&str, &str)] = &[
    ("curl", "curl"),
    ("raw", "raw"),
    ("ours", "ours"),
    ("sandbox", "sandbox@1"),
    ("js", "JS SDK"),
    ("py", "Py SDK"),
];

/// Prints one line per operation: each contender's sequential round trips (p50 / RTT,
/// rounded) and, in brackets, the emulator requests it made per operation.
pub fn print_round_trips(results: &[FigureResult], rtt_ms: u64) {
    println!(
        "\n== sequential round trips per operation at {rtt_ms} ms (p50 / RTT rounded; \
         emulator requests per op in brackets; ours: subprocess-e2b / fs-e2b)"
    );
    let mut head = format!("  {:<12}", "operation");
    for (_, name) in RT_COLUMNS {
        head.push_str(&format!(" {name:>11}"));
    }
    println!("{head}");
    for r in results.iter().filter(|r| r.figure.kind() == Kind::Latency) {
        let mut line = format!("  {:<12}", r.figure.id.trim_start_matches("op_"));
        for (c, _) in RT_COLUMNS {
            let cell = match r.get(c) {
                None => "".to_owned(),
                Some(m) if m.outcome.error.is_some() => "failed".to_owned(),
                Some(m) => format!(
                    "{} ({:.1})",
                    sequential(Kind::Latency, m, rtt_ms).map_or("-".into(), |n| n.to_string()),
                    requests_per_op(m)
                ),
            };
            line.push_str(&format!(" {cell:>11}"));
        }
        println!("{line}");
    }
}

/// The latency mode's targets: per operation, ours and the sandbox@1 provider at most
/// 1.1x the faster official SDK's p50 and no more sequential round trips than it; the
/// transfers at least 0.9x curl on the same link.
pub fn latency_targets(results: &[FigureResult], rtt_ms: u64) -> Vec<Target> {
    let mut t = Vec::new();
    for r in results.iter().filter(|r| r.figure.kind() == Kind::Latency) {
        let fig = r.figure.id.as_str();
        let sdk = ["js", "py"]
            .into_iter()
            .filter(|s| r.value_of(s).is_finite())
            .min_by(|a, b| r.value_of(a).total_cmp(&r.value_of(b)));
        for c in ["ours", "sandbox"] {
            let Some(m) = r.get(c) else { continue };
            let Some(sdk) = sdk else {
                t.push(Target {
                    name: format!("{fig}: {} vs the faster SDK", display(c, fig)),
                    holds: None,
                    detail: "no official SDK measured".into(),
                });
                continue;
            };
            let (v, vs) = (value(Kind::Latency, m), r.value_of(sdk));
            let x = v / vs;
            t.push(Target {
                name: format!(
                    "{fig}: {} p50 <= 1.1x {}",
                    display(c, fig),
                    display(sdk, fig)
                ),
                holds: x.is_finite().then_some(x <= 1.1),
                detail: format!("{x:.2}x ({v:.1} vs {vs:.1} ms)"),
            });
            let (a, b) = (
                sequential(Kind::Latency, m, rtt_ms),
                r.get(sdk)
                    .and_then(|s| sequential(Kind::Latency, s, rtt_ms)),
            );
            t.push(Target {
                name: format!(
                    "{fig}: {} round trips <= {}'s",
                    display(c, fig),
                    display(sdk, fig)
                ),
                holds: a.zip(b).map(|(a, b)| a <= b),
                detail: format!(
                    "{} vs {} ({:.1} vs {:.1} requests/op)",
                    a.map_or("-".into(), |n| n.to_string()),
                    b.map_or("-".into(), |n| n.to_string()),
                    requests_per_op(m),
                    r.get(sdk).map_or(f64::NAN, requests_per_op)
                ),
            });
        }
    }
    for fig in ["bw_up", "bw_down"] {
        t.extend(ratio_target(results, fig, "ours", "curl", false, 0.9));
    }
    t
}

/// Prints the targets.
pub fn print_targets(targets: &[Target]) {
    println!("\n== targets");
    for t in targets {
        let mark = match t.holds {
            Some(true) => "holds",
            Some(false) => "MISSED",
            None => "n/a",
        };
        println!("  {mark:<7} {:<56} {}", t.name, t.detail);
    }
}

fn num(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// The JSON report.
pub fn json(opts: &Opts, results: &[FigureResult], targets: &[Target]) -> Value {
    let figures: Vec<Value> = results
        .iter()
        .map(|r| {
            let kind = r.figure.kind();
            let contenders: Vec<Value> = r
                .measures
                .iter()
                .map(|m| {
                    let reqs: u64 = m.requests.values().sum();
                    let requests_per_op: serde_json::Map<String, Value> = m
                        .requests
                        .iter()
                        .map(|(k, n)| (k.clone(), num(per_op(*n as f64, m.outcome.ops))))
                        .collect();
                    json!({
                        "id": m.contender,
                        "name": display(&m.contender, &r.figure.id),
                        "value": num(value(kind, m)),
                        "p50_ms": num(percentile(&m.outcome.samples_ms, 0.5)),
                        "p99_ms": num(percentile(&m.outcome.samples_ms, 0.99)),
                        "ops": m.outcome.ops,
                        "errors": m.outcome.errors,
                        "bytes": m.outcome.bytes,
                        "secs": num(m.outcome.secs),
                        "peak_rss_mib": num(m.peak_rss_mib),
                        "requests_per_op": num(per_op(reqs as f64, m.outcome.ops)),
                        "round_trips_p50": num(round_trips(kind, m, opts.rtt_ms)),
                        "requests_per_op_by_route": requests_per_op,
                        "emulator_cpu_ms_per_op": num(per_op(m.emulator_cpu_ms, m.outcome.ops)),
                        "client_cpu_ms_per_op": num(per_op(m.client_cpu_ms, m.outcome.ops)),
                        "error": m.outcome.error,
                    })
                })
                .collect();
            json!({
                "id": r.figure.id,
                "title": r.figure.title,
                "unit": if kind == Kind::Latency { "ms_p50" } else { "mib_per_s" },
                "contenders": contenders,
            })
        })
        .collect();
    json!({
        "schema": "world-bench/1",
        "options": {
            "iterations": opts.iterations,
            "rounds": opts.rounds,
            "levels": opts.levels,
            "small_n": opts.small_n,
            "small_bytes": opts.small_bytes,
            "large_bytes": opts.large_bytes,
            "flood_bytes": opts.flood_bytes,
            "rtt_ms": opts.rtt_ms,
            "bandwidth_mbit": opts.bandwidth_mbit,
            "op_iterations": opts.op_iterations,
        },
        "figures": figures,
        "targets": targets.iter().map(|t| json!({
            "name": t.name, "holds": t.holds, "detail": t.detail,
        })).collect::<Vec<_>>(),
    })
}
