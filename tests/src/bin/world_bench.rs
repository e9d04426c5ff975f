//! `world-bench`: the figures of the exec-world adapters, local against E2B (emulator), in one run.
//!
//! Run: `cargo run --release -p integration-tests --bin world-bench [-- --iterations N --size-mib M]`
//!
//! It prints, each with a baseline measured in the same run:
//! * spawn-to-exit of `true`: p50/p99 through bare `tokio::process`, `LocalSubprocess`, raw envd `Start`
//!   (e2b-core, no adapter), through `E2bSubprocess`, and `sandbox-e2b`'s exec on the
//!   conversation template; ratio E2B adapter / local and provider / adapter;
//! * a 256 MiB write then read: `LocalFs`, raw HTTP `POST/GET /files` with reqwest, and
//!   `E2bFs`; throughput, ratio fs-e2b / raw HTTP, and the peak host memory (VmHWM, reset
//!   before each transfer) of this process.
//!
//! * read cost: `E2bFs::read` of 1 KiB and 1 MiB (p50/p99) and `read_stream` of the
//!   large file, against the way reads worked before they honoured the acting user
//!   (envd `Stat` + `GET /files`, which envd serves as root) on the same files.
//!
//! The emulator runs in a child process (this binary re-executed with `--serve-emulator`),
//! so the memory figures are the client's alone. Figures, not assertions: the machine is
//! shared and noisy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2b_core::{Client, Config, CreateOptions, EnvdApi, StartProcess};
use exec_world::sandbox::SandboxProvider as _;
use exec_world::{
    ByteStream, Fs, LocalFs, LocalSubprocess, SpawnSpec, Subprocess, WorldPath, WriteOptions,
};
use futures::StreamExt as _;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHUNK: usize = 256 * 1024;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve-emulator") {
        if let Err(e) = serve_emulator().await {
            eprintln!("world-bench emulator: {e}");
            std::process::exit(1);
        }
        return;
    }
    let iterations = flag(&args, "--iterations").unwrap_or(200);
    let size_mib = flag(&args, "--size-mib").unwrap_or(256);
    if let Err(e) = run(iterations, size_mib).await {
        eprintln!("world-bench: {e}");
        std::process::exit(1);
    }
}

fn flag(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

/// Child mode: run the emulator, print its env lines, live until stdin closes.
async fn serve_emulator() -> Result<(), AnyError> {
    let emu = testing_fake::Emulator::start(testing_fake::EmulatorConfig::default()).await?;
    print!("{}", emu.env_lines());
    println!("READY");
    let mut line = String::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    while stdin.read_line(&mut line).await? > 0 {
        line.clear();
    }
    emu.shutdown().await;
    Ok(())
}

struct EmulatorChild {
    child: tokio::process::Child,
    vars: BTreeMap<String, String>,
}

async fn spawn_emulator() -> Result<EmulatorChild, AnyError> {
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .arg("--serve-emulator")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut vars = BTreeMap::new();
    while let Some(line) = lines.next_line().await? {
        if line == "READY" {
            break;
        }
        if let Some((k, v)) = line.split_once('=') {
            vars.insert(k.to_owned(), v.to_owned());
        }
    }
    Ok(EmulatorChild { child, vars })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Samples {
    name: &'static str,
    p50: Duration,
    p99: Duration,
}

async fn time_n<F, Fut>(name: &'static str, n: u64, mut f: F) -> Result<Samples, AnyError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), AnyError>>,
{
    // warm-up
    for _ in 0..3 {
        f().await?;
    }
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        v.push(t.elapsed());
    }
    v.sort();
    let s = Samples {
        name,
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
    };
    println!(
        "  {:<28} p50 {:>8.2} ms   p99 {:>8.2} ms   (n={n})",
        s.name,
        ms(s.p50),
        ms(s.p99)
    );
    Ok(s)
}

/// Deterministic incompressible data, generated chunk by chunk (never held whole).
fn data_stream(total: u64) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut left = total;
    futures::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = (left as usize).min(CHUNK);
        let mut buf = Vec::with_capacity(n);
        while buf.len() < n {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            buf.extend_from_slice(&state.to_le_bytes());
        }
        buf.truncate(n);
        left -= n as u64;
        std::task::Poll::Ready(Some(Bytes::from(buf)))
    })
}

async fn expected_hash(total: u64) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut s = Box::pin(data_stream(total));
    while let Some(b) = s.next().await {
        h.update(&b);
    }
    h.finalize().to_vec()
}

/// Reset this process's peak RSS (Linux `clear_refs` 5) and read it back later.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

struct Transfer {
    name: &'static str,
    mib_s: f64,
    peak_mib: f64,
}

async fn transfer<W, WF, R, RF>(
    name: &'static str,
    size: u64,
    want: &[u8],
    write: W,
    read: R,
) -> Result<Transfer, AnyError>
where
    W: FnOnce() -> WF,
    WF: std::future::Future<Output = Result<(), AnyError>>,
    R: FnOnce() -> RF,
    RF: std::future::Future<Output = Result<Vec<u8>, AnyError>>,
{
    reset_peak_rss();
    let t = Instant::now();
    write().await?;
    let got = read().await?;
    let secs = t.elapsed().as_secs_f64();
    if got != want {
        return Err(format!("{name}: read-back hash differs from what was written").into());
    }
    let mib = size as f64 / (1024.0 * 1024.0);
    let r = Transfer {
        name,
        mib_s: 2.0 * mib / secs,
        peak_mib: peak_rss_mib(),
    };
    println!(
        "  {:<28} {:>8.1} MiB/s (write+read of {mib:.0} MiB in {secs:.2} s)   peak host RSS {:>6.1} MiB",
        r.name, r.mib_s, r.peak_mib
    );
    Ok(r)
}

async fn hash_stream(mut s: ByteStream) -> Result<Vec<u8>, AnyError> {
    let mut h = Sha256::new();
    while let Some(b) = s.next().await {
        h.update(&b?);
    }
    Ok(h.finalize().to_vec())
}

fn fs_stream(size: u64) -> ByteStream {
    Box::pin(data_stream(size).map(Ok))
}

async fn run(iterations: u64, size_mib: u64) -> Result<(), AnyError> {
    let size = size_mib * 1024 * 1024;
    println!("world-bench: {iterations} spawns per backend, {size_mib} MiB transfers");
    let emu = spawn_emulator().await?;
    let var = |k: &str| {
        emu.vars
            .get(k)
            .cloned()
            .ok_or_else(|| format!("emulator did not print {k}"))
    };
    let cfg = Config::new()
        .api_key(var("E2B_API_KEY")?)
        .api_url(var("E2B_API_URL")?)
        .sandbox_url(var("E2B_SANDBOX_URL")?);
    let client = Client::new(cfg)?;
    let sandbox = client.create(&CreateOptions::new("base")).await?;
    let api: Arc<dyn EnvdApi> = sandbox.clone().into_api();
    let scratch = std::env::temp_dir().join(format!("world-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let scratch_s = scratch.to_string_lossy().into_owned();

    println!("\nspawn-to-exit of `true`");
    let bare = time_n("bare tokio::process", iterations, || async {
        tokio::process::Command::new("true").status().await?;
        Ok(())
    })
    .await?;
    let local_proc = LocalSubprocess::new()?;
    let local = time_n("local (LocalSubprocess)", iterations, || async {
        local_proc.spawn(SpawnSpec::new("true"))?.wait().await?;
        Ok(())
    })
    .await?;
    let raw = time_n("raw envd Start (e2b-core)", iterations, || {
        let api = api.clone();
        async move {
            api.start_process(StartProcess::new("true"))
                .await?
                .wait_output()
                .await?;
            Ok(())
        }
    })
    .await?;
    let e2b_proc = subprocess_e2b::E2bSubprocess::new(
        api.clone(),
        subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
    )?;
    let adapter = time_n("subprocess-e2b", iterations, || async {
        e2b_proc.spawn(SpawnSpec::new("true"))?.wait().await?;
        Ok(())
    })
    .await?;
    let sandboxes = {
        let mut c = sandbox_e2b::SandboxConfig::new(var("E2B_API_KEY")?, "conversation");
        c.api_url = Some(var("E2B_API_URL")?);
        c.sandbox_url = Some(var("E2B_SANDBOX_URL")?);
        sandbox_e2b::E2bSandboxes::new(c)?
    };
    let conv = sandboxes
        .create(exec_world::sandbox::CreateSpec::new("world-bench"))
        .await?;
    let provider = time_n("sandbox-e2b exec", iterations, || async {
        sandboxes
            .exec(&conv, exec_world::sandbox::ExecSpec::new("true"))
            .await?;
        Ok(())
    })
    .await?;
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!(
        "  ratio sandbox-e2b exec / subprocess-e2b: p50 {:.1}x, p99 {:.1}x (bash -c + timeout backstop + tag env)",
        ratio(provider.p50, adapter.p50),
        ratio(provider.p99, adapter.p99)
    );
    println!(
        "  ratio subprocess-e2b / local: p50 {:.1}x, p99 {:.1}x (target <= 3x); subprocess-e2b / raw envd: p50 {:.1}x",
        ratio(adapter.p50, local.p50),
        ratio(adapter.p99, local.p99),
        ratio(adapter.p50, raw.p50)
    );
    println!(
        "  ratio LocalSubprocess / bare tokio::process: p50 {:.1}x (the local adapter's process-group and descendant tracking)",
        ratio(local.p50, bare.p50)
    );
    let _ = (&raw.name, &bare.name);

    println!("\n{size_mib} MiB write then read (sha256 verified)");
    let want = expected_hash(size).await;
    let local_fs = LocalFs::new()?;
    let local_path = WorldPath::new(format!("{scratch_s}/big.bin"))?;
    let lt = transfer(
        "LocalFs",
        size,
        &want,
        || async {
            local_fs
                .write(&local_path, fs_stream(size), WriteOptions::default())
                .await?;
            Ok(())
        },
        || async { hash_stream(local_fs.read_stream(&local_path).await?).await },
    )
    .await?;
    let _ = std::fs::remove_dir_all(&scratch);

    let http = reqwest::Client::new();
    let files_url = format!("{}/files", sandbox.envd_url());
    let with_headers = |rb: reqwest::RequestBuilder| {
        let rb = rb
            .header("E2b-Sandbox-Id", sandbox.id())
            .header("E2b-Sandbox-Port", "49983");
        match sandbox.access_token() {
            Some(t) => rb.header("X-Access-Token", t.expose()),
            None => rb,
        }
    };
    let raw_path = "/home/user/raw.bin";
    let rt = transfer(
        "raw HTTP /files (reqwest)",
        size,
        &want,
        || async {
            let body = reqwest::Body::wrap_stream(data_stream(size).map(Ok::<_, std::io::Error>));
            let resp = with_headers(http.post(&files_url))
                .query(&[("path", raw_path)])
                .header("Content-Type", "application/octet-stream")
                .body(body)
                .send()
                .await?;
            if !resp.status().is_success() {
                return Err(format!("upload: HTTP {}", resp.status()).into());
            }
            Ok(())
        },
        || async {
            let resp = with_headers(http.get(&files_url))
                .query(&[("path", raw_path)])
                .send()
                .await?;
            if !resp.status().is_success() {
                return Err(format!("download: HTTP {}", resp.status()).into());
            }
            let mut h = Sha256::new();
            let mut s = resp.bytes_stream();
            while let Some(b) = s.next().await {
                h.update(&b?);
            }
            Ok(h.finalize().to_vec())
        },
    )
    .await?;

    let e2b_fs = fs_e2b::E2bFs::new(api.clone(), fs_e2b::E2bFsOptions::new("/home/user"))?;
    let e2b_path = WorldPath::new("/home/user/adapter.bin")?;
    let ft = transfer(
        "fs-e2b",
        size,
        &want,
        || async {
            e2b_fs
                .write(&e2b_path, fs_stream(size), WriteOptions::default())
                .await?;
            Ok(())
        },
        || async { hash_stream(e2b_fs.read_stream(&e2b_path).await?).await },
    )
    .await?;
    println!(
        "  ratio fs-e2b / raw HTTP: {:.2}x (target >= 0.8x); fs-e2b / LocalFs: {:.2}x; peak host RSS during fs-e2b: {:.1} MiB (target < 64 MiB)",
        ft.mib_s / rt.mib_s.max(1e-9),
        ft.mib_s / lt.mib_s.max(1e-9),
        ft.peak_mib
    );

    read_cost(&api, &e2b_fs, &e2b_path, size_mib).await?;

    let _ = client.kill(sandbox.id()).await;
    let mut child = emu.child;
    drop(child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok(())
}

/// The reads of before (envd `Stat` for the size, then `GET /files` as root): the
/// baseline of [`read_cost`].
async fn read_as_root(api: &Arc<dyn EnvdApi>, path: &WorldPath) -> Result<Vec<u8>, AnyError> {
    api.stat(path.as_str(), None).await?;
    let mut h = Sha256::new();
    let mut s = api.download(path.as_str(), None).await?;
    while let Some(b) = s.next().await {
        h.update(&b?);
    }
    Ok(h.finalize().to_vec())
}

/// Small reads (p50/p99) and one large read, through fs-e2b's reader process (as the
/// acting user) and the root `GET /files` baseline, on the same files.
async fn read_cost(
    api: &Arc<dyn EnvdApi>,
    e2b_fs: &fs_e2b::E2bFs,
    large: &WorldPath,
    size_mib: u64,
) -> Result<(), AnyError> {
    println!(
        "\nread cost: fs-e2b reader process (as the user) vs before (envd Stat + GET /files as root)"
    );
    for (label, bytes) in [("1 KiB", 1024usize), ("1 MiB", 1 << 20)] {
        let p = WorldPath::new(format!("/home/user/read-{bytes}.bin"))?;
        e2b_fs
            .write(
                &p,
                exec_world::bytes_stream(vec![0x5a; bytes]),
                WriteOptions::default(),
            )
            .await?;
        println!("  {label}");
        let before = time_n("before: Stat + GET /files", 30, || async {
            read_as_root(api, &p).await?;
            Ok(())
        })
        .await?;
        let after = time_n("after: fs-e2b read", 30, || async {
            let b = e2b_fs.read(&p, 1 << 30).await?;
            if b.len() != bytes {
                return Err("short read".into());
            }
            Ok(())
        })
        .await?;
        println!(
            "  ratio after / before: p50 {:.2}x, p99 {:.2}x",
            after.p50.as_secs_f64() / before.p50.as_secs_f64().max(1e-9),
            after.p99.as_secs_f64() / before.p99.as_secs_f64().max(1e-9)
        );
    }
    println!("  {size_mib} MiB read (sha256 of each compared)");
    let mib = size_mib as f64;
    reset_peak_rss();
    let t = Instant::now();
    let want = read_as_root(api, large).await?;
    let before = t.elapsed().as_secs_f64();
    let before_rss = peak_rss_mib();
    reset_peak_rss();
    let t = Instant::now();
    let got = hash_stream(e2b_fs.read_stream(large).await?).await?;
    let after = t.elapsed().as_secs_f64();
    let after_rss = peak_rss_mib();
    if got != want {
        return Err("large read: hashes differ".into());
    }
    println!(
        "  before: Stat + GET /files   {:>8.1} MiB/s ({before:.2} s)   peak host RSS {before_rss:>6.1} MiB",
        mib / before.max(1e-9)
    );
    println!(
        "  after: fs-e2b read_stream   {:>8.1} MiB/s ({after:.2} s)   peak host RSS {after_rss:>6.1} MiB",
        mib / after.max(1e-9)
    );
    println!(
        "  ratio after / before (time): {:.2}x",
        after / before.max(1e-9)
    );
    Ok(())
}
