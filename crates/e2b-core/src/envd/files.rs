//! envd's plain HTTP routes: `/files` upload and download, streamed in both directions
//! (never the whole file in memory), `/health`, and signed `/files` URLs.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use sha2::{Digest as _, Sha256};

use super::conn::EnvdConn;
use crate::config::Secret;
use crate::error::{Error, Surface};
use crate::http;
use crate::proto::filesystem::WriteInfo;
use crate::retry::Idempotence;

/// A stream of bytes from the caller (upload source) or for the caller.
pub type ByteStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// Wrap any `AsyncRead` as a [`ByteStream`] (64 KiB chunks).
pub fn reader_stream<R: tokio::io::AsyncRead + Send + 'static>(reader: R) -> ByteStream {
    Box::pin(tokio_util::io::ReaderStream::with_capacity(
        reader,
        64 * 1024,
    ))
}

/// A [`ByteStream`] of one in-memory buffer.
pub fn bytes_stream(data: impl Into<Bytes>) -> ByteStream {
    let data: Bytes = data.into();
    Box::pin(futures::stream::once(async move { Ok(data) }))
}

/// `/files` operation named in a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// `GET /files`.
    Read,
    /// `POST /files`.
    Write,
}

impl FileOp {
    fn as_str(self) -> &'static str {
        match self {
            FileOp::Read => "read",
            FileOp::Write => "write",
        }
    }
}

/// `v1_` + unpadded standard base64 of SHA-256(`path:op:user:token[:exp]`).
/// `path` is the raw query value, `user` the `username` value or empty.
pub fn file_signature(
    path: &str,
    op: FileOp,
    user: &str,
    token: &Secret,
    expiration: Option<u64>,
) -> String {
    let mut raw = format!("{path}:{}:{user}:{}", op.as_str(), token.expose());
    if let Some(exp) = expiration {
        raw.push(':');
        raw.push_str(&exp.to_string());
    }
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// A file being downloaded: the body as a stream, never buffered whole.
pub struct Download {
    content_length: Option<u64>,
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>,
}

impl std::fmt::Debug for Download {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Download")
            .field("content_length", &self.content_length)
            .finish_non_exhaustive()
    }
}

impl Download {
    /// Wrap a byte stream (for in-process stand-ins).
    pub fn new(
        content_length: Option<u64>,
        body: Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>,
    ) -> Self {
        Download {
            content_length,
            inner: body,
        }
    }

    /// `Content-Length` when the server sent one.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// As an `io::Result` stream; errors are [`io::Error::other`] wrapping the [`Error`]
    /// (recover it with `get_ref().downcast_ref::<Error>()`).
    pub fn into_byte_stream(self) -> ByteStream {
        Box::pin(self.inner.map(|r| r.map_err(io::Error::other)))
    }

    /// As an `AsyncRead`.
    pub fn into_async_read(self) -> impl tokio::io::AsyncRead + Send + Unpin {
        tokio_util::io::StreamReader::new(self.into_byte_stream())
    }

    /// Collect into memory, failing with [`Error::Config`] past `max_bytes`.
    pub async fn collect(mut self, max_bytes: usize) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        while let Some(chunk) = self.inner.next().await {
            let chunk = chunk?;
            if out.len() + chunk.len() > max_bytes {
                return Err(Error::Config(format!(
                    "download larger than {max_bytes} bytes"
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

impl Stream for Download {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Upload progress shared between the body wrapper and the watchdog.
struct Progress {
    start: Instant,
    last_ms: AtomicU64,
    done_ms: AtomicU64,
    source_error: Mutex<Option<io::Error>>,
}

impl Progress {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The upload body: records progress, end and source errors.
struct Tracked {
    inner: ByteStream,
    progress: Arc<Progress>,
}

impl Stream for Tracked {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        let p = &self.progress;
        match &polled {
            Poll::Ready(Some(Ok(_))) => p.last_ms.store(p.now_ms(), Ordering::Relaxed),
            Poll::Ready(Some(Err(e))) => {
                if let Ok(mut slot) = p.source_error.lock() {
                    *slot = Some(io::Error::new(e.kind(), e.to_string()));
                }
            }
            Poll::Ready(None) => p.done_ms.store(p.now_ms(), Ordering::Relaxed),
            Poll::Pending => {}
        }
        polled
    }
}

/// Resolves with a timeout error when the upload stalls: no chunk taken for `idle`
/// while sending, or no answer `answer` after the body ended.
async fn upload_watchdog(p: Arc<Progress>, idle: Option<Duration>, answer: Duration) -> Error {
    loop {
        let now = p.now_ms();
        let done = p.done_ms.load(Ordering::Relaxed);
        let (deadline, err) = if done != u64::MAX {
            (
                done.saturating_add(ms(answer)),
                Error::Timeout {
                    what: "upload answer",
                    after: answer,
                },
            )
        } else if let Some(idle) = idle {
            let last = p.last_ms.load(Ordering::Relaxed);
            (
                last.saturating_add(ms(idle)),
                Error::Timeout {
                    what: "upload idle",
                    after: idle,
                },
            )
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if now >= deadline {
            return err;
        }
        tokio::time::sleep(Duration::from_millis((deadline - now).clamp(10, 1000))).await;
    }
}

/// Frame `body` as a `multipart/form-data` upload with one part `file` named `path`
/// (what envd before 0.5.7 accepts); returns the content type and the framed stream.
fn multipart(path: &str, body: ByteStream) -> (String, ByteStream) {
    // 20 random characters (RandomState is seeded from the OS): the boundary cannot
    // plausibly occur in the content.
    let boundary = format!("e2b-core-{}", crate::trusted_shell::random_suffix());
    // Quotes, CR and LF cannot appear inside the quoted filename.
    let filename: String = path
        .chars()
        .map(|c| match c {
            '"' => "%22".to_owned(),
            '\r' => "%0D".to_owned(),
            '\n' => "%0A".to_owned(),
            c => c.to_string(),
        })
        .collect();
    let head = Bytes::from(format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    ));
    let tail = Bytes::from(format!("\r\n--{boundary}--\r\n"));
    let framed = futures::stream::once(async move { Ok(head) })
        .chain(body)
        .chain(futures::stream::once(async move { Ok(tail) }));
    (
        format!("multipart/form-data; boundary={boundary}"),
        Box::pin(framed),
    )
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl EnvdConn {
    fn files_query(&self, path: &str, user: Option<&str>) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(u) = self.effective_user(user) {
            q.push(("username", u.to_owned()));
        }
        q.push(("path", path.to_owned()));
        q
    }

    /// `POST /files?path=…` with `application/octet-stream`, streaming `body`.
    pub(crate) async fn upload(
        &self,
        path: &str,
        user: Option<&str>,
        body: ByteStream,
    ) -> Result<WriteInfo, Error> {
        let progress = Arc::new(Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            done_ms: AtomicU64::new(u64::MAX),
            source_error: Mutex::new(None),
        });
        let tracked = Tracked {
            inner: body,
            progress: progress.clone(),
        };
        // envd < 0.5.7 only takes multipart; the multipart body is framed around the
        // same stream, so it is never buffered either.
        let (content_type, body): (String, ByteStream) = if self.envd_at_least((0, 5, 7)) {
            ("application/octet-stream".to_owned(), Box::pin(tracked))
        } else {
            multipart(path, Box::pin(tracked))
        };
        let send = self
            .request(reqwest::Method::POST, "/files")
            .query(&self.files_query(path, user))
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(reqwest::Body::wrap_stream(body))
            .send();
        let watchdog = upload_watchdog(
            progress.clone(),
            self.transfer_idle_timeout,
            self.request_timeout,
        );
        let resp = tokio::select! {
            r = send => r,
            e = watchdog => return Err(e),
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                if let Ok(mut slot) = progress.source_error.lock()
                    && let Some(src) = slot.take()
                {
                    return Err(Error::Source(src));
                }
                return Err(Error::from_reqwest(
                    Surface::Envd,
                    e,
                    "upload",
                    self.request_timeout,
                ));
            }
        };
        if !resp.status().is_success() {
            return Err(self.error_of(resp).await);
        }
        let bytes = tokio::time::timeout(self.request_timeout, resp.bytes())
            .await
            .map_err(|_| Error::Timeout {
                what: "upload answer body",
                after: self.request_timeout,
            })?
            .map_err(|e| {
                Error::from_reqwest(Surface::Envd, e, "upload answer body", self.request_timeout)
            })?;
        // envd sends no content type here (Go sniffs text/plain): parse as JSON regardless.
        let infos: Vec<WriteInfo> = serde_json::from_slice(&bytes).map_err(|e| {
            Error::protocol(
                Surface::Envd,
                format!(
                    "undecodable upload answer ({e}): {}",
                    crate::error::snippet(&bytes, &self.secrets())
                ),
            )
        })?;
        infos
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol(Surface::Envd, "upload answer lists no written file"))
    }

    /// `GET /files?path=…`, the body as a stream (the handshake retried on 429/502/503/504
    /// and connection resets; a body cut midway is an error item, not retried).
    pub(crate) async fn download(&self, path: &str, user: Option<&str>) -> Result<Download, Error> {
        self.download_with(path, user, None).await
    }

    /// `GET /files?path=…` with `Range: bytes=OFFSET-(OFFSET+LEN-1)`: `len` bytes from
    /// `offset` (fewer when the file ends first). envd answers ranges as Go's
    /// `http.ServeContent` does (206); an answer that is not 206 is a protocol error, so
    /// a server that ignores the range never streams the whole file instead. `len` 0 is
    /// an empty download with no request.
    pub(crate) async fn download_range(
        &self,
        path: &str,
        user: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Download, Error> {
        if len == 0 {
            return Ok(Download::new(Some(0), Box::pin(futures::stream::empty())));
        }
        let last = offset.saturating_add(len - 1);
        self.download_with(path, user, Some((offset, last))).await
    }

    async fn download_with(
        &self,
        path: &str,
        user: Option<&str>,
        range: Option<(u64, u64)>,
    ) -> Result<Download, Error> {
        // The handshake is an idempotent read: retried by the connection's policy.
        let resp = self
            .retry
            .run("download", Idempotence::Idempotent, |_| async {
                let mut req = self
                    .request(reqwest::Method::GET, "/files")
                    .query(&self.files_query(path, user));
                if let Some((first, last)) = range {
                    req = req.header(reqwest::header::RANGE, format!("bytes={first}-{last}"));
                }
                let send = http::send_resending_stale(req);
                let resp = tokio::time::timeout(self.request_timeout, send)
                    .await
                    .map_err(|_| Error::Timeout {
                        what: "download handshake",
                        after: self.request_timeout,
                    })?
                    .map_err(|e| {
                        Error::from_reqwest(Surface::Envd, e, "download", self.request_timeout)
                    })?;
                if !resp.status().is_success() {
                    return Err(self.error_of(resp).await);
                }
                if range.is_some() && resp.status() != reqwest::StatusCode::PARTIAL_CONTENT {
                    return Err(Error::protocol(
                        Surface::Envd,
                        format!(
                            "a ranged download of {path} was answered with HTTP {} instead of 206",
                            resp.status().as_u16()
                        ),
                    ));
                }
                Ok(resp)
            })
            .await?;
        let len = resp.content_length();
        let idle = self.transfer_idle_timeout;
        let body = Box::pin(resp.bytes_stream());
        let stream = futures::stream::unfold(Some(body), move |body| async move {
            let mut body = body?;
            let next = match idle {
                Some(idle) => match tokio::time::timeout(idle, body.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        return Some((
                            Err(Error::Timeout {
                                what: "download idle",
                                after: idle,
                            }),
                            None,
                        ));
                    }
                },
                None => body.next().await,
            };
            match next {
                Some(Ok(b)) => Some((Ok(b), Some(body))),
                Some(Err(e)) => Some((
                    Err(Error::from_reqwest(
                        Surface::Envd,
                        e,
                        "download body",
                        Duration::ZERO,
                    )),
                    None,
                )),
                None => None,
            }
        });
        Ok(Download::new(len, Box::pin(stream)))
    }

    /// `GET /health`: `Ok` on 2xx; the proxy's 502 is [`Error::SandboxNotFound`].
    pub(crate) async fn health(&self) -> Result<(), Error> {
        let resp = self
            .request(reqwest::Method::GET, "/health")
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(|e| Error::from_reqwest(Surface::Envd, e, "health", self.request_timeout))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.error_of(resp).await)
        }
    }

    /// A `/files` URL usable without headers by a third party; signed when the sandbox
    /// has an access token. `expires_in` requires a token.
    pub(crate) fn file_url(
        &self,
        op: FileOp,
        path: &str,
        user: Option<&str>,
        expires_in: Option<Duration>,
    ) -> Result<String, Error> {
        let user = self.effective_user(user);
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        if let Some(u) = user {
            ser.append_pair("username", u);
        }
        if !path.is_empty() {
            ser.append_pair("path", path);
        }
        match (&self.access_token, expires_in) {
            (Some(token), exp) => {
                let exp = exp.map(|d| {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    (now + d).as_secs()
                });
                ser.append_pair(
                    "signature",
                    &file_signature(path, op, user.unwrap_or(""), token, exp),
                );
                if let Some(exp) = exp {
                    ser.append_pair("signature_expiration", &exp.to_string());
                }
            }
            (None, Some(_)) => {
                return Err(Error::Config(
                    "signature expiration needs a secured sandbox (no access token)".into(),
                ));
            }
            (None, None) => {}
        }
        let query = ser.finish();
        Ok(if query.is_empty() {
            format!("{}/files", self.direct_url)
        } else {
            format!("{}/files?{query}", self.direct_url)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn multipart_framing() {
        let (ct, body) = multipart("/home/user/a \"b\".txt", bytes_stream(&b"DATA"[..]));
        let boundary = ct
            .strip_prefix("multipart/form-data; boundary=")
            .unwrap()
            .to_owned();
        let chunks: Vec<Bytes> = body.map(|r| r.unwrap()).collect().await;
        let all = String::from_utf8(chunks.concat()).unwrap();
        assert_eq!(
            all,
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a %22b%22.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nDATA\r\n--{boundary}--\r\n"
            )
        );
    }

    #[test]
    fn signature_vectors() {
        let token = Secret::new("access-token");
        assert_eq!(
            file_signature("/home/user/a.txt", FileOp::Read, "", &token, None),
            "v1_TDd5LiZDLemTOwAdehESIVafBnRrg75Mr9Wpgriu9ls"
        );
        assert_eq!(
            file_signature(
                "/home/user/a.txt",
                FileOp::Write,
                "user",
                &token,
                Some(1_700_000_000)
            ),
            "v1_BPepF86tbh728NFMahf10Na+uZ5J3Bl4bRm+1CuJB8Y"
        );
    }
}
