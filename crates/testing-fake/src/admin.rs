//! The emulator's own endpoints for out-of-process users (the `e2b-local` binary): counters
//! and fault rules over HTTP. They require `X-API-KEY` and are never counted or faulted.
//!
//! * `GET /_emulator/counters` → `{"total":N,"control":{"POST /v2/sandboxes":1,…},"envd":{…}}`
//! * `DELETE /_emulator/counters` → 204, every counter back to zero
//! * `GET /_emulator/faults` → `[{"id":1,"rule":{…},"remaining":1}]`
//! * `POST /_emulator/faults` with a rule (see [`crate::faults`]) → 201 `{"id":1}`
//! * `DELETE /_emulator/faults` → 204, every rule removed
//! * `DELETE /_emulator/faults/{id}` → 204, or 404 when there is no such rule

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use e2b_proto::headers;

use crate::control::error::{ApiErr, parse_body};
use crate::faults::{FaultId, FaultRule, FaultRuleWire};
use crate::server::Shared;

/// Path prefix of these endpoints.
pub(crate) const PREFIX: &str = "/_emulator/";

async fn require_key(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(headers::API_KEY)
        .and_then(|v| v.to_str().ok())
        == Some(s.api_key.as_str());
    if !ok {
        return ApiErr::unauthorized().into_response();
    }
    next.run(req).await
}

async fn counters(State(s): State<Arc<Shared>>) -> Response {
    Json(s.counters.snapshot()).into_response()
}

async fn reset_counters(State(s): State<Arc<Shared>>) -> StatusCode {
    s.counters.reset();
    StatusCode::NO_CONTENT
}

async fn list_faults(State(s): State<Arc<Shared>>) -> Response {
    let rules: Vec<serde_json::Value> = s
        .faults
        .rules()
        .iter()
        .map(|(id, rule, remaining)| {
            serde_json::json!({
                "id": id,
                "rule": FaultRuleWire::from(rule),
                "remaining": remaining,
            })
        })
        .collect();
    Json(rules).into_response()
}

async fn add_fault(State(s): State<Arc<Shared>>, body: Bytes) -> Result<Response, ApiErr> {
    let wire: FaultRuleWire =
        parse_body(&body, true)?.ok_or_else(|| ApiErr::bad_request("a fault rule is required"))?;
    let id = s.faults.add(FaultRule::from(wire));
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))).into_response())
}

async fn clear_faults(State(s): State<Arc<Shared>>) -> StatusCode {
    s.faults.clear();
    StatusCode::NO_CONTENT
}

async fn remove_fault(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiErr> {
    if s.faults.remove(FaultId(id)) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiErr::new(
            StatusCode::NOT_FOUND,
            format!("fault rule {id} not found"),
        ))
    }
}

/// The admin router.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/_emulator/counters", get(counters).delete(reset_counters))
        .route(
            "/_emulator/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/_emulator/faults/{id}", delete(remove_fault))
        .layer(middleware::from_fn_with_state(shared.clone(), require_key))
        .with_state(shared)
}
