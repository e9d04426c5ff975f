//! envd routing, as on E2B's shared sandbox host (`e2b-dev/infra packages/shared/pkg/proxy`):
//! a request carrying `E2b-Sandbox-Id` / `E2b-Sandbox-Port`, or whose `Host` is
//! `<port>-<sandbox id>.<domain>`, goes to that port of that sandbox (envd's port: envd);
//! a header-less signed `/files` URL goes to the sandbox whose access token signed it.
//!
//! Answers of the proxy itself (JSON for non-browser clients):
//! * one routing header without the other → 400 text `missing header`; a port that is not
//!   an unsigned integer → 400 text `Invalid sandbox port`;
//! * unknown / killed sandbox → 502 `{"sandboxId","message":"The sandbox was not found","code":502}`;
//! * a port other than envd's: forwarded to the sandbox's listener ([`crate::ports`]); when
//!   none listens → 502 `{"sandboxId","message":"The sandbox is running but port is not open","port":N,"code":502}`;
//! * paused sandbox: auto-resumed when it was created with `autoResume.enabled` (and paused
//!   with memory), else the same 502 as a missing sandbox: the proxy cannot route to a VM
//!   that does not run, and the SDKs' `isRunning()` reads exactly that 502 as "not running".
//!
//! A killed or paused sandbox's responses still streaming are cut mid-body (no
//! end-of-stream frame, the connection aborts), as the real proxy loses its connection to a
//! destroyed or snapshotted VM; a `/health` probe then answers 502.
//!
//! Also: [`cut_stream`] and [`cut_idle`], the body wrappers of the `CutStream` and
//! `CutIdle` faults.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use e2b_proto::control::SandboxState;
use e2b_proto::{ENVD_PORT, headers};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::control::ids::is_valid_id;
use crate::control::store::Store;

/// Seconds of life a sandbox gets when traffic auto-resumes it (infra's proxy uses 600).
const AUTO_RESUME_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a request goes.
pub(crate) enum Target {
    /// No routing header: the control plane.
    Control,
    /// envd of this sandbox, on this port.
    Envd {
        /// Sandbox id (as sent).
        sandbox_id: String,
        /// Port (as parsed).
        port: u64,
    },
    /// Bad routing headers: the proxy's answer.
    Invalid(Response),
}

fn text(status: StatusCode, msg: &str) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// The proxy's "sandbox not found" answer.
pub(crate) fn not_found(sandbox_id: &str) -> Response {
    json(
        StatusCode::BAD_GATEWAY,
        serde_json::json!({
            "sandboxId": sandbox_id,
            "message": "The sandbox was not found",
            "code": 502,
        }),
    )
}

/// The proxy's answer for a port of a running sandbox on which nothing listens.
pub(crate) fn port_closed(sandbox_id: &str, port: u64) -> Response {
    json(
        StatusCode::BAD_GATEWAY,
        serde_json::json!({
            "sandboxId": sandbox_id,
            "message": "The sandbox is running but port is not open",
            "port": port,
            "code": 502,
        }),
    )
}

/// Classify a request by its routing headers, else by its `Host` (`<port>-<id>.<domain>`),
/// else (a header-less signed `/files` URL) by the sandbox whose token made its signature.
pub(crate) fn target(store: &Store, req: &Request) -> Target {
    let h = req.headers();
    let get = |name: &str| {
        h.get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .filter(|v| !v.is_empty())
    };
    let id = get(headers::SANDBOX_ID);
    let port = get(headers::SANDBOX_PORT);
    match (id, port) {
        (None, None) => {}
        (None, Some(_)) | (Some(_), None) => {
            return Target::Invalid(text(StatusCode::BAD_REQUEST, "missing header"));
        }
        (Some(sandbox_id), Some(port)) => {
            return match port.parse::<u64>() {
                Ok(port) => Target::Envd { sandbox_id, port },
                Err(_) => Target::Invalid(text(StatusCode::BAD_REQUEST, "Invalid sandbox port")),
            };
        }
    }
    if let Some((port, sandbox_id)) = get(header::HOST.as_str()).as_deref().and_then(host_route) {
        return Target::Envd { sandbox_id, port };
    }
    if req.uri().path() == "/files" && crate::envd::has_signature(req.uri().query()) {
        return signed_files_target(store, req);
    }
    Target::Control
}

/// `<port>-<sandbox id>.<domain>[:<listen port>]` → (port, sandbox id).
fn host_route(host: &str) -> Option<(u64, String)> {
    let label = host.split('.').next()?;
    let (port, id) = label.split_once('-')?;
    let port = port.parse::<u64>().ok()?;
    // A bare `host:port` has no dot: never a sandbox host.
    (host.contains('.') && is_valid_id(id)).then(|| (port, id.to_owned()))
}

/// The sandbox whose access token signed this header-less `/files` request, or envd's own
/// 401 `invalid signature` when none did.
fn signed_files_target(store: &Store, req: &Request) -> Target {
    let query = req.uri().query();
    let owner = store.all().into_iter().find(|rec| {
        !rec.life().gone
            && rec
                .access_token
                .as_deref()
                .is_some_and(|token| crate::envd::signed_with(query, req.method(), token))
    });
    match owner {
        Some(rec) => Target::Envd {
            sandbox_id: rec.id.clone(),
            port: u64::from(ENVD_PORT),
        },
        None => Target::Invalid(crate::envd::json_error(
            StatusCode::UNAUTHORIZED,
            "invalid signature",
        )),
    }
}

/// Hand an envd request to its sandbox.
pub(crate) async fn route_envd(
    store: &Arc<Store>,
    sandbox_id: &str,
    port: u64,
    req: Request,
) -> Response {
    if !is_valid_id(sandbox_id) {
        return not_found(sandbox_id);
    }
    let Some(rec) = store.get(sandbox_id) else {
        return not_found(sandbox_id);
    };
    let (state, can_resume) = {
        let life = rec.life();
        if life.gone {
            return not_found(sandbox_id);
        }
        (life.state, rec.auto_resume && life.paused_with_memory)
    };
    if state == SandboxState::Paused {
        if !can_resume {
            return not_found(sandbox_id);
        }
        let timeout = AUTO_RESUME_TIMEOUT.min(store.max_timeout);
        if store.resume(&rec, timeout, None).await.is_err() {
            return not_found(sandbox_id);
        }
        tracing::info!(sandbox = %sandbox_id, "sandbox auto-resumed by traffic");
    }
    let (router, envd) = {
        let life = rec.life();
        if life.gone {
            return not_found(sandbox_id);
        }
        if life.state == SandboxState::Paused {
            return not_found(sandbox_id);
        }
        (life.router.clone(), life.envd.clone())
    };
    // Taken before the request runs: a pause or kill from now on cuts its answer.
    let cut = rec.cut_token();
    let resp = if port == u64::from(ENVD_PORT) {
        match router.oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    } else {
        crate::ports::forward(&envd, sandbox_id, port, req, cut.clone()).await
    };
    cut_when(resp, cut)
}

/// The body of `resp`, aborted with an error as soon as `cut` is cancelled: hyper then
/// drops the connection without finishing the body (HTTP/1: no last chunk).
fn cut_when(resp: Response, cut: CancellationToken) -> Response {
    use axum::body::HttpBody as _;
    // A body of known size is already complete (unary answers): it keeps its length.
    if resp.body().size_hint().exact().is_some() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let stream = futures::stream::unfold(
        (body.into_data_stream(), cut, false),
        |(mut inner, cut, done)| async move {
            if done {
                return None;
            }
            tokio::select! {
                biased;
                () = cut.cancelled() => Some((
                    Err(std::io::Error::other("sandbox killed: connection to it lost")),
                    (inner, cut, true),
                )),
                next = inner.next() => match next {
                    Some(Ok(chunk)) => Some((Ok(chunk), (inner, cut, false))),
                    Some(Err(e)) => Some((Err(std::io::Error::other(e)), (inner, cut, true))),
                    None => None,
                },
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(stream))
}

/// True for a Connect streaming response (`application/connect+…`).
fn is_connect_stream(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/connect+"))
}

/// Pass a streaming response's bytes as they come, but end the body (with no
/// end-of-stream frame) once nothing has arrived for `idle`: a proxy that drops idle
/// streams. Non-streaming responses pass unchanged.
pub(crate) fn cut_idle(resp: Response, idle: std::time::Duration) -> Response {
    if !is_connect_stream(&resp) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let stream = futures::stream::unfold(body.into_data_stream(), move |mut inner| async move {
        match tokio::time::timeout(idle, inner.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok::<_, std::io::Error>(chunk), inner)),
            // the end, a broken body, or silence for `idle`: stop here
            _ => None,
        }
    });
    Response::from_parts(parts, axum::body::Body::from_stream(stream))
}

/// Pass the first `after_frames` Connect envelopes of a streaming response, then end the
/// body without an end-of-stream frame. Non-streaming responses pass unchanged.
pub(crate) fn cut_stream(resp: Response, after_frames: usize) -> Response {
    if !is_connect_stream(&resp) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    struct St {
        inner: axum::body::BodyDataStream,
        buf: BytesMut,
        passed: usize,
        done: bool,
    }
    let st = St {
        inner: body.into_data_stream(),
        buf: BytesMut::new(),
        passed: 0,
        done: after_frames == 0,
    };
    let stream = futures::stream::unfold(st, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            let chunk = match st.inner.next().await {
                Some(Ok(c)) => c,
                _ => return None,
            };
            st.buf.extend_from_slice(&chunk);
            let mut out = BytesMut::new();
            while st.buf.len() >= 5 && !st.done {
                let flags = st.buf[0];
                let len = u32::from_be_bytes([st.buf[1], st.buf[2], st.buf[3], st.buf[4]]) as usize;
                if st.buf.len() < 5 + len {
                    break;
                }
                let frame = st.buf.split_to(5 + len);
                if flags & 0x02 != 0 {
                    st.done = true;
                    break;
                }
                out.extend_from_slice(&frame);
                st.passed += 1;
                if st.passed >= after_frames {
                    st.done = true;
                }
            }
            if !out.is_empty() {
                let bytes: Bytes = out.freeze();
                return Some((Ok::<Bytes, std::io::Error>(bytes), st));
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
