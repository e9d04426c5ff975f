//! The resolved settings of `e2bx mcp`: flags over the JSON config file over defaults.
//!
//! The file is one flat JSON object. Our keys: `timeout` and `idle` (seconds), `max_output` (bytes),
//! `keep_background`, `conversation`, `state_dir`. The conversation provider's keys, in
//! our snake_case or in the `sandbox@1` plugin's camelCase: `api_key`/`apiKey`,
//! `api_url`/`apiUrl`, `domain`, `template`, `timeout_seconds`/`timeoutSeconds`,
//! `domain_allowlist`/`domainAllowlist`, `allow_open_egress`/`allowOpenEgress`. An unknown
//! key is an error naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::args::McpArgs;
use crate::error::{CliError, CliResult};

/// Default [`Settings::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default [`Settings::idle`].
pub const DEFAULT_IDLE: Duration = Duration::from_secs(1800);
/// Default [`Settings::max_output`].
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// The provider keys: (plugin camelCase, our snake_case).
const PROVIDER_KEYS: [(&str, &str); 7] = [
    ("apiKey", "api_key"),
    ("apiUrl", "api_url"),
    ("domain", "domain"),
    ("template", "template"),
    ("timeoutSeconds", "timeout_seconds"),
    ("domainAllowlist", "domain_allowlist"),
    ("allowOpenEgress", "allow_open_egress"),
];
const OWN_KEYS: [&str; 6] = [
    "timeout",
    "idle",
    "max_output",
    "keep_background",
    "conversation",
    "state_dir",
];

/// What the server runs with. `Debug` shows the provider's key names, never their values
/// (the API key is among them).
#[derive(Clone)]
pub struct Settings {
    /// The longest any call may take.
    pub timeout: Duration,
    /// Bytes kept per output stream.
    pub max_output: usize,
    /// HTTP: how long a session may go without a request.
    pub idle: Duration,
    /// Leave background jobs of bash commands running.
    pub keep_background: bool,
    /// The conversation every session joins (`--provider`).
    pub conversation: Option<String>,
    /// Where `--provider` keeps state.
    pub state_dir: PathBuf,
    /// The provider's keys from the file, in snake_case (secrets included: never printed).
    pub provider: Map<String, Value>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("timeout", &self.timeout)
            .field("max_output", &self.max_output)
            .field("idle", &self.idle)
            .field("keep_background", &self.keep_background)
            .field("conversation", &self.conversation)
            .field("state_dir", &self.state_dir)
            .field("provider_keys", &self.provider.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Settings {
    /// Flags over the file named by `--config` over the defaults.
    pub fn resolve(a: &McpArgs) -> CliResult<Settings> {
        let file = match &a.config {
            Some(p) => read_file(p)?,
            None => Map::new(),
        };
        Self::from_parts(a, file)
    }

    fn from_parts(a: &McpArgs, file: Map<String, Value>) -> CliResult<Settings> {
        let (own, provider) = split_keys(file)?;
        let secs = |k: &str| -> CliResult<Option<u64>> {
            match own.get(k) {
                None => Ok(None),
                Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                    CliError::msg(format!("mcp config: `{k}` must be a whole number"))
                }),
            }
        };
        let timeout = a
            .timeout
            .or(secs("timeout")?)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        if timeout.is_zero() {
            return Err(CliError::msg("mcp: the timeout must be at least 1 second"));
        }
        let idle = a
            .idle
            .or(secs("idle")?)
            .map_or(DEFAULT_IDLE, Duration::from_secs);
        let max_output = match a.max_output {
            Some(n) => n,
            None => secs("max_output")?.map_or(DEFAULT_MAX_OUTPUT, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
        };
        let keep_background = a.keep_background
            || match own.get("keep_background") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(CliError::msg(
                        "mcp config: `keep_background` must be true or false",
                    ));
                }
            };
        let string = |k: &str| -> CliResult<Option<String>> {
            match own.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(CliError::msg(format!("mcp config: `{k}` must be a string"))),
            }
        };
        let conversation = a.conversation.clone().or(string("conversation")?);
        let state_dir = match (&a.state_dir, string("state_dir")?) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => default_state_dir()?,
        };
        Ok(Settings {
            timeout,
            max_output,
            idle,
            keep_background,
            conversation,
            state_dir,
            provider,
        })
    }
}

fn read_file(p: &Path) -> CliResult<Map<String, Value>> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| CliError::msg(format!("cannot read the mcp config {}: {e}", p.display())))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CliError::msg(format!(
            "mcp config {}: must be a JSON object",
            p.display()
        ))),
        Err(e) => Err(CliError::msg(format!("mcp config {}: {e}", p.display()))),
    }
}

/// Our keys, and the provider's keys renamed to snake_case; an unknown key or one given
/// in both spellings is an error naming it.
fn split_keys(file: Map<String, Value>) -> CliResult<(Map<String, Value>, Map<String, Value>)> {
    let (mut own, mut provider) = (Map::new(), Map::new());
    for (k, v) in file {
        if OWN_KEYS.contains(&k.as_str()) {
            own.insert(k, v);
            continue;
        }
        let Some((_, snake)) = PROVIDER_KEYS
            .iter()
            .find(|(camel, snake)| *camel == k || *snake == k)
        else {
            let known: Vec<&str> = OWN_KEYS
                .iter()
                .copied()
                .chain(PROVIDER_KEYS.iter().map(|(c, _)| *c))
                .collect();
            return Err(CliError::msg(format!(
                "mcp config: unknown key `{}` (known keys: {})",
                k.chars().take(100).collect::<String>(),
                known.join(", ")
            )));
        };
        if provider.insert((*snake).to_owned(), v).is_some() {
            return Err(CliError::msg(format!(
                "mcp config: `{snake}` is given twice (once in camelCase)"
            )));
        }
    }
    Ok((own, provider))
}

fn default_state_dir() -> CliResult<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("e2bx").join("mcp"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/e2bx/mcp")),
        None => Err(CliError::msg(
            "mcp: neither XDG_STATE_HOME nor HOME is set; pass --state-dir",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(extra: &[&str]) -> McpArgs {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: McpArgs,
        }
        let mut v = vec!["t", "--state-dir", "/s"];
        v.extend_from_slice(extra);
        T::try_parse_from(v).expect("parses").a
    }

    fn obj(text: &str) -> Map<String, Value> {
        match serde_json::from_str(text).expect("json") {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn plugin_keys_are_accepted_in_both_spellings() {
        let s = Settings::from_parts(
            &args(&[]),
            obj(r#"{"apiKey":"k","template":"t","timeoutSeconds":600,"domainAllowlist":false,
                    "allowOpenEgress":true,"apiUrl":"http://127.0.0.1:1","domain":"e2b.app","timeout":7}"#),
        )
        .expect("valid");
        assert_eq!(s.timeout, Duration::from_secs(7));
        assert_eq!(s.provider["api_key"], "k");
        assert_eq!(s.provider["timeout_seconds"], 600);
        assert_eq!(s.provider["allow_open_egress"], true);
        let shown = format!("{s:?}");
        assert!(
            shown.contains("api_key") && !shown.contains("\"k\""),
            "{shown}"
        );
        let s = Settings::from_parts(&args(&[]), obj(r#"{"api_key":"k","template":"t"}"#))
            .expect("snake case");
        assert_eq!(s.provider["template"], "t");
    }

    #[test]
    fn flags_win_and_bad_keys_are_named() {
        let s = Settings::from_parts(&args(&["--timeout", "3"]), obj(r#"{"timeout":9}"#))
            .expect("valid");
        assert_eq!(s.timeout, Duration::from_secs(3));
        let msg = |e| match e {
            CliError::Message(m) => m,
            CliError::Exit(c) => format!("exit {c}"),
        };
        let e = msg(Settings::from_parts(&args(&[]), obj(r#"{"colour":1}"#)).expect_err("unknown"));
        assert!(e.contains("`colour`"), "{e}");
        let e = msg(
            Settings::from_parts(&args(&[]), obj(r#"{"apiKey":"a","api_key":"b"}"#))
                .expect_err("twice"),
        );
        assert!(e.contains("api_key"), "{e}");
    }
}
