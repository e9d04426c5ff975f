//! `POST /files`: a raw or multipart body written to files as the acting user; a refused
//! upload still reads (a bounded part of) its body first, as Go's server does.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};

use super::super::auth::json_error;
use super::super::{Envd, paths};
use super::gzip::{BodyStream, body_stream};
use super::metadata::metadata_of;
use super::multipart::multipart_upload;
use super::write::{UploadedEntry, process_file};
use super::{Failure, Params, check_access, lookup_user, parse_query};
use crate::template::TemplateUser;

/// Most bytes of a refused upload's body read (and discarded) before answering, as Go's
/// HTTP server does after a handler that did not read the body (`maxPostHandlerReadBytes`).
const REFUSED_BODY_DRAIN: u64 = 256 << 10;
/// Longest wait for that rest of the body.
const REFUSED_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A request body that the handler reads through [`SharedBody::body`] and that can still
/// be drained after the handler gave up on it.
struct SharedBody(Arc<std::sync::Mutex<axum::body::BodyDataStream>>);

impl SharedBody {
    fn new(body: Body) -> Self {
        SharedBody(Arc::new(std::sync::Mutex::new(body.into_data_stream())))
    }

    /// The body for the handler (reads from the shared stream).
    fn body(&self) -> Body {
        Body::from_stream(SharedStream(self.0.clone()))
    }

    /// Read and discard the rest, up to [`REFUSED_BODY_DRAIN`] bytes; true when it ended.
    async fn drain(&self) -> bool {
        let mut rest = SharedStream(self.0.clone());
        let mut read = 0u64;
        let all = async {
            while let Some(chunk) = rest.next().await {
                let Ok(chunk) = chunk else { return false };
                read += chunk.len() as u64;
                if read > REFUSED_BODY_DRAIN {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(REFUSED_BODY_WAIT, all)
            .await
            .unwrap_or(false)
    }
}

struct SharedStream(Arc<std::sync::Mutex<axum::body::BodyDataStream>>);

impl Stream for SharedStream {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.0.lock() {
            Ok(mut inner) => inner.poll_next_unpin(cx),
            Err(_) => std::task::Poll::Ready(None),
        }
    }
}

/// `POST /files`. A refused upload still reads (a bounded part of) its body before the
/// answer goes out, so the client sees the status instead of a broken pipe.
pub(crate) async fn upload(
    State(envd): State<Arc<Envd>>,
    RawQuery(q): RawQuery,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let shared = SharedBody::new(body);
    let mut resp = upload_body(envd, q, parts.headers, shared.body()).await;
    if !resp.status().is_success() && !shared.drain().await {
        // Too much left: answer and close, as Go does.
        resp.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

async fn upload_body(
    envd: Arc<Envd>,
    q: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = parse_query(q.as_deref());
    if let Err(r) = check_access(&envd, &headers, &params, "write") {
        return r;
    }
    let gzip = match request_gzip(&headers) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let user = match lookup_user(&envd, &params) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let metadata = match metadata_of(&headers) {
        Ok(m) => m,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, format!("invalid metadata: {e}")),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let content_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    let result: Result<Vec<UploadedEntry>, Failure> = if media == "application/octet-stream" {
        raw_upload(
            &envd,
            &params,
            &user,
            body_stream(body, gzip),
            &metadata,
            content_length,
        )
        .await
    } else if media.starts_with("multipart/") {
        multipart_upload(
            &envd,
            &params,
            &user,
            &content_type,
            body_stream(body, gzip),
            &metadata,
            content_length,
        )
        .await
    } else {
        Err((
            StatusCode::BAD_REQUEST,
            format!(
                "unsupported content type: {content_type}, expected multipart/form-data or application/octet-stream"
            ),
        ))
    };
    entries_response(result)
}

/// Whether the upload body is gzipped (`Content-Encoding`); envd refuses other encodings.
fn request_gzip(headers: &HeaderMap) -> Result<bool, Response> {
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        }) {
        None => Ok(false),
        Some(e) if e.is_empty() || e == "identity" => Ok(false),
        Some(e) if e == "gzip" => Ok(true),
        Some(_) => {
            let raw = headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            Err(json_error(
                StatusCode::BAD_REQUEST,
                format!(
                    "error decompressing request body: unsupported Content-Encoding: {raw}, supported: [gzip]"
                ),
            ))
        }
    }
}

/// An `application/octet-stream` upload: the body is the file at `path`.
async fn raw_upload(
    envd: &Envd,
    params: &Params,
    user: &TemplateUser,
    body: BodyStream,
    metadata: &BTreeMap<String, String>,
    content_length: Option<u64>,
) -> Result<Vec<UploadedEntry>, Failure> {
    let workdir = envd.template().workdir.clone();
    match params.path.as_deref() {
        None => Err((
            StatusCode::BAD_REQUEST,
            "path query parameter is required for raw body upload".into(),
        )),
        Some(p) => match paths::resolve(p, user, workdir.as_deref()) {
            Err(e) => Err((
                StatusCode::BAD_REQUEST,
                format!("error resolving path: {e}"),
            )),
            Ok(path) => process_file(envd, path, user, body, metadata, content_length)
                .await
                .map(|e| vec![e]),
        },
    }
}

/// The upload's answer: the entries written, or envd's error.
fn entries_response(result: Result<Vec<UploadedEntry>, Failure>) -> Response {
    match result {
        Ok(entries) => {
            let json = serde_json::to_vec(&entries).unwrap_or_else(|_| b"[]".to_vec());
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                json,
            )
                .into_response()
        }
        Err((status, msg)) => json_error(status, msg),
    }
}
