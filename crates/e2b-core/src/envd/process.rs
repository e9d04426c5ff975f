//! `process.Process` calls: Start and Connect (server streams), List, SendInput,
//! SendSignal, Update (PTY resize) and CloseStdin (unary).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;

use super::conn::EnvdConn;
use super::stream::{MessageStream, ProcessStream};
use crate::error::{Error, Surface};
use crate::proto::process::{
    CloseStdinRequest, ConnectRequest, Empty, EventResponse, ListResponse, ProcessConfig,
    ProcessEvent, ProcessInfo, ProcessInput, ProcessSelector, Pty, PtySize, SendInputRequest,
    SendSignalRequest, Signal, StartRequest, UpdateRequest, paths,
};

/// What to start.
///
/// ```
/// use std::time::Duration;
/// use e2b_core::StartProcess;
/// let spec = StartProcess::shell("echo hi")
///     .env("A", "1")
///     .cwd("/tmp")
///     .user("root")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(spec.args, ["-l", "-c", "echo hi"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartProcess {
    /// Program.
    pub cmd: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub envs: BTreeMap<String, String>,
    /// Working directory (relative: against the user's home).
    pub cwd: Option<String>,
    /// Run as this user (`Authorization: Basic`); `None` = envd's default user.
    pub user: Option<String>,
    /// Allocate a PTY of this size (output then arrives as `pty` data).
    pub pty: Option<PtySize>,
    /// Tag usable as a selector.
    pub tag: Option<String>,
    /// Open a stdin pipe (default false, as the SDKs).
    pub stdin: bool,
    /// Process lifetime: envd SIGKILLs it when this expires (sent as `Connect-Timeout-Ms`,
    /// which also bounds the stream). Default none.
    pub timeout: Option<Duration>,
    /// Fail the stream when nothing arrives for this long (overrides the config).
    pub idle_timeout: Option<Duration>,
}

impl StartProcess {
    /// Run `cmd` with no arguments.
    pub fn new(cmd: impl Into<String>) -> Self {
        StartProcess {
            cmd: cmd.into(),
            ..Default::default()
        }
    }

    /// `/bin/bash -l -c <script>`, as the SDKs' `commands.run`.
    pub fn shell(script: impl Into<String>) -> Self {
        StartProcess::new("/bin/bash").args(["-l".to_owned(), "-c".to_owned(), script.into()])
    }

    /// Set the arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Add an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.insert(key.into(), value.into());
        self
    }

    /// Working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Run as this user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Allocate a PTY.
    pub fn pty(mut self, cols: u32, rows: u32) -> Self {
        self.pty = Some(PtySize { cols, rows });
        self
    }

    /// Tag the process.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Open a stdin pipe.
    pub fn stdin(mut self, on: bool) -> Self {
        self.stdin = on;
        self
    }

    /// Process lifetime (envd kills the process after it).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Stream idle timeout.
    pub fn idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = Some(t);
        self
    }

    /// The `StartRequest` body.
    pub fn to_request(&self) -> StartRequest {
        StartRequest {
            process: ProcessConfig {
                cmd: self.cmd.clone(),
                args: self.args.clone(),
                envs: self.envs.clone(),
                cwd: self.cwd.clone(),
            },
            pty: self.pty.map(|size| Pty { size: Some(size) }),
            tag: self.tag.clone(),
            // a PTY process has no stdin pipe; the SDK omits the field then
            stdin: if self.pty.is_some() {
                None
            } else {
                Some(self.stdin)
            },
        }
    }
}

/// Options of streams that attach to something existing (`Connect`, `WatchDir`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// `Connect-Timeout-Ms`: the server ends the stream (`deadline_exceeded`) after it.
    /// Default none. On `Connect` it does not kill the process.
    pub deadline: Option<Duration>,
    /// Fail the stream when nothing arrives for this long (overrides the config).
    pub idle_timeout: Option<Duration>,
}

impl EnvdConn {
    /// Read the first message, which must be `start`, within the handshake timeout.
    async fn process_stream(
        &self,
        mut events: MessageStream<EventResponse>,
    ) -> Result<ProcessStream, Error> {
        let first = tokio::time::timeout(self.request_timeout, events.next())
            .await
            .map_err(|_| Error::Timeout {
                what: "process start event",
                after: self.request_timeout,
            })?;
        let pid = match first {
            Some(Ok(EventResponse {
                event: ProcessEvent::Start(s),
            })) => s.pid,
            Some(Ok(other)) => {
                return Err(Error::protocol(
                    Surface::Envd,
                    format!("expected a start event, got {other:?}"),
                ));
            }
            Some(Err(e)) => return Err(e),
            None => {
                return Err(Error::stream_cut(
                    Surface::Envd,
                    "stream ended before its start event",
                ));
            }
        };
        let events = events.map(|r| r.map(|e| e.event));
        Ok(ProcessStream::new(pid, Box::pin(events)))
    }

    pub(crate) async fn start_process(&self, spec: &StartProcess) -> Result<ProcessStream, Error> {
        let user = self.effective_user(spec.user.as_deref());
        let events = self
            .server_stream::<_, EventResponse>(
                paths::START,
                &spec.to_request(),
                user,
                spec.timeout,
                spec.idle_timeout,
            )
            .await?;
        self.process_stream(events).await
    }

    pub(crate) async fn connect_process(
        &self,
        process: ProcessSelector,
        opts: StreamOptions,
    ) -> Result<ProcessStream, Error> {
        let events = self
            .server_stream::<_, EventResponse>(
                paths::CONNECT,
                &ConnectRequest { process },
                None,
                opts.deadline,
                opts.idle_timeout,
            )
            .await?;
        self.process_stream(events).await
    }

    pub(crate) async fn list_processes(&self) -> Result<Vec<ProcessInfo>, Error> {
        let r: ListResponse = self.unary(paths::LIST, &Empty {}, None).await?;
        Ok(r.processes)
    }

    pub(crate) async fn send_input(
        &self,
        process: ProcessSelector,
        input: ProcessInput,
    ) -> Result<(), Error> {
        let req = SendInputRequest {
            process,
            input: Some(input),
        };
        // Binary: the bytes cross as they are (JSON would carry them as base64).
        let _: Empty = self.unary_proto(paths::SEND_INPUT, &req, None).await?;
        Ok(())
    }

    pub(crate) async fn send_stdin_parts(
        &self,
        process: ProcessSelector,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        let body = crate::proto::process_wire::encode_stdin_parts(&process, parts);
        let _: Empty = self.unary_proto_body(paths::SEND_INPUT, body, None).await?;
        Ok(())
    }

    pub(crate) async fn send_signal(
        &self,
        process: ProcessSelector,
        signal: Signal,
    ) -> Result<(), Error> {
        let _: Empty = self
            .unary(
                paths::SEND_SIGNAL,
                &SendSignalRequest { process, signal },
                None,
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn resize_pty(
        &self,
        process: ProcessSelector,
        size: PtySize,
    ) -> Result<(), Error> {
        let req = UpdateRequest {
            process,
            pty: Some(Pty { size: Some(size) }),
        };
        let _: Empty = self.unary(paths::UPDATE, &req, None).await?;
        Ok(())
    }

    pub(crate) async fn close_stdin(&self, process: ProcessSelector) -> Result<(), Error> {
        let _: Empty = self
            .unary(paths::CLOSE_STDIN, &CloseStdinRequest { process }, None)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_request_shapes() {
        let json = serde_json::to_string(&StartProcess::shell("echo hi").to_request()).unwrap();
        assert_eq!(
            json,
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}"#
        );
        let pty = StartProcess::new("/bin/bash")
            .args(["-i", "-l"])
            .pty(80, 24);
        let json = serde_json::to_string(&pty.to_request()).unwrap();
        assert_eq!(
            json,
            r#"{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":24}}}"#
        );
    }
}
