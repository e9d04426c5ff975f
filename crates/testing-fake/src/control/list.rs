//! Listing: `GET /v2/sandboxes` (filters, order, pagination with an opaque `nextToken`,
//! `X-Next-Token` only when another page exists, `X-Total-Running`) and the deprecated
//! `GET /sandboxes` (running only, unpaginated).
//!
//! `metadata` is double-encoded: the query value is a `k=v&k2=v2` string whose keys and
//! values are themselves URL-encoded, so it is decoded twice, as E2B does.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2b_proto::control::{ListedSandbox, SandboxState};
use e2b_proto::headers;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::error::ApiErr;
use super::handlers::listed;
use super::store::{SandboxRecord, Store};

struct Query {
    metadata: BTreeMap<String, String>,
    states: Vec<SandboxState>,
    asc: bool,
    started_after: Option<OffsetDateTime>,
    template: Option<String>,
    limit: usize,
    cursor: Option<(i128, String)>,
}

fn pct_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn parse_metadata(raw: &str) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(raw.as_bytes())
        .map(|(k, v)| (pct_decode(&k), pct_decode(&v)))
        .collect()
}

fn encode_cursor(rec: &SandboxRecord) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "{}__{}",
        rec.started_at.unix_timestamp_nanos(),
        rec.id
    ))
}

fn decode_cursor(token: &str) -> Option<(i128, String)> {
    let raw = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (nanos, id) = raw.split_once("__")?;
    Some((nanos.parse().ok()?, id.to_owned()))
}

fn invalid_param(name: &str, detail: &str) -> ApiErr {
    ApiErr::validation(format!(
        "parameter \"{name}\" in query has an error: {detail}"
    ))
}

fn parse_query(raw: Option<&str>, default_states: &[SandboxState]) -> Result<Query, ApiErr> {
    let mut q = Query {
        metadata: BTreeMap::new(),
        states: Vec::new(),
        asc: false,
        started_after: None,
        template: None,
        limit: 100,
        cursor: None,
    };
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match &*k {
            "metadata" => q.metadata.extend(parse_metadata(&v)),
            "state" => {
                for s in v.split(',').filter(|s| !s.is_empty()) {
                    let state = match s {
                        "running" => SandboxState::Running,
                        "paused" => SandboxState::Paused,
                        other => {
                            return Err(invalid_param(
                                "state",
                                &format!(
                                    "value is not one of the allowed values [\"running\",\"paused\"]: {other:?}"
                                ),
                            ));
                        }
                    };
                    if !q.states.contains(&state) {
                        q.states.push(state);
                    }
                }
            }
            "order" => match &*v {
                "asc" => q.asc = true,
                "desc" => q.asc = false,
                _ => {
                    return Err(invalid_param(
                        "order",
                        "value is not one of the allowed values [\"asc\",\"desc\"]",
                    ));
                }
            },
            "startedAfter" => {
                let t = OffsetDateTime::parse(&v, &Rfc3339)
                    .map_err(|_| invalid_param("startedAfter", "invalid date-time"))?;
                q.started_after = Some(t);
            }
            "template" => {
                if v.contains(':') {
                    return Err(ApiErr::bad_request(
                        "Template filter must not contain a tag",
                    ));
                }
                if !v.is_empty() {
                    q.template = Some(v.into_owned());
                }
            }
            "limit" => {
                let n: i64 = v
                    .parse()
                    .map_err(|_| invalid_param("limit", "value must be an integer"))?;
                if !(1..=100).contains(&n) {
                    return Err(invalid_param("limit", "number must be between 1 and 100"));
                }
                q.limit = usize::try_from(n).unwrap_or(100);
            }
            "nextToken" if !v.is_empty() => {
                q.cursor = Some(
                    decode_cursor(&v).ok_or_else(|| ApiErr::bad_request("Invalid next token"))?,
                );
            }
            _ => {}
        }
    }
    if q.states.is_empty() {
        q.states = default_states.to_vec();
    }
    Ok(q)
}

fn matches(rec: &SandboxRecord, q: &Query) -> bool {
    let state = rec.life().state;
    q.states.contains(&state)
        && q.metadata
            .iter()
            .all(|(k, v)| rec.metadata.get(k) == Some(v))
        && q.started_after.is_none_or(|t| rec.started_at > t)
        && q.template
            .as_deref()
            .is_none_or(|t| rec.template.id == t || rec.template.alias == t)
}

fn sort_key(rec: &SandboxRecord) -> (i128, String) {
    (rec.started_at.unix_timestamp_nanos(), rec.id.clone())
}

/// `GET /v2/sandboxes`.
pub(crate) async fn list_v2(
    State(store): State<Arc<Store>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiErr> {
    let q = parse_query(
        raw.as_deref(),
        &[SandboxState::Running, SandboxState::Paused],
    )?;
    let mut all: Vec<Arc<SandboxRecord>> =
        store.all().into_iter().filter(|r| matches(r, &q)).collect();
    let total_running = all
        .iter()
        .filter(|r| r.life().state == SandboxState::Running)
        .count();
    all.sort_by_key(|r| sort_key(r));
    if !q.asc {
        all.reverse();
    }
    if let Some(cursor) = &q.cursor {
        all.retain(|r| {
            let k = sort_key(r);
            if q.asc { k > *cursor } else { k < *cursor }
        });
    }
    let more = all.len() > q.limit;
    all.truncate(q.limit);
    let items: Vec<ListedSandbox> = all.iter().map(|r| listed(r)).collect();
    let mut headers = HeaderMap::new();
    if more {
        if let Some(last) = all.last() {
            if let Ok(v) = HeaderValue::from_str(&encode_cursor(last)) {
                headers.insert(headers::NEXT_TOKEN, v);
            }
        }
    }
    if q.states.contains(&SandboxState::Running) {
        headers.insert(headers::TOTAL_RUNNING, HeaderValue::from(total_running));
    }
    Ok((headers, Json(items)).into_response())
}

/// `GET /sandboxes` (deprecated): running sandboxes only, unpaginated.
pub(crate) async fn list_v1(
    State(store): State<Arc<Store>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<ListedSandbox>>, ApiErr> {
    let mut metadata = BTreeMap::new();
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if k == "metadata" {
            metadata.extend(parse_metadata(&v));
        }
    }
    let q = Query {
        metadata,
        states: vec![SandboxState::Running],
        asc: false,
        started_after: None,
        template: None,
        limit: usize::MAX,
        cursor: None,
    };
    let mut all: Vec<Arc<SandboxRecord>> =
        store.all().into_iter().filter(|r| matches(r, &q)).collect();
    all.sort_by_key(|r| sort_key(r));
    all.reverse();
    Ok(Json(all.iter().map(|r| listed(r)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_decoded_twice() {
        // JS: metadata=user%3Dabc%26app%3Dprod, after the query layer: user=abc&app=prod
        let m = parse_metadata("user=abc&app=prod%2520x");
        assert_eq!(m.get("user").map(String::as_str), Some("abc"));
        assert_eq!(m.get("app").map(String::as_str), Some("prod x"));
    }

    #[test]
    fn cursor_round_trip() {
        let raw = URL_SAFE_NO_PAD.encode("123__iabc");
        assert_eq!(decode_cursor(&raw), Some((123, "iabc".into())));
        assert_eq!(decode_cursor("!!"), None);
    }
}
