//! Client configuration: API key, domain, URLs and timeouts, read from the environment like
//! the official SDKs do (`E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL`, `E2B_SANDBOX_URL`) and
//! adjustable with builder methods. Secrets live in [`Secret`], which never prints itself.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::proto::ENVD_PORT;

/// Default domain of E2B's cloud.
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// Default timeout of one request (the SDKs' `requestTimeoutMs`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Default TCP/TLS connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `Keepalive-Ping-Interval` asked of envd on streaming RPCs (the SDKs send 50 s);
/// with a stream idle timeout the interval asked is a third of it
/// ([`DEFAULT_STREAM_IDLE_TIMEOUT`]).
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(50);
/// Default stream idle timeout: a streaming RPC with no frame (not even a keep-alive) for
/// this long has lost envd (frozen, unreachable, a dead connection) and fails with
/// [`Error::Timeout`](crate::Error).
///
/// How the bound follows from envd's keep-alive: envd sends a keep-alive event on a quiet
/// stream every `Keepalive-Ping-Interval` seconds (90 s when the header is absent or not
/// a number: `defaultKeepAliveInterval` in envd's `internal/permissions/keepalive.go`), and
/// its ticker restarts at every data event, so on a healthy stream two frames are never
/// more than one interval apart. The host must learn of a frozen envd within 90 s (a
/// `wait` with no timeout errors, never blocks longer); at envd's own 90 s that is
/// impossible, so the client asks for a third of this bound, 20 s: 60 s of silence is
/// three keep-alives missed in a row, which a healthy envd does not do even in a loaded
/// sandbox, and 60 s plus the at most 20 s subprocess-e2b spends trying the tree kill
/// after the loss stays inside 90 s.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default sandbox lifetime asked for at create and connect (the SDKs' 300 s).
pub const DEFAULT_SANDBOX_TIMEOUT: Duration = Duration::from_secs(300);

/// Default of [`Config::with_http2`]: off. Against the emulator on plain http (one run,
/// `files-bench`, a loaded 2-core machine) HTTP/2 moved a 256 MiB write + read at about
/// a quarter of HTTP/1.1's speed (one connection, flow-controlled, for both directions
/// and the control calls) and was no faster on sequential or 64 concurrent execs.
pub const DEFAULT_HTTP2: bool = false;

/// What a disabled request timeout means: long enough never to matter.
const NO_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Domains served by E2B's shared envd host `sandbox.<domain>` (header routing).
const SHARED_HOST_DOMAINS: [&str; 4] = ["e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"];

/// A secret string (API key, envd access token). `Debug` prints `<redacted>`; there is no
/// `Display`, so it cannot end up in a message by accident. Cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(Arc::from(value.into()))
    }

    /// The secret value, for putting it on the wire. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret::new(value)
    }
}

/// How the client reaches E2B (or a compatible control plane and envd).
///
/// ```
/// use std::time::Duration;
/// use e2b_core::Config;
///
/// let cfg = Config::new()
///     .with_api_key("e2b_0123")
///     .with_api_url("http://127.0.0.1:3000")
///     .with_sandbox_url("http://127.0.0.1:3000")
///     .with_request_timeout(Duration::from_secs(5));
/// assert_eq!(cfg.request_timeout(), Duration::from_secs(5));
/// assert_eq!(cfg.resolved_api_url(), "http://127.0.0.1:3000");
/// assert!(!format!("{cfg:?}").contains("e2b_0123"));
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) api_key: Option<Secret>,
    pub(crate) domain: String,
    pub(crate) api_url: Option<String>,
    pub(crate) sandbox_url: Option<String>,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) stream_idle_timeout: Option<Duration>,
    pub(crate) transfer_idle_timeout: Option<Duration>,
    pub(crate) keepalive_interval: Duration,
    pub(crate) user_agent: String,
    pub(crate) http2: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// Defaults only; nothing is read from the environment.
    pub fn new() -> Self {
        Config {
            api_key: None,
            domain: DEFAULT_DOMAIN.to_owned(),
            api_url: None,
            sandbox_url: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            stream_idle_timeout: Some(DEFAULT_STREAM_IDLE_TIMEOUT),
            transfer_idle_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            user_agent: format!("e2b-rust-core/{}", env!("CARGO_PKG_VERSION")),
            http2: DEFAULT_HTTP2,
        }
    }

    /// Defaults overridden by `E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL` and
    /// `E2B_SANDBOX_URL` (empty values are ignored).
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`Config::from_env`] with a custom variable lookup (for tests and embedding).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut cfg = Self::new();
        if let Some(key) = get("E2B_API_KEY") {
            cfg.api_key = Some(Secret::new(key.trim()));
        }
        if let Some(d) = get("E2B_DOMAIN") {
            cfg.domain = d.trim().to_owned();
        }
        cfg.api_url = get("E2B_API_URL").map(|u| trim_url(&u));
        cfg.sandbox_url = get("E2B_SANDBOX_URL").map(|u| trim_url(&u));
        cfg
    }

    /// Set the API key (sent as `X-API-KEY`).
    pub fn with_api_key(mut self, key: impl Into<Secret>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Set the domain (default `e2b.app`).
    pub fn with_domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }

    /// Set the control-plane URL (default `https://api.<domain>`).
    pub fn with_api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(trim_url(&url.into()));
        self
    }

    /// Send every envd request to this URL (self-hosted, emulator); routing then relies on
    /// the `E2b-Sandbox-Id` header.
    pub fn with_sandbox_url(mut self, url: impl Into<String>) -> Self {
        self.sandbox_url = Some(trim_url(&url.into()));
        self
    }

    /// Timeout of every unary call, and of the handshake of streaming calls (default 60 s;
    /// zero disables it, as the SDKs' `requestTimeoutMs: 0`).
    pub fn with_request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = if t.is_zero() { NO_TIMEOUT } else { t };
        self
    }

    /// TCP and TLS connect timeout (default 10 s).
    pub fn with_connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Fail a streaming RPC (process output, watch) when no frame, not even a keepalive,
    /// arrives for this long. Default [`DEFAULT_STREAM_IDLE_TIMEOUT`] (60 s); `None` or
    /// zero waits forever (a frozen envd then hangs the stream). The keepalive interval
    /// asked of envd (`Keepalive-Ping-Interval`) is lowered to a third of it so a quiet
    /// but healthy stream never trips it.
    pub fn with_stream_idle_timeout(mut self, t: Option<Duration>) -> Self {
        self.stream_idle_timeout = t.filter(|d| !d.is_zero());
        self
    }

    /// Fail an upload or download when no bytes move for this long (default 60 s; `None`
    /// disables).
    pub fn with_transfer_idle_timeout(mut self, t: Option<Duration>) -> Self {
        self.transfer_idle_timeout = t.filter(|d| !d.is_zero());
        self
    }

    /// `Keepalive-Ping-Interval` asked of envd on streaming RPCs (default 50 s; whole
    /// seconds, at least 1).
    pub fn with_keepalive_interval(mut self, t: Duration) -> Self {
        self.keepalive_interval = t;
        self
    }

    /// HTTP/2 for every request (`true`: prior knowledge, as the Python SDK speaks to
    /// envd, which serves h2c; on `https` without falling back to HTTP/1.1; windows grow
    /// adaptively) or HTTP/1.1 on plain `http` and whatever TLS negotiates (ALPN) on
    /// `https` (`false`). A graceful `GOAWAY` never fails the next call; a read sent on a
    /// connection the server had dropped is sent once more (see `send_resending_stale` in
    /// `src/http.rs`). Default [`DEFAULT_HTTP2`].
    pub fn with_http2(mut self, on: bool) -> Self {
        self.http2 = on;
        self
    }

    /// The `User-Agent` header.
    pub fn with_user_agent(mut self, ua: impl Into<String>) -> Self {
        self.user_agent = ua.into();
        self
    }

    /// The API key, if any.
    pub fn api_key(&self) -> Option<&Secret> {
        self.api_key.as_ref()
    }

    /// The configured domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The sandbox URL override, if any.
    pub fn sandbox_url(&self) -> Option<&str> {
        self.sandbox_url.as_deref()
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The control-plane base URL: the override, else `https://api.<domain>`.
    pub fn resolved_api_url(&self) -> String {
        match &self.api_url {
            Some(u) => u.clone(),
            None => format!("https://api.{}", self.domain),
        }
    }

    /// The envd base URL used for RPCs and `/files` (`envdApiUrl`): the override, else
    /// `https://sandbox.<domain>` for E2B's own domains, else `https://49983-<id>.<domain>`.
    /// `sandbox_domain` is the `domain` of the create/connect answer when non-empty.
    pub fn envd_api_url(&self, sandbox_id: &str, sandbox_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.clone();
        }
        let domain = self.sandbox_domain(sandbox_domain);
        if SHARED_HOST_DOMAINS.contains(&domain) {
            format!("https://sandbox.{domain}")
        } else {
            format!("https://{ENVD_PORT}-{sandbox_id}.{domain}")
        }
    }

    /// The envd URL handed to third parties in signed URLs (`envdDirectUrl`): the
    /// override, else always `https://49983-<id>.<domain>`.
    pub fn envd_direct_url(&self, sandbox_id: &str, sandbox_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.clone();
        }
        let domain = self.sandbox_domain(sandbox_domain);
        format!("https://{ENVD_PORT}-{sandbox_id}.{domain}")
    }

    fn sandbox_domain<'a>(&'a self, sandbox_domain: Option<&'a str>) -> &'a str {
        sandbox_domain
            .filter(|d| !d.is_empty())
            .unwrap_or(&self.domain)
    }

    /// Whole seconds of keepalive interval for a stream with the given idle timeout.
    pub(crate) fn keepalive_secs(&self, idle: Option<Duration>) -> u64 {
        let base = self.keepalive_interval.as_secs().max(1);
        match idle {
            Some(idle) => base.min((idle.as_secs() / 3).max(1)),
            None => base,
        }
    }
}

fn trim_url(u: &str) -> String {
    u.trim().trim_end_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Config {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(move |k| pairs.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_env() {
        let c = env(&[]);
        assert!(c.api_key().is_none());
        assert_eq!(c.resolved_api_url(), "https://api.e2b.app");
        assert_eq!(c.request_timeout(), Duration::from_secs(60));
        let c = env(&[
            ("E2B_API_KEY", "e2b_abc"),
            ("E2B_DOMAIN", "example.org"),
            ("E2B_SANDBOX_URL", ""),
        ]);
        assert_eq!(c.api_key().map(Secret::expose), Some("e2b_abc"));
        assert_eq!(c.resolved_api_url(), "https://api.example.org");
        assert!(c.sandbox_url().is_none());
        let c = env(&[
            ("E2B_API_URL", "http://127.0.0.1:9/"),
            ("E2B_SANDBOX_URL", "http://127.0.0.1:8/"),
        ]);
        assert_eq!(c.resolved_api_url(), "http://127.0.0.1:9");
        assert_eq!(c.envd_api_url("iabc", None), "http://127.0.0.1:8");
        assert_eq!(
            c.envd_direct_url("iabc", Some("x.dev")),
            "http://127.0.0.1:8"
        );
    }

    #[test]
    fn envd_urls_follow_the_sdk_rules() {
        let c = Config::new();
        assert_eq!(c.envd_api_url("iabc", None), "https://sandbox.e2b.app");
        assert_eq!(c.envd_api_url("iabc", Some("")), "https://sandbox.e2b.app");
        assert_eq!(
            c.envd_api_url("iabc", Some("e2b.dev")),
            "https://sandbox.e2b.dev"
        );
        assert_eq!(
            c.envd_api_url("iabc", Some("self.example")),
            "https://49983-iabc.self.example"
        );
        assert_eq!(
            c.envd_direct_url("iabc", None),
            "https://49983-iabc.e2b.app"
        );
        let c = Config::new().with_domain("corp.local");
        assert_eq!(
            c.envd_api_url("iabc", None),
            "https://49983-iabc.corp.local"
        );
    }

    #[test]
    fn secrets_never_print() {
        let c = Config::new().with_api_key("e2b_deadbeef");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("deadbeef"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        assert_eq!(format!("{:?}", Secret::new("tok")), "<redacted>");
    }

    #[test]
    fn keepalive_fits_under_idle_timeout() {
        let c = Config::new();
        assert_eq!(c.keepalive_secs(None), 50);
        assert_eq!(c.keepalive_secs(Some(Duration::from_secs(10))), 3);
        assert_eq!(c.keepalive_secs(Some(DEFAULT_STREAM_IDLE_TIMEOUT)), 20);
        assert_eq!(c.keepalive_secs(Some(Duration::from_millis(300))), 1);
        let c = Config::new()
            .with_request_timeout(Duration::ZERO)
            .with_stream_idle_timeout(Some(Duration::ZERO));
        assert!(c.request_timeout() > Duration::from_secs(3600));
        assert_eq!(c.keepalive_secs(c.stream_idle_timeout), 50);
    }

    #[test]
    fn streams_have_an_idle_bound_by_default() {
        // A frozen envd must not hang a stream forever with the default configuration,
        // and a quiet healthy stream gets keepalives well inside the bound.
        let c = Config::new();
        let idle = c
            .stream_idle_timeout
            .expect("a default stream idle timeout");
        assert_eq!(idle, DEFAULT_STREAM_IDLE_TIMEOUT);
        assert!(c.keepalive_secs(Some(idle)) * 3 <= idle.as_secs());
        // Silence past the bound plus subprocess-e2b's bounded kill after the loss
        // (20 s) still tells a waiting host within 90 s.
        assert!(idle + Duration::from_secs(20) <= Duration::from_secs(90));
        let c = Config::from_lookup(|_| None);
        assert_eq!(c.stream_idle_timeout, Some(DEFAULT_STREAM_IDLE_TIMEOUT));
        assert_eq!(c.with_stream_idle_timeout(None).stream_idle_timeout, None);
    }
}
