//! Wire types of the E2B protocol, shared by our client and by the emulator.
//!
//! * [`control`]: the control-plane REST API (`/sandboxes`, `/v2/sandboxes`, ...).
//! * [`process`] and [`filesystem`]: envd's Connect services as protobuf-JSON messages.
//! * [`envelope`]: Connect streaming envelopes and end-of-stream trailers.
//! * [`connect`]: Connect error codes and their HTTP statuses.
//! * [`signal`]: Go's signal names as envd reports them, one table for the workspace.
//! * [`snapshot`] and [`volume`]: snapshots, fork and team volumes (control plane and
//!   volume content API).
//! * [`wire`] and [`process_wire`]: the binary codec (`application/proto`) of the
//!   process service's unary calls.
//! * [`json`]: serde helpers for protobuf-JSON (int64 as string, base64 bytes, omitted defaults).
//!
//! Field names follow protobuf-JSON (lowerCamelCase); default values are omitted when
//! serializing and accepted when absent, as connect-go and connect-es do.

pub mod connect;
pub mod control;
pub mod envelope;
pub mod filesystem;
pub mod json;
pub mod process;
pub mod process_wire;
pub mod signal;
pub mod snapshot;
pub mod volume;
pub mod wire;

/// The port envd listens on inside every sandbox; sent as `E2b-Sandbox-Port`.
pub const ENVD_PORT: u16 = 49983;
/// The envd version our emulator advertises (newest gates in the SDKs are below it).
pub const EMULATED_ENVD_VERSION: &str = "0.6.13";
/// Deprecated constant `clientID` the control plane still returns.
pub const CLIENT_ID: &str = "6532622b";

/// HTTP header names used on the wire.
pub mod headers {
    /// Control-plane API key.
    pub const API_KEY: &str = "X-API-KEY";
    /// envd access token (secured sandboxes).
    pub const ACCESS_TOKEN: &str = "X-Access-Token";
    /// Sandbox routing on the shared envd host.
    pub const SANDBOX_ID: &str = "E2b-Sandbox-Id";
    /// Port routing on the shared envd host.
    pub const SANDBOX_PORT: &str = "E2b-Sandbox-Port";
    /// Seconds between keepalive events on streaming RPCs.
    pub const KEEPALIVE_PING_INTERVAL: &str = "Keepalive-Ping-Interval";
    /// Connect protocol version header (always `1`).
    pub const CONNECT_PROTOCOL_VERSION: &str = "Connect-Protocol-Version";
    /// Connect deadline in milliseconds.
    pub const CONNECT_TIMEOUT_MS: &str = "Connect-Timeout-Ms";
    /// Pagination cursor on `GET /v2/sandboxes`.
    pub const NEXT_TOKEN: &str = "X-Next-Token";
    /// Count of matching running sandboxes on `GET /v2/sandboxes`.
    pub const TOTAL_RUNNING: &str = "X-Total-Running";
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
