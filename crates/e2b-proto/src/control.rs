//! Control-plane REST types (`e2b-dev/infra spec/openapi.yml`).
//!
//! Unset options are absent from request bodies (the SDKs build bodies with
//! `JSON.stringify`), never `null`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Egress proxy settings.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressProxy {
    /// `host:port` of the proxy.
    pub address: String,
    /// Optional user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Optional password; never printed by `Debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `SandboxNetworkConfig`: egress allow/deny lists and public traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// Allowed egress destinations (CIDR, IP or domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_out: Option<Vec<String>>,
    /// Denied egress destinations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_out: Option<Vec<String>>,
    /// Whether sandbox ports are reachable without a traffic token (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_public_traffic: Option<bool>,
    /// Host header mask for forwarded requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_request_host: Option<String>,
    /// Egress proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<EgressProxy>,
    /// Per-host transform rules, passed through untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<serde_json::Value>,
}

/// `autoResume` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoResume {
    /// Resume on incoming traffic.
    pub enabled: bool,
}

/// Body of `POST /v2/sandboxes` (and, minus v2-only keys, `POST /sandboxes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    /// Template ID or alias (optionally `:tag`).
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Lifetime in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// Pause instead of kill on timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause: Option<bool>,
    /// Keep memory when auto-pausing (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause_memory: Option<bool>,
    /// Resume a paused sandbox on traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<AutoResume>,
    /// Require an envd access token (SDK default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    /// Internet access (snake_case on the wire).
    #[serde(
        default,
        rename = "allow_internet_access",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_internet_access: Option<bool>,
    /// Egress and public-traffic settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
    /// Free-form metadata, used for listing and naming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Global environment variables for every process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Team volumes to mount (name, absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<crate::volume::VolumeMount>>,
}

/// Create/connect/resume response (`Sandbox`).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Resolved template ID.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Sandbox ID.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Deprecated constant.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// envd version (semver).
    #[serde(default)]
    pub envd_version: String,
    /// envd access token when secured; never printed by `Debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Token for non-envd ports when public traffic is off; never printed by `Debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_access_token: Option<String>,
    /// Sandbox traffic domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Template alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("Sandbox")
            .field("template_id", &self.template_id)
            .field("sandbox_id", &self.sandbox_id)
            .field("envd_version", &self.envd_version)
            .field("envd_access_token", &redact(&self.envd_access_token))
            .field("traffic_access_token", &redact(&self.traffic_access_token))
            .field("domain", &self.domain)
            .field("alias", &self.alias)
            .finish()
    }
}

/// `running` or `paused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// Running.
    Running,
    /// Paused (snapshot kept).
    Paused,
}

impl SandboxState {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
        }
    }
}

/// An item of `GET /v2/sandboxes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedSandbox {
    /// Template ID.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Template alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Sandbox ID.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Deprecated constant.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time.
    pub end_at: String,
    /// vCPUs.
    #[serde(default)]
    pub cpu_count: i64,
    /// Memory in MiB.
    #[serde(rename = "memoryMB", default)]
    pub memory_mb: i64,
    /// Disk in MiB.
    #[serde(rename = "diskSizeMB", default)]
    pub disk_size_mb: i64,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// State.
    pub state: SandboxState,
    /// envd version.
    #[serde(default)]
    pub envd_version: String,
    /// Team volumes mounted at create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<crate::volume::VolumeMount>>,
}

/// Lifecycle settings reported by `GET /sandboxes/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Auto-resume on traffic.
    #[serde(default)]
    pub auto_resume: bool,
    /// `kill` or `pause`.
    pub on_timeout: String,
}

/// `GET /sandboxes/{id}` response.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// The listing fields.
    #[serde(flatten)]
    pub listed: ListedSandbox,
    /// envd access token; never printed by `Debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Internet access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    /// Traffic domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Network settings (proxy password never returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
    /// Lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// What the latest pause saved (`full` or `filesystem`); only for a paused sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<String>,
}

impl std::fmt::Debug for SandboxDetail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxDetail")
            .field("listed", &self.listed)
            .field(
                "envd_access_token",
                &self.envd_access_token.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_internet_access", &self.allow_internet_access)
            .field("domain", &self.domain)
            .field("network", &self.network)
            .field("lifecycle", &self.lifecycle)
            .field("pause_mode", &self.pause_mode)
            .finish()
    }
}

/// Body of `POST /sandboxes/{id}/connect` (v1 and v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectSandbox {
    /// Seconds of life from now (only extends a running sandbox).
    pub timeout: i64,
    /// `false` cold-boots a paused sandbox from its disk state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/pause`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseSandbox {
    /// Keep memory (default true); false is a filesystem-only snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<bool>,
    /// Require a healthy guest before pausing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_healthy_guest: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetTimeout {
    /// Seconds from now; may shorten.
    pub timeout: i64,
}

/// Body of `POST /sandboxes/{id}/refreshes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshSandbox {
    /// Seconds (0..3600, below 15 becomes 15); extends only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<i64>,
}

/// The control plane's error body: `code` always equals the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// HTTP status, repeated.
    pub code: i32,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// Machine-readable reason (`sandbox_capacity_unavailable`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_sandbox_omits_unset_fields() {
        let body = NewSandbox {
            template_id: "base".into(),
            timeout: Some(300),
            secure: Some(true),
            allow_internet_access: Some(true),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true}"#
        );
    }

    #[test]
    fn debug_redacts_tokens() {
        let s = Sandbox {
            sandbox_id: "iabc".into(),
            envd_access_token: Some("supersecret".into()),
            ..Default::default()
        };
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("supersecret"));
        assert!(dbg.contains("<redacted>"));
        let p = EgressProxy {
            address: "p:1".into(),
            username: None,
            password: Some("pw-xyz".into()),
        };
        assert!(!format!("{p:?}").contains("pw-xyz"));
    }
}
