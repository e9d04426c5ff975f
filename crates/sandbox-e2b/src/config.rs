//! [`SandboxConfig`]: the deployment config of `sandbox@1` on E2B, strict (unknown keys
//! are errors naming the key), loadable from JSON, each bad value one English error
//! naming the key and the allowed range.

use std::time::Duration;

use e2b_core::Secret;
use exec_world::sandbox::validate::hostname;

/// Smallest `timeout_seconds`.
pub const MIN_TIMEOUT_SECONDS: u64 = 60;
/// Largest `timeout_seconds` (24 h, E2B's longest run).
pub const MAX_TIMEOUT_SECONDS: u64 = 86_400;

impl TryFrom<serde_json::Value> for SandboxConfig {
    type Error = ConfigError;

    fn try_from(value: serde_json::Value) -> Result<Self, Self::Error> {
        SandboxConfig::from_value(value)
    }
}

/// The keys of the JSON form.
pub const KEYS: [&str; 7] = [
    "api_key",
    "template",
    "api_url",
    "domain",
    "timeout_seconds",
    "domain_allowlist",
    "allow_open_egress",
];

/// A config value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The JSON did not parse, or named an unknown key (the message names it).
    #[error("sandbox-e2b config: {0}")]
    Parse(String),
    /// A value is out of its range or malformed.
    #[error("sandbox-e2b config: `{key}` {rule}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What it must be (and what it was, when that is not a secret).
        rule: String,
    },
}

/// The provider's deployment config.
///
/// ```
/// let cfg = sandbox_e2b::SandboxConfig::from_json(
///     r#"{"api_key": "e2b_x", "template": "capybara-sandbox", "timeout_seconds": 600}"#,
/// ).expect("valid");
/// assert_eq!(cfg.api_url(), "https://api.e2b.app");
/// assert!(!format!("{cfg:?}").contains("e2b_x"));
/// let err = sandbox_e2b::SandboxConfig::from_json(r#"{"api_key":"k","template":"t","colour":1}"#)
///     .expect_err("unknown key");
/// assert!(err.to_string().contains("colour"));
/// ```
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(try_from = "serde_json::Value")]
pub struct SandboxConfig {
    /// The E2B API key (secret: `Debug` prints `<redacted>`).
    pub api_key: Secret,
    /// Template name or id (user `sandbox`, `/workspace`, `/skills`, `/opt/capybara`).
    pub template: String,
    /// Control-plane URL; `None` = `https://api.<domain>`.
    pub api_url: Option<String>,
    /// Sandbox domain (default `e2b.app`); a domain the API returns for a sandbox wins.
    pub domain: String,
    /// Sandbox timeout in seconds (60..=86400, default 3600); at expiry E2B pauses it.
    pub timeout_seconds: u64,
    /// E2B supports per-domain egress allowlists (default true); when false `allowlist`
    /// degrades to `none` with a warning.
    pub domain_allowlist: bool,
    /// Allow `egress = open` (default false).
    pub allow_open_egress: bool,
    /// Test and self-hosting hook, not in JSON: one URL for every sandbox's envd
    /// (routed by the `E2b-Sandbox-Id` header), e.g. the emulator's.
    pub sandbox_url: Option<String>,
    /// Not in JSON: the keep-alive interval asked of envd on command streams (envd's
    /// `Keepalive-Ping-Interval`); `None` = e2b-core's default (50 s), under the idle
    /// timeout of proxies between here and the sandbox.
    pub keepalive_interval: Option<Duration>,
}

impl SandboxConfig {
    /// A config with the defaults.
    pub fn new(api_key: impl Into<Secret>, template: impl Into<String>) -> SandboxConfig {
        SandboxConfig {
            api_key: api_key.into(),
            template: template.into(),
            api_url: None,
            domain: "e2b.app".into(),
            timeout_seconds: 3600,
            domain_allowlist: true,
            allow_open_egress: false,
            sandbox_url: None,
            keepalive_interval: None,
        }
    }

    /// Parses and validates JSON (keys in snake_case). An unknown key, a value of the
    /// wrong type or out of range is an error naming the key.
    pub fn from_json(text: &str) -> Result<SandboxConfig, ConfigError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        SandboxConfig::from_value(value)
    }

    /// Validates an already parsed JSON value (what `Deserialize` uses, so the config
    /// can sit inside a larger serde config).
    pub fn from_value(value: serde_json::Value) -> Result<SandboxConfig, ConfigError> {
        let serde_json::Value::Object(map) = value else {
            return Err(ConfigError::Parse(
                "the config must be a JSON object".into(),
            ));
        };
        let string = |key: &'static str| -> Result<Option<String>, ConfigError> {
            match map.get(key) {
                None => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(ConfigError::Invalid {
                    key,
                    rule: "must be a string".into(),
                }),
            }
        };
        let boolean = |key: &'static str| -> Result<Option<bool>, ConfigError> {
            match map.get(key) {
                None => Ok(None),
                Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(ConfigError::Invalid {
                    key,
                    rule: "must be true or false".into(),
                }),
            }
        };
        for key in map.keys() {
            if !KEYS.contains(&key.as_str()) {
                return Err(ConfigError::Parse(format!(
                    "unknown key `{}` (known keys: {})",
                    key.chars().take(100).collect::<String>(),
                    KEYS.join(", ")
                )));
            }
        }
        let required = |key: &'static str, v: Option<String>| {
            v.ok_or(ConfigError::Invalid {
                key,
                rule: "is required".into(),
            })
        };
        let mut cfg = SandboxConfig::new(
            required("api_key", string("api_key")?)?,
            required("template", string("template")?)?,
        );
        cfg.api_url = string("api_url")?;
        if let Some(d) = string("domain")? {
            cfg.domain = d;
        }
        if let Some(t) = map.get("timeout_seconds") {
            cfg.timeout_seconds = t.as_u64().ok_or_else(|| ConfigError::Invalid {
                key: "timeout_seconds",
                rule: format!(
                    "must be a whole number of seconds between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS}"
                ),
            })?;
        }
        if let Some(b) = boolean("domain_allowlist")? {
            cfg.domain_allowlist = b;
        }
        if let Some(b) = boolean("allow_open_egress")? {
            cfg.allow_open_egress = b;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value; the first bad one is the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, rule: String| Err(ConfigError::Invalid { key, rule });
        if self.api_key.expose().trim().is_empty() {
            return bad("api_key", "is required and must not be empty".into());
        }
        if self.template.trim().is_empty() {
            return bad("template", "is required and must not be empty".into());
        }
        if !hostname(&self.domain, true) {
            return bad(
                "domain",
                format!(
                    "must be a lowercase hostname such as e2b.app (got {:?})",
                    self.domain.chars().take(100).collect::<String>()
                ),
            );
        }
        if !(MIN_TIMEOUT_SECONDS..=MAX_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            return bad(
                "timeout_seconds",
                format!(
                    "must be between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS} seconds (got {})",
                    self.timeout_seconds
                ),
            );
        }
        for (key, url) in [
            ("api_url", self.api_url.as_deref()),
            ("sandbox_url", self.sandbox_url.as_deref()),
        ] {
            if let Some(u) = url {
                let ok = url::Url::parse(u)
                    .map(|p| matches!(p.scheme(), "http" | "https") && p.host().is_some())
                    .unwrap_or(false);
                if !ok {
                    return bad(key, "must be an http:// or https:// URL".into());
                }
            }
        }
        Ok(())
    }

    /// The control-plane URL in use.
    pub fn api_url(&self) -> String {
        self.api_url
            .clone()
            .unwrap_or_else(|| format!("https://api.{}", self.domain))
    }

    /// The sandbox timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<SandboxConfig, ConfigError> {
        SandboxConfig::from_json(&format!(
            r#"{{"api_key":"e2b_secret","template":"t"{extra}}}"#
        ))
    }

    #[test]
    fn defaults_and_overrides() {
        let c = parse("").expect("defaults");
        assert_eq!(
            (
                c.domain.as_str(),
                c.timeout_seconds,
                c.domain_allowlist,
                c.allow_open_egress
            ),
            ("e2b.app", 3600, true, false)
        );
        assert_eq!(c.api_url(), "https://api.e2b.app");
        let c = parse(r#","domain":"e2b.example.org","api_url":"http://127.0.0.1:3000","timeout_seconds":60,"domain_allowlist":false,"allow_open_egress":true"#)
            .expect("overrides");
        assert_eq!(c.api_url(), "http://127.0.0.1:3000");
        assert!(!c.domain_allowlist && c.allow_open_egress);
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let cases = [
            (r#","colour":1"#, "colour"),
            (
                r#","timeout_seconds":59"#,
                "`timeout_seconds` must be between 60 and 86400",
            ),
            (
                r#","timeout_seconds":86401"#,
                "`timeout_seconds` must be between 60 and 86400",
            ),
            (
                r#","domain":"E2B.app""#,
                "`domain` must be a lowercase hostname",
            ),
            (r#","domain":"localhost""#, "`domain`"),
            (r#","api_url":"ftp://x""#, "`api_url` must be an http"),
            (
                r#","timeout_seconds":"1""#,
                "`timeout_seconds` must be a whole number",
            ),
            (
                r#","timeout_seconds":-5"#,
                "`timeout_seconds` must be a whole number",
            ),
            (
                r#","domain_allowlist":"yes""#,
                "`domain_allowlist` must be true or false",
            ),
        ];
        for (extra, want) in cases {
            let e = parse(extra).expect_err(extra).to_string();
            assert!(e.contains(want), "{extra}: {e}");
            assert!(!e.contains("e2b_secret"), "{e}");
        }
        let e = SandboxConfig::from_json(r#"{"template":"t"}"#).expect_err("no key");
        assert!(e.to_string().contains("api_key"), "{e}");
        let e = SandboxConfig::from_json(r#"{"api_key":"","template":"t"}"#).expect_err("empty");
        assert!(e.to_string().contains("`api_key` is required"), "{e}");
        let e = SandboxConfig::from_json(r#"{"api_key":"k"}"#).expect_err("no template");
        assert!(e.to_string().contains("template"), "{e}");
    }

    #[test]
    fn deserializes_inside_a_larger_config() {
        #[derive(serde::Deserialize)]
        struct Outer {
            #[serde(rename = "sandbox-e2b")]
            sandbox: SandboxConfig,
        }
        let o: Outer = serde_json::from_str(r#"{"sandbox-e2b":{"api_key":"k","template":"t"}}"#)
            .expect("valid");
        assert_eq!(o.sandbox.template, "t");
        let e = serde_json::from_str::<Outer>(
            r#"{"sandbox-e2b":{"api_key":"k","template":"t","x":1}}"#,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("unknown key `x`"), "{e}");
    }

    #[test]
    fn debug_redacts_the_key() {
        let c = parse("").expect("valid");
        let d = format!("{c:?}");
        assert!(!d.contains("e2b_secret") && d.contains("redacted"), "{d}");
    }
}
