//! `world-bench --boundary [N]`: what the emulator's sandbox boundary costs, measured in one
//! run against baselines of the same run. Three emulator children, one after the other:
//! isolated sandboxes with internet access (their own network namespace plus pasta),
//! isolated sandboxes without it (loopback only), and `E2B_LOCAL_NO_ISOLATION=1` (plain
//! host processes). For each: create sandbox + first command p50 (`N` creates back to
//! back, default 20, then 10 each after 200 ms of idle; spare sandboxes are prepared in
//! every mode), exec `true` p50 (200 on
//! one sandbox back to back, then 20 with 100 ms of idle before each), and with 100 idle
//! sandboxes alive the
//! emulator's RSS per sandbox and that of the pasta processes it started. Figures, not
//! assertions; ratios against the no-isolation baseline. Each timed part starts on a
//! quiet machine (the kernel's teardown of the killed sandboxes done), so no mode pays
//! for the one before.

use std::time::Instant;

use e2b_core::{Client, Config, CreateOptions, EnvdApi, StartProcess};

use super::child::AnyError;
use super::emulator::Emulator;

/// One boundary mode: a name, the emulator child's environment, the sandboxes' internet.
struct Mode {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    internet: bool,
}

const MODES: [Mode; 3] = [
    Mode {
        name: "isolated, internet (pasta)",
        env: &[],
        internet: true,
    },
    Mode {
        name: "isolated, no internet",
        env: &[],
        internet: false,
    },
    Mode {
        name: "no isolation (baseline)",
        env: &[("E2B_LOCAL_NO_ISOLATION", "1")],
        internet: true,
    },
];

/// The figures of one mode.
struct Figures {
    create_ms: f64,
    create_idle_ms: f64,
    exec_ms: f64,
    exec_idle_ms: f64,
    emulator_kib: f64,
    pasta_kib: f64,
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `VmRSS` of `pid` in KiB (0 once it is gone).
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

/// Summed RSS (KiB) of the pasta processes (`pasta`, `passt*`) whose parent is `parent`.
fn pasta_kib(parent: u32) -> u64 {
    let parent = parent.to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                st.rsplit_once(") ").is_some_and(|(head, rest)| {
                    (head.ends_with("(pasta") || head.contains("(passt"))
                        && rest.split_whitespace().nth(1) == Some(parent.as_str())
                })
            })
        })
        .map(rss_kib)
        .sum()
}

/// Busy and total jiffies of all CPUs, from `/proc/stat`.
fn cpu_jiffies() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    // idle and iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Wait until the machine is quiet (under 10% busy over half a second, at most 30 s):
/// the kernel tears down a killed sandbox's namespaces and mounts in the background, and
/// that work must not land on the next figure (of this mode or the next).
async fn settle() {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (b0, t0) = cpu_jiffies();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let (b1, t1) = cpu_jiffies();
        let busy = (b1 - b0) as f64 / (t1 - t0).max(1) as f64;
        if busy < 0.10 || Instant::now() > deadline {
            return;
        }
    }
}

async fn start_true(api: &std::sync::Arc<dyn EnvdApi>) -> Result<(), AnyError> {
    super::raw::start_ok(api, StartProcess::new("true")).await
}

/// The figures of `mode`, on an emulator child of its own.
async fn measure(mode: &Mode, creates: usize) -> Result<Figures, AnyError> {
    let emu = Emulator::start_with(mode.env).await?;
    let cfg = Config::new()
        .with_api_key(emu.vars["E2B_API_KEY"].clone())
        .with_api_url(emu.vars["E2B_API_URL"].clone())
        .with_sandbox_url(emu.vars["E2B_SANDBOX_URL"].clone());
    let client = Client::new(cfg)?;
    let opts = CreateOptions::new("base").allow_internet_access(mode.internet);
    // One untimed create warms the template and the emulator's caches.
    let warm = client.create(&opts).await?;
    start_true(&warm.clone().into_api()).await?;
    settle().await;
    let mut create = Vec::new();
    for _ in 0..creates {
        let t = Instant::now();
        let sb = client.create(&opts).await?;
        start_true(&sb.clone().into_api()).await?;
        create.push(t.elapsed().as_secs_f64() * 1000.0);
        client.kill(sb.id()).await?;
    }
    // Creates as they usually come, apart: each after 200 ms of idle (the spare, if any,
    // is ready by then; the kernel's fast paths may have gone cold).
    let mut create_idle = Vec::new();
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let t = Instant::now();
        let sb = client.create(&opts).await?;
        start_true(&sb.clone().into_api()).await?;
        create_idle.push(t.elapsed().as_secs_f64() * 1000.0);
        client.kill(sb.id()).await?;
    }
    let api = warm.clone().into_api();
    settle().await;
    let mut exec = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        start_true(&api).await?;
        exec.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    // A command after the sandbox sat idle, as an agent's commands come: what a start
    // pays once the kernel's fast paths went cold (a cgroup migration then waits for an
    // RCU grace period).
    let mut exec_idle = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let t = Instant::now();
        start_true(&api).await?;
        exec_idle.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    client.kill(warm.id()).await?;
    let before = rss_kib(emu.pid());
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(client.create(&opts).await?);
    }
    let after = rss_kib(emu.pid());
    let pasta = pasta_kib(emu.pid());
    for sb in &idle {
        let _ = client.kill(sb.id()).await;
    }
    drop(emu);
    settle().await;
    Ok(Figures {
        create_ms: p50(create),
        create_idle_ms: p50(create_idle),
        exec_ms: p50(exec),
        exec_idle_ms: p50(exec_idle),
        emulator_kib: after.saturating_sub(before) as f64 / 100.0,
        pasta_kib: pasta as f64 / 100.0,
    })
}

/// Runs the three modes and prints the table.
pub async fn run(args: &[String]) -> Result<(), AnyError> {
    let creates = match args.first() {
        Some(n) => n.parse().map_err(|e| format!("--boundary {n}: {e}"))?,
        None => 20,
    };
    let mut rows = Vec::new();
    for mode in &MODES {
        eprintln!("world-bench --boundary: {} ...", mode.name);
        rows.push((mode.name, measure(mode, creates).await?));
    }
    let Some((_, base)) = rows.last() else {
        return Ok(());
    };
    let (base_create, base_exec, base_idle) = (base.create_ms, base.exec_ms, base.exec_idle_ms);
    let base_create_idle = base.create_idle_ms;
    println!(
        "| mode | create + first command p50 | vs baseline | the same 200 ms apart | vs baseline | exec `true` p50 | vs baseline | exec after 100 ms idle p50 | vs baseline | emulator RSS per idle sandbox | pasta RSS per idle sandbox |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, f) in &rows {
        println!(
            "| {name} | {:.1} ms | {:.2}x | {:.1} ms | {:.2}x | {:.2} ms | {:.2}x | {:.2} ms | {:.2}x | {:.0} KiB | {:.0} KiB |",
            f.create_ms,
            f.create_ms / base_create,
            f.create_idle_ms,
            f.create_idle_ms / base_create_idle,
            f.exec_ms,
            f.exec_ms / base_exec,
            f.exec_idle_ms,
            f.exec_idle_ms / base_idle,
            f.emulator_kib,
            f.pasta_kib,
        );
    }
    Ok(())
}
