//! Connect protocol plumbing for envd's services, as connect-go speaks it.
//!
//! * unary: `application/json` request, 200 `application/json` response, errors with the
//!   connect-go HTTP status and `{"code","message"}`; the process service's unary calls
//!   also in the binary codec (`application/proto` both ways, errors still JSON);
//! * server streaming: one enveloped request, HTTP 200 `application/connect+json`, data
//!   envelopes, then exactly one end-of-stream envelope (`{}` or `{"error":…}`);
//! * `Connect-Timeout-Ms` parsing and the keepalive interval header.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use e2b_proto::connect::{Code, ConnectErrorBody};
use e2b_proto::envelope::{self, FrameDecoder};
use e2b_proto::wire::{self, ProtoMessage, WireError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// Content type of unary JSON calls.
pub(crate) const UNARY_JSON: &str = "application/json";
/// Content type of streaming JSON calls.
pub(crate) const STREAM_JSON: &str = "application/connect+json";
/// envd's keepalive interval when the header is missing or not an integer.
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);

/// A Connect error: a code and a message.
#[derive(Debug, Clone)]
pub(crate) struct RpcError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    fn body(&self) -> ConnectErrorBody {
        ConnectErrorBody::new(self.code, self.message.clone())
    }

    /// The unary error response.
    pub(crate) fn into_unary(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let json = serde_json::to_vec(&self.body()).unwrap_or_else(|_| b"{}".to_vec());
        (status, [(header::CONTENT_TYPE, UNARY_JSON)], json).into_response()
    }
}

/// The media type of a request, lowercased and without parameters.
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// connect-go's answer to a request it cannot route to the procedure (wrong method or
/// content type): a plain HTTP error, not a Connect one.
fn protocol_mismatch(method: &Method, streaming: bool) -> Response {
    if method != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, HeaderValue::from_static("POST"))],
        )
            .into_response();
    }
    let accept = if streaming {
        "application/connect+json, application/connect+proto, application/grpc, application/grpc+json, application/grpc+proto, application/grpc-web, application/grpc-web+json, application/grpc-web+proto"
    } else {
        "application/json, application/proto"
    };
    (
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        [(header::HeaderName::from_static("accept-post"), accept)],
    )
        .into_response()
}

/// Parse `Connect-Timeout-Ms`: `None` when absent; connect-go rejects more than 10 digits
/// or anything that is not digits.
pub(crate) fn timeout_header(headers: &HeaderMap) -> Result<Option<Duration>, RpcError> {
    let Some(raw) = headers.get("connect-timeout-ms") else {
        return Ok(None);
    };
    let s = raw.to_str().unwrap_or("");
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RpcError::invalid(format!(
            "protocol error: invalid timeout {s:?}"
        )));
    }
    let ms: u64 = s
        .parse()
        .map_err(|_| RpcError::invalid(format!("protocol error: invalid timeout {s:?}")))?;
    Ok(Some(Duration::from_millis(ms)))
}

/// envd's keepalive interval: `Keepalive-Ping-Interval` seconds, else 90 s.
pub(crate) fn keepalive_interval(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|n| *n > 0)
        .map_or(DEFAULT_KEEPALIVE, |n| Duration::from_secs(n as u64))
}

fn decode_json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, RpcError> {
    if payload.is_empty() {
        // connect-go's JSON codec refuses an empty payload.
        return Err(RpcError::invalid(
            "unmarshal message: zero-length payload is not a valid JSON object",
        ));
    }
    serde_json::from_slice(payload)
        .map_err(|e| RpcError::invalid(format!("unmarshal message: {e}")))
}

/// The codec of a unary call; connect-go answers in the codec the request came in
/// (errors are JSON in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    /// `application/json`.
    Json,
    /// `application/proto`.
    Proto,
}

/// [`unary_request`] for a procedure served in both codecs: a JSON or a binary body.
/// A binary message that names no process is `Err(WireError::NoSelector)` in the
/// inner result, for the caller to answer as envd does.
pub(crate) fn unary_request_any<T: DeserializeOwned + ProtoMessage>(
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(Result<T, WireError>, Codec), Response> {
    if method == Method::POST && media_type(headers) == wire::CONTENT_TYPE {
        timeout_header(headers).map_err(RpcError::into_unary)?;
        return match T::decode_proto(body) {
            Err(WireError::Malformed(why)) => Err(RpcError::invalid(format!(
                "unmarshal message: proto: cannot parse invalid wire-format data: {why}"
            ))
            .into_unary()),
            r => Ok((r, Codec::Proto)),
        };
    }
    unary_request(method, headers, body).map(|m| (Ok(m), Codec::Json))
}

/// A unary result as a response in `codec`.
pub(crate) fn unary_in<T: Serialize + ProtoMessage>(
    codec: Codec,
    r: Result<T, RpcError>,
) -> Response {
    match (codec, r) {
        (Codec::Proto, Ok(m)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, wire::CONTENT_TYPE)],
            m.encode_proto(),
        )
            .into_response(),
        (_, r) => unary(r),
    }
}

/// Validate a unary request and decode its JSON body; `Err` is the full response to send.
pub(crate) fn unary_request<T: DeserializeOwned>(
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, Response> {
    if method != Method::POST || media_type(headers) != UNARY_JSON {
        return Err(protocol_mismatch(method, false));
    }
    timeout_header(headers).map_err(RpcError::into_unary)?;
    decode_json(body).map_err(RpcError::into_unary)
}

/// A unary success response.
pub(crate) fn unary_ok<T: Serialize>(msg: &T) -> Response {
    match serde_json::to_vec(msg) {
        Ok(json) => (StatusCode::OK, [(header::CONTENT_TYPE, UNARY_JSON)], json).into_response(),
        Err(e) => RpcError::internal(format!("marshal message: {e}")).into_unary(),
    }
}

/// A unary result as a response.
pub(crate) fn unary<T: Serialize>(r: Result<T, RpcError>) -> Response {
    match r {
        Ok(m) => unary_ok(&m),
        Err(e) => e.into_unary(),
    }
}

/// The first enveloped message of a streaming request (`Err`: an error to put in the
/// end-of-stream frame).
fn stream_message<T: DeserializeOwned>(body: &Bytes) -> Result<T, RpcError> {
    let mut dec = FrameDecoder::default();
    dec.push(body);
    match dec.next_frame() {
        Ok(Some(frame)) if !frame.is_end_stream() => decode_json(&frame.payload),
        Ok(_) => Err(RpcError::invalid(
            "protocol error: incomplete envelope: unexpected EOF",
        )),
        Err(e) => Err(RpcError::invalid(format!("protocol error: {e}"))),
    }
}

/// The plain HTTP rejection of a request that is not a Connect streaming call.
pub(crate) fn stream_protocol_error(method: &Method, headers: &HeaderMap) -> Option<Response> {
    (method != Method::POST || media_type(headers) != STREAM_JSON)
        .then(|| protocol_mismatch(method, true))
}

/// Check a streaming request and decode it. `Err(Ok(resp))`: a plain HTTP rejection;
/// `Err(Err(e))`: a Connect error to send in a 200 stream.
pub(crate) fn stream_request<T: DeserializeOwned>(
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(T, Option<Duration>), Result<Response, RpcError>> {
    if let Some(resp) = stream_protocol_error(method, headers) {
        return Err(Ok(resp));
    }
    let deadline = timeout_header(headers).map_err(Err)?;
    let msg = stream_message(body).map_err(Err)?;
    Ok((msg, deadline))
}

/// The sending half of a streaming response.
#[derive(Debug, Clone)]
pub(crate) struct StreamTx {
    tx: mpsc::Sender<Bytes>,
}

/// The client went away.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Closed;

impl StreamTx {
    /// Send one data message; `Err` when the client is gone.
    pub(crate) async fn send<T: Serialize>(&self, msg: &T) -> Result<(), Closed> {
        let frame = envelope::encode_json(msg).map_err(|_| Closed)?;
        self.tx.send(frame).await.map_err(|_| Closed)
    }

    /// Send one data frame already encoded (`envelope::encode`); `Err` when the client is
    /// gone.
    pub(crate) async fn send_frame(&self, frame: Bytes) -> Result<(), Closed> {
        self.tx.send(frame).await.map_err(|_| Closed)
    }

    /// Send the end-of-stream frame.
    pub(crate) async fn finish(self, error: Option<RpcError>) {
        let frame = envelope::encode_end(error.map(|e| e.body()).as_ref());
        let _ = self.tx.send(frame).await;
    }

    /// Resolves when the client has gone away.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// A 200 `application/connect+json` response fed by the returned sender.
pub(crate) fn stream_response() -> (StreamTx, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    });
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, STREAM_JSON)
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    (StreamTx { tx }, resp)
}

/// A streaming response that ends at once with `error`.
pub(crate) fn stream_error(error: RpcError) -> Response {
    let frame = envelope::encode_end(Some(&error.body()));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, STREAM_JSON)
        .body(Body::from(frame))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_and_keepalive_headers() {
        let mut h = HeaderMap::new();
        assert!(matches!(timeout_header(&h), Ok(None)));
        h.insert("connect-timeout-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            timeout_header(&h).ok().flatten(),
            Some(Duration::from_millis(1500))
        );
        h.insert(
            "connect-timeout-ms",
            HeaderValue::from_static("12345678901"),
        );
        assert!(timeout_header(&h).is_err());
        h.insert("connect-timeout-ms", HeaderValue::from_static("-1"));
        assert!(timeout_header(&h).is_err());
        assert_eq!(keepalive_interval(&h), DEFAULT_KEEPALIVE);
        h.insert("keepalive-ping-interval", HeaderValue::from_static("50"));
        assert_eq!(keepalive_interval(&h), Duration::from_secs(50));
        h.insert("keepalive-ping-interval", HeaderValue::from_static("x"));
        assert_eq!(keepalive_interval(&h), DEFAULT_KEEPALIVE);
    }

    #[test]
    fn empty_payload_is_refused() {
        assert!(decode_json::<serde_json::Value>(b"").is_err());
        assert!(decode_json::<serde_json::Value>(b"{}").is_ok());
    }
}
