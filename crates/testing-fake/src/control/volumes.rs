//! Volume handlers of the control plane: `GET/POST /volumes`, `GET/DELETE
//! /volumes/{volumeID}`, and the check of a create's `volumeMounts` (E2B's messages:
//! `invalid mounts:` with one line per bad mount).

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use e2b_proto::volume::{NewVolume, Volume, VolumeAndToken, VolumeMount};

use super::error::{ApiErr, parse_body};
use super::store::Store;
use super::volume_store::{CreateError, VolumeRec};

fn with_token(v: &VolumeRec) -> VolumeAndToken {
    VolumeAndToken {
        volume_id: v.id.clone(),
        name: v.name.clone(),
        token: v.token.clone(),
        domain: None,
    }
}

fn parse_id(raw: &str) -> Result<String, ApiErr> {
    uuid::Uuid::parse_str(raw)
        .map(|u| u.to_string())
        .map_err(|_| ApiErr::bad_request("Invalid volume ID"))
}

/// `GET /volumes`.
pub(crate) async fn list(State(store): State<Arc<Store>>) -> Json<Vec<Volume>> {
    Json(
        store
            .volumes
            .all()
            .iter()
            .map(|v| Volume {
                volume_id: v.id.clone(),
                name: v.name.clone(),
            })
            .collect(),
    )
}

/// `POST /volumes`: 201 `VolumeAndToken`; a taken name is 400.
pub(crate) async fn create(
    State(store): State<Arc<Store>>,
    body: Bytes,
) -> Result<(StatusCode, Json<VolumeAndToken>), ApiErr> {
    let req: NewVolume = parse_body(&body, true)?.unwrap_or_default();
    if !req.name_is_valid() {
        return Err(ApiErr::bad_request("Invalid volume name"));
    }
    let store2 = store.clone();
    let name = req.name.clone();
    let made = tokio::task::spawn_blocking(move || store2.volumes.create(&name))
        .await
        .map_err(|_| ApiErr::internal("Error when creating volume"))?;
    match made {
        Ok(v) => Ok((StatusCode::CREATED, Json(with_token(&v)))),
        Err(CreateError::NameTaken) => Err(ApiErr::bad_request(format!(
            "Volume with name '{}' already exists",
            req.name
        ))),
        Err(CreateError::Io(e)) => {
            tracing::warn!(error = %e, "creating a volume failed");
            Err(ApiErr::internal("Error when creating directory"))
        }
    }
}

/// `GET /volumes/{volumeID}`.
pub(crate) async fn get(
    State(store): State<Arc<Store>>,
    Path(raw): Path<String>,
) -> Result<Json<VolumeAndToken>, ApiErr> {
    let id = parse_id(&raw)?;
    let v = store
        .volumes
        .get(&id)
        .ok_or_else(|| ApiErr::new(StatusCode::NOT_FOUND, "Volume not found"))?;
    Ok(Json(with_token(&v)))
}

/// `DELETE /volumes/{volumeID}`: 204. Sandboxes that mount it lose its files (as on E2B,
/// where the volume's storage goes away).
pub(crate) async fn delete(
    State(store): State<Arc<Store>>,
    Path(raw): Path<String>,
) -> Result<StatusCode, ApiErr> {
    let id = parse_id(&raw)?;
    let store2 = store.clone();
    let id2 = id.clone();
    match tokio::task::spawn_blocking(move || store2.volumes.delete(&id2)).await {
        Ok(Ok(true)) => Ok(StatusCode::NO_CONTENT),
        Ok(Ok(false)) => Err(ApiErr::new(StatusCode::NOT_FOUND, "Volume not found")),
        Ok(Err(e)) => {
            tracing::warn!(volume = %id, error = %e, "deleting a volume failed");
            Err(ApiErr::internal("Error recording volume deletion"))
        }
        Err(_) => Err(ApiErr::internal("Error recording volume deletion")),
    }
}

/// Why a mount path is refused (E2B's `isValidMountPath`), or `None`.
fn bad_mount_path(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("path cannot be empty");
    }
    if !path.starts_with('/') {
        return Some("path must be absolute");
    }
    // Already clean as Go's `filepath.Clean` leaves it: no empty, `.` or `..` segment
    // (std's `Path::components` would drop an inner `.` silently).
    let clean = path == "/"
        || path[1..]
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    if !clean {
        return Some("path must not contain any '.' or '..' components");
    }
    None
}

/// The (sandbox path, host directory) pairs of a create's `volumeMounts`, or E2B's 400.
pub(crate) fn resolve_mounts(
    store: &Store,
    mounts: Option<&[VolumeMount]>,
) -> Result<Vec<(PathBuf, PathBuf)>, ApiErr> {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let mut used = std::collections::HashSet::new();
    for (i, m) in mounts.unwrap_or_default().iter().enumerate() {
        let Some(v) = store.volumes.by_name(&m.name) else {
            bad.push(format!(
                "\t- volume mount #{i}: volume '{}' not found",
                m.name
            ));
            continue;
        };
        if let Some(reason) = bad_mount_path(&m.path) {
            bad.push(format!("\t- volume mount #{i}: {reason}"));
            continue;
        }
        if !used.insert(m.path.clone()) {
            bad.push(format!(
                "\t- volume mount #{i}: path '{}' is already used",
                m.path
            ));
            continue;
        }
        out.push((PathBuf::from(&m.path), store.volumes.data(&v.id)));
    }
    if !bad.is_empty() {
        return Err(ApiErr::bad_request(format!(
            "invalid mounts:\n{}",
            bad.join("\n")
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::bad_mount_path;

    #[test]
    fn mount_paths_are_checked_like_e2b() {
        assert_eq!(bad_mount_path("/mnt/data"), None);
        assert_eq!(bad_mount_path(""), Some("path cannot be empty"));
        assert_eq!(bad_mount_path("mnt"), Some("path must be absolute"));
        assert!(bad_mount_path("/mnt/../etc").is_some());
        assert!(bad_mount_path("/mnt/./x").is_some());
        assert!(bad_mount_path("/mnt/").is_some());
    }
}
