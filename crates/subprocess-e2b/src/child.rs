//! `E2bChild`: the [`ChildBackend`] of a piped spawn, and the stdin forwarder (an
//! in-memory duplex whose reading end a task sends to envd's SendInput in chunks of at
//! most 64 KiB, one request at a time; EOF → CloseStdin).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use e2b_core::proto::process::{ProcessInput, ProcessSelector};
use exec_world::{ChildBackend, Error, ExitStatus, InputSink, OutputStream, Signal};
use tokio::io::AsyncReadExt;

use crate::route::Party;
use crate::session::Session;

/// Bytes per SendInput request (and the duplex buffer).
const STDIN_CHUNK: usize = 64 << 10;

/// A piped process in the sandbox.
pub(crate) struct E2bChild {
    pub(crate) session: Arc<Session>,
    stdin: Mutex<Option<InputSink>>,
    stdout: Mutex<Option<OutputStream>>,
    stderr: Mutex<Option<OutputStream>>,
}

impl E2bChild {
    pub(crate) fn new(session: Arc<Session>, piped_stdin: bool) -> E2bChild {
        let stdin = piped_stdin.then(|| forward_stdin(session.clone()));
        let stdout = session.reader(Party::Out);
        let stderr = session.err.is_some().then(|| session.reader(Party::Err));
        E2bChild {
            session,
            stdin: Mutex::new(stdin),
            stdout: Mutex::new(Some(stdout)),
            stderr: Mutex::new(stderr),
        }
    }
}

/// The caller's stdin half; a task forwards the other half to envd once started.
fn forward_stdin(session: Arc<Session>) -> InputSink {
    let api = session.world.api.clone();
    // A durable command's stdin outlives this child: only an explicit shutdown closes it.
    let close_on_drop = !session.detached.load(Ordering::SeqCst);
    forward_input(
        api,
        async move {
            let s = session.started().await.ok()?;
            Some(ProcessSelector::Pid(s.envd_pid))
        },
        close_on_drop,
    )
}

/// The caller's stdin half; a task sends the other half to envd's SendInput for the
/// process `target` resolves to (`None`: nothing is sent), CloseStdin at EOF: a shutdown
/// of the sink, or its drop when `close_on_drop`.
pub(crate) fn forward_input(
    api: Arc<dyn e2b_core::EnvdApi>,
    target: impl std::future::Future<Output = Option<ProcessSelector>> + Send + 'static,
    close_on_drop: bool,
) -> InputSink {
    let (writer, mut reader) = tokio::io::duplex(STDIN_CHUNK);
    let shut = Arc::new(AtomicBool::new(close_on_drop));
    let shut_seen = shut.clone();
    tokio::spawn(async move {
        let Some(sel) = target.await else {
            return;
        };
        let mut buf = vec![0u8; STDIN_CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    if !shut_seen.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Err(e) = api.close_stdin(sel.clone()).await {
                        tracing::debug!(error = %e, "CloseStdin");
                    }
                    return;
                }
                Ok(n) => {
                    let input = ProcessInput::Stdin(buf[..n].to_vec());
                    if let Err(e) = api.send_input(sel.clone(), input).await {
                        // The process ended or closed stdin: the writer sees a broken pipe.
                        tracing::debug!(error = %e, "SendInput");
                        return;
                    }
                }
            }
        }
    });
    Box::pin(ShutdownFlag {
        inner: writer,
        shut,
    })
}

/// A writer that notes its shutdown (an explicit close, unlike a drop).
struct ShutdownFlag {
    inner: tokio::io::DuplexStream,
    shut: Arc<AtomicBool>,
}

impl tokio::io::AsyncWrite for ShutdownFlag {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.shut.store(true, Ordering::SeqCst);
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn take<T>(m: &mut Mutex<Option<T>>) -> Option<T> {
    m.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

#[async_trait]
impl ChildBackend for E2bChild {
    fn pid(&self) -> Option<u32> {
        self.session.pid()
    }

    async fn started(&self) -> Result<u32, Error> {
        self.session.started().await.map(|s| s.pid)
    }

    fn take_stdin(&mut self) -> Option<InputSink> {
        take(&mut self.stdin)
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        take(&mut self.stdout)
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        take(&mut self.stderr)
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        self.session.wait().await
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.session.signal_process(sig).await
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.session.terminate(grace).await
    }

    fn detach(&mut self) {
        self.session.detached.store(true, Ordering::SeqCst);
        take(&mut self.stdin);
        take(&mut self.stdout);
        take(&mut self.stderr);
    }
}

impl Drop for E2bChild {
    fn drop(&mut self) {
        self.session.drop_kill();
    }
}
