//! Snapshot and fork handlers: `POST /sandboxes/{id}/snapshots`, `GET /snapshots`,
//! `DELETE /templates/{id}` (how the SDKs delete a snapshot) and
//! `POST /sandboxes/{id}/fork`, with E2B's statuses and messages.
//!
//! E2B snapshots and forks carry memory; the emulator carries the filesystem only (the
//! copy is taken with the source's processes frozen, and a sandbox made from it boots
//! cold), as E2B's filesystem-only pause does.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2b_proto::control::ApiError;
use e2b_proto::headers;
use e2b_proto::snapshot::{ForkRequest, ForkResult, SnapshotInfo, SnapshotRequest};

use super::error::{ApiErr, parse_body};
use super::handlers::{sandbox_answer, validated_timeout};
use super::ids::short_id;
use super::snapshot_store::{DEFAULT_TAG, Snapshot, TEAM_SLUG, new_template_id, parse_reference};
use super::store::{CreateParams, SandboxRecord, Store};

/// Most forks one request may ask for.
const MAX_FORKS: i64 = 100;

fn lookup(store: &Store, raw_id: &str) -> Result<(String, Arc<SandboxRecord>), ApiErr> {
    let id = short_id(raw_id).map_err(|_| ApiErr::bad_request("Invalid sandbox ID"))?;
    let rec = store
        .get(&id)
        .ok_or_else(|| ApiErr::sandbox_not_found(&id))?;
    Ok((id, rec))
}

fn info(s: &Snapshot) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: s.snapshot_id(),
        names: s.names(),
    }
}

/// `POST /sandboxes/{id}/snapshots`: 201 `SnapshotInfo`.
pub(crate) async fn create(
    State(store): State<Arc<Store>>,
    Path(raw_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiErr> {
    let (id, rec) = lookup(&store, &raw_id)?;
    let req: SnapshotRequest = serde_json::from_slice(if body.is_empty() { b"{}" } else { &body })
        .map_err(|e| ApiErr::bad_request(format!("Error when parsing request: {e}")))?;
    let mut tag = DEFAULT_TAG.to_owned();
    let mut alias = None;
    if let Some(name) = &req.name {
        let r = parse_reference(name).ok_or_else(|| {
            ApiErr::bad_request(format!("Invalid name: {name:?} is not a valid name"))
        })?;
        if let Some(ns) = r.namespace
            && ns != TEAM_SLUG
        {
            return Err(ApiErr::bad_request(format!(
                "namespace '{ns}' must match your team '{TEAM_SLUG}'"
            )));
        }
        if let Some(t) = r.tag {
            tag = t.to_owned();
        }
        alias = Some(r.identifier.to_owned());
    }
    let template_id = alias
        .as_deref()
        .and_then(|a| store.snapshots.template_of_alias(a))
        .unwrap_or_else(new_template_id);
    let staged = store.snapshots.staging_dir();
    let paused = ApiErr::sandbox_not_found(&id);
    store.capture(&rec, &staged, paused).await?;
    let snap = store
        .snapshots
        .add(
            &staged,
            template_id,
            alias,
            tag,
            id.clone(),
            rec.template.clone(),
        )
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&staged);
            tracing::warn!(sandbox = %id, error = %e, "storing a snapshot failed");
            ApiErr::internal("Error creating snapshot template")
        })?;
    tracing::info!(sandbox = %id, snapshot = %snap.snapshot_id(), "snapshot taken");
    Ok((StatusCode::CREATED, Json(info(&snap))).into_response())
}

fn cursor_of(s: &Snapshot) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "{}__{}",
        s.created.unix_timestamp_nanos(),
        s.snapshot_id()
    ))
}

fn key_of(s: &Snapshot) -> (i128, String) {
    (s.created.unix_timestamp_nanos(), s.snapshot_id())
}

fn decode_cursor(token: &str) -> Option<(i128, String)> {
    let raw = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (nanos, id) = raw.split_once("__")?;
    Some((nanos.parse().ok()?, id.to_owned()))
}

/// `GET /snapshots?sandboxID&name&limit&nextToken`: newest first, `X-Next-Token` when
/// more remain.
pub(crate) async fn list(
    State(store): State<Arc<Store>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiErr> {
    let mut limit = 100usize;
    let mut cursor = None;
    let mut sandbox = None;
    let mut name = None;
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match &*k {
            "limit" => {
                let n: i64 = v.parse().map_err(|_| {
                    ApiErr::validation(
                        "parameter \"limit\" in query has an error: value must be an integer",
                    )
                })?;
                if !(1..=100).contains(&n) {
                    return Err(ApiErr::validation(
                        "parameter \"limit\" in query has an error: number must be between 1 and 100",
                    ));
                }
                limit = usize::try_from(n).unwrap_or(100);
            }
            "nextToken" => {
                cursor = Some(
                    decode_cursor(&v).ok_or_else(|| ApiErr::bad_request("Invalid next token"))?,
                );
            }
            "sandboxID" => {
                sandbox =
                    Some(short_id(&v).map_err(|_| ApiErr::bad_request("Invalid sandbox ID"))?);
            }
            "name" => {
                if parse_reference(&v).is_none() {
                    return Err(ApiErr::bad_request(format!("Invalid name: {v:?}")));
                }
                name = Some(v.into_owned());
            }
            _ => {}
        }
    }
    let named = name.as_deref().and_then(|n| store.snapshots.resolve(n));
    let mut all: Vec<Arc<Snapshot>> = store
        .snapshots
        .all()
        .into_iter()
        .filter(|s| sandbox.as_ref().is_none_or(|id| &s.source_sandbox == id))
        .filter(|s| {
            name.is_none()
                || named
                    .as_ref()
                    .is_some_and(|n| n.template_id == s.template_id && n.tag == s.tag)
        })
        .collect();
    all.sort_by_key(|s| std::cmp::Reverse(key_of(s)));
    if let Some(c) = &cursor {
        all.retain(|s| key_of(s) < *c);
    }
    let more = all.len() > limit;
    all.truncate(limit);
    let mut hdrs = HeaderMap::new();
    if more
        && let Some(last) = all.last()
        && let Ok(v) = HeaderValue::from_str(&cursor_of(last))
    {
        hdrs.insert(headers::NEXT_TOKEN, v);
    }
    let items: Vec<SnapshotInfo> = all.iter().map(|s| info(s)).collect();
    Ok((hdrs, Json(items)).into_response())
}

/// `DELETE /templates/{id}`: 204, or 404 when no snapshot (the emulator's only deletable
/// templates) has that id or name. Sandboxes made from it keep running on their copies.
pub(crate) async fn delete_template(
    State(store): State<Arc<Store>>,
    Path(reference): Path<String>,
) -> Result<StatusCode, ApiErr> {
    let Some(r) = parse_reference(&reference) else {
        return Err(ApiErr::bad_request(format!(
            "Invalid template ID: {reference:?} is not a valid template ID"
        )));
    };
    if crate::template::Template::lookup(r.identifier).is_some() {
        return Err(ApiErr::new(
            StatusCode::FORBIDDEN,
            format!("you don't have access to template '{}'", r.identifier),
        ));
    }
    let gone = {
        let store = store.clone();
        let reference = reference.clone();
        tokio::task::spawn_blocking(move || store.snapshots.delete(&reference))
            .await
            .unwrap_or(false)
    };
    if gone {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiErr::new(
            StatusCode::NOT_FOUND,
            format!("template '{}' not found", r.identifier),
        ))
    }
}

/// `POST /sandboxes/{id}/fork`: 201 with one `{sandbox}` or `{error}` per requested fork.
pub(crate) async fn fork(
    State(store): State<Arc<Store>>,
    Path(raw_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiErr> {
    let req: ForkRequest = parse_body(&body, false)
        .map_err(|e| ApiErr::bad_request(format!("Error when parsing request: {}", e.message)))?
        .unwrap_or_default();
    let timeout = validated_timeout(&store, req.timeout.unwrap_or(15))?;
    let count = req.count.unwrap_or(1);
    if count < 1 {
        return Err(ApiErr::bad_request("Count must be at least 1"));
    }
    if count > MAX_FORKS {
        return Err(ApiErr::bad_request(format!(
            "Count cannot be greater than {MAX_FORKS}"
        )));
    }
    let (id, rec) = lookup(&store, &raw_id)?;
    let staged = store.snapshots.staging_dir();
    let paused = ApiErr::conflict(format!(
        "Sandbox '{id}' is paused and cannot be forked; resume it first"
    ));
    store.capture(&rec, &staged, paused).await?;
    let mut results = Vec::new();
    for i in 0..count {
        let params = CreateParams {
            template: rec.template.clone(),
            timeout,
            secure: true,
            auto_pause: false,
            auto_pause_memory: true,
            auto_resume: false,
            allow_internet_access: rec.net().0,
            network: rec.net().1,
            metadata: rec.metadata.clone(),
            env_vars: rec.env_vars.clone(),
            // The last fork takes the staged copy instead of copying it once more.
            seed: Some((staged.clone(), i + 1 == count)),
            volumes: rec.volumes.clone(),
            volume_mounts: rec.volume_mounts.clone(),
        };
        results.push(match store.create(params).await {
            Ok(new) => ForkResult {
                sandbox: Some(sandbox_answer(&new)),
                error: None,
            },
            Err(e) => ForkResult {
                sandbox: None,
                error: Some(ApiError {
                    code: i32::from(e.status.as_u16()),
                    message: e.message,
                    error_code: None,
                }),
            },
        });
    }
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(staged)).await;
    tracing::info!(sandbox = %id, count, "sandbox forked");
    Ok((StatusCode::CREATED, Json(results)).into_response())
}
