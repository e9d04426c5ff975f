//! Snapshot and fork wire types of the control plane (`e2b-dev/infra spec/openapi.yml`:
//! `SandboxSnapshotRequest`, `SnapshotInfo`, `SandboxForkRequest`, `SandboxForkResult`).
//!
//! ```
//! use e2b_proto::snapshot::{ForkRequest, SnapshotInfo};
//! let body = ForkRequest { timeout: Some(60), count: Some(2) };
//! assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"timeout":60,"count":2}"#);
//! let info: SnapshotInfo =
//!     serde_json::from_str(r#"{"snapshotID":"abc:default","names":[]}"#).unwrap();
//! assert_eq!(info.snapshot_id, "abc:default");
//! ```

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Sandbox};

/// `POST /sandboxes/{id}/snapshots` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// Name of the snapshot template (`alias`, `alias:tag` or `team/alias:tag`); a name
    /// already in use gets a new build under the same template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A snapshot as the control plane describes it (`201` of create, items of `GET /snapshots`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// `team/alias:tag` when named, else `templateID:tag`; usable as a create's template.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Full names of the snapshot template (`team/alias`), empty when unnamed.
    #[serde(default)]
    pub names: Vec<String>,
}

/// `POST /sandboxes/{id}/fork` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRequest {
    /// Lifetime of each fork in seconds (server default 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// How many forks (1..=100, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// One fork's outcome: exactly one of `sandbox` and `error` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkResult {
    /// The fork, when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// Why it did not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}
