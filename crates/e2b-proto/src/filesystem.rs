//! `filesystem.Filesystem` messages (envd `spec/filesystem/filesystem.proto`) as protobuf-JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::json::{i64_string, is_default, proto_enum};
use super::process::Empty;

/// Connect procedure paths of the filesystem service.
pub mod paths {
    /// Unary: stat (lstat semantics for the entry, target type for symlinks).
    pub const STAT: &str = "/filesystem.Filesystem/Stat";
    /// Unary: mkdir -p.
    pub const MAKE_DIR: &str = "/filesystem.Filesystem/MakeDir";
    /// Unary: rename.
    pub const MOVE: &str = "/filesystem.Filesystem/Move";
    /// Unary: list a directory to a depth.
    pub const LIST_DIR: &str = "/filesystem.Filesystem/ListDir";
    /// Unary: recursive remove; a missing path is success.
    pub const REMOVE: &str = "/filesystem.Filesystem/Remove";
    /// Server stream: watch a directory.
    pub const WATCH_DIR: &str = "/filesystem.Filesystem/WatchDir";
    /// Unary: create a polled watcher.
    pub const CREATE_WATCHER: &str = "/filesystem.Filesystem/CreateWatcher";
    /// Unary: drain a polled watcher's events.
    pub const GET_WATCHER_EVENTS: &str = "/filesystem.Filesystem/GetWatcherEvents";
    /// Unary: remove a polled watcher.
    pub const REMOVE_WATCHER: &str = "/filesystem.Filesystem/RemoveWatcher";
}

proto_enum! {
    /// Entry type.
    FileType {
        /// Sockets, fifos, devices, broken links.
        #[default]
        Unspecified = 0 => "FILE_TYPE_UNSPECIFIED",
        /// Regular file (or a link to one).
        File = 1 => "FILE_TYPE_FILE",
        /// Directory (or a link to one).
        Directory = 2 => "FILE_TYPE_DIRECTORY",
        /// Never emitted by envd 0.6.x.
        Symlink = 3 => "FILE_TYPE_SYMLINK",
    }
}

proto_enum! {
    /// Watch event type.
    EventType {
        /// Unset.
        #[default]
        Unspecified = 0 => "EVENT_TYPE_UNSPECIFIED",
        /// Created.
        Create = 1 => "EVENT_TYPE_CREATE",
        /// Written.
        Write = 2 => "EVENT_TYPE_WRITE",
        /// Removed.
        Remove = 3 => "EVENT_TYPE_REMOVE",
        /// Renamed away (the new name gets a CREATE).
        Rename = 4 => "EVENT_TYPE_RENAME",
        /// Mode changed.
        Chmod = 5 => "EVENT_TYPE_CHMOD",
    }
}

/// Metadata of one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// Base name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Type (a symlink reports its target's type).
    #[serde(default, rename = "type", skip_serializing_if = "is_default")]
    pub file_type: FileType,
    /// Absolute path as requested.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// lstat size; int64, a JSON string on the wire.
    #[serde(default, with = "i64_string", skip_serializing_if = "is_default")]
    pub size: i64,
    /// Permission bits.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: u32,
    /// Go `FileMode.String()` of the entry itself (`-rw-r--r--`, `Lrwxrwxrwx`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub permissions: String,
    /// Owner name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Group name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// RFC 3339 modification time.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "modified_time"
    )]
    pub modified_time: Option<String>,
    /// Resolved target, only for symlinks.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "symlink_target"
    )]
    pub symlink_target: Option<String>,
    /// `user.e2b.*` extended attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// A request naming one path (`Stat`, `MakeDir`, `Remove`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRequest {
    /// The path.
    #[serde(default)]
    pub path: String,
}

/// A response carrying one entry (`Stat`, `MakeDir`, `Move`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryResponse {
    /// The entry.
    #[serde(default)]
    pub entry: EntryInfo,
}

/// `Move` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRequest {
    /// From.
    #[serde(default)]
    pub source: String,
    /// To.
    #[serde(default)]
    pub destination: String,
}

/// `ListDir` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListDirRequest {
    /// Directory.
    #[serde(default)]
    pub path: String,
    /// Depth; 0 means 1.
    #[serde(default, skip_serializing_if = "is_default")]
    pub depth: u32,
}

/// `ListDir` response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListDirResponse {
    /// Entries in depth-first lexical order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<EntryInfo>,
}

/// `WatchDir` / `CreateWatcher` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchDirRequest {
    /// Directory.
    #[serde(default)]
    pub path: String,
    /// Watch subdirectories too.
    #[serde(default, skip_serializing_if = "is_default")]
    pub recursive: bool,
    /// Attach entry info to events.
    #[serde(default, skip_serializing_if = "is_default", alias = "include_entry")]
    pub include_entry: bool,
    /// Allow NFS/CIFS/FUSE.
    #[serde(
        default,
        skip_serializing_if = "is_default",
        alias = "allow_network_mounts"
    )]
    pub allow_network_mounts: bool,
}

/// One filesystem event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemEvent {
    /// Path relative to the watched directory.
    #[serde(default)]
    pub name: String,
    /// What happened.
    #[serde(default, rename = "type", skip_serializing_if = "is_default")]
    pub event_type: EventType,
    /// Entry info when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `WatchDir` stream message (a protobuf `oneof`).
#[allow(clippy::large_enum_variant)] // mirrors the wire; events are short-lived
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WatchDirResponse {
    /// The watch is established.
    Start(Empty),
    /// An event.
    Filesystem(FilesystemEvent),
    /// Idle tick.
    Keepalive(Empty),
}

/// `CreateWatcher` response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    /// Watcher id (`w` + 20 `[a-z0-9]`).
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `GetWatcherEvents` / `RemoveWatcher` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatcherRequest {
    /// Watcher id.
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `GetWatcherEvents` response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetWatcherEventsResponse {
    /// Drained events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<FilesystemEvent>,
}

/// One element of the JSON array `POST /files` answers (envd `EntryInfo` of its HTTP API,
/// not the RPC one: `type` is the plain string `"file"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteInfo {
    /// Base name.
    #[serde(default)]
    pub name: String,
    /// Entry type as a plain string (`"file"`).
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Absolute path written.
    #[serde(default)]
    pub path: String,
    /// Stored `X-Metadata-*` pairs; omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_info_wire_shape() {
        let json = r#"{"entry":{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"6",
            "mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user",
            "modifiedTime":"2026-08-21T20:00:22.123456789Z"}}"#;
        let r: EntryResponse = serde_json::from_str(json).unwrap();
        assert_eq!(r.entry.size, 6);
        assert_eq!(r.entry.file_type, FileType::File);
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["entry"]["size"], "6");
        assert!(back["entry"].get("metadata").is_none());
        // numbers accepted for int64 and enums
        let r: EntryResponse = serde_json::from_str(r#"{"entry":{"type":2,"size":4096}}"#).unwrap();
        assert_eq!(r.entry.file_type, FileType::Directory);
        assert_eq!(r.entry.size, 4096);
    }

    #[test]
    fn watch_messages() {
        let s: WatchDirResponse = serde_json::from_str(r#"{"start":{}}"#).unwrap();
        assert_eq!(s, WatchDirResponse::Start(Empty {}));
        let e: WatchDirResponse =
            serde_json::from_str(r#"{"filesystem":{"name":"x","type":"EVENT_TYPE_CREATE"}}"#)
                .unwrap();
        match e {
            WatchDirResponse::Filesystem(ev) => assert_eq!(ev.event_type, EventType::Create),
            other => panic!("unexpected {other:?}"),
        }
        let req = WatchDirRequest {
            path: "/tmp".into(),
            ..Default::default()
        };
        assert_eq!(serde_json::to_string(&req).unwrap(), r#"{"path":"/tmp"}"#);
    }
}
