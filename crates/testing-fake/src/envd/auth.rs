//! Access control as envd does it: the reserved internal routes, the `X-Access-Token`
//! check, the Basic-auth user resolver, and `/files` signature verification.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use e2b_proto::connect::Code;
use sha2::{Digest, Sha256};

use super::Envd;
use super::connect::{RpcError, STREAM_JSON};
use crate::template::TemplateUser;

/// Routes only the orchestrator may call; the E2B proxy answers them itself.
const INTERNAL_PATHS: [&str; 7] = [
    "/init",
    "/freeze",
    "/unfreeze",
    "/collapse",
    "/fsfreeze",
    "/fsthaw",
    "/upgrade",
];

const UNAUTHORIZED: &str =
    "unauthorized access, please provide a valid access token or method signing if supported";

/// envd's plain JSON error (`{"code":<status>,"message":…}` + newline).
pub(crate) fn json_error(status: StatusCode, message: impl AsRef<str>) -> Response {
    let body = serde_json::json!({"code": status.as_u16(), "message": message.as_ref()});
    let mut text = body.to_string();
    text.push('\n');
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}

fn reserved(path: &str) -> Response {
    let body = serde_json::json!({
        "message": "This endpoint is reserved for the E2B control plane and is not reachable through the sandbox URL",
        "path": path,
        "code": 404,
    });
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// The user named by `Authorization: Basic base64(user:)`; `Ok(None)` without the header.
fn basic_user(headers: &HeaderMap) -> Result<Option<String>, ()> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let s = v.to_str().map_err(|_| ())?;
    let Some((scheme, rest)) = s.split_once(' ') else {
        return Ok(None);
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(None);
    }
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(rest.trim()) else {
        return Ok(None);
    };
    let Ok(text) = String::from_utf8(raw) else {
        return Ok(None);
    };
    let Some((user, _password)) = text.split_once(':') else {
        return Ok(None);
    };
    Ok(Some(user.to_string()))
}

/// The acting user of a request, resolved by the middleware.
#[derive(Debug, Clone)]
pub(crate) struct ActingUser(pub(crate) Option<TemplateUser>);

/// Middleware: reserved routes, access token, Basic-auth user.
pub(crate) async fn middleware(
    State(envd): State<Arc<Envd>>,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    let cleaned = super::paths::clean(&path);
    if INTERNAL_PATHS.contains(&cleaned.as_str()) {
        return reserved(&path);
    }
    if let Some(token) = &envd.cfg.access_token {
        let excluded = matches!(
            (req.method(), path.as_str()),
            (&Method::GET, "/health") | (&Method::GET, "/files") | (&Method::POST, "/files")
        );
        let given = req
            .headers()
            .get("x-access-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !excluded && !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            return json_error(StatusCode::UNAUTHORIZED, UNAUTHORIZED);
        }
    }
    let user = match basic_user(req.headers()) {
        Ok(None) | Err(()) => None,
        Ok(Some(name)) => match envd.cfg.template.user(&name) {
            Some(u) => Some(u.clone()),
            None => {
                let err =
                    RpcError::new(Code::Unauthenticated, format!("invalid username: '{name}'"));
                let streaming = req
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|ct| ct.starts_with(STREAM_JSON));
                return if streaming {
                    super::connect::stream_error(err)
                } else {
                    err.into_unary()
                };
            }
        },
    };
    req.extensions_mut().insert(ActingUser(user));
    let _ = Body::empty();
    next.run(req).await
}

/// Constant-time comparison.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `v1_` + unpadded standard base64 of SHA-256(`path:op:user:token[:exp]`).
pub(crate) fn signature(
    path: &str,
    operation: &str,
    username: &str,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let raw = match expiration {
        Some(exp) => format!("{path}:{operation}:{username}:{token}:{exp}"),
        None => format!("{path}:{operation}:{username}:{token}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// `/files` access check: a matching header token, or a valid signature.
pub(crate) fn check_files_access(
    envd: &Envd,
    headers: &HeaderMap,
    path: &str,
    operation: &str,
    username: Option<&str>,
    signature_param: Option<&str>,
    expiration: Option<&str>,
) -> Result<(), Response> {
    let Some(token) = &envd.cfg.access_token else {
        return Ok(());
    };
    let deny = |m: &str| Err(json_error(StatusCode::UNAUTHORIZED, m));
    let header_token = headers
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !header_token.is_empty() {
        if constant_time_eq(header_token.as_bytes(), token.as_bytes()) {
            return Ok(());
        }
        return deny("access token present in header but does not match");
    }
    let Some(sig) = signature_param else {
        return deny("missing signature query parameter");
    };
    let exp = match expiration {
        None => None,
        Some(e) => match e.parse::<i64>() {
            Ok(v) => Some(v),
            Err(_) => return deny("invalid signature"),
        },
    };
    let expected = signature(path, operation, username.unwrap_or(""), token, exp);
    if !constant_time_eq(expected.as_bytes(), sig.as_bytes()) {
        return deny("invalid signature");
    }
    if let Some(exp) = exp {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if exp < now {
            return deny("signature is already expired");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_signature_vectors() {
        assert_eq!(
            signature("/home/user/a.txt", "read", "", "access-token", None),
            "v1_TDd5LiZDLemTOwAdehESIVafBnRrg75Mr9Wpgriu9ls"
        );
        assert_eq!(
            signature(
                "/home/user/a.txt",
                "write",
                "user",
                "access-token",
                Some(1_700_000_000)
            ),
            "v1_BPepF86tbh728NFMahf10Na+uZ5J3Bl4bRm+1CuJB8Y"
        );
    }
}
