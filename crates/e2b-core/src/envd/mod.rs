//! The envd client: Connect JSON RPCs (unary and server-streaming) of the process and
//! filesystem services, and the `/files` and `/health` HTTP routes. Reached through a
//! [`Sandbox`](crate::Sandbox) handle.

#[cfg(test)]
mod canned_tests;
pub(crate) mod conn;
mod event_decode;
mod files;
mod filesystem;
mod process;
mod stream;

pub use conn::basic_auth;
pub use files::{ByteStream, Download, FileOp, bytes_stream, file_signature, reader_stream};
pub use filesystem::WatchOptions;
pub use process::{StartProcess, StreamOptions};
pub use stream::{MessageStream, ProcessOutput, ProcessStream, WatchStream};
