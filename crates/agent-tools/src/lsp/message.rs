//! JSON-RPC 2.0 messages as LSP uses them: requests, responses, notifications, ids and
//! error objects, with a classifier for incoming bodies.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request id: a number or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object (`{"code", "message", "data"?}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    /// The error code (see the constants on this type).
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Extra data, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ResponseError {
    /// JSON-RPC: the method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// JSON-RPC: invalid parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// JSON-RPC: internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// LSP: the request was cancelled.
    pub const REQUEST_CANCELLED: i64 = -32800;

    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> ResponseError {
        ResponseError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// A notification (no id, no reply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// The method, e.g. `textDocument/publishDiagnostics`.
    pub method: String,
    /// The parameters (`null` when absent).
    #[serde(default)]
    pub params: Value,
}

/// A request from the server to the client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerRequest {
    /// The id to answer.
    pub id: RequestId,
    /// The method, e.g. `workspace/configuration`.
    pub method: String,
    /// The parameters (`null` when absent).
    #[serde(default)]
    pub params: Value,
}

/// A classified incoming message.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A response to one of our requests.
    Response {
        /// Our request's id.
        id: RequestId,
        /// `result` or `error`.
        result: Result<Value, ResponseError>,
    },
    /// A request the server sends us.
    Request(ServerRequest),
    /// A notification.
    Notification(Notification),
}

/// Why a body is not a JSON-RPC message.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON-RPC message: {0}")]
pub struct InvalidMessage(pub String);

/// Classifies a message body.
///
/// ```
/// # use agent_tools::lsp::message::{classify, Incoming};
/// let m = classify(br#"{"jsonrpc":"2.0","id":3,"result":null}"#).unwrap();
/// assert!(matches!(m, Incoming::Response { .. }));
/// ```
pub fn classify(body: &[u8]) -> Result<Incoming, InvalidMessage> {
    let v: Value = serde_json::from_slice(body).map_err(|e| InvalidMessage(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| InvalidMessage("not an object".into()))?;
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(id) => Some(
            serde_json::from_value::<RequestId>(id.clone())
                .map_err(|_| InvalidMessage(format!("bad id {id}")))?,
        ),
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    match (obj.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) => Ok(Incoming::Request(ServerRequest {
            id,
            method: method.to_string(),
            params,
        })),
        (Some(method), None) => Ok(Incoming::Notification(Notification {
            method: method.to_string(),
            params,
        })),
        (None, Some(id)) => {
            let result = match obj.get("error") {
                Some(err) if !err.is_null() => Err(serde_json::from_value(err.clone())
                    .map_err(|e| InvalidMessage(format!("bad error object: {e}")))?),
                _ => Ok(obj.get("result").cloned().unwrap_or(Value::Null)),
            };
            Ok(Incoming::Response { id, result })
        }
        (None, None) => Err(InvalidMessage(
            "neither a method nor an id (a response to an unparsable request?)".into(),
        )),
    }
}

/// The body of a request.
pub(crate) fn request_body(id: &RequestId, method: &str, params: &Value) -> Vec<u8> {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// The body of a notification.
pub(crate) fn notification_body(method: &str, params: &Value) -> Vec<u8> {
    serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// The body of a response to a server request.
pub(crate) fn response_body(id: &RequestId, result: &Result<Value, ResponseError>) -> Vec<u8> {
    match result {
        Ok(v) => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": v}),
        Err(e) => serde_json::json!({"jsonrpc": "2.0", "id": id, "error": e}),
    }
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_all_kinds() {
        let r = classify(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"no"}}"#)
            .expect("valid");
        assert_eq!(
            r,
            Incoming::Response {
                id: RequestId::String("a".into()),
                result: Err(ResponseError::new(-32601, "no")),
            }
        );
        let r = classify(
            br#"{"jsonrpc":"2.0","id":7,"method":"workspace/configuration","params":{"items":[]}}"#,
        )
        .expect("valid");
        assert!(matches!(
            r,
            Incoming::Request(ServerRequest {
                id: RequestId::Number(7),
                ..
            })
        ));
        let r = classify(br#"{"jsonrpc":"2.0","method":"window/logMessage"}"#).expect("valid");
        assert!(matches!(
            r,
            Incoming::Notification(Notification {
                params: Value::Null,
                ..
            })
        ));
        assert!(classify(b"[1]").is_err());
        assert!(classify(b"{").is_err());
        assert!(classify(br#"{"jsonrpc":"2.0"}"#).is_err());
    }
}
