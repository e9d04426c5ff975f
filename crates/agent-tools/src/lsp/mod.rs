//! A language-server bridge over stdio: spawns the server through
//! [`Subprocess`](exec_world::Subprocess) and speaks JSON-RPC 2.0 with `Content-Length`
//! framing both ways ([`framing`]), correlating concurrent requests by id, answering the
//! server's own requests ([`ServerRequestHandler`]) and surfacing notifications
//! ([`LspClient::subscribe`], [`LspClient::wait_for_diagnostics`]).

mod client;
mod connection;
mod error;
pub mod framing;
mod handler;
pub mod message;

pub use client::{LspClient, LspOptions, default_client_capabilities};
pub use error::LspError;
pub use framing::FrameError;
pub use handler::{DefaultHandler, ServerRequestHandler};
pub use message::{Notification, RequestId, ResponseError, ServerRequest};
