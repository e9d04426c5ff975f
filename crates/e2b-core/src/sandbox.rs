//! The connected sandbox handle ([`Sandbox`]) and the trait adapters build on
//! ([`EnvdApi`]): every envd operation plus the sandbox's identity. Lifecycle (kill,
//! timeout, pause, connect) stays on [`Client`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::api::Client;
use crate::config::{Config, Secret};
use crate::envd::conn::EnvdConn;
use crate::envd::{
    ByteStream, Download, FileOp, ProcessOutput, ProcessStream, StartProcess, StreamOptions,
    WatchOptions, WatchStream,
};
use crate::error::Error;
use crate::http;
use crate::proto::control::Sandbox as WireSandbox;
use crate::proto::filesystem::{EntryInfo, WriteInfo};
use crate::proto::process::{ProcessInfo, ProcessInput, ProcessSelector, PtySize, Signal};

/// The envd operations of one sandbox, object-safe so adapters can take
/// `Arc<dyn EnvdApi>`: a [`Sandbox`] from the control plane, a bring-your-own sandbox, or
/// an in-process stand-in.
///
/// Conventions: `user: None` means envd's default user; paths are absolute or relative to
/// that user's home. Errors of envd are [`Error::Envd`] with a Connect code (`not_found`,
/// `already_exists`, ...); a sandbox that is gone is [`Error::SandboxNotFound`].
#[async_trait]
pub trait EnvdApi: Send + Sync + fmt::Debug {
    /// The sandbox id.
    fn sandbox_id(&self) -> &str;

    /// `Process.Start`: start a process and return its pid and event stream (the `start`
    /// event already consumed). With `spec.timeout` envd kills it when the time is up.
    async fn start_process(&self, spec: StartProcess) -> Result<ProcessStream, Error>;

    /// `Process.Connect`: attach to a running process (only new output arrives).
    async fn connect_process(
        &self,
        process: ProcessSelector,
        opts: StreamOptions,
    ) -> Result<ProcessStream, Error>;

    /// `Process.List`: running processes.
    async fn list_processes(&self) -> Result<Vec<ProcessInfo>, Error>;

    /// `Process.SendInput`: bytes to stdin (started with `stdin`) or to the PTY.
    async fn send_input(&self, process: ProcessSelector, input: ProcessInput) -> Result<(), Error>;

    /// `Process.SendInput` of the concatenation of `parts` to stdin, for a caller that
    /// holds its bytes in pieces (a header and a payload): the request is built with one
    /// copy of each. The default joins them and calls [`EnvdApi::send_input`].
    async fn send_stdin_parts(
        &self,
        process: ProcessSelector,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        self.send_input(process, ProcessInput::Stdin(parts.concat()))
            .await
    }

    /// `Process.SendSignal`: SIGTERM or SIGKILL to the process (not its group). Unknown pid
    /// → `not_found`.
    async fn send_signal(&self, process: ProcessSelector, signal: Signal) -> Result<(), Error>;

    /// `Process.Update`: resize the PTY.
    async fn resize_pty(&self, process: ProcessSelector, size: PtySize) -> Result<(), Error>;

    /// `Process.CloseStdin`: EOF on the stdin pipe.
    async fn close_stdin(&self, process: ProcessSelector) -> Result<(), Error>;

    /// `Filesystem.Stat` (type of the target for symlinks).
    async fn stat(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error>;

    /// `Filesystem.ListDir` to `depth` (at least 1).
    async fn list_dir(
        &self,
        path: &str,
        depth: u32,
        user: Option<&str>,
    ) -> Result<Vec<EntryInfo>, Error>;

    /// `Filesystem.MakeDir` (with parents); an existing directory is `already_exists`.
    async fn make_dir(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error>;

    /// `Filesystem.Move` (rename, creating the destination's parents; overwrites files).
    async fn rename(
        &self,
        source: &str,
        destination: &str,
        user: Option<&str>,
    ) -> Result<EntryInfo, Error>;

    /// `Filesystem.Remove` (recursive; a missing path is success).
    async fn remove(&self, path: &str, user: Option<&str>) -> Result<(), Error>;

    /// `Filesystem.WatchDir`: events until dropped, deadline or error.
    async fn watch_dir(&self, path: &str, opts: WatchOptions) -> Result<WatchStream, Error>;

    /// `POST /files` (octet-stream), streaming `body`; parents are created.
    async fn upload(
        &self,
        path: &str,
        user: Option<&str>,
        body: ByteStream,
    ) -> Result<WriteInfo, Error>;

    /// `GET /files`, the content as a stream.
    async fn download(&self, path: &str, user: Option<&str>) -> Result<Download, Error>;

    /// `GET /files` of `len` bytes from `offset` (a `Range` request, answered 206; fewer
    /// bytes when the file ends first).
    async fn download_range(
        &self,
        path: &str,
        user: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Download, Error>;

    /// `GET /health`: `Ok` when envd answers.
    async fn health(&self) -> Result<(), Error>;

    /// Start a process and wait for it, collecting its output (unbounded: for short
    /// commands). A non-zero exit is data in [`ProcessOutput::end`], not an error.
    async fn run(&self, spec: StartProcess) -> Result<ProcessOutput, Error> {
        self.start_process(spec).await?.wait_output().await
    }

    /// Upload one in-memory buffer.
    async fn upload_bytes(
        &self,
        path: &str,
        user: Option<&str>,
        data: Bytes,
    ) -> Result<WriteInfo, Error> {
        self.upload(path, user, crate::envd::bytes_stream(data))
            .await
    }

    /// Download into memory, failing past `max_bytes`.
    async fn download_bytes(
        &self,
        path: &str,
        user: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Error> {
        self.download(path, user).await?.collect(max_bytes).await
    }
}

/// What identifies a sandbox's envd, for [`Sandbox::attach`] (bring your own sandbox).
#[derive(Debug, Clone, Default)]
pub struct SandboxParts {
    /// Sandbox id.
    pub sandbox_id: String,
    /// envd version (semver); empty = assume current.
    pub envd_version: String,
    /// envd access token, for secured sandboxes.
    pub access_token: Option<Secret>,
    /// Sandbox traffic domain (`domain` of the create/connect answer), if any.
    pub domain: Option<String>,
    /// Template id, if known.
    pub template_id: Option<String>,
}

/// A connected sandbox: id, envd URL, access token, envd version and domain, with the envd
/// calls as methods. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    conn: EnvdConn,
    domain: String,
    template_id: Option<String>,
    resumed: bool,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.inner.conn.sandbox_id)
            .field("envd_url", &self.inner.conn.base_url)
            .field("envd_version", &self.inner.conn.envd_version)
            .field("domain", &self.inner.domain)
            .field("secured", &self.inner.conn.access_token.is_some())
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    pub(crate) fn from_wire(
        client: &Client,
        wire: &WireSandbox,
        resumed: bool,
    ) -> Result<Sandbox, Error> {
        let parts = SandboxParts {
            sandbox_id: wire.sandbox_id.clone(),
            envd_version: wire.envd_version.clone(),
            access_token: wire
                .envd_access_token
                .clone()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            domain: wire.domain.clone(),
            template_id: Some(wire.template_id.clone()),
        };
        Ok(
            Self::build(client.config(), client.http().clone(), parts, resumed)
                .with_retry_policy(*client.retry_policy()),
        )
    }

    /// A handle for a sandbox known by its parts, without any control-plane call (bring
    /// your own sandbox; the emulator).
    pub fn attach(cfg: &Config, parts: SandboxParts) -> Result<Sandbox, Error> {
        if parts.sandbox_id.is_empty() {
            return Err(Error::Config("empty sandbox id".into()));
        }
        Self::attach_with(cfg, http::build_client(cfg)?, parts)
    }

    pub(crate) fn attach_with(
        cfg: &Config,
        http: reqwest::Client,
        parts: SandboxParts,
    ) -> Result<Sandbox, Error> {
        if parts.sandbox_id.is_empty() {
            return Err(Error::Config("empty sandbox id".into()));
        }
        Ok(Self::build(cfg, http, parts, false))
    }

    fn build(cfg: &Config, http: reqwest::Client, parts: SandboxParts, resumed: bool) -> Sandbox {
        let domain = parts
            .domain
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| cfg.domain.clone());
        let conn = EnvdConn {
            http,
            base_url: cfg.envd_api_url(&parts.sandbox_id, parts.domain.as_deref()),
            direct_url: cfg.envd_direct_url(&parts.sandbox_id, parts.domain.as_deref()),
            sandbox_id: parts.sandbox_id,
            access_token: parts.access_token,
            envd_version: parts.envd_version,
            request_timeout: cfg.request_timeout,
            stream_idle_timeout: cfg.stream_idle_timeout,
            transfer_idle_timeout: cfg.transfer_idle_timeout,
            cfg: cfg.clone(),
            retry: crate::retry::RetryPolicy::default(),
        };
        Sandbox {
            inner: Arc::new(Inner {
                conn,
                domain,
                template_id: parts.template_id,
                resumed,
            }),
        }
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.inner.conn.sandbox_id
    }

    /// The envd base URL in use.
    pub fn envd_url(&self) -> &str {
        &self.inner.conn.base_url
    }

    /// The envd version the control plane reported.
    pub fn envd_version(&self) -> &str {
        &self.inner.conn.envd_version
    }

    /// The envd access token (secured sandboxes).
    pub fn access_token(&self) -> Option<&Secret> {
        self.inner.conn.access_token.as_ref()
    }

    /// The sandbox traffic domain.
    pub fn domain(&self) -> &str {
        &self.inner.domain
    }

    /// The template id, when known.
    pub fn template_id(&self) -> Option<&str> {
        self.inner.template_id.as_deref()
    }

    /// True when this handle came from a connect that resumed a paused sandbox.
    pub fn was_resumed(&self) -> bool {
        self.inner.resumed
    }

    /// `<port>-<id>.<domain>`: the host of a user server on `port`.
    pub fn host(&self, port: u16) -> String {
        format!("{port}-{}.{}", self.id(), self.inner.domain)
    }

    /// A URL a third party can `GET` to download `path` (signed when secured).
    pub fn download_url(
        &self,
        path: &str,
        user: Option<&str>,
        expires_in: Option<Duration>,
    ) -> Result<String, Error> {
        self.inner
            .conn
            .file_url(FileOp::Read, path, user, expires_in)
    }

    /// A URL a third party can `POST` to to upload `path` (signed when secured).
    pub fn upload_url(
        &self,
        path: &str,
        user: Option<&str>,
        expires_in: Option<Duration>,
    ) -> Result<String, Error> {
        self.inner
            .conn
            .file_url(FileOp::Write, path, user, expires_in)
    }

    /// Upload from an `AsyncRead`.
    pub async fn upload_reader<R: tokio::io::AsyncRead + Send + 'static>(
        &self,
        path: &str,
        user: Option<&str>,
        reader: R,
    ) -> Result<WriteInfo, Error> {
        let r = self
            .inner
            .conn
            .upload(path, user, crate::envd::reader_stream(reader))
            .await;
        self.explain(r).await
    }

    /// After a lost connection, ask `/health` (5 s at most) whether the sandbox is still
    /// there, as the SDKs do: the proxy's 502 turns the error into
    /// [`Error::SandboxNotFound`]; otherwise the original error stands.
    async fn explain<T>(&self, r: Result<T, Error>) -> Result<T, Error> {
        match r {
            Err(e) if e.is_connection_lost() => Err(explain_lost(&self.inner.conn, e).await),
            other => other,
        }
    }

    /// This handle with another retry policy for its idempotent envd calls (a handle from
    /// a [`Client`] inherits the client's); [`RetryPolicy::none`](crate::retry::RetryPolicy::none)
    /// makes every call once.
    pub fn with_retry_policy(&self, retry: crate::retry::RetryPolicy) -> Sandbox {
        let mut conn = self.inner.conn.clone();
        conn.retry = retry;
        Sandbox {
            inner: Arc::new(Inner {
                conn,
                domain: self.inner.domain.clone(),
                template_id: self.inner.template_id.clone(),
                resumed: self.inner.resumed,
            }),
        }
    }

    /// [`Sandbox::explain`] for a process stream: a stream cut before its end (a killed
    /// sandbox's proxy drops the connection) ends with [`Error::SandboxNotFound`] when
    /// `/health` then says 502. One check per stream; nothing waits longer than it.
    fn explain_stream(&self, s: ProcessStream) -> ProcessStream {
        use futures::StreamExt as _;
        let pid = s.pid();
        let sbx = self.clone();
        let events = futures::stream::unfold(Some((s, sbx)), |state| async move {
            let (mut s, sbx) = state?;
            match s.next().await? {
                Err(e) if e.is_connection_lost() => {
                    let e = explain_lost(&sbx.inner.conn, e).await;
                    Some((Err(e), None))
                }
                item => Some((item, Some((s, sbx)))),
            }
        });
        ProcessStream::new(pid, Box::pin(events))
    }

    /// This handle as a shareable trait object.
    pub fn into_api(self) -> Arc<dyn EnvdApi> {
        Arc::new(self)
    }
}

/// One `/health` probe (5 s at most) after `e`, a lost connection: the proxy's 502 means
/// the sandbox is gone (or paused) and replaces `e`; any other answer keeps `e`.
async fn explain_lost(conn: &EnvdConn, e: Error) -> Error {
    match tokio::time::timeout(Duration::from_secs(5), conn.health()).await {
        Ok(Err(gone @ Error::SandboxNotFound { .. })) => gone,
        _ => e,
    }
}

#[async_trait]
impl EnvdApi for Sandbox {
    fn sandbox_id(&self) -> &str {
        self.id()
    }

    async fn start_process(&self, spec: StartProcess) -> Result<ProcessStream, Error> {
        let s = self
            .explain(self.inner.conn.start_process(&spec).await)
            .await?;
        Ok(self.explain_stream(s))
    }

    async fn connect_process(
        &self,
        process: ProcessSelector,
        opts: StreamOptions,
    ) -> Result<ProcessStream, Error> {
        let s = self
            .explain(self.inner.conn.connect_process(process, opts).await)
            .await?;
        Ok(self.explain_stream(s))
    }

    async fn list_processes(&self) -> Result<Vec<ProcessInfo>, Error> {
        self.explain(self.inner.conn.list_processes().await).await
    }

    async fn send_input(&self, process: ProcessSelector, input: ProcessInput) -> Result<(), Error> {
        self.explain(self.inner.conn.send_input(process, input).await)
            .await
    }

    async fn send_stdin_parts(
        &self,
        process: ProcessSelector,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        self.explain(self.inner.conn.send_stdin_parts(process, parts).await)
            .await
    }

    async fn send_signal(&self, process: ProcessSelector, signal: Signal) -> Result<(), Error> {
        self.explain(self.inner.conn.send_signal(process, signal).await)
            .await
    }

    async fn resize_pty(&self, process: ProcessSelector, size: PtySize) -> Result<(), Error> {
        self.explain(self.inner.conn.resize_pty(process, size).await)
            .await
    }

    async fn close_stdin(&self, process: ProcessSelector) -> Result<(), Error> {
        self.explain(self.inner.conn.close_stdin(process).await)
            .await
    }

    async fn stat(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error> {
        self.explain(self.inner.conn.stat(path, user).await).await
    }

    async fn list_dir(
        &self,
        path: &str,
        depth: u32,
        user: Option<&str>,
    ) -> Result<Vec<EntryInfo>, Error> {
        self.explain(self.inner.conn.list_dir(path, depth, user).await)
            .await
    }

    async fn make_dir(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error> {
        self.explain(self.inner.conn.make_dir(path, user).await)
            .await
    }

    async fn rename(
        &self,
        source: &str,
        destination: &str,
        user: Option<&str>,
    ) -> Result<EntryInfo, Error> {
        self.explain(self.inner.conn.rename(source, destination, user).await)
            .await
    }

    async fn remove(&self, path: &str, user: Option<&str>) -> Result<(), Error> {
        self.explain(self.inner.conn.remove(path, user).await).await
    }

    async fn watch_dir(&self, path: &str, opts: WatchOptions) -> Result<WatchStream, Error> {
        self.explain(self.inner.conn.watch_dir(path, &opts).await)
            .await
    }

    async fn upload(
        &self,
        path: &str,
        user: Option<&str>,
        body: ByteStream,
    ) -> Result<WriteInfo, Error> {
        self.explain(self.inner.conn.upload(path, user, body).await)
            .await
    }

    async fn download(&self, path: &str, user: Option<&str>) -> Result<Download, Error> {
        self.explain(self.inner.conn.download(path, user).await)
            .await
    }

    async fn download_range(
        &self,
        path: &str,
        user: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Download, Error> {
        self.explain(
            self.inner
                .conn
                .download_range(path, user, offset, len)
                .await,
        )
        .await
    }

    async fn health(&self) -> Result<(), Error> {
        self.inner.conn.health().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(cfg: &Config, token: Option<&str>, version: &str) -> Sandbox {
        Sandbox::attach(
            cfg,
            SandboxParts {
                sandbox_id: "iabc123".into(),
                envd_version: version.into(),
                access_token: token.map(Secret::new),
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn handle_urls_and_redaction() {
        let s = sb(&Config::new(), Some("tok-secret"), "0.6.13");
        assert_eq!(s.envd_url(), "https://sandbox.e2b.app");
        assert_eq!(s.host(8080), "8080-iabc123.e2b.app");
        assert!(!format!("{s:?}").contains("tok-secret"));
        let url = s.download_url("/home/user/a.txt", None, None).unwrap();
        assert!(
            url.starts_with(
                "https://49983-iabc123.e2b.app/files?path=%2Fhome%2Fuser%2Fa.txt&signature=v1_"
            ),
            "{url}"
        );
        let unsigned = sb(
            &Config::new().with_sandbox_url("http://127.0.0.1:1"),
            None,
            "0.6.13",
        );
        assert_eq!(
            unsigned.upload_url("a b", Some("root"), None).unwrap(),
            "http://127.0.0.1:1/files?username=root&path=a+b"
        );
        assert!(
            unsigned
                .upload_url("x", None, Some(Duration::from_secs(1)))
                .is_err()
        );
        // envd < 0.4.0 names `user` explicitly
        let old = sb(&Config::new(), None, "0.3.9");
        assert_eq!(
            old.download_url("x", None, None).unwrap(),
            "https://49983-iabc123.e2b.app/files?username=user&path=x"
        );
    }

    #[test]
    fn signed_url_uses_the_vector() {
        let s = sb(&Config::new(), Some("access-token"), "0.6.13");
        let url = s.download_url("/home/user/a.txt", None, None).unwrap();
        assert!(
            url.ends_with("signature=v1_TDd5LiZDLemTOwAdehESIVafBnRrg75Mr9Wpgriu9ls"),
            "{url}"
        );
        let url = s
            .upload_url("/home/user/a.txt", Some("user"), None)
            .unwrap();
        assert!(url.contains("username=user&path="), "{url}");
    }

    #[test]
    fn trait_is_object_safe() {
        let s = sb(&Config::new(), None, "");
        let api: Arc<dyn EnvdApi> = s.into_api();
        assert_eq!(api.sandbox_id(), "iabc123");
    }
}
