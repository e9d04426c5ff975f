//! The curl contender: one `curl` process per `POST /files` and per `GET /files`, the
//! payload streamed from a file on disk (`-T`), the download to a file on disk (SHA-256 checked).

use std::io::Write as _;

use futures::StreamExt as _;

use super::child::{AnyError, Outcome};
use super::files::{self, Body};
use super::opts::var;
use super::{data, sandbox_env};

/// curl on a file figure.
pub async fn run(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, _api) = sandbox_env::sandbox().await?;
    let dir = std::env::temp_dir().join(format!("world-bench-curl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let src = dir.join("up.bin");
    let dst = dir.join("down.bin");
    let url = format!("{}/files?path=/home/user/wb-curl.bin", sandbox.envd_url());
    let mut headers = vec![
        format!("E2b-Sandbox-Id: {}", sandbox.id()),
        "E2b-Sandbox-Port: 49983".to_owned(),
    ];
    if let Some(t) = sandbox.access_token() {
        headers.push(format!("X-Access-Token: {}", t.expose()));
    }
    let curl = |extra: &[&str]| {
        let mut c = tokio::process::Command::new("curl");
        c.args(["-sS", "-f", "--noproxy", "*"]);
        for h in &headers {
            c.arg("-H").arg(h);
        }
        c.args(extra).arg(&url);
        c
    };
    // The source file is the caller's data, not curl's work: written before the timing,
    // chunk by chunk (this process's peak RSS is then curl's, not the payload's).
    let size = var(if figure == "files_small" {
        "WB_SMALL_BYTES"
    } else {
        "WB_LARGE_BYTES"
    });
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&src)?);
        let mut chunks = std::pin::pin!(data::stream(size));
        while let Some(b) = chunks.next().await {
            f.write_all(&b)?;
        }
        f.flush()?;
    }
    let out = files::run(
        figure,
        |_: Body| async {
            let s = curl(&[
                "-X",
                "POST",
                "-H",
                "Content-Type: application/octet-stream",
                "-T",
                &src.display().to_string(),
                "-o",
                "/dev/null",
            ])
            .status()
            .await?;
            if !s.success() {
                return Err(format!("curl upload: {s}").into());
            }
            Ok(())
        },
        || async {
            let s = curl(&["-o", &dst.display().to_string()]).status().await?;
            if !s.success() {
                return Err(format!("curl download: {s}").into());
            }
            let f = tokio::fs::File::open(&dst).await?;
            data::hash_of(tokio_util::io::ReaderStream::new(f)).await
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = client.kill(sandbox.id()).await;
    out
}
