//! Signed `/files` URLs: whether a header-less request belongs to this sandbox.

use super::parse_query;
use crate::envd::auth;

/// True when `query` (the raw query of a header-less `GET`/`POST /files`) carries a
/// signature that `token` made for this operation: such a request belongs to the sandbox
/// holding `token`, whether or not the signature has expired (envd then says so).
pub(crate) fn signed_with(query: Option<&str>, method: &axum::http::Method, token: &str) -> bool {
    let operation = match *method {
        axum::http::Method::GET => "read",
        axum::http::Method::POST => "write",
        _ => return false,
    };
    let p = parse_query(query);
    let Some(sig) = p.signature.as_deref() else {
        return false;
    };
    let Ok(exp) = p
        .signature_expiration
        .as_deref()
        .map(str::parse::<i64>)
        .transpose()
    else {
        return false;
    };
    let expected = auth::signature(
        p.path.as_deref().unwrap_or(""),
        operation,
        p.username.as_deref().unwrap_or(""),
        token,
        exp,
    );
    auth::constant_time_eq(expected.as_bytes(), sig.as_bytes())
}

/// True when `query` has a `signature` parameter.
pub(crate) fn has_signature(query: Option<&str>) -> bool {
    parse_query(query).signature.is_some()
}
