//! Our own E2B client: the control-plane REST API, envd's Connect JSON services and its
//! `/files` routes, spoken with reqwest (rustls). The [`proto`] module holds the wire types,
//! shared with the `testing-fake` emulator.
//!
//! * [`Config`]: API key, domain, URLs, timeouts (from the environment or built).
//! * [`Client`]: the control plane (create, list, get, kill, set timeout, refresh, pause,
//!   connect/resume).
//! * [`Sandbox`]: a connected, cloneable handle; [`EnvdApi`] is the object-safe trait of its
//!   envd operations that adapters accept.
//! * [`Error`]: one typed error enum; [`world_error`] maps it to exec-world's one error.
//! * [`retry`]: which failures are retried, how often and after how long.
//! * [`lifecycle`]: the sandbox lifecycle owner, its shared handle, bring-your-own
//!   sandboxes, reconnect by name and opt-in keep-alive.

pub mod api;
pub mod config;
pub mod disposition;
pub mod envd;
pub mod error;
mod http;
pub mod lifecycle;
pub mod retry;
pub mod trusted_shell;
pub mod world_error;
pub use e2b_proto as proto;
pub mod sandbox;

pub use api::{
    CREATE_TOKEN_KEY, Client, ConnectOptions, CreateOptions, ForkOptions, ListPage, ListQuery,
    PauseOptions, SandboxStream, SnapshotPage, SnapshotQuery, VolumeContent,
};
pub use config::{Config, Secret};
pub use disposition::Disposition;
pub use envd::{
    ByteStream, Download, FileOp, MessageStream, ProcessOutput, ProcessStream, StartProcess,
    StreamOptions, WatchOptions, WatchStream, bytes_stream, file_signature, reader_stream,
};
pub use error::{Error, Surface};
pub use sandbox::{EnvdApi, Sandbox, SandboxParts};

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
