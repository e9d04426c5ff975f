//! Sandbox ports, served as E2B's proxy serves them: a request for `<port>-<id>.<domain>`
//! (or carrying `E2b-Sandbox-Port` other than envd's) goes to that port inside the sandbox,
//! plain HTTP and upgraded connections (WebSocket) alike.
//!
//! Only a port on which a process **of that sandbox** listens is reached, never another
//! service of the host; anything else gets the proxy's 502 `The sandbox is running but port
//! is not open`. A killed sandbox's forwarded responses and upgraded connections are cut
//! (see [`crate::proxy`]).

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use crate::envd::Envd;
use crate::proxy::port_closed;

/// Forward `req` to `port` of the sandbox whose envd is `envd`; `cut` ends upgraded
/// connections when the sandbox is killed.
pub(crate) async fn forward(
    envd: &Envd,
    sandbox_id: &str,
    port: u64,
    mut req: Request,
    cut: CancellationToken,
) -> Response {
    let Ok(port16) = u16::try_from(port) else {
        return port_closed(sandbox_id, port);
    };
    if !envd.listens_on(port16).await {
        return port_closed(sandbox_id, port);
    }
    let stream = match envd.connect_port(port16).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(sandbox = %sandbox_id, port, error = %e, "sandbox port refused");
            return port_closed(sandbox_id, port);
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(sandbox = %sandbox_id, port, error = %e, "sandbox port handshake failed");
            return port_closed(sandbox_id, port);
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "sandbox port connection ended with an error");
        }
    });
    let client_side = hyper::upgrade::on(&mut req);
    let version = req.version();
    let mut resp = match sender.send_request(req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(sandbox = %sandbox_id, port, error = %e, "sandbox port answered nothing");
            return routing_failed();
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let sandbox_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let (Ok(client), Ok(sandbox)) = (client_side.await, sandbox_side.await) else {
                return;
            };
            let mut client = TokioIo::new(client);
            let mut sandbox = TokioIo::new(sandbox);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut sandbox) => {}
                () = cut.cancelled() => {}
            }
        });
    }
    // The proxy answers in the client's protocol, whatever the sandbox's server spoke.
    *resp.version_mut() = version;
    resp.map(Body::new)
}

/// The proxy's plain answer when the sandbox's side failed mid-request.
fn routing_failed() -> Response {
    let mut r = Response::new(Body::from("Failed to route request to sandbox\n"));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}
