//! `GET /files` (download) and `POST /files` (upload), streamed both ways: never a whole
//! file in memory. Checks, statuses and messages follow envd's `download.go`/`upload.go`.
//! This module holds the query parsing both share; each step has a file of its own.

mod content_type;
mod disposition;
mod download;
mod gzip;
mod http_date;
mod metadata;
mod multipart;
mod range;
mod signing;
mod upload;
mod write;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

pub(crate) use download::download;
pub(crate) use signing::{has_signature, signed_with};
pub(crate) use upload::upload;

use super::Envd;
use super::auth::{check_files_access, json_error};
use crate::template::TemplateUser;

/// Query parameters of `/files` (decoded; `None` when absent).
#[derive(Debug, Default)]
struct Params {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<String>,
}

/// One decoded query component (`+` is a space).
fn decode_component(s: &str) -> String {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8_lossy()
        .into_owned()
}

/// The `/files` query; the first of repeated parameters wins.
fn parse_query(q: Option<&str>) -> Params {
    let mut p = Params::default();
    for pair in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode_component(k), decode_component(v));
        let slot = match k.as_str() {
            "path" => &mut p.path,
            "username" => &mut p.username,
            "signature" => &mut p.signature,
            "signature_expiration" => &mut p.signature_expiration,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    p
}

/// envd's access check of a `/files` request for `operation` (`read` or `write`): the
/// access token, or a valid signature for the path and user.
fn check_access(
    envd: &Envd,
    headers: &HeaderMap,
    params: &Params,
    operation: &str,
) -> Result<(), Response> {
    check_files_access(
        envd,
        headers,
        params.path.as_deref().unwrap_or_default(),
        operation,
        params.username.as_deref(),
        params.signature.as_deref(),
        params.signature_expiration.as_deref(),
    )
}

/// The user a `/files` request acts as: `username`, else the template's default user.
fn lookup_user(envd: &Envd, params: &Params) -> Result<TemplateUser, Response> {
    let name = params
        .username
        .clone()
        .unwrap_or_else(|| envd.cfg.template.default_user.clone());
    envd.user(&name).cloned().ok_or_else(|| {
        json_error(
            StatusCode::UNAUTHORIZED,
            format!("error looking up user '{name}': user: unknown user {name}"),
        )
    })
}

/// A refused request: the status and envd's message.
type Failure = (StatusCode, String);
