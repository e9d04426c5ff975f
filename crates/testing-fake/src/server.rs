//! The emulator as a whole: configuration, the one shared listener, per-request dispatch
//! (count → faults → control plane or envd), the timeout reaper, and shutdown.
//!
//! One listener serves both surfaces: requests carrying `E2b-Sandbox-Id` are envd traffic
//! (as on E2B's shared sandbox host), everything else is the control plane, except the
//! emulator's own `/_emulator/*` endpoints ([`crate::admin`]). Connections are served by
//! hyper directly so a `Reset` fault can drop one without answering.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use e2b_proto::headers;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::Rng;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::control;
use crate::control::store::Store;
use crate::counters::{Counters, Plane, route_key};
use crate::faults::{FaultAction, Faults, RequestFacts};
use crate::proxy::{self, Target};

/// How to run an emulator.
#[derive(Clone)]
pub struct EmulatorConfig {
    /// Listen address; default `127.0.0.1:0` (a free port).
    pub bind: SocketAddr,
    /// The API key clients must send; default a random `e2b_<40 hex>`.
    pub api_key: Option<String>,
    /// Directory holding every sandbox's tree; default a temp dir removed on shutdown.
    pub root: Option<PathBuf>,
    /// The plan's maximum sandbox lifetime; default 24 h.
    pub max_timeout: Duration,
    /// How often timed-out sandboxes are looked for; default 100 ms.
    pub reap_interval: Duration,
    /// Templates whose sandboxes' root filesystem is a tree the person names instead of
    /// the host's allowlisted system directories (`e2b-local --template-root NAME=DIR`);
    /// default none. Two roots for one template, or any with the boundary switched off,
    /// refuse the start.
    pub template_roots: Vec<crate::TemplateRoot>,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            api_key: None,
            root: None,
            max_timeout: Duration::from_secs(24 * 3600),
            reap_interval: Duration::from_millis(100),
            template_roots: Vec::new(),
        }
    }
}

impl std::fmt::Debug for EmulatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatorConfig")
            .field("bind", &self.bind)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("root", &self.root)
            .field("max_timeout", &self.max_timeout)
            .field("reap_interval", &self.reap_interval)
            .field("template_roots", &self.template_roots)
            .finish()
    }
}

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulatorError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The root directory could not be created.
    #[error("cannot create the emulator root: {0}")]
    Root(std::io::Error),
    /// A template root cannot be used (see [`crate::TemplateRoot`]).
    #[error("--template-root: {0}")]
    TemplateRoot(#[from] crate::TemplateRootError),
}

/// State shared by every connection.
pub(crate) struct Shared {
    pub api_key: String,
    pub counters: Counters,
    pub faults: Faults,
    pub store: Arc<Store>,
    control: Router,
    admin: OnceLock<Router>,
}

/// A connection-dropping answer (the `Reset` fault): hyper closes the connection without
/// writing a response.
#[derive(Debug, thiserror::Error)]
#[error("connection reset by fault injection")]
struct ResetConnection;

async fn dispatch(shared: Arc<Shared>, req: Request) -> Result<Response, ResetConnection> {
    let path = req.uri().path().to_owned();
    if path.starts_with(crate::admin::PREFIX) {
        let admin = shared
            .admin
            .get_or_init(|| crate::admin::router(shared.clone()))
            .clone();
        return Ok(admin
            .oneshot(req)
            .await
            .unwrap_or_else(|never| match never {}));
    }
    let target = proxy::target(&shared.store, &req);
    let (surface, sandbox_id) = match &target {
        Target::Control => {
            let id = control_sandbox_id(&path);
            (Plane::Control, id)
        }
        Target::Envd { sandbox_id, .. } => (Plane::Envd, Some(sandbox_id.clone())),
        Target::Invalid(_) => (
            Plane::Envd,
            req.headers()
                .get(headers::SANDBOX_ID)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ),
    };
    shared
        .counters
        .record(surface, &route_key(surface, req.method(), &path));
    let fired = shared.faults.fire(&RequestFacts {
        surface,
        method: req.method().as_str(),
        path: &path,
        sandbox_id: sandbox_id.as_deref(),
    });
    for d in &fired.delays {
        tokio::time::sleep(*d).await;
    }
    let mut cut = None;
    let mut cut_idle = None;
    match fired.terminal {
        Some(FaultAction::Status {
            status,
            body,
            content_type,
        }) => {
            let status = axum::http::StatusCode::from_u16(status)
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
            return Ok((
                status,
                [(axum::http::header::CONTENT_TYPE, content_type)],
                body,
            )
                .into_response());
        }
        Some(FaultAction::Reset) => return Err(ResetConnection),
        Some(FaultAction::CutStream { after_frames }) => cut = Some(after_frames),
        Some(FaultAction::CutIdle(idle)) => cut_idle = Some(idle),
        _ => {}
    }
    let mut req = req;
    if fired.go_away
        && let Some(GoAway(n)) = req.extensions().get::<GoAway>()
    {
        // Served first: the connection ends once its requests in flight are answered.
        n.notify_one();
    }
    if fired.drop_access_token {
        req.headers_mut().remove(headers::ACCESS_TOKEN);
    }
    let resp = match target {
        Target::Control => shared
            .control
            .clone()
            .oneshot(req)
            .await
            .unwrap_or_else(|never| match never {}),
        Target::Invalid(resp) => resp,
        Target::Envd { sandbox_id, port } => {
            proxy::route_envd(&shared.store, &sandbox_id, port, req).await
        }
    };
    Ok(match (cut, cut_idle) {
        (Some(n), _) => proxy::cut_stream(resp, n),
        (None, Some(idle)) => proxy::cut_idle(resp, idle),
        (None, None) => resp,
    })
}

/// HTTP/2 receive window, per stream and per connection (Go's `MaxUploadBufferPer*`).
const H2_WINDOW: u32 = 1 << 20;

/// Per connection: told by a `GoAway` fault to shut the connection down gracefully.
#[derive(Clone)]
struct GoAway(Arc<tokio::sync::Notify>);

/// The sandbox id in a control-plane path (`/sandboxes/{id}/…`, `/v2/sandboxes/{id}/…`).
fn control_sandbox_id(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/v2/sandboxes/")
        .or_else(|| path.strip_prefix("/sandboxes/"))?;
    let id = rest.split('/').next()?;
    (!id.is_empty() && id != "metrics").then(|| id.split('-').next().unwrap_or(id).to_owned())
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        // Reap finished connection tasks as we go.
        while conns.try_join_next().is_some() {}
        let (stream, _peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        shared.counters.connection();
        let shared = shared.clone();
        let stop = stop.clone();
        conns.spawn(async move {
            let go_away = Arc::new(tokio::sync::Notify::new());
            let told = go_away.clone();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut req = req.map(Body::new);
                    req.extensions_mut().insert(GoAway(go_away.clone()));
                    dispatch(shared.clone(), req)
                });
            // HTTP/1.1 and HTTP/2 with prior knowledge on the same plain port, as envd
            // serves h2c; receive windows of 1 MiB per stream and per connection, Go's
            // http2 server defaults (envd's).
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http2()
                .initial_stream_window_size(H2_WINDOW)
                .initial_connection_window_size(H2_WINDOW);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => Some(r),
                () = told.notified() => None,
                () = stop.cancelled() => return,
            };
            let r = match ended {
                Some(r) => r,
                None => {
                    conn.as_mut().graceful_shutdown();
                    tokio::select! {
                        r = conn.as_mut() => r,
                        () = stop.cancelled() => return,
                    }
                }
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    conns.shutdown().await;
}

/// A running E2B emulator (control plane + envd on one loopback listener).
pub struct Emulator {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: CancellationToken,
    server: Option<JoinHandle<()>>,
    reaper: Option<JoinHandle<()>>,
    finished: bool,
    tempdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("addr", &self.addr)
            .field("api_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

fn random_api_key() -> String {
    let mut bytes = [0u8; 20];
    rand::rng().fill(&mut bytes);
    format!("e2b_{}", hex::encode(bytes))
}

impl Emulator {
    /// Bind, and start serving in the background.
    pub async fn start(cfg: EmulatorConfig) -> Result<Emulator, EmulatorError> {
        let api_key = cfg.api_key.clone().unwrap_or_else(random_api_key);
        let template_roots = crate::template_root::by_template(&cfg.template_roots)?;
        if !template_roots.is_empty() && crate::envd::isolation_opted_out() {
            return Err(crate::TemplateRootError::NeedsIsolation.into());
        }
        let (root, tempdir) = match &cfg.root {
            Some(r) => {
                std::fs::create_dir_all(r).map_err(EmulatorError::Root)?;
                (r.clone(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("e2b-local-")
                    .tempdir()
                    .map_err(EmulatorError::Root)?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let listener = TcpListener::bind(cfg.bind)
            .await
            .map_err(|source| EmulatorError::Bind {
                addr: cfg.bind,
                source,
            })?;
        let mut addr = listener
            .local_addr()
            .map_err(|source| EmulatorError::Bind {
                addr: cfg.bind,
                source,
            })?;
        if addr.ip().is_unspecified() {
            addr.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        let store = Arc::new(Store::new(root, cfg.max_timeout, template_roots));
        let shared = Arc::new(Shared {
            control: control::router(store.clone(), &api_key),
            api_key,
            counters: Counters::default(),
            faults: Faults::default(),
            store: store.clone(),
            admin: OnceLock::new(),
        });
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, shared.clone(), stop.clone()));
        let reaper = {
            let stop = stop.clone();
            let every = cfg.reap_interval.max(Duration::from_millis(10));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        _ = tick.tick() => {
                            store.expire_due().await;
                            store.sample_metrics();
                        }
                    }
                }
            })
        };
        tracing::info!(%addr, "E2B emulator listening");
        Ok(Emulator {
            shared,
            addr,
            stop,
            server: Some(server),
            reaper: Some(reaper),
            finished: false,
            tempdir,
        })
    }

    /// The control-plane URL, `http://127.0.0.1:N`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The envd URL of every sandbox (the same listener; routed by `E2b-Sandbox-Id`).
    pub fn sandbox_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API key clients must send as `X-API-KEY`.
    pub fn api_key(&self) -> &str {
        &self.shared.api_key
    }

    /// `E2B_API_URL=…\nE2B_SANDBOX_URL=…\nE2B_API_KEY=…\n`, ready to `export`.
    pub fn env_lines(&self) -> String {
        format!(
            "E2B_API_URL={}\nE2B_SANDBOX_URL={}\nE2B_API_KEY={}\n",
            self.api_url(),
            self.sandbox_url(),
            self.api_key()
        )
    }

    /// Request counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Fault rules.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Stop serving, kill every sandbox's processes and remove the temp root.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
        if let Some(r) = self.reaper.take() {
            let _ = r.await;
        }
        self.shared.store.kill_all().await;
        self.finished = true;
        if let Some(t) = self.tempdir.take() {
            let _ = t.close();
        }
        tracing::info!("E2B emulator stopped");
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.stop.cancel();
        // Kill every sandbox without depending on the (possibly single-threaded, possibly
        // shutting down) runtime we are dropped on: a helper thread with its own runtime.
        // The SIGKILLs go out at once; waiting for the exits needs the caller's runtime
        // (blocked here when it is single-threaded), so the wait is bounded. The temp root
        // is removed right after, when `tempdir` drops.
        let store = self.shared.store.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("e2b-emulator-drop".into())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(store.kill_all());
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(3));
        }
    }
}
