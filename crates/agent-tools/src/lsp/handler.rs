//! Answers to requests the server sends the client ([`ServerRequestHandler`]), with a
//! default that accepts the common housekeeping requests and rejects the rest.

use serde_json::{Value, json};

use super::message::ResponseError;

/// Answers server→client requests. Called on the bridge's reader task: keep it quick and
/// non-blocking. Any `Fn(&str, &Value) -> Result<Value, ResponseError>` closure is one.
///
/// ```
/// # use agent_tools::lsp::{ResponseError, ServerRequestHandler};
/// # use serde_json::{json, Value};
/// let h = |method: &str, _params: &Value| match method {
///     "workspace/configuration" => Ok(json!([{"pylsp": {}}])),
///     other => Err(ResponseError::new(ResponseError::METHOD_NOT_FOUND, other)),
/// };
/// assert!(h.handle("workspace/configuration", &Value::Null).is_ok());
/// ```
pub trait ServerRequestHandler: Send + Sync {
    /// The `result` for the request, or the error to reply with.
    fn handle(&self, method: &str, params: &Value) -> Result<Value, ResponseError>;
}

impl<F> ServerRequestHandler for F
where
    F: Fn(&str, &Value) -> Result<Value, ResponseError> + Send + Sync,
{
    fn handle(&self, method: &str, params: &Value) -> Result<Value, ResponseError> {
        self(method, params)
    }
}

/// The default answers:
/// - `window/workDoneProgress/create`, `client/registerCapability`,
///   `client/unregisterCapability`, `window/showMessageRequest`,
///   `workspace/*/refresh`: `null` (accepted, nothing to do);
/// - `workspace/configuration`: one `null` per requested item (no settings);
/// - `workspace/workspaceFolders`: `null` (none);
/// - `workspace/applyEdit`: `{"applied": false}` (this client does not edit);
/// - anything else: `MethodNotFound`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultHandler;

impl ServerRequestHandler for DefaultHandler {
    fn handle(&self, method: &str, params: &Value) -> Result<Value, ResponseError> {
        match method {
            "window/workDoneProgress/create"
            | "client/registerCapability"
            | "client/unregisterCapability"
            | "window/showMessageRequest"
            | "workspace/workspaceFolders" => Ok(Value::Null),
            m if m.starts_with("workspace/") && m.ends_with("/refresh") => Ok(Value::Null),
            "workspace/configuration" => {
                let n = params
                    .get("items")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                Ok(Value::Array(vec![Value::Null; n]))
            }
            "workspace/applyEdit" => {
                Ok(json!({"applied": false, "failureReason": "read-only client"}))
            }
            other => Err(ResponseError::new(
                ResponseError::METHOD_NOT_FOUND,
                format!("client does not handle {other}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_answers() {
        let h = DefaultHandler;
        assert_eq!(
            h.handle("workspace/configuration", &json!({"items": [{}, {}]})),
            Ok(json!([null, null]))
        );
        assert_eq!(
            h.handle("window/workDoneProgress/create", &json!({"token": 1})),
            Ok(Value::Null)
        );
        assert_eq!(
            h.handle("x/y", &Value::Null).map_err(|e| e.code),
            Err(ResponseError::METHOD_NOT_FOUND)
        );
    }
}
