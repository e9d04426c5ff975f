//! `files-bench`: fs-e2b's file transfers against curl on the same emulator, in one run.
//!
//! Run: `cargo run --release -p integration-tests --bin files-bench [-- --size-mib M --small N --execs N --rounds R --http2]`
//!
//! Prints, for a large file (`--size-mib`, default 256) and for `--small` (default 100)
//! files of 1 MiB: write then read through `E2bFs` (as the default user) and through
//! `curl` (`POST` then `GET /files`, one curl process per request), in MiB/s of data moved
//! both ways, the ratio fs-e2b / curl and this process's peak RSS (VmHWM, reset before
//! each figure). `--http2` makes e2b-core speak HTTP/2 (prior knowledge) instead of
//! HTTP/1.1. Then, to compare the protocols on execs: the p50 of `--execs` (default 200)
//! sequential raw e2b-core runs of `true`, and the p50 of `--rounds` (default 10) rounds
//! of 64 concurrent ones. The emulator runs in a child process (this binary with `--serve-emulator`),
//! so the memory figure is the client's alone. Figures, not assertions.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use e2b_core::{Client, Config, CreateOptions, Sandbox};
use exec_world::{ByteStream, Fs, WorldPath, WriteOptions};
use futures::StreamExt as _;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt as _, BufReader};

type AnyError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve-emulator") {
        if let Err(e) = serve_emulator().await {
            eprintln!("files-bench emulator: {e}");
            std::process::exit(1);
        }
        return;
    }
    let flag = |name: &str| -> Option<u64> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1)?.parse().ok()
    };
    let size_mib = flag("--size-mib").unwrap_or(256);
    let small = flag("--small").unwrap_or(100);
    let http2 = args.iter().any(|a| a == "--http2");
    let execs = flag("--execs").unwrap_or(200);
    let rounds = flag("--rounds").unwrap_or(10);
    if let Err(e) = run(size_mib, small, http2, execs, rounds).await {
        eprintln!("files-bench: {e}");
        std::process::exit(1);
    }
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

/// Deterministic incompressible bytes (xorshift), `len` of them.
fn data(len: usize, seed: u64) -> Bytes {
    let mut state = seed | 1;
    let mut buf = Vec::with_capacity(len + 8);
    while buf.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        buf.extend_from_slice(&state.to_le_bytes());
    }
    buf.truncate(len);
    Bytes::from(buf)
}

/// `total` bytes as a stream of 256 KiB chunks, generated as they are taken.
fn stream_of(total: u64) -> ByteStream {
    let chunk = data(256 << 10, 7);
    let mut left = total;
    Box::pin(futures::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = left.min(chunk.len() as u64) as usize;
        left -= n as u64;
        std::task::Poll::Ready(Some(Ok(chunk.slice(..n))))
    }))
}

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

/// curl with the sandbox's routing headers.
fn curl(sandbox: &Sandbox) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("curl");
    c.args(["-sS", "-f", "-o", "/dev/null"])
        .arg("-H")
        .arg(format!("E2b-Sandbox-Id: {}", sandbox.id()))
        .args(["-H", "E2b-Sandbox-Port: 49983"]);
    if let Some(t) = sandbox.access_token() {
        c.arg("-H").arg(format!("X-Access-Token: {}", t.expose()));
    }
    c
}

/// `POST` the file `src` to `path`, then `GET` it, each with one curl process.
async fn curl_round(sandbox: &Sandbox, src: &str, path: &str) -> Result<(), AnyError> {
    let url = format!("{}/files?path={path}", sandbox.envd_url());
    let post = curl(sandbox)
        .args(["-H", "Content-Type: application/octet-stream"])
        .arg("--data-binary")
        .arg(format!("@{src}"))
        .arg(&url)
        .status()
        .await?;
    let get = curl(sandbox).arg(&url).status().await?;
    if !post.success() || !get.success() {
        return Err(format!("curl failed: {post} / {get}").into());
    }
    Ok(())
}

/// Prints one figure and returns its MiB/s.
fn report(name: &str, bytes: u64, secs: f64) -> f64 {
    let mib_s = 2.0 * bytes as f64 / (1024.0 * 1024.0) / secs;
    println!(
        "  {name:<34} {mib_s:>8.1} MiB/s  ({secs:.2} s)   peak host RSS {:>6.1} MiB",
        peak_rss_mib()
    );
    mib_s
}

/// The p50 of `times`, in milliseconds.
fn p50_ms(mut times: Vec<std::time::Duration>) -> f64 {
    times.sort();
    times
        .get(times.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Exec figures: sequential runs of `true`, then rounds of 64 concurrent ones.
async fn exec_figures(
    api: &std::sync::Arc<dyn e2b_core::EnvdApi>,
    execs: u64,
    rounds: u64,
) -> Result<(), AnyError> {
    let one = || e2b_core::StartProcess::new("true");
    for _ in 0..5 {
        api.run(one()).await?;
    }
    let mut seq = Vec::new();
    for _ in 0..execs {
        let t = Instant::now();
        let out = api.run(one()).await?;
        seq.push(t.elapsed());
        if out.end.exit_code != 0 {
            return Err("true failed".into());
        }
    }
    println!(
        "
exec `true`, raw e2b-core run, sequential x{execs}"
    );
    println!("  p50 {:.2} ms", p50_ms(seq));
    let mut per_round = Vec::new();
    let mut errors = 0usize;
    for _ in 0..rounds {
        let t = Instant::now();
        let all = futures::future::join_all((0..64).map(|_| api.run(one()))).await;
        per_round.push(t.elapsed());
        errors += all.iter().filter(|r| r.is_err()).count();
    }
    println!("64 concurrent execs x{rounds} rounds");
    println!(
        "  p50 per round {:.1} ms, errors {errors}",
        p50_ms(per_round)
    );
    Ok(())
}

async fn run(
    size_mib: u64,
    small: u64,
    http2: bool,
    execs: u64,
    rounds: u64,
) -> Result<(), AnyError> {
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
    let var = |k: &str| {
        vars.get(k)
            .cloned()
            .ok_or(format!("emulator did not print {k}"))
    };
    let cfg = Config::new()
        .with_api_key(var("E2B_API_KEY")?)
        .with_api_url(var("E2B_API_URL")?)
        .with_sandbox_url(var("E2B_SANDBOX_URL")?)
        .with_http2(http2);
    let client = Client::new(cfg)?;
    let sandbox = client.create(&CreateOptions::new("base")).await?;
    let fs = fs_e2b::E2bFs::new(
        sandbox.clone().into_api(),
        fs_e2b::E2bFsOptions::new("/home/user"),
    )?;
    let scratch = std::env::temp_dir().join(format!("files-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let proto = if http2 { "HTTP/2" } else { "HTTP/1.1" };
    println!("files-bench: fs-e2b ({proto}) against curl, write then read");

    // Large file.
    let size = size_mib << 20;
    let big_src = scratch.join("big.bin");
    {
        let mut f = tokio::fs::File::create(&big_src).await?;
        let mut s = stream_of(size);
        while let Some(b) = s.next().await {
            f.write_all(&b?).await?;
        }
        f.flush().await?;
    }
    println!("\n{size_mib} MiB");
    let t = Instant::now();
    curl_round(
        &sandbox,
        &big_src.to_string_lossy(),
        "/home/user/curl-big.bin",
    )
    .await?;
    let curl_big = report("curl POST + GET", size, t.elapsed().as_secs_f64());
    let big = WorldPath::new("/home/user/fs-big.bin")?;
    reset_peak_rss();
    let t = Instant::now();
    fs.write(&big, stream_of(size), WriteOptions::default())
        .await?;
    let mut got = 0u64;
    let mut s = fs.read_stream(&big).await?;
    while let Some(b) = s.next().await {
        got += b?.len() as u64;
    }
    if got != size {
        return Err(format!("read back {got} bytes of {size}").into());
    }
    let ours = report(
        "fs-e2b write + read_stream",
        size,
        t.elapsed().as_secs_f64(),
    );
    println!(
        "  ratio fs-e2b / curl: {:.2}x (target >= 0.9x)",
        ours / curl_big
    );

    // Small files.
    let one = data(1 << 20, 11);
    let small_src = scratch.join("small.bin");
    std::fs::write(&small_src, &one)?;
    println!("\n{small} x 1 MiB");
    let t = Instant::now();
    for i in 0..small {
        let p = format!("/home/user/curl-small-{i}.bin");
        curl_round(&sandbox, &small_src.to_string_lossy(), &p).await?;
    }
    let curl_small = report("curl POST + GET", small << 20, t.elapsed().as_secs_f64());
    reset_peak_rss();
    let t = Instant::now();
    for i in 0..small {
        let p = WorldPath::new(format!("/home/user/fs-small-{i}.bin"))?;
        fs.write(
            &p,
            exec_world::bytes_stream(one.clone()),
            WriteOptions::default(),
        )
        .await?;
        let back = fs.read(&p, 2 << 20).await?;
        if back != one {
            return Err(format!("{p}: read back differs").into());
        }
    }
    let ours = report(
        "fs-e2b write + read",
        small << 20,
        t.elapsed().as_secs_f64(),
    );
    println!(
        "  ratio fs-e2b / curl: {:.2}x (target >= 0.5x)",
        ours / curl_small
    );

    exec_figures(&sandbox.clone().into_api(), execs, rounds).await?;

    let _ = std::fs::remove_dir_all(&scratch);
    let _ = client.kill(sandbox.id()).await;
    drop(child.stdin.take());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await;
    Ok(())
}
