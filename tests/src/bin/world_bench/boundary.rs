//! `world-bench --boundary [N]`: what the emulator's sandbox boundary costs, measured in one
//! run against baselines of the same run. Three emulator children, alive together:
//! isolated sandboxes with internet access (their own network namespace plus pasta),
//! isolated sandboxes without it (loopback only), and `E2B_LOCAL_NO_ISOLATION=1` (plain
//! host processes); spare sandboxes are made in every mode.
//!
//! Interleaved (one sample of each mode in turn, so a noisy minute of this shared machine
//! lands on all three alike): create sandbox + first command p50, `N` rounds (default 20)
//! with 200 ms of idle before each create; exec `true` p50, 20 rounds of 10 back to back
//! on one sandbox per mode; exec after 100 ms of idle, 20 rounds.
//!
//! Then per mode, each on a quiet machine (the kernel's teardown of the killed sandboxes
//! done): `N` creates + first command back to back (a create storm: what the spares can
//! keep up with; with the machine's busy CPU time per create, the spares made after it and
//! the kernel's teardown included), and with 100 idle sandboxes alive the emulator's RSS per sandbox and that
//! of the pasta processes it started. Figures, not assertions; ratios against the
//! no-isolation baseline.

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
#[derive(Default)]
struct Figures {
    create_ms: f64,
    create_idle_ms: f64,
    exec_ms: f64,
    exec_idle_ms: f64,
    /// Busy CPU time of the whole machine per create of the storm (both cores, the
    /// kernel's work included: namespaces, mounts, the teardown of killed sandboxes).
    storm_cpu_ms: f64,
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

/// One mode's emulator child, its client and its sandboxes' options.
struct Lane {
    mode: &'static Mode,
    emu: Emulator,
    client: Client,
    opts: CreateOptions,
}

impl Lane {
    async fn start(mode: &'static Mode) -> Result<Lane, AnyError> {
        let emu = Emulator::start_with(mode.env).await?;
        let cfg = Config::new()
            .with_api_key(emu.vars["E2B_API_KEY"].clone())
            .with_api_url(emu.vars["E2B_API_URL"].clone())
            .with_sandbox_url(emu.vars["E2B_SANDBOX_URL"].clone());
        let client = Client::new(cfg)?;
        let opts = CreateOptions::new("base").allow_internet_access(mode.internet);
        Ok(Lane {
            mode,
            emu,
            client,
            opts,
        })
    }

    /// One create + first command, in ms; the sandbox is killed after.
    async fn create_and_run(&self) -> Result<f64, AnyError> {
        let t = Instant::now();
        let sb = self.client.create(&self.opts).await?;
        start_true(&sb.clone().into_api()).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        self.client.kill(sb.id()).await?;
        Ok(ms)
    }
}

/// Runs the three modes and prints the table.
pub async fn run(args: &[String]) -> Result<(), AnyError> {
    let n = match args.first() {
        Some(n) => n.parse().map_err(|e| format!("--boundary {n}: {e}"))?,
        None => 20,
    };
    eprintln!("world-bench --boundary: starting the three emulators ...");
    let mut lanes = Vec::new();
    for mode in &MODES {
        lanes.push(Lane::start(mode).await?);
    }
    // One untimed create each warms the template and the emulator's caches; the warm
    // sandbox is the one exec is timed on.
    let mut warm = Vec::new();
    for lane in &lanes {
        let sb = lane.client.create(&lane.opts).await?;
        start_true(&sb.clone().into_api()).await?;
        warm.push(sb);
    }
    settle().await;
    let mut figures: Vec<Figures> = (0..lanes.len()).map(|_| Figures::default()).collect();
    eprintln!("world-bench --boundary: interleaved creates 200 ms apart and execs ...");
    let mut apart: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    for _ in 0..n {
        for (i, lane) in lanes.iter().enumerate() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            apart[i].push(lane.create_and_run().await?);
        }
    }
    settle().await;
    let apis: Vec<_> = warm.iter().map(|sb| sb.clone().into_api()).collect();
    let mut exec: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    for _ in 0..20 {
        for (i, api) in apis.iter().enumerate() {
            for _ in 0..10 {
                let t = Instant::now();
                start_true(api).await?;
                exec[i].push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    // A command after the sandbox sat idle, as an agent's commands come: what a start
    // pays once the kernel's fast paths went cold (a cgroup migration then waits for an
    // RCU grace period).
    let mut exec_idle: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    for _ in 0..20 {
        for (i, api) in apis.iter().enumerate() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let t = Instant::now();
            start_true(api).await?;
            exec_idle[i].push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for (i, lane) in lanes.iter().enumerate() {
        lane.client.kill(warm[i].id()).await?;
        figures[i].create_idle_ms = p50(std::mem::take(&mut apart[i]));
        figures[i].exec_ms = p50(std::mem::take(&mut exec[i]));
        figures[i].exec_idle_ms = p50(std::mem::take(&mut exec_idle[i]));
    }
    for (i, lane) in lanes.into_iter().enumerate() {
        eprintln!(
            "world-bench --boundary: {}: creates back to back, RSS ...",
            lane.mode.name
        );
        settle().await;
        let mut create = Vec::new();
        let (busy0, _) = cpu_jiffies();
        for _ in 0..n {
            create.push(lane.create_and_run().await?);
        }
        // The spares the storm asked for are made (and the killed sandboxes torn down)
        // after it: counted until the machine is quiet again.
        settle().await;
        let (busy1, _) = cpu_jiffies();
        // SAFETY: sysconf has no preconditions.
        let tick_ms = 1000.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        figures[i].storm_cpu_ms = (busy1 - busy0) as f64 * tick_ms / n.max(1) as f64;
        figures[i].create_ms = p50(create);
        let before = rss_kib(lane.emu.pid());
        let mut idle = Vec::new();
        for _ in 0..100 {
            idle.push(lane.client.create(&lane.opts).await?);
        }
        let after = rss_kib(lane.emu.pid());
        figures[i].emulator_kib = after.saturating_sub(before) as f64 / 100.0;
        figures[i].pasta_kib = pasta_kib(lane.emu.pid()) as f64 / 100.0;
        for sb in &idle {
            let _ = lane.client.kill(sb.id()).await;
        }
        drop(lane);
    }
    settle().await;
    let Some(base) = figures.last() else {
        return Ok(());
    };
    println!(
        "| mode | create + first command p50, 200 ms apart (interleaved) | vs baseline | the same back to back | vs baseline | CPU per create back to back | exec `true` p50 | vs baseline | exec after 100 ms idle p50 | vs baseline | emulator RSS per idle sandbox | pasta RSS per idle sandbox |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (mode, f) in MODES.iter().zip(&figures) {
        println!(
            "| {} | {:.1} ms | {:.2}x | {:.1} ms | {:.2}x | {:.1} ms | {:.2} ms | {:.2}x | {:.2} ms | {:.2}x | {:.0} KiB | {:.0} KiB |",
            mode.name,
            f.create_idle_ms,
            f.create_idle_ms / base.create_idle_ms,
            f.create_ms,
            f.create_ms / base.create_ms,
            f.storm_cpu_ms,
            f.exec_ms,
            f.exec_ms / base.exec_ms,
            f.exec_idle_ms,
            f.exec_idle_ms / base.exec_idle_ms,
            f.emulator_kib,
            f.pasta_kib,
        );
    }
    Ok(())
}
