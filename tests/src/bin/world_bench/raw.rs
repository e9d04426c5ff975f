//! The raw e2b-core contenders: envd `Start` of the program itself (no adapter, no
//! wrapper) and `POST/GET /files`; and (`rawsh`) envd `Start` of `/bin/bash -c true`, the
//! program a shell-command exec runs (the sandbox@1 provider's `exec` takes a shell
//! command), for execs only.

use std::sync::Arc;

use e2b_core::proto::process::{DataEvent, ProcessEvent};
use e2b_core::{EnvdApi, StartProcess};
use futures::StreamExt as _;

use super::child::{self, AnyError, Outcome};
use super::files::{self, Body};
use super::opts::var;
use super::{local, sandbox_env};

async fn start_true(api: &Arc<dyn EnvdApi>) -> Result<(), AnyError> {
    start_ok(api, StartProcess::new("true")).await
}

/// One envd `Start` of `spec`, run to its end; a non-zero exit is an error.
pub async fn start_ok(api: &Arc<dyn EnvdApi>, spec: StartProcess) -> Result<(), AnyError> {
    let out = api.start_process(spec).await?.wait_output().await?;
    if out.end.exit_code != 0 {
        return Err(format!("exit code {}", out.end.exit_code).into());
    }
    Ok(())
}

/// `rawsh` on an exec figure: envd `Start` of `/bin/bash -c true`.
pub async fn run_shell(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let once = || start_ok(&api, StartProcess::new("/bin/bash").args(["-c", "true"]));
    let out = match figure {
        "exec_seq" => child::sequential(var("WB_ITER"), once).await,
        f if f.starts_with("exec_c") => {
            child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), once).await
        }
        f => Err(format!("rawsh measures execs only, not {f}").into()),
    };
    let _ = client.kill(sandbox.id()).await;
    out
}

async fn start_flood(api: &Arc<dyn EnvdApi>, size: u64) -> Result<u64, AnyError> {
    let mut s = api
        .start_process(StartProcess::new("head").args(["-c", &size.to_string(), "/dev/zero"]))
        .await?;
    let mut n = 0u64;
    let mut ended = false;
    while let Some(ev) = s.next().await {
        match ev? {
            ProcessEvent::Data(DataEvent::Stdout(b)) => n += b.len() as u64,
            ProcessEvent::End(_) => ended = true,
            _ => {}
        }
    }
    if !ended {
        return Err("flood: no end event".into());
    }
    Ok(n)
}

/// Raw e2b-core on `figure`.
pub async fn run(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let path = "/home/user/wb-raw.bin";
    let out = match figure {
        "exec_seq" => child::sequential(var("WB_ITER"), || start_true(&api)).await,
        f if f.starts_with("exec_c") => {
            child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), || start_true(&api)).await
        }
        "flood" => local::flood(|size| start_flood(&api, size)).await,
        f => {
            files::run(
                f,
                |body: Body| {
                    let s = body.stream().map(Ok::<_, std::io::Error>).boxed();
                    let api = &api;
                    async move {
                        api.upload(path, None, s).await?;
                        Ok(())
                    }
                },
                || async { super::data::hash_of(api.download(path, None).await?).await },
            )
            .await
        }
    };
    let _ = client.kill(sandbox.id()).await;
    out
}
