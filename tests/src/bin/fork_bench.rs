//! `fork-bench`: fork of a sandbox with a large workspace, to the first command in the fork.
//!
//! Run: `cargo run --release -p integration-tests --bin fork-bench [-- --size-mib M --iterations K]`
//!
//! Writes `--size-mib` (default 1024) MiB of random data in 16 MiB files into a sandbox's
//! workspace, then prints the p50 of `--iterations` (default 5) runs of:
//! * `cp -a --reflink=auto` of that workspace (the baseline),
//! * `LocalSandboxes::fork` then `exec true` in the fork (and its ratio to the baseline),
//! * e2b-core `fork` on the emulator (in this process) then a `true` in the fork.
//!
//! The previous fork is destroyed before each timed run, so no deletion is timed.
//! Figures, not assertions.

use std::path::Path;
use std::time::{Duration, Instant};

use e2b_core::{Client, Config, CreateOptions, EnvdApi as _, ForkOptions, StartProcess};
use exec_world::sandbox::{CreateSpec, ExecSpec, LocalSandboxes, SandboxProvider};

type AnyError = Box<dyn std::error::Error + Send + Sync>;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A shell line writing `mib` MiB of random data as 16 MiB files under `dir`.
fn fill(dir: &str, mib: u64) -> String {
    let files = mib.div_ceil(16).max(1);
    format!(
        "mkdir -p {dir} && for i in $(seq 1 {files}); do head -c 16777216 /dev/urandom > {dir}/f$i || exit 1; done"
    )
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| -> Option<u64> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1)?.parse().ok()
    };
    let size = flag("--size-mib").unwrap_or(1024);
    let iterations = flag("--iterations").unwrap_or(5).max(1);
    if let Err(e) = run(size, iterations).await {
        eprintln!("fork-bench: {e}");
        std::process::exit(1);
    }
}

async fn run(size: u64, iterations: u64) -> Result<(), AnyError> {
    let dir = std::env::temp_dir().join(format!("fork-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = measure(size, iterations, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    r
}

async fn measure(size: u64, iterations: u64, tmp: &Path) -> Result<(), AnyError> {
    let local = LocalSandboxes::new(tmp.join("local"))?;
    let src = local.create(CreateSpec::new("bench-src")).await?;
    let filled = local
        .exec(
            &src,
            ExecSpec::new(fill("data", size)).timeout(Duration::from_secs(600)),
        )
        .await?;
    if filled.exit_code != Some(0) {
        return Err(format!("filling the workspace failed: {}", filled.stderr).into());
    }
    let workspace = local.dir_of(&src).join("workspace");

    let mut cp = Vec::new();
    for i in 0..iterations {
        let dst = tmp.join(format!("cp-{i}"));
        let t = Instant::now();
        let st = std::process::Command::new("cp")
            .args(["-a", "--reflink=auto", "--no-target-directory"])
            .arg(&workspace)
            .arg(&dst)
            .status()?;
        cp.push(t.elapsed());
        if !st.success() {
            return Err("cp -a failed".into());
        }
        std::fs::remove_dir_all(&dst)?;
    }

    let mut forks = Vec::new();
    for _ in 0..iterations {
        local.destroy_by_name("bench-fork").await?;
        let t = Instant::now();
        let f = local.fork(&src, "bench-fork").await?;
        let out = local.exec(&f, ExecSpec::new("true")).await?;
        forks.push(t.elapsed());
        if out.exit_code != Some(0) {
            return Err("true failed in the fork".into());
        }
    }
    local.destroy_by_name("bench-fork").await?;
    local.destroy(&src).await?;

    let emu_ms = emulator(size, iterations, tmp).await?;
    let (cp50, fork50) = (p50(cp), p50(forks));
    println!(
        "fork of a sandbox with {size} MiB in its workspace, to the first command (p50 of {iterations}):"
    );
    println!(
        "  cp -a --reflink=auto of the workspace   {:>9.1} ms",
        ms(cp50)
    );
    println!(
        "  LocalSandboxes fork + exec true         {:>9.1} ms  ({:.2}x cp)",
        ms(fork50),
        ms(fork50) / ms(cp50).max(0.001)
    );
    println!(
        "  emulator fork + true (e2b-core)         {:>9.1} ms  ({:.2}x cp)",
        emu_ms,
        emu_ms / ms(cp50).max(0.001)
    );
    Ok(())
}

/// p50 in ms of e2b-core fork + a `true` in the fork on an in-process emulator.
async fn emulator(size: u64, iterations: u64, tmp: &Path) -> Result<f64, AnyError> {
    let emu = testing_fake::Emulator::start(testing_fake::EmulatorConfig {
        root: Some(tmp.join("emulator")),
        ..Default::default()
    })
    .await?;
    let client = Client::new(
        Config::new()
            .with_api_key(emu.api_key())
            .with_api_url(emu.api_url())
            .with_sandbox_url(emu.sandbox_url()),
    )?;
    let src = client.create(&CreateOptions::new("base")).await?;
    let filled = src
        .run(StartProcess::shell(fill("/home/user/data", size)))
        .await?;
    if filled.end.exit_code != 0 {
        return Err("filling the sandbox failed".into());
    }
    let mut times = Vec::new();
    for _ in 0..iterations {
        let t = Instant::now();
        let fork = client
            .fork(src.id(), &ForkOptions::new())
            .await?
            .pop()
            .ok_or("no fork in the answer")??;
        fork.run(StartProcess::new("true")).await?;
        times.push(t.elapsed());
        client.kill(fork.id()).await?;
    }
    client.kill(src.id()).await?;
    emu.shutdown().await;
    Ok(ms(p50(times)))
}
