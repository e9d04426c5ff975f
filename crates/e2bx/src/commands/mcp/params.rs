//! The tools' inputs: one struct per tool, deserialized from the call's arguments and
//! described to clients as JSON Schema (schemars through rmcp).

use std::collections::BTreeMap;

use rmcp::schemars;
use serde::Deserialize;

/// `bash`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bash {
    /// The command line, run by `bash -c` (or `sh -c`).
    pub command: String,
    /// Working directory (default: the world's home or root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before the command is killed (at most the server's --timeout, its default).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
}

/// `read_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// The file.
    pub path: String,
    /// First line to return, from 1 (default 1).
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many lines to return (default 2000).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `write_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The file (missing parent directories are created).
    pub path: String,
    /// Its whole new content.
    pub content: String,
}

/// `edit_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    /// The file.
    pub path: String,
    /// Exact text to replace; it must occur exactly once.
    pub old_string: String,
    /// The replacement.
    pub new_string: String,
}

/// `list_dir`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDir {
    /// The directory (default: the current one).
    #[serde(default)]
    pub path: Option<String>,
}

/// `search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// An extended regular expression (grep -E).
    pub pattern: String,
    /// File or directory to search recursively (default: the current directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub ignore_case: bool,
}

/// `terminal_start`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalStart {
    /// Program to run on the terminal (default: the user's shell).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Columns (default 120).
    #[serde(default)]
    pub cols: Option<u16>,
    /// Rows (default 40).
    #[serde(default)]
    pub rows: Option<u16>,
}

/// `terminal_write`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalWrite {
    /// The terminal id from terminal_start.
    pub id: String,
    /// Text typed as-is (control characters included, e.g. "\u0003" for Ctrl-C).
    pub input: String,
    /// Press Enter after the text.
    #[serde(default)]
    pub enter: bool,
}

/// `terminal_read`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalRead {
    /// The terminal id.
    pub id: String,
    /// Wait until this text appears, and return the output through it.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Milliseconds to wait: for `wait_for`, or else for the first new output (default 1000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `terminal_close`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalClose {
    /// The terminal id.
    pub id: String,
}
