//! The sandbox@1 provider (sandbox-e2b) on the `conversation` template: `exec` and
//! `write_file` / `read_file`.

use exec_world::sandbox::{CreateSpec, ExecSpec, SandboxProvider as _};
use sha2::{Digest, Sha256};

use super::child::{self, AnyError, Outcome};
use super::files::{self, Body};
use super::opts::var;
use super::sandbox_env::env;

/// sandbox-e2b on `figure`.
pub async fn run(figure: &str) -> Result<Outcome, AnyError> {
    let mut c = sandbox_e2b::SandboxConfig::new(env("E2B_API_KEY")?, "conversation");
    c.api_url = Some(env("E2B_API_URL")?);
    c.sandbox_url = Some(env("E2B_SANDBOX_URL")?);
    let sb = sandbox_e2b::E2bSandboxes::new(c)?;
    let h = sb
        .create(CreateSpec::new(format!(
            "world-bench-{}",
            std::process::id()
        )))
        .await?;
    let exec = || async {
        let out = sb.exec(&h, ExecSpec::new("true")).await?;
        if out.exit_code != Some(0) {
            return Err::<(), AnyError>(format!("true: {out:?}").into());
        }
        Ok(())
    };
    let path = "/workspace/wb-sandbox.bin";
    let out = match figure {
        "exec_seq" => child::sequential(var("WB_ITER"), exec).await,
        f if f.starts_with("exec_c") => {
            child::concurrent(var("WB_ROUNDS"), var("WB_CONC"), exec).await
        }
        f if f.starts_with("files") => {
            files::run(
                f,
                |body: Body| {
                    let (sb, h) = (&sb, &h);
                    async move {
                        let b = body.bytes().await;
                        sb.write_file(h, path, &b).await?;
                        Ok(())
                    }
                },
                || async {
                    let got = sb
                        .read_file(&h, path, u64::MAX)
                        .await?
                        .ok_or("read_file: missing")?;
                    Ok(Sha256::digest(&got.data).to_vec())
                },
            )
            .await
        }
        other => Err(format!("sandbox: no figure {other}").into()),
    };
    let _ = sb.destroy(&h).await;
    out
}
