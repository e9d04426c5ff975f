//! The transfer contenders: ours (`exec_world::tree::{upload,download}_via_file` on
//! fs-e2b and subprocess-e2b) and the baseline `tarcurl`: host `tar -c` into a file, one
//! plain `curl --data-binary @file` into envd's `/files`, one envd process `tar -x`
//! (upload); one envd process `tar -c` into a file, one plain `curl` of it piped into host
//! `tar -x` (download). The download's archive is removed after the timing for the
//! baseline (so the baseline is flattered), inside it for ours.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use e2b_core::StartProcess;
use exec_world::tree::{self, TreeOptions};
use exec_world::{Fs as _, SpawnSpec, Subprocess as _, WorldPath, WriteOptions};
use fs_e2b::{E2bFs, E2bFsOptions};
use futures::StreamExt as _;
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};

use super::super::child::{self, AnyError, Outcome};
use super::super::opts::var;
use super::super::{curl, raw, sandbox_env};
use super::{data, env};

/// Where the tree goes in the sandbox (upload) or is read from (download).
const TREE: &str = "/home/user/wbtree";
/// The baseline's archive in the sandbox.
const ARCHIVE: &str = "/home/user/wb-tree.tar";

/// Runs `sh -c SCRIPT sh ARGS…` in the sandbox as its user; stdout, trimmed.
pub async fn sandbox_sh(
    proc: &E2bSubprocess,
    script: &str,
    args: &[&str],
) -> Result<String, AnyError> {
    let mut c = proc.spawn(
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args.iter().map(|a| a.to_string())),
    )?;
    let mut out = c.take_stdout().ok_or("no stdout")?;
    let mut err = c.take_stderr().ok_or("no stderr")?;
    let (o, e) = futures::join!(
        async {
            let mut v = Vec::new();
            while let Some(Ok(b)) = out.next().await {
                v.extend_from_slice(&b);
            }
            v
        },
        async {
            let mut v = Vec::new();
            while let Some(Ok(b)) = err.next().await {
                v.extend_from_slice(&b);
            }
            v
        }
    );
    let st = c.wait().await?;
    if !st.success() {
        return Err(format!(
            "`{script}` in the sandbox: {st:?}: {}",
            String::from_utf8_lossy(&e).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&o).trim().to_owned())
}

/// Our adapters over one fresh sandbox.
async fn adapters() -> Result<(e2b_core::Client, e2b_core::Sandbox, E2bFs, E2bSubprocess), AnyError>
{
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let fs = E2bFs::new(api.clone(), E2bFsOptions::new("/home/user"))?;
    let proc = E2bSubprocess::new(api, E2bSubprocessOptions::new("/home/user"))?;
    Ok((client, sandbox, fs, proc))
}

/// Untimed setup of a download: the host's archive of the tree written through fs-e2b
/// and extracted at [`TREE`] by one `tar` in the sandbox.
async fn put_tree(fs: &E2bFs, proc: &E2bSubprocess) -> Result<(), AnyError> {
    let tar = PathBuf::from(env("WB_TREE_TAR")?);
    let file = tokio::fs::File::open(&tar).await?;
    let body = tokio_util::io::ReaderStream::with_capacity(file, 256 << 10)
        .map(|r| r.map_err(|e| exec_world::Error::io("reading the archive", e)));
    fs.write(
        &WorldPath::new(ARCHIVE)?,
        Box::pin(body),
        WriteOptions::default(),
    )
    .await?;
    sandbox_sh(
        proc,
        "mkdir -p \"$1\" && tar -x -f \"$2\" -C \"$1\" && rm -f \"$2\"",
        &[TREE, ARCHIVE],
    )
    .await?;
    Ok(())
}

/// Untimed: the adapters' first operations (a process, a write), so their one-time
/// per-sandbox setup is not in the figure (a harness keeps its adapters; the download's
/// setup warms them the same way).
async fn warm(fs: &E2bFs, proc: &E2bSubprocess) -> Result<(), AnyError> {
    sandbox_sh(proc, "true", &[]).await?;
    let p = WorldPath::new("/home/user/wb-warm")?;
    fs.write(
        &p,
        Box::pin(futures::stream::iter([Ok(bytes::Bytes::from_static(b"w"))])),
        WriteOptions::default(),
    )
    .await?;
    fs.remove(&p, false).await?;
    Ok(())
}

/// Resets this process's peak RSS to its current RSS (Linux `clear_refs` 5), so the peak
/// `wait4` reports afterwards is the transfer's, not the setup's.
fn reset_peak_rss() -> Result<(), AnyError> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| format!("resetting the peak RSS (/proc/self/clear_refs): {e}").into())
}

/// Fails unless the sandbox's [`TREE`] has the source's digest.
async fn check_upload(proc: &E2bSubprocess) -> Result<(), AnyError> {
    let want = env("WB_TREE_DIGEST")?;
    let got = sandbox_sh(proc, data::DIGEST, &[TREE]).await?;
    if got != want {
        return Err(format!("the uploaded tree differs (digest {got}, want {want})").into());
    }
    Ok(())
}

/// ours on `tree_up` / `tree_down`.
pub async fn run_ours(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, fs, proc) = adapters().await?;
    let r = async {
        let src = PathBuf::from(env("WB_TREE_SRC")?);
        let out = PathBuf::from(env("WB_TREE_OUT")?);
        let world = WorldPath::new(TREE)?;
        let bytes = var("WB_TREE_BYTES");
        let opts = TreeOptions::default();
        match figure {
            "tree_up" => {
                warm(&fs, &proc).await?;
                reset_peak_rss()?;
                let o = child::transfers(1, bytes, || async {
                    tree::upload_via_file(&fs, &proc, &src, &world, &opts).await?;
                    Ok(())
                })
                .await?;
                check_upload(&proc).await?;
                Ok(o)
            }
            "tree_down" => {
                put_tree(&fs, &proc).await?;
                reset_peak_rss()?;
                child::transfers(1, bytes, || async {
                    tree::download_via_file(&fs, &proc, &world, &out, &opts).await?;
                    Ok(())
                })
                .await
            }
            f => Err(format!("ours: no tree figure {f}").into()),
        }
    }
    .await;
    let _ = client.kill(sandbox.id()).await;
    r
}

/// The baseline on `tree_up` / `tree_down`.
pub async fn run_tarcurl(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, fs, proc) = adapters().await?;
    let api = sandbox.clone().into_api();
    let headers = curl::envd_headers(&sandbox);
    let url = format!("{}/files?path={ARCHIVE}", sandbox.envd_url());
    let tmp = std::env::temp_dir().join(format!("world-bench-tarcurl-{}", std::process::id()));
    let r = async {
        std::fs::create_dir_all(&tmp)?;
        let src = PathBuf::from(env("WB_TREE_SRC")?);
        let out = PathBuf::from(env("WB_TREE_OUT")?);
        let bytes = var("WB_TREE_BYTES");
        match figure {
            "tree_up" => {
                let local_tar = tmp.join("up.tar");
                reset_peak_rss()?;
                let o = child::transfers(1, bytes, || async {
                    host_tar_c(&src, &local_tar).await?;
                    let s = curl::plain(&headers)
                        .args(["-H", "Content-Type: application/octet-stream"])
                        .arg("--data-binary")
                        .arg(format!("@{}", local_tar.display()))
                        .args(["-o", "/dev/null"])
                        .arg(&url)
                        .status()
                        .await?;
                    if !s.success() {
                        return Err(format!("curl upload: {s}").into());
                    }
                    raw::start_ok(
                        &api,
                        StartProcess::new("sh").args([
                            "-c",
                            "mkdir -p \"$1\" && tar -x -f \"$2\" -C \"$1\" && rm -f \"$2\"",
                            "sh",
                            TREE,
                            ARCHIVE,
                        ]),
                    )
                    .await
                })
                .await?;
                check_upload(&proc).await?;
                Ok(o)
            }
            "tree_down" => {
                put_tree(&fs, &proc).await?;
                reset_peak_rss()?;
                let o = child::transfers(1, bytes, || async {
                    raw::start_ok(
                        &api,
                        StartProcess::new("sh").args([
                            "-c",
                            "tar -c -f \"$2\" -C \"$1\" .",
                            "sh",
                            TREE,
                            ARCHIVE,
                        ]),
                    )
                    .await?;
                    curl_into_tar(&headers, &url, &out).await
                })
                .await?;
                sandbox_sh(&proc, "rm -f \"$1\"", &[ARCHIVE]).await?;
                Ok(o)
            }
            f => Err(format!("tarcurl: no tree figure {f}").into()),
        }
    }
    .await;
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = client.kill(sandbox.id()).await;
    r
}

/// Host `tar -c -f TAR -C SRC .`.
async fn host_tar_c(src: &Path, tar: &Path) -> Result<(), AnyError> {
    let s = tokio::process::Command::new("tar")
        .arg("-c")
        .arg("-f")
        .arg(tar)
        .arg("-C")
        .arg(src)
        .arg(".")
        .status()
        .await?;
    if !s.success() {
        return Err(format!("tar -c: {s}").into());
    }
    Ok(())
}

/// `curl URL | tar -x -C OUT` (OUT made first).
async fn curl_into_tar(headers: &[String], url: &str, out: &Path) -> Result<(), AnyError> {
    std::fs::create_dir_all(out)?;
    let mut c = curl::plain(headers)
        .arg(url)
        .stdout(Stdio::piped())
        .spawn()?;
    let pipe: Stdio = c.stdout.take().ok_or("curl: no stdout")?.try_into()?;
    let t = tokio::process::Command::new("tar")
        .args(["-x", "--no-same-owner", "-f", "-", "-C"])
        .arg(out)
        .stdin(pipe)
        .status();
    let (cs, ts) = futures::join!(c.wait(), t);
    let (cs, ts) = (cs?, ts?);
    if !cs.success() || !ts.success() {
        return Err(format!("curl | tar -x: curl {cs}, tar {ts}").into());
    }
    Ok(())
}
