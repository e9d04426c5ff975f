//! Consumers written only against the `exec-world` traits: the bash tool, a terminal
//! session and the LSP-over-stdio bridge. They take `Arc<dyn Subprocess>` / `&dyn
//! Subprocess` (and `Fs` where files are involved), never a concrete backend, so they run
//! unchanged on this machine ([`exec_world::LocalSubprocess`]) or inside an E2B sandbox.
//!
//! - [`bash`]: [`BashTool`] runs a command string with cwd, env, timeout and an output cap.
//! - [`terminal`]: [`TerminalSession`] drives a PTY (keys, ring buffer, `read_until`).
//! - [`lsp`]: [`LspClient`] speaks JSON-RPC over a language server's stdio.
//! - `testing` (feature `testing`): the shared test functions every backend runs.

pub mod bash;
mod capture;
pub mod lsp;
pub mod terminal;

#[cfg(feature = "testing")]
pub mod testing;

pub use bash::{BashError, BashOutput, BashRequest, BashTool};
pub use capture::CapturedOutput;
pub use lsp::{LspClient, LspError, LspOptions};
pub use terminal::{Key, TerminalError, TerminalSession};

/// The README's example, compiled as a doctest so it cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
