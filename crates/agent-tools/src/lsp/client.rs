//! [`LspClient`]: one language server process and the JSON-RPC connection to it (the
//! connection's tasks are in `connection.rs`), with its options and the default client
//! capabilities. The messages the client builds are `lsp-types` values, not JSON written
//! by hand; what comes back stays JSON where servers differ (diagnostics, notifications).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exec_world::{Child, ExitStatus, Fs, SpawnSpec, StdinMode, Subprocess, Target, WorldPath};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, Initialized,
    Notification as _,
};
use lsp_types::request::{Initialize, Request as _};
use lsp_types::{
    ClientCapabilities, ClientInfo, CompletionClientCapabilities, CompletionItemCapability,
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    DynamicRegistrationClientCapabilities, GeneralClientCapabilities, GotoCapability,
    HoverClientCapabilities, InitializeParams, InitializeResult, InitializedParams, MarkupKind,
    PositionEncodingKind, PublishDiagnosticsClientCapabilities, TextDocumentClientCapabilities,
    TextDocumentContentChangeEvent, TextDocumentIdentifier, TextDocumentItem,
    TextDocumentSyncClientCapabilities, Uri, VersionedTextDocumentIdentifier,
    WindowClientCapabilities, WorkspaceClientCapabilities, WorkspaceFolder,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::connection::{
    CancelGuard, NOTIFY_CAPACITY, OUTGOING_CAPACITY, Outgoing, Shared, drain_stderr, read_loop,
    write_loop,
};
use super::error::LspError;
use super::framing::DEFAULT_MAX_BODY;
use super::handler::{DefaultHandler, ServerRequestHandler};
use super::message::{Notification, RequestId, notification_body, request_body};

/// Options of [`LspClient::spawn`].
#[derive(Clone)]
#[non_exhaustive]
pub struct LspOptions {
    /// Largest message body accepted from the server (default 64 MiB); a larger one is
    /// skipped and reported as a protocol error.
    pub max_body: usize,
    /// Timeout of [`LspClient::request`] (default 30 s).
    pub request_timeout: Duration,
    /// Answers server→client requests (default [`DefaultHandler`]).
    pub handler: Arc<dyn ServerRequestHandler>,
}

impl Default for LspOptions {
    fn default() -> Self {
        LspOptions {
            max_body: DEFAULT_MAX_BODY,
            request_timeout: Duration::from_secs(30),
            handler: Arc::new(DefaultHandler),
        }
    }
}

impl std::fmt::Debug for LspOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LspOptions")
            .field("max_body", &self.max_body)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl LspOptions {
    /// Sets [`LspOptions::max_body`].
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sets [`LspOptions::request_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`LspOptions::handler`].
    pub fn handler(mut self, handler: impl ServerRequestHandler + 'static) -> Self {
        self.handler = Arc::new(handler);
        self
    }
}

/// A running language server and the connection to it.
///
/// Dropping the client kills the server's process group (exec-world's `Child` drop);
/// [`LspClient::close`] shuts it down politely first.
///
/// ```no_run
/// # use agent_tools::lsp::{LspClient, LspOptions, default_client_capabilities};
/// # use exec_world::{SpawnSpec, Target, WorldPath};
/// # async fn demo(proc: &dyn exec_world::Subprocess) -> Result<(), agent_tools::lsp::LspError> {
/// let spec = SpawnSpec::new("python3").arg("-m").arg("pylsp");
/// let lsp = LspClient::spawn(proc, spec, LspOptions::default())?;
/// let root = Target::from_absolute(&WorldPath::new("/home/user/proj").unwrap()).unwrap();
/// lsp.initialize(&root, default_client_capabilities()).await?;
/// lsp.initialized().await?;
/// lsp.did_open("file:///home/user/proj/a.py", "python", 1, "print(x)\n").await?;
/// let diags = lsp
///     .wait_for_diagnostics("file:///home/user/proj/a.py", std::time::Duration::from_secs(30), |d| !d.is_empty())
///     .await?;
/// let status = lsp.close(std::time::Duration::from_secs(5)).await?;
/// # let _ = (diags, status); Ok(()) }
/// ```
pub struct LspClient {
    shared: Arc<Shared>,
    child: Child,
    next_id: AtomicI64,
    request_timeout: Duration,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for LspClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LspClient")
            .field("pid", &self.child.pid())
            .field("closed", &self.shared.closed_reason())
            .finish()
    }
}

impl LspClient {
    /// Starts the server `spec` (its stdin is made a pipe) and connects to it.
    pub fn spawn(
        proc: &dyn Subprocess,
        spec: SpawnSpec,
        opts: LspOptions,
    ) -> Result<LspClient, LspError> {
        let mut child = proc
            .spawn(spec.stdin(StdinMode::Piped))
            .map_err(LspError::Spawn)?;
        let stdin = child.take_stdin();
        let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING_CAPACITY);
        let stdout = child.take_stdout();
        let stderr = child.take_stderr();
        let (notifications, _) = broadcast::channel(NOTIFY_CAPACITY);
        let (diagnostics_changed, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            outgoing,
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            stderr_tail: Mutex::new(VecDeque::new()),
            diagnostics: Mutex::new(HashMap::new()),
            diagnostics_changed,
            notifications,
            handler: opts.handler.clone(),
        });
        let mut tasks = Vec::new();
        match stdin {
            Some(sink) => tasks.push(tokio::spawn(write_loop(shared.clone(), sink, outgoing_rx))),
            None => shared.close("the server has no stdin".into()),
        }
        if let Some(err) = stderr {
            tasks.push(tokio::spawn(drain_stderr(shared.clone(), err)));
        }
        match stdout {
            Some(out) => tasks.push(tokio::spawn(read_loop(shared.clone(), out, opts.max_body))),
            None => shared.close("the server has no stdout".into()),
        }
        Ok(LspClient {
            shared,
            child,
            next_id: AtomicI64::new(1),
            request_timeout: opts.request_timeout,
            tasks,
        })
    }

    /// The server's pid in the world, once known.
    pub fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// Sends a request and waits for its result with the default timeout, deserialized
    /// as `R` (use `serde_json::Value` for the raw result).
    pub async fn request<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
    ) -> Result<R, LspError> {
        let v = self
            .request_value(method, serde_json::to_value(params)?, self.request_timeout)
            .await?;
        serde_json::from_value(v)
            .map_err(|e| LspError::Protocol(format!("{method}: unexpected result: {e}")))
    }

    /// Sends a request and waits up to `timeout` for its raw result. On timeout (or when
    /// this future is dropped) the server is sent `$/cancelRequest`.
    pub async fn request_value(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, LspError> {
        if let Some(reason) = self.shared.closed_reason() {
            return Err(LspError::Closed { reason });
        }
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.shared
            .pending
            .lock()
            .map_err(|_| LspError::Protocol("pending map poisoned".into()))?
            .insert(id.clone(), tx);
        let mut guard = CancelGuard {
            shared: &self.shared,
            id: id.clone(),
            sent: false,
            answered: false,
        };
        let body = request_body(&id, method, &params);
        // The timeout covers queueing the frame too (a server that stops reading its
        // stdin cannot hang the caller); giving up never cuts a frame in half.
        let outcome = tokio::time::timeout(timeout, async {
            self.shared.send(&body).await?;
            guard.sent = true;
            Ok::<_, LspError>(rx.await)
        })
        .await;
        match outcome {
            Ok(Err(e)) => Err(e),
            Ok(Ok(Ok(Ok(v)))) => {
                guard.answered = true;
                Ok(v)
            }
            Ok(Ok(Ok(Err(error)))) => {
                guard.answered = true;
                Err(LspError::Server {
                    method: method.to_string(),
                    error,
                })
            }
            Ok(Ok(Err(_))) => {
                guard.answered = true; // the connection closed: nothing to cancel
                Err(self.shared.closed_error("connection closed"))
            }
            Err(_) => Err(LspError::Timeout {
                method: method.to_string(),
                after: timeout,
            }),
        }
    }

    /// Sends a notification.
    pub async fn notify<P: Serialize>(&self, method: &str, params: P) -> Result<(), LspError> {
        if let Some(reason) = self.shared.closed_reason() {
            return Err(LspError::Closed { reason });
        }
        let params = serde_json::to_value(params)?;
        self.shared.send(&notification_body(method, &params)).await
    }

    /// Notifications from the server from now on (every method, including
    /// `textDocument/publishDiagnostics`, `window/logMessage`, `$/progress`). A subscriber
    /// that falls more than 1024 behind gets `RecvError::Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<Notification> {
        self.shared.notifications.subscribe()
    }

    /// The last diagnostics published for `uri`, if any.
    pub fn diagnostics(&self, uri: &str) -> Option<Vec<Value>> {
        self.shared.diagnostics.lock().ok()?.get(uri).cloned()
    }

    /// Waits until the latest diagnostics for `uri` satisfy `pred` (checked against what
    /// was already received too, so there is no subscribe race) and returns them.
    pub async fn wait_for_diagnostics(
        &self,
        uri: &str,
        timeout: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Result<Vec<Value>, LspError> {
        let mut changed = self.shared.diagnostics_changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changed.borrow_and_update();
            if let Some(d) = self.diagnostics(uri) {
                if pred(&d) {
                    return Ok(d);
                }
            }
            if let Some(reason) = self.shared.closed_reason() {
                return Err(LspError::Closed { reason });
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(_) => {}
                Err(_) => {
                    return Err(LspError::Timeout {
                        method: format!("textDocument/publishDiagnostics for {uri}"),
                        after: timeout,
                    });
                }
            }
        }
    }

    /// The `initialize` request for a workspace rooted at `root` (`rootUri`,
    /// `workspaceFolders`), `processId: null` (the client lives in another world than
    /// the server). Returns the server's `InitializeResult`.
    pub async fn initialize(
        &self,
        root: &Target,
        capabilities: ClientCapabilities,
    ) -> Result<InitializeResult, LspError> {
        let name = root.path().file_name().unwrap_or_else(|| "root".into());
        let uri = parse_uri(&root.uri())?;
        // `rootUri` and `rootPath` are deprecated in favour of `workspaceFolders`, but
        // servers that predate folders still read them.
        #[allow(deprecated)]
        let params = InitializeParams {
            process_id: None,
            client_info: Some(ClientInfo {
                name: "agent-tools".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            root_uri: Some(uri.clone()),
            root_path: Some(root.path().as_str().to_string()),
            workspace_folders: Some(vec![WorkspaceFolder { uri, name }]),
            capabilities,
            ..InitializeParams::default()
        };
        self.request(Initialize::METHOD, params).await
    }

    /// The `initialized` notification.
    pub async fn initialized(&self) -> Result<(), LspError> {
        self.notify(Initialized::METHOD, InitializedParams {}).await
    }

    /// `textDocument/didOpen`.
    pub async fn did_open(
        &self,
        uri: &str,
        language_id: &str,
        version: i32,
        text: &str,
    ) -> Result<(), LspError> {
        let text_document = TextDocumentItem {
            uri: parse_uri(uri)?,
            language_id: language_id.into(),
            version,
            text: text.into(),
        };
        self.notify(
            DidOpenTextDocument::METHOD,
            DidOpenTextDocumentParams { text_document },
        )
        .await
    }

    /// Reads `path` through `fs` (at most `max_bytes`, UTF-8 required) and sends
    /// `textDocument/didOpen` for it with version 1; returns the document's URI
    /// (`fs.canonical(path).uri()`), the identity the server's notifications use.
    pub async fn open_document(
        &self,
        fs: &dyn Fs,
        path: &WorldPath,
        language_id: &str,
        max_bytes: u64,
    ) -> Result<String, LspError> {
        let data = fs.read(path, max_bytes).await?;
        let text = std::str::from_utf8(&data)
            .map_err(|e| LspError::Protocol(format!("{path} is not UTF-8: {e}")))?;
        let uri = fs.canonical(path).uri();
        self.did_open(&uri, language_id, 1, text).await?;
        Ok(uri)
    }

    /// `textDocument/didChange` with the full new text.
    pub async fn did_change(&self, uri: &str, version: i32, text: &str) -> Result<(), LspError> {
        let params = DidChangeTextDocumentParams {
            text_document: VersionedTextDocumentIdentifier {
                uri: parse_uri(uri)?,
                version,
            },
            content_changes: vec![TextDocumentContentChangeEvent {
                range: None,
                range_length: None,
                text: text.into(),
            }],
        };
        self.notify(DidChangeTextDocument::METHOD, params).await
    }

    /// `textDocument/didClose`.
    pub async fn did_close(&self, uri: &str) -> Result<(), LspError> {
        let text_document = TextDocumentIdentifier {
            uri: parse_uri(uri)?,
        };
        self.notify(
            DidCloseTextDocument::METHOD,
            DidCloseTextDocumentParams { text_document },
        )
        .await
    }

    /// The `shutdown` request.
    pub async fn shutdown(&self) -> Result<(), LspError> {
        self.request_value("shutdown", Value::Null, self.request_timeout)
            .await
            .map(|_| ())
    }

    /// The `exit` notification, then closes the server's stdin (after every message
    /// queued before it was written).
    pub async fn exit(&self) -> Result<(), LspError> {
        let r = self.notify("exit", Value::Null).await;
        let (done, closed) = oneshot::channel();
        if self
            .shared
            .outgoing
            .send(Outgoing::Close(done))
            .await
            .is_ok()
        {
            let _ = closed.await;
        }
        r
    }

    /// Waits for the server process to exit.
    pub async fn wait(&self) -> Result<ExitStatus, LspError> {
        self.child.wait().await.map_err(LspError::Process)
    }

    /// Ends the server: `shutdown` and `exit` (if the connection is still open), up to
    /// `grace` for the process to exit by itself, then terminates its whole process group
    /// (SIGTERM, `grace`, SIGKILL). Returns the server's exit status.
    pub async fn close(self, grace: Duration) -> Result<ExitStatus, LspError> {
        let polite = async {
            if self.shared.closed_reason().is_none() {
                let _ = self.request_value("shutdown", Value::Null, grace).await;
                let _ = self.exit().await;
            }
            self.child.wait().await
        };
        let status = match tokio::time::timeout(grace.saturating_mul(2), polite).await {
            Ok(Ok(s)) => {
                // The leader exited; still end anything it left in its group.
                self.child
                    .terminate(grace)
                    .await
                    .map_err(LspError::Process)?;
                s
            }
            _ => self
                .child
                .terminate(grace)
                .await
                .map_err(LspError::Process)?,
        };
        self.shared.close("closed by the client".into());
        Ok(status)
    }
}

impl Drop for LspClient {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // `child` drops after this: exec-world kills the server's process group.
    }
}

/// A document or workspace URI as the protocol types hold it.
fn parse_uri(uri: &str) -> Result<Uri, LspError> {
    uri.parse()
        .map_err(|e| LspError::Protocol(format!("not a URI: {uri:?}: {e}")))
}

/// Client capabilities suitable for diagnostics and navigation: publishDiagnostics,
/// hover/definition/completion basics, `workspace/configuration`, workDoneProgress.
pub fn default_client_capabilities() -> ClientCapabilities {
    ClientCapabilities {
        workspace: Some(WorkspaceClientCapabilities {
            configuration: Some(true),
            workspace_folders: Some(true),
            did_change_configuration: Some(DynamicRegistrationClientCapabilities {
                dynamic_registration: Some(false),
            }),
            ..Default::default()
        }),
        text_document: Some(TextDocumentClientCapabilities {
            synchronization: Some(TextDocumentSyncClientCapabilities {
                dynamic_registration: Some(false),
                did_save: Some(true),
                ..Default::default()
            }),
            publish_diagnostics: Some(PublishDiagnosticsClientCapabilities {
                related_information: Some(true),
                version_support: Some(true),
                ..Default::default()
            }),
            hover: Some(HoverClientCapabilities {
                content_format: Some(vec![MarkupKind::Markdown, MarkupKind::PlainText]),
                ..Default::default()
            }),
            definition: Some(GotoCapability {
                link_support: Some(true),
                ..Default::default()
            }),
            completion: Some(CompletionClientCapabilities {
                completion_item: Some(CompletionItemCapability {
                    snippet_support: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        window: Some(WindowClientCapabilities {
            work_done_progress: Some(true),
            ..Default::default()
        }),
        general: Some(GeneralClientCapabilities {
            position_encodings: Some(vec![PositionEncodingKind::UTF16]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
