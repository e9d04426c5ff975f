//! Control-plane handlers for one sandbox or a new one: create (v1 and v2), info, kill,
//! timeout, refreshes, pause, connect (v1 and v2), resume, metrics, and the API health check.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use e2b_proto::control::{
    ListedSandbox, NewSandbox, PauseSandbox, RefreshSandbox, Sandbox, SandboxDetail, SandboxState,
    SetTimeout,
};
use e2b_proto::{CLIENT_ID, control::Lifecycle};
use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::error::{ApiErr, parse_body};
use super::ids::short_id;
use super::store::{CreateParams, Resumed, Sample, SandboxRecord, Store};

type ApiResult<T> = Result<T, ApiErr>;

/// RFC 3339 with at most microsecond precision (every SDK's date parser accepts it).
pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    let t = t
        .replace_nanosecond(t.nanosecond() / 1_000 * 1_000)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// The `Sandbox` answer of create / connect / resume.
pub(crate) fn sandbox_answer(rec: &SandboxRecord) -> Sandbox {
    Sandbox {
        template_id: rec.template.id.clone(),
        sandbox_id: rec.id.clone(),
        client_id: CLIENT_ID.into(),
        envd_version: rec.template.envd_version.clone(),
        envd_access_token: rec.access_token.clone(),
        traffic_access_token: None,
        domain: None,
        alias: Some(rec.template.alias.clone()),
    }
}

/// The listing view of a sandbox.
pub(crate) fn listed(rec: &SandboxRecord) -> ListedSandbox {
    let (state, end_at) = {
        let life = rec.life();
        (life.state, life.end_at)
    };
    ListedSandbox {
        template_id: rec.template.id.clone(),
        alias: Some(rec.template.alias.clone()),
        sandbox_id: rec.id.clone(),
        client_id: CLIENT_ID.into(),
        started_at: rfc3339(rec.started_at),
        end_at: rfc3339(end_at),
        cpu_count: i64::from(rec.template.cpu_count),
        memory_mb: i64::from(rec.template.memory_mb),
        disk_size_mb: i64::from(rec.template.disk_size_mb),
        metadata: Some(rec.metadata.clone()),
        state,
        envd_version: rec.template.envd_version.clone(),
        volume_mounts: (!rec.volume_mounts.is_empty()).then(|| rec.volume_mounts.clone()),
    }
}

fn lookup(store: &Store, raw_id: &str) -> ApiResult<Arc<SandboxRecord>> {
    let id = short_id(raw_id)?;
    store.get(&id).ok_or_else(|| ApiErr::sandbox_not_found(&id))
}

fn check_timeout(store: &Store, secs: i64) -> ApiResult<Duration> {
    let max = store.max_timeout;
    if secs > 0 && u64::try_from(secs).is_ok_and(|s| s > max.as_secs()) {
        return Err(ApiErr::bad_request(format!(
            "Timeout cannot be greater than {} hours",
            max.as_secs() / 3600
        )));
    }
    Ok(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// [`check_timeout`] for the other handler modules.
pub(crate) fn validated_timeout(store: &Store, secs: i64) -> ApiResult<Duration> {
    check_timeout(store, secs)
}

/// `GET /health` of the API.
pub(crate) async fn health() -> &'static str {
    "Health check successful"
}

/// `POST /sandboxes`.
pub(crate) async fn create_v1(State(store): State<Arc<Store>>, body: Bytes) -> Response {
    create(&store, &body, false).await.into_response()
}

/// `POST /v2/sandboxes`. A retry carrying the same `Idempotency-Key` as an earlier
/// successful create gets that sandbox again instead of a new one.
pub(crate) async fn create_v2(
    State(store): State<Arc<Store>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    if let Some(rec) = key.as_deref().and_then(|k| store.by_idempotency_key(k)) {
        return (StatusCode::CREATED, Json(sandbox_answer(&rec))).into_response();
    }
    match create(&store, &body, true).await {
        Ok((status, Json(sbx))) => {
            if let Some(k) = key {
                store.remember_idempotency_key(k, &sbx.sandbox_id);
            }
            (status, Json(sbx)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn create(store: &Store, body: &[u8], v2: bool) -> ApiResult<(StatusCode, Json<Sandbox>)> {
    let req: NewSandbox = parse_body(body, true)?.unwrap_or_default();
    if req.template_id.is_empty() {
        return Err(ApiErr::validation(
            "request body has an error: doesn't match schema: property \"templateID\" is missing",
        ));
    }
    // Server default when absent: 15 s on v1 (infra), 300 s on v2 (spec default).
    let secs = req.timeout.unwrap_or(if v2 { 300 } else { 15 });
    if secs <= 0 {
        return Err(ApiErr::bad_request(
            "Timeout must be greater than 0 seconds",
        ));
    }
    let timeout = check_timeout(store, secs)?;
    let auto_pause = req.auto_pause.unwrap_or(false);
    if req.auto_pause_memory.is_some() && !auto_pause {
        return Err(ApiErr::bad_request(
            "autoPauseMemory can only be set when autoPause is true",
        ));
    }
    let auto_pause_memory = req.auto_pause_memory.unwrap_or(true);
    let auto_resume = req.auto_resume.is_some_and(|a| a.enabled);
    if auto_resume && !auto_pause_memory {
        return Err(ApiErr::bad_request(
            "autoResume cannot be enabled when autoPauseMemory is false",
        ));
    }
    let (template, seed) = match store.template(&req.template_id) {
        Some(t) => (t, None),
        None => {
            let snap = store.snapshots.resolve(&req.template_id).ok_or_else(|| {
                ApiErr::new(
                    StatusCode::NOT_FOUND,
                    format!("template '{}' not found", req.template_id),
                )
            })?;
            (snap.template.clone(), Some((snap.dir.clone(), false)))
        }
    };
    let volumes = super::volumes::resolve_mounts(store, req.volume_mounts.as_deref())?;
    // v2 sandboxes are always secured; v1 honours an explicit `secure: false`.
    let secure = v2 || req.secure.unwrap_or(true);
    let rec = store
        .create(CreateParams {
            template,
            timeout,
            secure,
            auto_pause,
            auto_pause_memory,
            auto_resume,
            allow_internet_access: req.allow_internet_access,
            network: req.network,
            metadata: req.metadata.unwrap_or_default(),
            env_vars: req.env_vars.unwrap_or_default(),
            seed,
            volumes,
            volume_mounts: req.volume_mounts.unwrap_or_default(),
        })
        .await?;
    Ok((StatusCode::CREATED, Json(sandbox_answer(&rec))))
}

/// `GET /sandboxes/{id}`; with `missingLimits` (the emulator's own field, absent when
/// every limit of the template applies) naming the limits this host could not apply.
pub(crate) async fn info(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let rec = lookup(&store, &id)?;
    let missing = rec.life().envd.missing_limits();
    let pause_mode = {
        let life = rec.life();
        (life.state == SandboxState::Paused).then(|| {
            if life.paused_with_memory {
                "full"
            } else {
                "filesystem"
            }
            .to_owned()
        })
    };
    let (allow_internet_access, network) = rec.net();
    let detail = SandboxDetail {
        listed: listed(&rec),
        pause_mode,
        envd_access_token: rec.access_token.clone(),
        allow_internet_access,
        domain: None,
        network: network.map(|mut n| {
            if let Some(p) = n.egress_proxy.as_mut() {
                p.password = None;
            }
            n
        }),
        lifecycle: Some(Lifecycle {
            auto_resume: rec.auto_resume,
            on_timeout: if rec.auto_pause { "pause" } else { "kill" }.into(),
        }),
    };
    let mut body = serde_json::to_value(detail)
        .map_err(|e| ApiErr::internal(format!("encoding the sandbox: {e}")))?;
    if let (false, Some(obj)) = (missing.is_empty(), body.as_object_mut()) {
        obj.insert("missingLimits".into(), serde_json::json!(missing));
    }
    Ok(Json(body))
}

/// `DELETE /sandboxes/{id}`.
pub(crate) async fn kill(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = short_id(&id)?;
    if store.kill(&id).await {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiErr::sandbox_not_found(&id))
    }
}

/// `POST /sandboxes/{id}/timeout`.
pub(crate) async fn set_timeout(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let rec = lookup(&store, &id)?;
    let req: SetTimeout = parse_body(&body, true)?.unwrap_or_default();
    if u64::try_from(req.timeout).is_ok_and(|s| s > store.max_timeout.as_secs()) {
        return Err(ApiErr::bad_request("Max instance length exceeded"));
    }
    // Negative is treated as 0.
    store.set_timeout(
        &rec,
        Duration::from_secs(u64::try_from(req.timeout).unwrap_or(0)),
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/refreshes`.
pub(crate) async fn refresh(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let rec = lookup(&store, &id)?;
    let req: RefreshSandbox = parse_body(&body, false)?.unwrap_or_default();
    let secs = req.duration.unwrap_or(0);
    if !(0..=3600).contains(&secs) {
        return Err(ApiErr::validation(
            "request body has an error: doesn't match schema: duration must be between 0 and 3600",
        ));
    }
    store.refresh(
        &rec,
        Duration::from_secs(u64::try_from(secs.max(15)).unwrap_or(15)),
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/pause`.
pub(crate) async fn pause(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let rec = lookup(&store, &id)?;
    let req: PauseSandbox = parse_body(&body, false)?.unwrap_or_default();
    store.pause(&rec, req.memory.unwrap_or(true)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Body of connect (v1: `timeout` required; v2: default 300).
#[derive(Debug, Deserialize)]
struct ConnectBody {
    timeout: Option<i64>,
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/connect`.
pub(crate) async fn connect_v1(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    connect(&store, &id, &body, false).await
}

/// `POST /v2/sandboxes/{id}/connect`.
pub(crate) async fn connect_v2(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    connect(&store, &id, &body, true).await
}

async fn connect(store: &Store, id: &str, body: &[u8], v2: bool) -> ApiResult<Response> {
    let id = short_id(id)?;
    let req: Option<ConnectBody> = parse_body(body, !v2)?;
    let (timeout, memory) = match req {
        Some(b) => (b.timeout, b.memory),
        None => (None, None),
    };
    let secs = match timeout {
        Some(t) => t,
        None if v2 => 300,
        None => {
            return Err(ApiErr::validation(
                "request body has an error: doesn't match schema: property \"timeout\" is missing",
            ));
        }
    };
    if secs < 0 {
        return Err(ApiErr::validation(
            "request body has an error: doesn't match schema: timeout must be at least 0",
        ));
    }
    let timeout = check_timeout(store, secs)?;
    let rec = store
        .get(&id)
        .ok_or_else(|| ApiErr::sandbox_not_found(&id))?;
    let status = match store.resume(&rec, timeout, memory).await? {
        Resumed::AlreadyRunning => StatusCode::OK,
        Resumed::Resumed => StatusCode::CREATED,
    };
    Ok((status, Json(sandbox_answer(&rec))).into_response())
}

/// Body of the deprecated resume.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeBody {
    timeout: Option<i64>,
    #[allow(dead_code)]
    auto_pause: Option<bool>,
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/resume` (deprecated).
pub(crate) async fn resume(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Sandbox>)> {
    let rec = lookup(&store, &id)?;
    let req: ResumeBody = parse_body(&body, false)?.unwrap_or_default();
    let secs = req.timeout.unwrap_or(15);
    if secs < 0 {
        return Err(ApiErr::validation(
            "request body has an error: doesn't match schema: timeout must be at least 0",
        ));
    }
    let timeout = check_timeout(&store, secs)?;
    if rec.life().state == SandboxState::Running {
        return Err(ApiErr::conflict(format!(
            "Sandbox {} is already running",
            rec.id
        )));
    }
    match store.resume(&rec, timeout, req.memory).await? {
        Resumed::AlreadyRunning => Err(ApiErr::conflict(format!(
            "Sandbox {} is already running",
            rec.id
        ))),
        Resumed::Resumed => Ok((StatusCode::CREATED, Json(sandbox_answer(&rec)))),
    }
}

/// One sample as E2B reports it: memory and CPU use measured (see [`Sample`]), disk use
/// not (a sixteenth of the template's disk).
fn metric(rec: &SandboxRecord, s: &Sample) -> serde_json::Value {
    let mem_total = u64::from(rec.template.memory_mb) * 1024 * 1024;
    let disk_total = u64::from(rec.template.disk_size_mb) * 1024 * 1024;
    serde_json::json!({
        "timestamp": rfc3339(s.at),
        "timestampUnix": s.at.unix_timestamp(),
        "cpuCount": rec.template.cpu_count,
        "cpuUsedPct": s.cpu_used_pct,
        "memUsed": s.mem_used.min(mem_total),
        "memTotal": mem_total,
        "memCache": s.mem_cache,
        "diskUsed": disk_total / 16,
        "diskTotal": disk_total,
    })
}

/// `GET /sandboxes/{id}/metrics?start=&end=` (unix seconds): the sandbox's samples (one at
/// boot, then one every 5 s while it runs) within the range; `start` defaults to the
/// sandbox's start, `end` to now. Timestamps and memory are measured (see [`metric`]).
pub(crate) async fn metrics(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<serde_json::Value>> {
    let rec = lookup(&store, &id)?;
    let query = query.unwrap_or_default();
    let mut start = rec.started_at.unix_timestamp();
    let mut end = OffsetDateTime::now_utc().unix_timestamp();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match k.as_ref() {
            "start" => &mut start,
            "end" => &mut end,
            _ => continue,
        };
        *slot = v.parse::<i64>().map_err(|_| {
            ApiErr::validation(format!(
                "parameter \"{k}\" in query has an error: value {v}: an invalid integer: invalid syntax"
            ))
        })?;
    }
    let samples: Vec<serde_json::Value> = rec
        .samples_between(start, end)
        .iter()
        .map(|s| metric(&rec, s))
        .collect();
    Ok(Json(serde_json::Value::Array(samples)))
}

/// `GET /sandboxes/metrics?sandbox_ids=a,b`.
pub(crate) async fn metrics_many(
    State(store): State<Arc<Store>>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<serde_json::Value>> {
    let query = query.unwrap_or_default();
    let ids: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "sandbox_ids")
        .flat_map(|(_, v)| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    if ids.is_empty() || ids.len() > 100 {
        return Err(ApiErr::validation(
            "parameter \"sandbox_ids\" in query has an error: expected 1 to 100 ids",
        ));
    }
    let mut out = BTreeMap::new();
    for id in ids {
        if let Some(rec) = store.get(&id) {
            let running = rec.life().state == SandboxState::Running;
            if let (true, Some(s)) = (running, rec.last_sample()) {
                out.insert(id, metric(&rec, &s));
            }
        }
    }
    Ok(Json(serde_json::json!({ "sandboxes": out })))
}

/// `GET /sandboxes/{id}/logs` (deprecated): the emulator keeps no sandbox logs.
pub(crate) async fn logs_v1(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    lookup(&store, &id)?;
    Ok(Json(serde_json::json!({ "logs": [], "logEntries": [] })))
}

/// `GET /v2/sandboxes/{id}/logs`: the emulator keeps no sandbox logs.
pub(crate) async fn logs_v2(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    lookup(&store, &id)?;
    Ok(Json(serde_json::json!({ "logs": [] })))
}

/// Body of `PUT /sandboxes/{id}/network`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkUpdate {
    allow_out: Option<Vec<String>>,
    deny_out: Option<Vec<String>>,
    egress_proxy: Option<e2b_proto::control::EgressProxy>,
    rules: Option<serde_json::Value>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
}

/// `PUT /sandboxes/{id}/network`: replaces the egress settings (omitted fields are
/// cleared). The emulator records them for `GET /sandboxes/{id}`; it does not filter
/// traffic.
pub(crate) async fn update_network(
    State(store): State<Arc<Store>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let rec = lookup(&store, &id)?;
    let req: NetworkUpdate = parse_body(&body, true)?.unwrap_or_default();
    let (_, old) = rec.net();
    let old = old.unwrap_or_default();
    let network = e2b_proto::control::NetworkConfig {
        allow_out: req.allow_out,
        deny_out: req.deny_out,
        egress_proxy: req.egress_proxy,
        rules: req.rules,
        allow_public_traffic: old.allow_public_traffic,
        mask_request_host: old.mask_request_host,
    };
    rec.set_net(req.allow_internet_access, Some(network));
    Ok(StatusCode::NO_CONTENT)
}
