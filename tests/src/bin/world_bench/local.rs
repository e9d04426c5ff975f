//! Contenders on this machine: bare `tokio::process` and exec-world's `LocalSubprocess`.

use exec_world::{LocalSubprocess, SpawnSpec, Subprocess};
use futures::StreamExt as _;
use tokio::io::AsyncReadExt as _;

use super::child::{self, AnyError, Outcome};
use super::opts::var;

async fn tokio_true() -> Result<(), AnyError> {
    let s = tokio::process::Command::new("true").status().await?;
    if !s.success() {
        return Err(format!("true: {s}").into());
    }
    Ok(())
}

async fn tokio_flood(size: u64) -> Result<u64, AnyError> {
    let mut c = tokio::process::Command::new("head")
        .args(["-c", &size.to_string(), "/dev/zero"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut out = c.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let k = out.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    c.wait().await?;
    Ok(n)
}

/// Bare tokio::process on `figure`.
pub async fn tokio_run(figure: &str) -> Result<Outcome, AnyError> {
    match figure {
        "exec_seq" => child::sequential(var("WB_ITER"), tokio_true).await,
        f if f.starts_with("exec_c") => {
            child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), tokio_true).await
        }
        "flood" => flood(tokio_flood).await,
        other => Err(format!("tokio: no figure {other}").into()),
    }
}

async fn local_true(p: &LocalSubprocess) -> Result<(), AnyError> {
    let s = p.spawn(SpawnSpec::new("true"))?.wait().await?;
    if s.code != Some(0) {
        return Err(format!("true: {s:?}").into());
    }
    Ok(())
}

async fn local_flood(p: &LocalSubprocess, size: u64) -> Result<u64, AnyError> {
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

/// `LocalSubprocess` on `figure`.
pub async fn local_run(figure: &str) -> Result<Outcome, AnyError> {
    let p = LocalSubprocess::new()?;
    match figure {
        "exec_seq" => child::sequential(var("WB_ITER"), || local_true(&p)).await,
        f if f.starts_with("exec_c") => {
            child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), || local_true(&p)).await
        }
        "flood" => flood(|size| local_flood(&p, size)).await,
        other => Err(format!("local: no figure {other}").into()),
    }
}

/// The flood figure: one run of `f` printing `WB_FLOOD_BYTES` bytes, every byte counted.
pub async fn flood<F, Fut>(f: F) -> Result<Outcome, AnyError>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, AnyError>>,
{
    let size = var("WB_FLOOD_BYTES");
    let got = std::cell::Cell::new(0);
    let mut out = child::transfers(1, size, || async {
        got.set(f(size).await?);
        Ok(())
    })
    .await?;
    let got = got.get();
    if got != size {
        return Err(format!("flood: received {got} of {size} bytes").into());
    }
    out.bytes = size;
    Ok(out)
}
