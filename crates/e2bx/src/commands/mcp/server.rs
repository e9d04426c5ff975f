//! The MCP server handler (rmcp): one [`McpSession`] per MCP session, holding that
//! session's world (opened on its first tool call) and terminals. The tool list with
//! JSON Schema inputs, dispatch, per-call timeout and cancellation (the request's token,
//! fired by `notifications/cancelled` or a lost connection), and the end of a session
//! (its terminals dropped, its world ended) live here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::Settings;
use super::params as p;
use super::tools::{Terminals, ToolResult, Tools};
use super::world::{Opener, World};
use crate::error::CliError;

/// What every session of one server shares.
pub struct Shared {
    opener: Opener,
    settings: Settings,
    next: AtomicU64,
    live: Mutex<HashMap<u64, Weak<SessionInner>>>,
    cleanups: TaskTracker,
}

impl Shared {
    /// Sessions opening worlds with `opener`.
    pub fn new(opener: Opener, settings: Settings) -> Arc<Shared> {
        Arc::new(Shared {
            opener,
            settings,
            next: AtomicU64::new(1),
            live: Mutex::new(HashMap::new()),
            cleanups: TaskTracker::new(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A new session.
    pub fn session(self: &Arc<Self>) -> McpSession {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(SessionInner {
            id,
            shared: self.clone(),
            world: OnceCell::new(),
            terminals: Mutex::new(Terminals::default()),
        });
        if let Ok(mut live) = self.live.lock() {
            live.insert(id, Arc::downgrade(&inner));
        }
        McpSession { inner }
    }

    /// Ends every session still open and waits for every session's cleanup.
    pub async fn shutdown(&self) {
        let open: Vec<Arc<SessionInner>> = match self.live.lock() {
            Ok(live) => live.values().filter_map(Weak::upgrade).collect(),
            Err(_) => Vec::new(),
        };
        for s in open {
            s.end().await;
        }
        self.cleanups.close();
        self.cleanups.wait().await;
    }
}

struct SessionInner {
    id: u64,
    shared: Arc<Shared>,
    world: OnceCell<Arc<World>>,
    terminals: Mutex<Terminals>,
}

impl SessionInner {
    /// Drops the terminals (their processes end) and ends the world.
    async fn end(&self) {
        if let Ok(mut t) = self.terminals.lock() {
            t.clear();
        }
        if let Some(w) = self.world.get() {
            w.end().await;
        }
    }
}

impl Drop for SessionInner {
    fn drop(&mut self) {
        if let Ok(mut live) = self.shared.live.lock() {
            live.remove(&self.id);
        }
        if let Ok(mut t) = self.terminals.lock() {
            t.clear();
        }
        let Some(world) = self.world.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.shared
                .cleanups
                .spawn_on(async move { world.end().await }, &rt);
        }
    }
}

/// One MCP session (the rmcp handler).
#[derive(Clone)]
pub struct McpSession {
    inner: Arc<SessionInner>,
}

const INSTRUCTIONS: &str = "An execution world (files, commands, terminals) in a sandbox or a directory. \
Run commands with bash; read_file/write_file/edit_file/list_dir/search for files; \
terminal_* for interactive programs. Output is capped; long commands time out.";

fn tool<T: rmcp::schemars::JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
) -> Tool {
    Tool::new(name, description, schema_for_type::<T>())
}

/// The names of [`tool_list`]'s tools.
const TOOL_NAMES: [&str; 10] = [
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "search",
    "terminal_start",
    "terminal_write",
    "terminal_read",
    "terminal_close",
];

/// The tools, in the order clients list them.
pub fn tool_list() -> Vec<Tool> {
    vec![
        tool::<p::Bash>(
            "bash",
            "Run a command line with bash -c. Returns JSON: exit_code, signal, timed_out, cancelled, stdout, stderr (each capped; *_truncated says when). A non-zero exit is not an error. Background jobs are killed when the command returns.",
        ),
        tool::<p::ReadFile>(
            "read_file",
            "Read a UTF-8 text file; lines are numbered like `cat -n`. offset (from 1) and limit select lines.",
        ),
        tool::<p::WriteFile>(
            "write_file",
            "Write a file's whole content (replacing it; parent directories are created).",
        ),
        tool::<p::EditFile>(
            "edit_file",
            "Replace the one exact occurrence of old_string with new_string; fails when old_string occurs 0 or several times.",
        ),
        tool::<p::ListDir>(
            "list_dir",
            "List a directory: one entry a line, directories with a trailing /, files with their size.",
        ),
        tool::<p::Search>(
            "search",
            "Search files for an extended regular expression (grep -rnIE): path:line:text lines, at most 1000.",
        ),
        tool::<p::TerminalStart>(
            "terminal_start",
            "Start a program (default: a shell) on a pseudo-terminal; returns its id.",
        ),
        tool::<p::TerminalWrite>(
            "terminal_write",
            "Type text into a terminal (enter: true presses Enter after it).",
        ),
        tool::<p::TerminalRead>(
            "terminal_read",
            "Read a terminal's new output: wait for wait_for to appear (or for any output) up to timeout_ms. Returns JSON: output, matched, timed_out, closed.",
        ),
        tool::<p::TerminalClose>("terminal_close", "End a terminal and every process in it."),
    ]
}

fn parse<T: DeserializeOwned>(
    tool: &str,
    args: Option<rmcp::model::JsonObject>,
) -> Result<T, String> {
    let v = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(v).map_err(|e| format!("{tool}: invalid arguments: {e}"))
}

impl McpSession {
    async fn world(&self) -> Result<Arc<World>, String> {
        let s = &self.inner;
        s.world
            .get_or_try_init(|| async {
                s.shared
                    .opener
                    .open(s.id)
                    .await
                    .map(Arc::new)
                    .map_err(|e| match e {
                        CliError::Message(m) => m,
                        CliError::Exit(code) => format!("opening the world failed (exit {code})"),
                    })
            })
            .await
            .cloned()
    }

    async fn run(
        &self,
        name: &str,
        args: Option<rmcp::model::JsonObject>,
        ct: &CancellationToken,
    ) -> ToolResult {
        let world = self.world().await?;
        let tools = Tools {
            world: &world,
            settings: &self.inner.shared.settings,
            terminals: &self.inner.terminals,
        };
        match name {
            "bash" => tools.bash(parse(name, args)?, ct).await,
            "read_file" => tools.read_file(parse(name, args)?).await,
            "write_file" => tools.write_file(parse(name, args)?).await,
            "edit_file" => tools.edit_file(parse(name, args)?).await,
            "list_dir" => tools.list_dir(parse(name, args)?, ct).await,
            "search" => tools.search(parse(name, args)?, ct).await,
            "terminal_start" => tools.terminal_start(parse(name, args)?).await,
            "terminal_write" => tools.terminal_write(parse(name, args)?).await,
            "terminal_read" => tools.terminal_read(parse(name, args)?, ct).await,
            "terminal_close" => tools.terminal_close(parse(name, args)?).await,
            other => Err(format!("unknown tool {other}")), // refused before: see call_tool
        }
    }
}

/// The newest protocol served: a session (`Mcp-Session-Id` on HTTP, the connection on
/// stdio) is what gives each client its own world, and the 2026-07-28 wire is sessionless
/// (every HTTP request would get a fresh world); its clients negotiate this one.
const NEWEST: ProtocolVersion = ProtocolVersion::V_2025_11_25;

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(NEWEST)
            .with_server_info(Implementation::new("e2bx", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !TOOL_NAMES.contains(&request.name.as_ref()) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {}", request.name),
                None,
            ));
        }
        let ct = context.ct.clone();
        let limit = self.inner.shared.settings.timeout;
        // bash enforces its own timeout (and kills on it); the bound here is for the rest,
        // with room for bash's termination grace.
        let bound = limit + agent_tools::bash::DEFAULT_GRACE + agent_tools::bash::KILL_BOUND;
        let name = request.name.to_string();
        // The tools that run commands or wait watch the token themselves (they kill what
        // they started, then return); the others are dropped at once (cancel-safe).
        let watches = matches!(
            name.as_str(),
            "bash" | "search" | "list_dir" | "terminal_read"
        );
        let r = tokio::select! {
            r = tokio::time::timeout(bound, self.run(&name, request.arguments, &ct)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!("{name}: timed out after {}s", limit.as_secs())),
            },
            () = ct.cancelled(), if !watches => Err(format!("{name}: cancelled")),
        };
        let result = match r {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_match_the_list() {
        let listed: Vec<String> = tool_list().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(listed, TOOL_NAMES);
        for t in tool_list() {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&serde_json::json!("object"))
            );
        }
    }
}
