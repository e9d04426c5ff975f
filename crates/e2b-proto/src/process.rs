//! `process.Process` messages (envd `spec/process/process.proto`) as protobuf-JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::json::{bytes_b64, is_default, proto_enum};

/// Connect procedure paths of the process service.
pub mod paths {
    /// Server stream: start a process.
    pub const START: &str = "/process.Process/Start";
    /// Server stream: attach to a running process.
    pub const CONNECT: &str = "/process.Process/Connect";
    /// Unary: list running processes.
    pub const LIST: &str = "/process.Process/List";
    /// Unary: write to stdin or the PTY.
    pub const SEND_INPUT: &str = "/process.Process/SendInput";
    /// Unary: SIGTERM or SIGKILL.
    pub const SEND_SIGNAL: &str = "/process.Process/SendSignal";
    /// Unary: resize the PTY.
    pub const UPDATE: &str = "/process.Process/Update";
    /// Unary: close stdin.
    pub const CLOSE_STDIN: &str = "/process.Process/CloseStdin";
    /// Client stream (unused by the SDKs).
    pub const STREAM_INPUT: &str = "/process.Process/StreamInput";
}

/// An empty message (`{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// What to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessConfig {
    /// The program.
    #[serde(default)]
    pub cmd: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory (resolved against the user's home when relative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Terminal size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    /// Columns.
    #[serde(default, skip_serializing_if = "is_default")]
    pub cols: u32,
    /// Rows.
    #[serde(default, skip_serializing_if = "is_default")]
    pub rows: u32,
}

/// PTY request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pty {
    /// Size of the terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
}

/// Selects a process by pid or tag (a protobuf `oneof`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessSelector {
    /// By pid.
    Pid(u32),
    /// By tag.
    Tag(String),
}

/// Input for a process (a protobuf `oneof`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessInput {
    /// Bytes for the stdin pipe.
    Stdin(#[serde(with = "bytes_b64")] Vec<u8>),
    /// Bytes for the PTY.
    Pty(#[serde(with = "bytes_b64")] Vec<u8>),
}

/// A running process as `List` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    /// The configuration it was started with.
    #[serde(default)]
    pub config: ProcessConfig,
    /// Its pid.
    #[serde(default, skip_serializing_if = "is_default")]
    pub pid: u32,
    /// Its tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

proto_enum! {
    /// Signals envd can send.
    Signal {
        /// `SIGNAL_UNSPECIFIED`.
        #[default]
        Unspecified = 0 => "SIGNAL_UNSPECIFIED",
        /// `SIGNAL_SIGTERM`.
        Sigterm = 15 => "SIGNAL_SIGTERM",
        /// `SIGNAL_SIGKILL`.
        Sigkill = 9 => "SIGNAL_SIGKILL",
    }
}

/// `start` event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEvent {
    /// The pid envd assigned (the real pid of the spawned program).
    #[serde(default, skip_serializing_if = "is_default")]
    pub pid: u32,
}

/// `data` event: one chunk of output (a protobuf `oneof`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DataEvent {
    /// stdout bytes.
    Stdout(#[serde(with = "bytes_b64")] Vec<u8>),
    /// stderr bytes.
    Stderr(#[serde(with = "bytes_b64")] Vec<u8>),
    /// PTY bytes.
    Pty(#[serde(with = "bytes_b64")] Vec<u8>),
}

/// `end` event. Zero values are omitted on the wire (`exitCode` 0, `exited` false).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    /// Exit code; -1 when killed by a signal.
    #[serde(default, skip_serializing_if = "is_default", alias = "exit_code")]
    pub exit_code: i32,
    /// True when the process exited normally.
    #[serde(default, skip_serializing_if = "is_default")]
    pub exited: bool,
    /// Go's `ProcessState.String()`: `exit status N` or `signal: killed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Set when the outcome is not a clean exit 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A process event (a protobuf `oneof`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessEvent {
    /// The process started.
    Start(StartEvent),
    /// Output.
    Data(DataEvent),
    /// The process ended.
    End(EndEvent),
    /// Nothing happened for a while.
    Keepalive(Empty),
}

/// `Start` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRequest {
    /// What to run.
    #[serde(default)]
    pub process: ProcessConfig,
    /// Allocate a PTY of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    /// Free-form tag usable as a selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Open a stdin pipe; absent means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
}

/// `Start` and `Connect` stream messages: `{"event": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventResponse {
    /// The event.
    pub event: ProcessEvent,
}

/// `Connect` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// Which process.
    pub process: ProcessSelector,
}

/// `List` response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    /// Running processes; omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessInfo>,
}

/// `SendInput` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInputRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<ProcessInput>,
}

/// `SendSignal` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSignalRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The signal.
    #[serde(default, skip_serializing_if = "is_default")]
    pub signal: Signal,
}

/// `Update` request (PTY resize).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The new PTY size; absent is a no-op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

/// `CloseStdin` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseStdinRequest {
    /// Which process.
    pub process: ProcessSelector,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_event_omits_zero_values() {
        let ok = EventResponse {
            event: ProcessEvent::End(EndEvent {
                exited: true,
                status: "exit status 0".into(),
                ..Default::default()
            }),
        };
        assert_eq!(
            serde_json::to_string(&ok).unwrap(),
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#
        );
        let killed: EventResponse = serde_json::from_str(
            r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#,
        )
        .unwrap();
        match killed.event {
            ProcessEvent::End(e) => {
                assert_eq!(e.exit_code, -1);
                assert!(!e.exited);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn documented_start_request_bytes() {
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-l".into(), "-c".into(), "echo hi".into()],
                ..Default::default()
            },
            stdin: Some(false),
            ..Default::default()
        };
        let json = serde_json::to_string(&req).unwrap();
        assert_eq!(
            json,
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}"#
        );
        assert_eq!(json.len(), 74);
    }

    #[test]
    fn events_data_keepalive_and_signals() {
        let data: EventResponse =
            serde_json::from_str(r#"{"event":{"data":{"stdout":"aGkK"}}}"#).unwrap();
        assert_eq!(
            data.event,
            ProcessEvent::Data(DataEvent::Stdout(b"hi\n".to_vec()))
        );
        let ka: EventResponse = serde_json::from_str(r#"{"event":{"keepalive":{}}}"#).unwrap();
        assert_eq!(ka.event, ProcessEvent::Keepalive(Empty {}));
        let sig: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":7},"signal":9}"#).unwrap();
        assert_eq!(sig.signal, Signal::Sigkill);
        assert_eq!(
            serde_json::to_string(&sig).unwrap(),
            r#"{"process":{"pid":7},"signal":"SIGNAL_SIGKILL"}"#
        );
        let empty: ListResponse = serde_json::from_str("{}").unwrap();
        assert!(empty.processes.is_empty());
    }
}
