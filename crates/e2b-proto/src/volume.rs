//! Volume wire types: the control plane's `/volumes` (`Volume`, `VolumeAndToken`,
//! `NewVolume`, `SandboxVolumeMount`) and the volume content API's `VolumeEntryStat`
//! (`/volumecontent/{volumeID}/…`, authorized by the volume's token as a bearer).
//!
//! ```
//! use e2b_proto::volume::{NewVolume, VolumeMount};
//! let m = VolumeMount { name: "cache".into(), path: "/mnt/cache".into() };
//! assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"name":"cache","path":"/mnt/cache"}"#);
//! assert!(NewVolume { name: "data_1".into() }.name_is_valid());
//! assert!(!NewVolume { name: "a/b".into() }.name_is_valid());
//! ```

use serde::{Deserialize, Serialize};

/// A volume mounted into a sandbox at create (`volumeMounts` items).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// Volume name.
    pub name: String,
    /// Absolute, clean path in the sandbox.
    pub path: String,
}

/// `POST /volumes` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewVolume {
    /// Name: `^[a-zA-Z0-9_-]+$`.
    pub name: String,
}

impl NewVolume {
    /// Whether the name matches the spec's pattern `^[a-zA-Z0-9_-]+$`.
    pub fn name_is_valid(&self) -> bool {
        !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }
}

/// A volume in a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Volume ID (a UUID).
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    /// Volume name.
    pub name: String,
}

/// A volume with the token for its content API (create, get).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAndToken {
    /// Volume ID (a UUID).
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    /// Volume name.
    pub name: String,
    /// Bearer token of the content API; never printed by `Debug`.
    pub token: String,
    /// Domain of the content API when not the default `api.<domain>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

impl std::fmt::Debug for VolumeAndToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeAndToken")
            .field("volume_id", &self.volume_id)
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("domain", &self.domain)
            .finish()
    }
}

/// Kind of a volume entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeEntryType {
    /// Neither file, directory nor symlink.
    Unknown,
    /// Regular file.
    File,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
}

/// `VolumeEntryStat` of the volume content API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntryStat {
    /// Base name.
    pub name: String,
    /// Path inside the volume (absolute, `/` = the volume's root).
    pub path: String,
    /// Kind.
    #[serde(rename = "type")]
    pub kind: VolumeEntryType,
    /// Size in bytes.
    pub size: i64,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// RFC 3339 access time.
    pub atime: String,
    /// RFC 3339 modification time.
    pub mtime: String,
    /// RFC 3339 change time.
    pub ctime: String,
    /// Target of a symlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `PATCH /volumecontent/{volumeID}/path` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMetadataUpdate {
    /// New owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// New group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// New permission bits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// The content API's error body (`code` is a string there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeContentError {
    /// Error code.
    pub code: String,
    /// Message.
    pub message: String,
}
