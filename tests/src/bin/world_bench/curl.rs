//! The curl contender: one plain `curl` process per `POST /files` and per `GET /files`
//! (`--data-binary @file` up, without `Expect: 100-continue`; the download on curl's
//! stdout, SHA-256 checked as it streams, as every contender checks it), and the command line both the loopback and the latency figures
//! use ([`plain`]).

use std::path::Path;

use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use super::child::{AnyError, Outcome};
use super::files::{self, Body};
use super::opts::var;
use super::{data, sandbox_env};

/// `curl -sS -f --noproxy '*'` with `headers` and no `Expect: 100-continue` (whose wait
/// costs a round trip, or a second when the server does not answer it): the fastest
/// honest curl for a single request.
pub fn plain(headers: &[String]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("curl");
    c.args(["-sS", "-f", "--noproxy", "*", "-H", "Expect:"]);
    for h in headers {
        c.arg("-H").arg(h);
    }
    c
}

/// The headers a plain curl sends to reach `sandbox`'s envd through the emulator.
pub fn envd_headers(sandbox: &e2b_core::Sandbox) -> Vec<String> {
    let mut headers = vec![
        format!("E2b-Sandbox-Id: {}", sandbox.id()),
        "E2b-Sandbox-Port: 49983".to_owned(),
    ];
    if let Some(t) = sandbox.access_token() {
        headers.push(format!("X-Access-Token: {}", t.expose()));
    }
    headers
}

/// Writes `size` bytes of the test data to `path`, chunk by chunk (the caller's data,
/// prepared before the timing).
pub async fn write_file(path: &Path, size: u64) -> Result<(), AnyError> {
    let mut f = tokio::io::BufWriter::new(tokio::fs::File::create(path).await?);
    let mut chunks = std::pin::pin!(data::stream(size));
    while let Some(b) = chunks.next().await {
        f.write_all(&b).await?;
    }
    f.flush().await?;
    Ok(())
}

/// curl on a file figure.
pub async fn run(figure: &str) -> Result<Outcome, AnyError> {
    let (client, sandbox, _api) = sandbox_env::sandbox().await?;
    let dir = std::env::temp_dir().join(format!("world-bench-curl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let src = dir.join("up.bin");
    let url = format!("{}/files?path=/home/user/wb-curl.bin", sandbox.envd_url());
    let headers = envd_headers(&sandbox);
    let size = var(if figure == "files_small" {
        "WB_SMALL_BYTES"
    } else {
        "WB_LARGE_BYTES"
    });
    write_file(&src, size).await?;
    let upload_from = format!("@{}", src.display());
    let out = files::run(
        figure,
        |_: Body| async {
            let s = plain(&headers)
                .args(["-H", "Content-Type: application/octet-stream"])
                .arg("--data-binary")
                .arg(&upload_from)
                .args(["-o", "/dev/null"])
                .arg(&url)
                .status()
                .await?;
            if !s.success() {
                return Err(format!("curl upload: {s}").into());
            }
            Ok(())
        },
        || async {
            let mut c = plain(&headers)
                .arg(&url)
                .stdout(std::process::Stdio::piped())
                .spawn()?;
            let out = c.stdout.take().ok_or("curl: no stdout")?;
            let hash = data::hash_of(tokio_util::io::ReaderStream::new(out)).await?;
            let s = c.wait().await?;
            if !s.success() {
                return Err(format!("curl download: {s}").into());
            }
            Ok(hash)
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = client.kill(sandbox.id()).await;
    out
}
