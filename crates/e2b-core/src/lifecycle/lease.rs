//! [`LeasedApi`]: an [`EnvdApi`] decorator that reports every call (and every event of a
//! process stream) to a [`KeepAlive`] as activity, so adapters taking `Arc<dyn EnvdApi>`
//! keep the sandbox alive without any change. A report costs a mutex and a clock read
//! while the lease is fresh; renewals happen on the keep-alive's own task, amortized.
//!
//! A call that envd's proxy answers with 502 (gone **or paused**, E2B does not tell them
//! apart) reconnects once through the keep-alive and is repeated once when that worked
//! (the sandbox was paused and now runs); otherwise the 502 stands (the sandbox is gone).
//! Uploads are not repeated (their body is consumed).

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt as _;

use crate::envd::{
    ByteStream, Download, ProcessStream, StartProcess, StreamOptions, WatchOptions, WatchStream,
};
use crate::error::Error;
use crate::lifecycle::keepalive::KeepAlive;
use crate::proto::filesystem::{EntryInfo, WriteInfo};
use crate::proto::process::{ProcessInfo, ProcessInput, ProcessSelector, PtySize, Signal};
use crate::sandbox::EnvdApi;

/// Wraps a handle; every call touches the keep-alive, then goes to the inner handle.
/// Process output events are activity too (a command printing keeps the sandbox up); a
/// silent long command should be wrapped in [`KeepAlive::activity`] by its caller.
#[derive(Debug, Clone)]
pub struct LeasedApi {
    inner: Arc<dyn EnvdApi>,
    keepalive: KeepAlive,
}

impl LeasedApi {
    /// Decorate `inner`.
    pub fn new(inner: Arc<dyn EnvdApi>, keepalive: KeepAlive) -> Self {
        LeasedApi { inner, keepalive }
    }

    /// The undecorated handle.
    pub fn inner(&self) -> &Arc<dyn EnvdApi> {
        &self.inner
    }

    /// The keep-alive reported to.
    pub fn keepalive(&self) -> &KeepAlive {
        &self.keepalive
    }

    fn touched(&self, s: ProcessStream) -> ProcessStream {
        let ka = self.keepalive.clone();
        let pid = s.pid();
        ProcessStream::new(
            pid,
            Box::pin(s.inspect(move |_| ka.touch("process output"))),
        )
    }
}

/// Run `$call` (an expression producing a future, evaluated again for the repeat); when
/// it fails with the proxy's 502, reconnect once and run it once more.
macro_rules! reconnecting {
    ($self:ident, $call:expr) => {{
        match $call.await {
            Err(e) if e.is_unroutable() => {
                if matches!($self.keepalive.reconnect().await, Ok(true)) {
                    tracing::info!(sandbox = %$self.keepalive.sandbox_id(), "envd answered 502; reconnected, repeating the call");
                    $call.await
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }};
}

#[async_trait]
impl EnvdApi for LeasedApi {
    fn sandbox_id(&self) -> &str {
        self.inner.sandbox_id()
    }

    async fn start_process(&self, spec: StartProcess) -> Result<ProcessStream, Error> {
        self.keepalive.touch("start_process");
        let s = reconnecting!(self, self.inner.start_process(spec.clone()))?;
        Ok(self.touched(s))
    }

    async fn connect_process(
        &self,
        process: ProcessSelector,
        opts: StreamOptions,
    ) -> Result<ProcessStream, Error> {
        self.keepalive.touch("connect_process");
        let s = reconnecting!(self, self.inner.connect_process(process.clone(), opts))?;
        Ok(self.touched(s))
    }

    async fn list_processes(&self) -> Result<Vec<ProcessInfo>, Error> {
        self.keepalive.touch("list_processes");
        reconnecting!(self, self.inner.list_processes())
    }

    async fn send_input(&self, process: ProcessSelector, input: ProcessInput) -> Result<(), Error> {
        self.keepalive.touch("send_input");
        reconnecting!(self, self.inner.send_input(process.clone(), input.clone()))
    }

    async fn send_stdin_parts(
        &self,
        process: ProcessSelector,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        self.keepalive.touch("send_input");
        reconnecting!(self, self.inner.send_stdin_parts(process.clone(), parts))
    }

    async fn send_signal(&self, process: ProcessSelector, signal: Signal) -> Result<(), Error> {
        self.keepalive.touch("send_signal");
        reconnecting!(self, self.inner.send_signal(process.clone(), signal))
    }

    async fn resize_pty(&self, process: ProcessSelector, size: PtySize) -> Result<(), Error> {
        self.keepalive.touch("resize_pty");
        reconnecting!(self, self.inner.resize_pty(process.clone(), size))
    }

    async fn close_stdin(&self, process: ProcessSelector) -> Result<(), Error> {
        self.keepalive.touch("close_stdin");
        reconnecting!(self, self.inner.close_stdin(process.clone()))
    }

    async fn stat(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error> {
        self.keepalive.touch("stat");
        reconnecting!(self, self.inner.stat(path, user))
    }

    async fn list_dir(
        &self,
        path: &str,
        depth: u32,
        user: Option<&str>,
    ) -> Result<Vec<EntryInfo>, Error> {
        self.keepalive.touch("list_dir");
        reconnecting!(self, self.inner.list_dir(path, depth, user))
    }

    async fn make_dir(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error> {
        self.keepalive.touch("make_dir");
        reconnecting!(self, self.inner.make_dir(path, user))
    }

    async fn rename(
        &self,
        source: &str,
        destination: &str,
        user: Option<&str>,
    ) -> Result<EntryInfo, Error> {
        self.keepalive.touch("rename");
        reconnecting!(self, self.inner.rename(source, destination, user))
    }

    async fn remove(&self, path: &str, user: Option<&str>) -> Result<(), Error> {
        self.keepalive.touch("remove");
        reconnecting!(self, self.inner.remove(path, user))
    }

    async fn watch_dir(&self, path: &str, opts: WatchOptions) -> Result<WatchStream, Error> {
        self.keepalive.touch("watch_dir");
        reconnecting!(self, self.inner.watch_dir(path, opts.clone()))
    }

    async fn upload(
        &self,
        path: &str,
        user: Option<&str>,
        body: ByteStream,
    ) -> Result<WriteInfo, Error> {
        self.keepalive.touch("upload");
        let res = self.inner.upload(path, user, body).await;
        self.keepalive.touch("upload");
        res
    }

    async fn download(&self, path: &str, user: Option<&str>) -> Result<Download, Error> {
        self.keepalive.touch("download");
        reconnecting!(self, self.inner.download(path, user))
    }

    async fn download_range(
        &self,
        path: &str,
        user: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Download, Error> {
        self.keepalive.touch("download");
        reconnecting!(self, self.inner.download_range(path, user, offset, len))
    }

    async fn health(&self) -> Result<(), Error> {
        self.keepalive.touch("health");
        self.inner.health().await
    }
}
