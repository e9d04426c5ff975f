//! Our adapters: subprocess-e2b (execs, flood) and fs-e2b (files) over one sandbox.

use exec_world::{Fs, SpawnSpec, Subprocess, WorldPath, WriteOptions};
use futures::StreamExt as _;

use super::child::{self, AnyError, Outcome};
use super::files::{self, Body};
use super::opts::var;
use super::{data, local, sandbox_env};

/// One `spawn` of `true` through subprocess-e2b, waited for; a non-zero exit is an error.
pub async fn spawn_true(p: &subprocess_e2b::E2bSubprocess) -> Result<(), AnyError> {
    let s = p.spawn(SpawnSpec::new("true"))?.wait().await?;
    if s.code != Some(0) {
        return Err(format!("true: {s:?}").into());
    }
    Ok(())
}

async fn spawn_flood(p: &subprocess_e2b::E2bSubprocess, size: u64) -> Result<u64, AnyError> {
    let mut c = p.spawn(
        SpawnSpec::new("head")
            .arg("-c")
            .arg(size.to_string())
            .arg("/dev/zero"),
    )?;
    let mut out = c.take_stdout().ok_or("no stdout")?;
    let mut n = 0u64;
    while let Some(b) = out.next().await {
        n += b?.len() as u64;
    }
    c.wait().await?;
    Ok(n)
}

/// subprocess-e2b / fs-e2b on `figure`.
pub async fn run(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let out = if figure.starts_with("files") {
        let fs = fs_e2b::E2bFs::new(api.clone(), fs_e2b::E2bFsOptions::new("/home/user"))?;
        let path = WorldPath::new("/home/user/wb-ours.bin")?;
        files::run(
            figure,
            |body: Body| {
                let s = body.stream().map(Ok).boxed();
                let (fs, path) = (&fs, &path);
                async move {
                    fs.write(path, s, WriteOptions::default()).await?;
                    Ok(())
                }
            },
            || async { data::hash_of(fs.read_stream(&path).await?).await },
        )
        .await
    } else {
        let p = subprocess_e2b::E2bSubprocess::new(
            api.clone(),
            subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
        )?;
        match figure {
            "exec_seq" => child::sequential(var("WB_ITER"), || spawn_true(&p)).await,
            f if f.starts_with("exec_c") => {
                child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), || spawn_true(&p)).await
            }
            "flood" => local::flood(|size| spawn_flood(&p, size)).await,
            other => Err(format!("ours: no figure {other}").into()),
        }
    };
    let _ = client.kill(sandbox.id()).await;
    out
}
