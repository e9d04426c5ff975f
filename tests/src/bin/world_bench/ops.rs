//! The latency mode's operations for the Rust contenders and curl: each operation
//! (`op_*`, one at a time, `WB_OP_ITER` timed runs after `WB_WARM` untimed ones) and the
//! transfers (`bw_up`, `bw_down`: one of `WB_LARGE_BYTES`), on files `WB_SETUP` prepared
//! in `WB_DIR` before the timing (`plan::setup_script`), so the timed part (and the
//! emulator's counters) hold only the operation.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use e2b_core::{Client, ConnectOptions, CreateOptions, EnvdApi, Sandbox, StartProcess};
use exec_world::sandbox::{CreateSpec, ExecSpec, SandboxProvider as _};
use exec_world::{Fs, WorldPath, WriteOptions, bytes_stream};
use futures::{Future, StreamExt as _};

use super::child::{self, AnyError, Outcome};
use super::opts::var;
use super::sandbox_env::{self, env};
use super::{data, ours, raw};

/// `contender` on the latency figure `figure`.
pub async fn run(contender: &str, figure: &str) -> Result<Outcome, AnyError> {
    if contender == "sandbox" {
        return provider(figure).await;
    }
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let out = async {
        let setup = env("WB_SETUP")?;
        let o = api
            .run(StartProcess::new("/bin/bash").args(["-c", &setup]))
            .await?;
        if o.end.exit_code != 0 {
            return Err(format!("setup `{setup}`: exit code {}", o.end.exit_code).into());
        }
        let dir = env("WB_DIR")?;
        let ctx = Ctx {
            client: &client,
            sandbox: &sandbox,
            api: &api,
            dir: &dir,
        };
        match contender {
            "raw" => raw_op(&ctx, figure).await,
            "ours" => ours_op(&ctx, figure).await,
            "curl" => curl_op(&ctx, figure).await,
            other => Err(format!("{other}: no latency figures").into()),
        }
    }
    .await;
    let _ = client.kill(sandbox.id()).await;
    out
}

/// A contender's sandbox and working directory.
struct Ctx<'a> {
    client: &'a Client,
    sandbox: &'a Sandbox,
    api: &'a Arc<dyn EnvdApi>,
    dir: &'a str,
}

/// `WB_WARM` untimed runs of `f(i)`, then `n` timed ones (`i` counts on, so names made
/// from it are fresh).
async fn timed<F, Fut>(n: u64, mut f: F) -> Result<Outcome, AnyError>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<(), AnyError>>,
{
    let warm = var("WB_WARM");
    for i in 0..warm {
        f(i).await?;
    }
    let mut samples = Vec::with_capacity(n as usize);
    child::mark("start");
    let t0 = Instant::now();
    for i in warm..warm + n {
        let t = Instant::now();
        f(i).await?;
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let secs = t0.elapsed().as_secs_f64();
    child::mark("end");
    Ok(Outcome {
        samples_ms: samples,
        ops: n,
        secs,
        ..Outcome::default()
    })
}

/// One timed transfer of `WB_LARGE_BYTES`.
async fn transfer<F, Fut>(f: F) -> Result<Outcome, AnyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), AnyError>>,
{
    let size = var("WB_LARGE_BYTES");
    child::transfers(1, size, f).await
}

/// The payload of a write figure (`op_write_4k`, `op_write_1m`).
async fn payload(figure: &str) -> Bytes {
    let size = if figure.ends_with("4k") {
        4096
    } else {
        1 << 20
    };
    Bytes::from(data::vec(size).await)
}

/// The size a read figure reads.
fn read_size(figure: &str) -> usize {
    if figure.ends_with("4k") {
        4096
    } else {
        1 << 20
    }
}

fn check_len(what: &str, got: usize, want: usize) -> Result<(), AnyError> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: {got} bytes, not {want}").into())
    }
}

/// Sandboxes made by `op_create`, killed after the timing.
type Made = Mutex<Vec<String>>;

async fn kill_made(client: &Client, made: &Made) {
    let ids: Vec<String> = made.lock().map(|v| v.clone()).unwrap_or_default();
    for id in ids {
        let _ = client.kill(&id).await;
    }
}

/// Raw e2b-core: one envd request per operation (`Start`, `/files`, a filesystem RPC).
async fn raw_op(c: &Ctx<'_>, figure: &str) -> Result<Outcome, AnyError> {
    let (api, dir, n) = (c.api, c.dir, var("WB_OP_ITER"));
    let start_true =
        |api: Arc<dyn EnvdApi>| async move { raw::start_ok(&api, StartProcess::new("true")).await };
    match figure {
        "op_exec" => timed(n, |_| start_true(api.clone())).await,
        f if f.starts_with("op_read") => {
            let (path, want) = (format!("{dir}/r.bin"), read_size(f));
            timed(n, |_| async {
                let got = api.download_bytes(&path, None, 2 << 20).await?;
                check_len(f, got.len(), want)
            })
            .await
        }
        f if f.starts_with("op_write") => {
            let (path, body) = (format!("{dir}/w.bin"), payload(f).await);
            timed(n, |_| async {
                api.upload_bytes(&path, None, body.clone()).await?;
                Ok(())
            })
            .await
        }
        "op_stat" => {
            let path = format!("{dir}/r.bin");
            timed(n, |_| async {
                api.stat(&path, None).await?;
                Ok(())
            })
            .await
        }
        "op_list" => {
            let path = format!("{dir}/list");
            timed(n, |_| async {
                let got = api.list_dir(&path, 1, None).await?;
                check_len("list", got.len(), 100)
            })
            .await
        }
        "op_mkdir" => {
            timed(n, |i| async move {
                api.make_dir(&format!("{dir}/m{i}"), None).await?;
                Ok(())
            })
            .await
        }
        "op_remove" => {
            timed(n, |i| async move {
                api.remove(&format!("{dir}/rm/{i}"), None).await?;
                Ok(())
            })
            .await
        }
        "op_rename" => {
            timed(n, |i| async move {
                let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
                let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
                api.rename(&from, &to, None).await?;
                Ok(())
            })
            .await
        }
        "op_create" => {
            let made = Made::default();
            let out = timed(var("WB_CREATE_N"), |_| async {
                let sb = c.client.create(&CreateOptions::new("base")).await?;
                if let Ok(mut m) = made.lock() {
                    m.push(sb.id().to_owned());
                }
                start_true(sb.into_api()).await
            })
            .await;
            kill_made(c.client, &made).await;
            out
        }
        "op_connect" => {
            timed(var("WB_CREATE_N"), |_| async {
                let sb = c
                    .client
                    .connect(c.sandbox.id(), ConnectOptions::default())
                    .await?;
                start_true(sb.into_api()).await
            })
            .await
        }
        "bw_up" => {
            let path = format!("{dir}/big.bin");
            transfer(|| async {
                let s = data::stream(var("WB_LARGE_BYTES"))
                    .map(Ok::<_, std::io::Error>)
                    .boxed();
                api.upload(&path, None, s).await?;
                Ok(())
            })
            .await
        }
        "bw_down" => {
            let path = format!("{dir}/big.bin");
            transfer(|| async {
                let mut s = api.download(&path, None).await?;
                let mut got = 0;
                while let Some(b) = s.next().await {
                    got += b?.len();
                }
                check_len("download", got, var("WB_LARGE_BYTES") as usize)
            })
            .await
        }
        other => Err(format!("raw: no figure {other}").into()),
    }
}

/// Ours: fs-e2b for the file operations, subprocess-e2b for the commands.
async fn ours_op(c: &Ctx<'_>, figure: &str) -> Result<Outcome, AnyError> {
    let n = var("WB_OP_ITER");
    let new_proc = |api: Arc<dyn EnvdApi>| {
        subprocess_e2b::E2bSubprocess::new(
            api,
            subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
        )
    };
    match figure {
        "op_exec" => {
            let p = new_proc(c.api.clone())?;
            return timed(n, |_| ours::spawn_true(&p)).await;
        }
        "op_create" => {
            let made = Made::default();
            let out = timed(var("WB_CREATE_N"), |_| async {
                let sb = c.client.create(&CreateOptions::new("base")).await?;
                if let Ok(mut m) = made.lock() {
                    m.push(sb.id().to_owned());
                }
                ours::spawn_true(&new_proc(sb.into_api())?).await
            })
            .await;
            kill_made(c.client, &made).await;
            return out;
        }
        "op_connect" => {
            return timed(var("WB_CREATE_N"), |_| async {
                let sb = c
                    .client
                    .connect(c.sandbox.id(), ConnectOptions::default())
                    .await?;
                ours::spawn_true(&new_proc(sb.into_api())?).await
            })
            .await;
        }
        _ => {}
    }
    let fs = fs_e2b::E2bFs::new(c.api.clone(), fs_e2b::E2bFsOptions::new("/home/user"))?;
    let fs = &fs;
    let at = |name: String| WorldPath::new(format!("{}/{name}", c.dir));
    match figure {
        f if f.starts_with("op_read") => {
            let (path, want) = (at("r.bin".into())?, read_size(f));
            // A bounded read, as a careful caller makes one (fs-e2b's `read` takes a
            // limit; the SDKs' read has none): at most 2 MiB, the size the warm worker
            // answers; an unbounded read takes the holder path.
            timed(n, |_| async {
                let got = fs.read(&path, 2 << 20).await?;
                check_len(f, got.len(), want)
            })
            .await
        }
        f if f.starts_with("op_write") => {
            let (path, body) = (at("w.bin".into())?, payload(f).await);
            timed(n, |_| async {
                fs.write(&path, bytes_stream(body.clone()), WriteOptions::default())
                    .await?;
                Ok(())
            })
            .await
        }
        "op_stat" => {
            let path = at("r.bin".into())?;
            timed(n, |_| async {
                fs.stat(&path).await?;
                Ok(())
            })
            .await
        }
        "op_list" => {
            let path = at("list".into())?;
            timed(n, |_| async {
                let got = fs.read_dir(&path).await?;
                check_len("list", got.len(), 100)
            })
            .await
        }
        "op_mkdir" => {
            timed(n, |i| async move {
                fs.mkdir(&at(format!("m{i}"))?, false).await?;
                Ok(())
            })
            .await
        }
        "op_remove" => {
            timed(n, |i| async move {
                fs.remove(&at(format!("rm/{i}"))?, false).await?;
                Ok(())
            })
            .await
        }
        "op_rename" => {
            let (a, b) = (at("a".into())?, at("b".into())?);
            let (a, b) = (&a, &b);
            timed(n, |i| async move {
                let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
                fs.rename(from, to).await?;
                Ok(())
            })
            .await
        }
        "bw_up" => {
            let path = at("big.bin".into())?;
            transfer(|| async {
                let s = data::stream(var("WB_LARGE_BYTES")).map(Ok).boxed();
                fs.write(&path, s, WriteOptions::default()).await?;
                Ok(())
            })
            .await
        }
        "bw_down" => {
            let path = at("big.bin".into())?;
            transfer(|| async {
                let mut s = fs.read_stream(&path).await?;
                let mut got = 0;
                while let Some(b) = s.next().await {
                    got += b?.len();
                }
                check_len("download", got, var("WB_LARGE_BYTES") as usize)
            })
            .await
        }
        other => Err(format!("ours: no figure {other}").into()),
    }
}

/// curl: one plain `curl` per `/files` request, the fastest honest way (`--data-binary
/// @file` up, no `Expect: 100-continue` wait; the body to `/dev/null` down, its size
/// checked).
async fn curl_op(c: &Ctx<'_>, figure: &str) -> Result<Outcome, AnyError> {
    let n = var("WB_OP_ITER");
    let local = std::env::temp_dir().join(format!("world-bench-curl-{}", std::process::id()));
    std::fs::create_dir_all(&local)?;
    let src = local.join("up.bin");
    let name = match figure {
        f if f.starts_with("op_read") => "r.bin",
        f if f.starts_with("op_write") => "w.bin",
        _ => "big.bin",
    };
    let url = format!("{}/files?path={}/{name}", c.sandbox.envd_url(), c.dir);
    let mut headers = vec![
        format!("E2b-Sandbox-Id: {}", c.sandbox.id()),
        "E2b-Sandbox-Port: 49983".to_owned(),
    ];
    if let Some(t) = c.sandbox.access_token() {
        headers.push(format!("X-Access-Token: {}", t.expose()));
    }
    let (url, headers, src) = (&url, &headers, &src);
    let download = |want: usize| async move {
        let out = super::curl::plain(headers)
            .args(["-o", "/dev/null", "-w", "%{size_download}"])
            .arg(url)
            .output()
            .await?;
        if !out.status.success() {
            return Err::<(), AnyError>(format!("curl download: {}", out.status).into());
        }
        let got: usize = String::from_utf8_lossy(&out.stdout).trim().parse()?;
        check_len("curl download", got, want)
    };
    let upload = || async move {
        let s = super::curl::plain(headers)
            .args(["-H", "Content-Type: application/octet-stream"])
            .arg("--data-binary")
            .arg(format!("@{}", src.display()))
            .args(["-o", "/dev/null"])
            .arg(url)
            .status()
            .await?;
        if !s.success() {
            return Err::<(), AnyError>(format!("curl upload: {s}").into());
        }
        Ok(())
    };
    let out = match figure {
        f if f.starts_with("op_read") => timed(n, |_| download(read_size(f))).await,
        f if f.starts_with("op_write") => {
            std::fs::write(src, payload(f).await)?;
            timed(n, |_| upload()).await
        }
        "bw_up" => {
            super::curl::write_file(src, var("WB_LARGE_BYTES")).await?;
            transfer(upload).await
        }
        "bw_down" => transfer(|| download(var("WB_LARGE_BYTES") as usize)).await,
        other => Err(format!("curl: no figure {other}").into()),
    };
    let _ = std::fs::remove_dir_all(&local);
    out
}

/// The sandbox@1 provider: its own sandbox (template `conversation`), `exec`,
/// `read_file`, `write_file`, `stat`, and `create` + the first `exec`.
async fn provider(figure: &str) -> Result<Outcome, AnyError> {
    let mut cfg = sandbox_e2b::SandboxConfig::new(env("E2B_API_KEY")?, "conversation");
    cfg.api_url = Some(env("E2B_API_URL")?);
    cfg.sandbox_url = Some(env("E2B_SANDBOX_URL")?);
    let sb = sandbox_e2b::E2bSandboxes::new(cfg)?;
    let name = format!("world-bench-{}", std::process::id());
    let h = sb.create(CreateSpec::new(name.clone())).await?;
    let (sb, h) = (&sb, &h);
    let run = |cmd: String| async move {
        let out = sb.exec(h, ExecSpec::new(cmd.clone())).await?;
        if out.exit_code != Some(0) {
            return Err::<(), AnyError>(format!("`{cmd}`: {out:?}").into());
        }
        Ok(())
    };
    let out = async {
        run(env("WB_SETUP")?).await?;
        let (dir, n) = (env("WB_DIR")?, var("WB_OP_ITER"));
        match figure {
            "op_exec" => timed(n, |_| run("true".into())).await,
            f if f.starts_with("op_read") => {
                let (path, want) = (format!("{dir}/r.bin"), read_size(f));
                // Bounded, as fs-e2b's read above (1 MiB: the largest file read here; the
                // provider asks its adapter for one byte more, within the warm worker's
                // 2 MiB).
                timed(n, |_| async {
                    let got = sb
                        .read_file(h, &path, 1 << 20)
                        .await?
                        .ok_or("read_file: missing")?;
                    check_len(f, got.data.len(), want)
                })
                .await
            }
            f if f.starts_with("op_write") => {
                let (path, body) = (format!("{dir}/w.bin"), payload(f).await);
                timed(n, |_| async {
                    sb.write_file(h, &path, &body).await?;
                    Ok(())
                })
                .await
            }
            "op_stat" => {
                let path = format!("{dir}/r.bin");
                timed(n, |_| async {
                    sb.stat(h, &path).await?.ok_or("stat: missing")?;
                    Ok(())
                })
                .await
            }
            "op_create" => {
                let made = Mutex::new(Vec::new());
                let out = timed(var("WB_CREATE_N"), |i| {
                    let (made, name) = (&made, format!("{name}-{i}"));
                    async move {
                        let h2 = sb.create(CreateSpec::new(name)).await?;
                        let out = sb.exec(&h2, ExecSpec::new("true")).await;
                        if let Ok(mut m) = made.lock() {
                            m.push(h2);
                        }
                        if out?.exit_code != Some(0) {
                            return Err("true: non-zero exit".into());
                        }
                        Ok(())
                    }
                })
                .await;
                let hs: Vec<_> = made.lock().map(|v| v.clone()).unwrap_or_default();
                for h2 in hs {
                    let _ = sb.destroy(&h2).await;
                }
                out
            }
            other => Err(format!("sandbox: no figure {other}").into()),
        }
    }
    .await;
    let _ = sb.destroy(h).await;
    out
}
