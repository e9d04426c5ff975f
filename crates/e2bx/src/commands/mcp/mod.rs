//! `e2bx mcp`: the execution world as a Model Context Protocol server (rmcp), on stdio or
//! on streamable HTTP, one world per MCP session. [`args`] (flags), [`config`] (flags over
//! the config file), [`world`] (what a session works in), [`params`] and [`tools`] (the
//! tools), [`server`] (the rmcp handler, sessions, cancellation).

pub mod args;
pub mod config;
pub mod params;
pub mod server;
pub mod tools;
pub mod world;

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use args::McpArgs;
use args::ProviderKind;
use config::Settings;
use server::Shared;
use world::{Opener, local_provider};

use crate::cli::Global;
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;
use crate::target::Backend;

/// Serve until the client goes away (stdio) or a termination signal (both); every
/// session's world is ended before this returns.
pub async fn mcp(a: &McpArgs, g: &Global, ints: &mut Interrupts) -> CliResult {
    let settings = Settings::resolve(a)?;
    let mut backend = None;
    let opener = if let Some(dir) = &a.local {
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| CliError::msg(format!("--local {}: {e}", dir.display())))?;
        if !dir.is_dir() {
            return Err(CliError::msg(format!(
                "--local {}: not a directory",
                dir.display()
            )));
        }
        Opener::Local(dir)
    } else if let Some(kind) = a.provider {
        provider_opener(kind, &settings, g)?
    } else {
        let b = Arc::new(Backend::open(g).await?);
        backend = Some(b.clone());
        Opener::Sandbox {
            backend: b,
            global: g.clone(),
        }
    };
    let shared = Shared::new(opener, settings);
    let r = match &a.http {
        None => stdio(&shared, ints).await,
        Some(addr) => http(&shared, addr, g.quiet, ints).await,
    };
    shared.shutdown().await;
    drop(shared);
    if let Some(b) = backend.and_then(|b| Arc::try_unwrap(b).ok()) {
        b.close().await;
    }
    r
}

fn provider_opener(kind: ProviderKind, s: &Settings, g: &Global) -> CliResult<Opener> {
    let provider: Arc<dyn exec_world::sandbox::SandboxProvider> = match kind {
        ProviderKind::Local => Arc::new(local_provider(&s.state_dir)?),
        ProviderKind::E2b => {
            let mut keys = s.provider.clone();
            if !keys.contains_key("api_key") {
                let key = std::env::var("E2B_API_KEY").map_err(|_| {
                    CliError::msg(
                        "--provider e2b needs an API key: set E2B_API_KEY or `apiKey` in --config",
                    )
                })?;
                keys.insert("api_key".into(), key.into());
            }
            if !keys.contains_key("template") {
                keys.insert("template".into(), g.template.clone().into());
            }
            for (key, flag) in [("api_url", &g.api_url), ("domain", &g.domain)] {
                if let (false, Some(v)) = (keys.contains_key(key), flag) {
                    keys.insert(key.into(), v.clone().into());
                }
            }
            let mut cfg = sandbox_e2b::SandboxConfig::from_value(keys.into())
                .map_err(|e| CliError::msg(e.to_string()))?;
            cfg.sandbox_url = g.sandbox_url.clone();
            Arc::new(sandbox_e2b::E2bSandboxes::new(cfg).map_err(|e| CliError::msg(e.to_string()))?)
        }
    };
    Ok(Opener::Provider {
        provider,
        kind: match kind {
            ProviderKind::E2b => "e2b",
            ProviderKind::Local => "local",
        },
        conversation: s.conversation.clone(),
        state_dir: s.state_dir.clone(),
    })
}

async fn stdio(shared: &Arc<Shared>, ints: &mut Interrupts) -> CliResult {
    let service = shared
        .session()
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| CliError::msg(format!("mcp: the client's initialization failed: {e}")))?;
    let ct = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let mut code = 0;
    tokio::select! {
        r = &mut waiting => { r.map_err(|e| CliError::msg(format!("mcp: {e}")))?; }
        sig = ints.recv() => {
            ct.cancel();
            let _ = waiting.await;
            code = 128 + sig;
        }
    }
    Ok(code)
}

async fn http(shared: &Arc<Shared>, addr: &str, quiet: bool, ints: &mut Interrupts) -> CliResult {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| CliError::msg(format!("--http {addr}: {e} (e.g. 127.0.0.1:8765)")))?;
    if !addr.ip().is_loopback() {
        return Err(CliError::msg(format!(
            "--http {addr}: only loopback addresses are served (the server has no authentication); put an authenticating proxy in front for remote use"
        )));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::msg(format!("--http {addr}: cannot listen: {e}")))?;
    let local = listener.local_addr()?;
    let stop = CancellationToken::new();
    // Loopback Host only (rmcp's default), and no browser: a request carrying any Origin is
    // refused, so a web page cannot drive the world through the user's browser.
    let config = StreamableHttpServerConfig::default()
        .enforce_origin_validation()
        .with_cancellation_token(stop.child_token());
    let sessions = shared.clone();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(shared.settings().idle);
    let service: StreamableHttpService<server::McpSession, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(sessions.session()), Arc::new(manager), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    if !quiet {
        eprintln!("e2bx: MCP server on http://{local}/mcp");
    }
    let serve = axum::serve(listener, router).with_graceful_shutdown({
        let stop = stop.clone();
        async move { stop.cancelled_owned().await }
    });
    let sig = tokio::select! {
        r = serve.into_future() => {
            r.map_err(|e| CliError::msg(format!("mcp: the HTTP server failed: {e}")))?;
            0
        }
        sig = ints.recv() => sig,
    };
    stop.cancel();
    Ok(if sig == 0 { 0 } else { 128 + sig })
}
