//! Durable commands (issue 20) beside their baselines: `exec_durable`, a durable start of
//! `true` plus an attach to its end (subprocess-e2b `durable`) against an exec of `true`
//! (`ours`); `attach_64m`, an attach to a finished command with `WB_LARGE_BYTES` (at most
//! 64 MiB) kept, read to the end (`durable`), against a read of the same bytes from a file
//! through fs-e2b (`ours`). Both contenders read the same content (`/dev/urandom` copied
//! into a file; the command `cat`s it) and hash what arrives. `exec_bg`: a `sleep 0.2`
//! started durably and attached to until it ends, against the official SDKs'
//! `commands.run(background)` + `commands.connect(pid)` + `wait` (they cannot attach to
//! an ended command, so they get no `attach_64m`).

use exec_world::{DurableId, DurableSpec, Fs, OutputOffsets, SpawnSpec, Subprocess, WorldPath};
use futures::StreamExt as _;
use sha2::{Digest, Sha256};

use super::child::{self, AnyError, Outcome};
use super::opts::var;
use super::{ours, sandbox_env};

/// The largest record `attach_64m` reads.
const MAX_ATTACH: u64 = 64 << 20;

/// One durable start of `true`, waited for, and an attach to its end, waited for.
async fn durable_true(p: &subprocess_e2b::E2bSubprocess) -> Result<(), AnyError> {
    let id = DurableId::random();
    let mut c = p.spawn(SpawnSpec::new("true").durable(DurableSpec::new(id.clone())))?;
    drop(c.take_stdout());
    drop(c.take_stderr());
    let s = c.wait().await?;
    if !s.success() {
        return Err(format!("durable true: {s:?}").into());
    }
    let a = p.durable_attach(&id, OutputOffsets::default()).await?;
    let s = a.child.wait().await?;
    if !s.success() {
        return Err(format!("attached true: {s:?}").into());
    }
    Ok(())
}

/// `exec_bg`: a durable start of [`BG_COMMAND`](super::plan::BG_COMMAND) and an attach
/// to it (as a restarted host would), waited for to its end.
async fn durable_bg(p: &subprocess_e2b::E2bSubprocess) -> Result<(), AnyError> {
    let id = DurableId::random();
    let c = p.spawn(
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(super::plan::BG_COMMAND)
            .durable(DurableSpec::new(id.clone())),
    )?;
    drop(c);
    let a = p.durable_attach(&id, OutputOffsets::default()).await?;
    let s = a.child.wait().await?;
    if !s.success() {
        return Err(format!("attached {}: {s:?}", super::plan::BG_COMMAND).into());
    }
    Ok(())
}

/// The SHA-256 of everything `s` gives.
async fn hash_stream(mut s: exec_world::OutputStream) -> Result<(u64, Vec<u8>), AnyError> {
    let mut h = Sha256::new();
    let mut n = 0u64;
    while let Some(c) = s.next().await {
        let c = c?;
        n += c.len() as u64;
        h.update(&c);
    }
    Ok((n, h.finalize().to_vec()))
}

/// `contender` (`ours` or `durable`) on `figure` (`exec_durable` or `attach_64m`).
pub async fn run(contender: &str, figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let out = async {
        let p = subprocess_e2b::E2bSubprocess::new(
            api.clone(),
            subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
        )?;
        match (figure, contender) {
            ("exec_durable", "ours") => {
                child::sequential(var("WB_ITER"), || ours::spawn_true(&p)).await
            }
            ("exec_durable", "durable") => {
                child::sequential(var("WB_ITER"), || durable_true(&p)).await
            }
            ("exec_bg", "durable") => {
                child::sequential(var("WB_ITER").min(20), || durable_bg(&p)).await
            }
            ("attach_64m", _) => attach(&p, &api, contender).await,
            _ => Err(format!("{contender}: no figure {figure}").into()),
        }
    }
    .await;
    let _ = client.kill(sandbox.id()).await;
    out
}

/// `attach_64m`: the content made first (untimed), then three timed reads.
async fn attach(
    p: &subprocess_e2b::E2bSubprocess,
    api: &std::sync::Arc<dyn e2b_core::EnvdApi>,
    contender: &str,
) -> Result<Outcome, AnyError> {
    let size = var("WB_LARGE_BYTES").clamp(1, MAX_ATTACH);
    let file = "/home/user/wb-attach.bin";
    let o = api
        .run(e2b_core::StartProcess::new("/bin/sh").args([
            "-c".to_owned(),
            format!("head -c {size} /dev/urandom > {file}"),
        ]))
        .await?;
    if o.end.exit_code != 0 {
        return Err("making the attach content failed".into());
    }
    let id = DurableId::random();
    let mut c = p.spawn(
        SpawnSpec::new("cat")
            .arg(file)
            .durable(DurableSpec::new(id.clone()).output_cap(size)),
    )?;
    let (_, want) = hash_stream(c.take_stdout().ok_or("no stdout")?).await?;
    c.wait().await?;
    let fs = fs_e2b::E2bFs::new(api.clone(), fs_e2b::E2bFsOptions::new("/home/user"))?;
    let path = WorldPath::new(file)?;
    let read_once = || async {
        let (n, got) = match contender {
            "durable" => {
                let mut a = p.durable_attach(&id, OutputOffsets::default()).await?;
                let got = hash_stream(a.child.take_stdout().ok_or("no stdout")?).await?;
                a.child.wait().await?;
                got
            }
            _ => hash_stream(fs.read_stream(&path).await?).await?,
        };
        if n != size || got != want {
            return Err::<(), AnyError>(
                format!("{contender}: read {n} bytes, hash differs").into(),
            );
        }
        Ok(())
    };
    read_once().await?;
    child::transfers(3, size, read_once).await
}
