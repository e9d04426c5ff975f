//! Control-plane error answers: JSON `{"code": <status>, "message": …}` with `code` always
//! equal to the HTTP status (several JS SDK call sites branch on the body's `code`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use e2b_proto::control::ApiError;

/// The 401 message of E2B's API-key authenticator.
pub(crate) const INVALID_API_KEY: &str =
    "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.";

/// A control-plane error answer.
#[derive(Debug, Clone)]
pub(crate) struct ApiErr {
    pub status: StatusCode,
    pub message: String,
}

impl ApiErr {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiErr {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn validation(detail: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("validation error: {detail}"))
    }

    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, INVALID_API_KEY)
    }

    pub fn sandbox_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"),
        )
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiErr {
    fn into_response(self) -> Response {
        let body = ApiError {
            code: i32::from(self.status.as_u16()),
            message: self.message,
            error_code: None,
        };
        let json = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
        let mut resp = (self.status, json).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        resp
    }
}

/// Parse a JSON body: `Ok(None)` for an empty body when it is optional; a spec-validator
/// style 400 when it is malformed or required and missing.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    required: bool,
) -> Result<Option<T>, ApiErr> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if required {
            return Err(ApiErr::validation(
                "request body has an error: value is required but missing",
            ));
        }
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| ApiErr::validation(format!("request body has an error: {e}")))
}
