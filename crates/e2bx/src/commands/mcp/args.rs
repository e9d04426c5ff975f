//! `e2bx mcp`'s flags (clap) and its config file: the limits, the transport, and which
//! world each MCP session gets. The config file is JSON; the conversation-provider keys are
//! accepted in our snake_case and exactly as the `sandbox@1` TypeScript plugin writes
//! them (`apiKey`, `apiUrl`, `domain`, `template`, `timeoutSeconds`, `domainAllowlist`,
//! `allowOpenEgress`). Flags win over the file.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

const AFTER_HELP: &str = "\
Tools: bash, read_file, write_file, edit_file, list_dir, search, terminal_start,
terminal_write, terminal_read, terminal_close (terminals need a backend with terminals:
not --provider).

Worlds (one per MCP session; a session never sees another's sandbox, processes or
terminals):
  default        a fresh E2B sandbox per session (E2B_API_KEY), or without E2B_API_KEY a
                 sandbox of the embedded emulator; deleted when the session ends.
                 With --sandbox ID|NAME every session works in that sandbox (kept).
  --local DIR    this machine: file tools see DIR as `/` (links cannot leave it); bash and
                 terminals run as you with DIR as cwd (not confined: use a sandbox for
                 untrusted agents). Sessions share DIR's files.
  --provider P   a sandbox@1 conversation sandbox (e2b or local), one per session, or the
                 one named by --conversation NAME, found again (resumed if paused) by a
                 later session or server

Limits: every call ends after --timeout (bash may ask for less); output is capped at
--max-output bytes per stream, cut on a UTF-8 boundary. A cancelled call
(notifications/cancelled) and a session that goes away kill what they started.

Agent configuration (stdio):  {\"command\": \"e2bx\", \"args\": [\"mcp\"]}
Streamable HTTP:              e2bx mcp --http 127.0.0.1:8765  ->  http://127.0.0.1:8765/mcp";

/// `e2bx mcp`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct McpArgs {
    /// Serve streamable HTTP on ADDR (path /mcp) instead of stdio; port 0 picks one (the
    /// address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// This machine's directory DIR as the world (files rooted at DIR).
    #[arg(long, value_name = "DIR", conflicts_with = "provider")]
    pub local: Option<PathBuf>,
    /// A conversation-sandbox provider (sandbox@1) as the world.
    #[arg(long, value_enum, value_name = "P")]
    pub provider: Option<ProviderKind>,
    /// With --provider: the conversation every session joins (created once, found again
    /// and resumed later); without it each session gets its own, destroyed at its end.
    #[arg(long, value_name = "NAME", requires = "provider")]
    pub conversation: Option<String>,
    /// Where --provider keeps its state (conversation names; the local provider's
    /// sandboxes). Default: $XDG_STATE_HOME/e2bx/mcp or ~/.local/state/e2bx/mcp.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// JSON config file (keys: timeout, max_output, and the provider's keys).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Longest a call may run, in seconds (default 120).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Bytes of output kept per stream and per call (default 65536).
    #[arg(long, value_name = "BYTES")]
    pub max_output: Option<usize>,
    /// HTTP: end a session (and its world) after this many seconds without a request
    /// (default 1800); a client that vanished without ending its session is cleaned up so.
    #[arg(long, value_name = "SECS")]
    pub idle: Option<u64>,
    /// When a session ends, leave the background jobs that bash commands started (they
    /// are killed by default).
    #[arg(long)]
    pub keep_background: bool,
}

/// The conversation-sandbox providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    /// E2B sandboxes (`sandbox-e2b`), configured from the config file and E2B_API_KEY.
    E2b,
    /// One directory per conversation on this machine (no isolation).
    Local,
}
