//! The connection to one sandbox's envd: base URL, routing and auth headers, and
//! the two Connect call shapes (unary JSON and server-streaming envelopes).

use std::time::Duration;

use base64::Engine as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::event_decode::StreamMessage;
use super::stream::{MessageStream, message_stream};
use crate::config::{Config, Secret};
use crate::error::{Error, Surface};
use crate::http;
use crate::proto::connect::ConnectErrorBody;
use crate::proto::wire::{self, ProtoMessage};
use crate::proto::{ENVD_PORT, envelope, headers};
use crate::retry::{Idempotence, RetryPolicy};

/// Content type of unary Connect JSON.
pub(crate) const CT_JSON: &str = "application/json";
/// Content type of streaming Connect JSON.
pub(crate) const CT_CONNECT_JSON: &str = "application/connect+json";

/// Everything needed to talk to one sandbox's envd.
#[derive(Debug, Clone)]
pub(crate) struct EnvdConn {
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) direct_url: String,
    pub(crate) sandbox_id: String,
    pub(crate) access_token: Option<Secret>,
    pub(crate) envd_version: String,
    pub(crate) request_timeout: Duration,
    pub(crate) stream_idle_timeout: Option<Duration>,
    pub(crate) transfer_idle_timeout: Option<Duration>,
    pub(crate) cfg: Config,
    /// Retries of idempotent calls (unary reads, the download handshake).
    pub(crate) retry: RetryPolicy,
}

/// `Authorization: Basic base64("<user>:")`.
pub fn basic_auth(user: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

/// envd's version as semver; a leading `v` and a missing minor or patch are allowed, as
/// in the SDKs' lenient compares. `None` when unparsable. A pre-release orders before its
/// release (`0.4.0-rc1 < 0.4.0`), as with the SDKs' `compare-versions` and `packaging`.
pub(crate) fn parse_version(v: &str) -> Option<semver::Version> {
    let v = v.trim().trim_start_matches('v');
    [v.to_string(), format!("{v}.0"), format!("{v}.0.0")]
        .iter()
        .find_map(|candidate| semver::Version::parse(candidate).ok())
}

impl EnvdConn {
    /// Secrets to keep out of error messages.
    pub(crate) fn secrets(&self) -> Vec<&Secret> {
        self.access_token.iter().collect()
    }

    /// The typed error of an envd answer that is not a success (body read within the
    /// request timeout, secrets redacted).
    pub(crate) async fn error_of(&self, resp: reqwest::Response) -> Error {
        http::error_from(Surface::Envd, resp, self.request_timeout, &self.secrets()).await
    }

    /// True when the sandbox's envd is at least `min` (unknown versions count as new).
    pub(crate) fn envd_at_least(&self, (major, minor, patch): (u64, u64, u64)) -> bool {
        parse_version(&self.envd_version)
            .is_none_or(|v| v >= semver::Version::new(major, minor, patch))
    }

    /// The user to name on the wire: the chosen one, else `user` for envd < 0.4.0 (which
    /// has no default user), else none.
    pub(crate) fn effective_user<'a>(&self, user: Option<&'a str>) -> Option<&'a str> {
        match user {
            Some(u) => Some(u),
            None if !self.envd_at_least((0, 4, 0)) => Some("user"),
            None => None,
        }
    }

    /// A request to envd with the routing and token headers every envd call carries.
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base_url, path))
            .header(headers::SANDBOX_ID, &self.sandbox_id)
            .header(headers::SANDBOX_PORT, ENVD_PORT.to_string());
        if let Some(t) = &self.access_token {
            req = req.header(headers::ACCESS_TOKEN, t.expose());
        }
        req
    }

    pub(crate) fn rpc_request(
        &self,
        path: &str,
        user: Option<&str>,
        content_type: &str,
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .request(reqwest::Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .header(headers::CONNECT_PROTOCOL_VERSION, "1");
        if let Some(u) = user {
            req = req.header(reqwest::header::AUTHORIZATION, basic_auth(u));
        }
        req
    }

    fn send_error(&self, e: reqwest::Error, what: &'static str) -> Error {
        Error::from_reqwest(Surface::Envd, e, what, self.request_timeout)
    }

    /// A unary Connect call. `user` is sent as Basic auth when given (callers apply
    /// [`EnvdConn::effective_user`] for the RPCs that take a user).
    pub(crate) async fn unary<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
    ) -> Result<Resp, Error> {
        self.unary_once(path, req, user, false).await
    }

    /// One attempt of a unary call; `repeatable` lets a request that met a dropped pooled
    /// connection be sent again (see [`http::send_resending_stale`]).
    async fn unary_once<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
        repeatable: bool,
    ) -> Result<Resp, Error> {
        let body = serde_json::to_vec(req)
            .map_err(|e| Error::Config(format!("cannot encode the request: {e}")))?;
        let bytes = self
            .unary_bytes(path, user, CT_JSON, body, repeatable)
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::protocol(
                Surface::Envd,
                format!(
                    "undecodable {path} response ({e}): {}",
                    crate::error::snippet(&bytes, &self.secrets())
                ),
            )
        })
    }

    /// A unary call in the binary codec (`application/proto`), which envd serves beside
    /// JSON: for a call that carries bytes (`SendInput`), which then cross the wire as
    /// they are instead of as base64 in JSON. Errors come back as JSON either way.
    pub(crate) async fn unary_proto<Req: ProtoMessage, Resp: ProtoMessage>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
    ) -> Result<Resp, Error> {
        self.unary_proto_body(path, req.encode_proto(), user).await
    }

    /// [`EnvdConn::unary_proto`] of a request already encoded.
    pub(crate) async fn unary_proto_body<Resp: ProtoMessage>(
        &self,
        path: &str,
        body: Vec<u8>,
        user: Option<&str>,
    ) -> Result<Resp, Error> {
        let bytes = self
            .unary_bytes(path, user, wire::CONTENT_TYPE, body, false)
            .await?;
        Resp::decode_proto(&bytes).map_err(|e| {
            Error::protocol(Surface::Envd, format!("undecodable {path} response ({e})"))
        })
    }

    /// Sends one unary request with `body` in `content_type` and returns the body of its
    /// 200 answer in the same content type (anything else is the typed error).
    async fn unary_bytes(
        &self,
        path: &str,
        user: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
        repeatable: bool,
    ) -> Result<bytes::Bytes, Error> {
        let resp = self
            .rpc_request(path, user, content_type)
            .timeout(self.request_timeout)
            .body(body);
        let resp = if repeatable {
            http::send_resending_stale(resp).await
        } else {
            resp.send().await
        };
        let resp = resp.map_err(|e| self.send_error(e, "envd unary call"))?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(self.error_of(resp).await);
        }
        let ct = http::media_type(&resp);
        if ct != content_type {
            return Err(Error::protocol(
                Surface::Envd,
                format!("unexpected response content type {ct:?} for {path} (want {content_type})"),
            ));
        }
        resp.bytes()
            .await
            .map_err(|e| self.send_error(e, "envd unary response body"))
    }

    /// [`EnvdConn::unary`] for a call that can be repeated safely (reads, `Remove`):
    /// retried by the connection's [`RetryPolicy`].
    pub(crate) async fn unary_idempotent<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
    ) -> Result<Resp, Error> {
        self.retry
            .run(path, Idempotence::Idempotent, |_| {
                self.unary_once(path, req, user, true)
            })
            .await
    }

    /// The request of a server-streaming call: one enveloped message, streaming content
    /// type, `Keepalive-Ping-Interval` (lowered under the idle timeout) and
    /// `Connect-Timeout-Ms` when a deadline is given.
    pub(crate) fn stream_request<Req: Serialize + ?Sized>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
        deadline: Option<Duration>,
        idle: Option<Duration>,
    ) -> Result<reqwest::RequestBuilder, Error> {
        let json = serde_json::to_vec(req)
            .map_err(|e| Error::Config(format!("cannot encode the request: {e}")))?;
        let frame = envelope::encode(0, &json);
        let mut rb = self
            .rpc_request(path, user, CT_CONNECT_JSON)
            .header(
                headers::KEEPALIVE_PING_INTERVAL,
                self.cfg.keepalive_secs(idle).to_string(),
            )
            .body(frame);
        if let Some(d) = deadline.filter(|d| !d.is_zero()) {
            rb = rb.header(
                headers::CONNECT_TIMEOUT_MS,
                d.as_millis().max(1).to_string(),
            );
        }
        Ok(rb)
    }

    /// Open a server-streaming Connect call: send the enveloped request, check the status
    /// and content type within the handshake timeout, and return the decoded messages.
    /// `deadline` becomes `Connect-Timeout-Ms`.
    pub(crate) async fn server_stream<Req: Serialize + ?Sized, Resp: StreamMessage>(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
        deadline: Option<Duration>,
        idle: Option<Duration>,
    ) -> Result<MessageStream<Resp>, Error> {
        let idle = idle.or(self.stream_idle_timeout);
        let rb = self.stream_request(path, req, user, deadline, idle)?;
        let resp = tokio::time::timeout(self.request_timeout, rb.send())
            .await
            .map_err(|_| Error::Timeout {
                what: "envd stream handshake",
                after: self.request_timeout,
            })?
            .map_err(|e| self.send_error(e, "envd stream handshake"))?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(self.error_of(resp).await);
        }
        let ct = http::media_type(&resp);
        if ct != CT_CONNECT_JSON {
            // connect-go answers a unary-style JSON error when the stream fails early.
            if ct == CT_JSON {
                let body = http::read_bounded(resp, self.request_timeout).await;
                if let Ok(err) = serde_json::from_slice::<ConnectErrorBody>(&body) {
                    return Err(Error::from_connect(err, Some(200), &self.secrets()));
                }
            }
            return Err(Error::protocol(
                Surface::Envd,
                format!(
                    "unexpected response content type {ct:?} for {path} (want {CT_CONNECT_JSON})"
                ),
            ));
        }
        Ok(message_stream(
            resp,
            idle,
            self.secrets().into_iter().cloned().collect(),
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn basic_auth_header() {
        assert_eq!(basic_auth("user"), "Basic dXNlcjo=");
        assert_eq!(basic_auth("root"), "Basic cm9vdDo=");
    }

    pub(crate) fn test_conn(base_url: &str, token: Option<&str>, version: &str) -> EnvdConn {
        let cfg = Config::new().with_request_timeout(Duration::from_secs(5));
        EnvdConn {
            http: reqwest::Client::new(),
            base_url: base_url.to_owned(),
            direct_url: base_url.to_owned(),
            sandbox_id: "isbx0000000000000000001".into(),
            access_token: token.map(Secret::new),
            envd_version: version.into(),
            request_timeout: cfg.request_timeout,
            stream_idle_timeout: None,
            transfer_idle_timeout: None,
            cfg,
            retry: RetryPolicy::default(),
        }
    }

    fn header<'a>(req: &'a reqwest::Request, name: &str) -> Option<&'a str> {
        req.headers().get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn unary_header_set() {
        let c = test_conn("http://127.0.0.1:9", Some("tok"), "0.6.13");
        let req = c
            .rpc_request("/filesystem.Filesystem/Stat", Some("root"), CT_JSON)
            .build()
            .unwrap();
        assert_eq!(
            req.url().as_str(),
            "http://127.0.0.1:9/filesystem.Filesystem/Stat"
        );
        assert_eq!(req.method(), reqwest::Method::POST);
        assert_eq!(header(&req, "content-type"), Some("application/json"));
        assert_eq!(header(&req, "connect-protocol-version"), Some("1"));
        assert_eq!(
            header(&req, "e2b-sandbox-id"),
            Some("isbx0000000000000000001")
        );
        assert_eq!(header(&req, "e2b-sandbox-port"), Some("49983"));
        assert_eq!(header(&req, "x-access-token"), Some("tok"));
        assert_eq!(header(&req, "authorization"), Some("Basic cm9vdDo="));
        assert_eq!(header(&req, "accept-encoding"), None);
        assert_eq!(header(&req, "connect-timeout-ms"), None);
        assert_eq!(header(&req, "keepalive-ping-interval"), None);

        // unsecured, no user on a new envd: neither header
        let c = test_conn("http://127.0.0.1:9", None, "0.6.13");
        let req = c.rpc_request("/process.Process/List", c.effective_user(None), CT_JSON);
        let req = req.build().unwrap();
        assert_eq!(header(&req, "x-access-token"), None);
        assert_eq!(header(&req, "authorization"), None);
        // old envd: `user` is named explicitly
        let old = test_conn("http://127.0.0.1:9", None, "0.3.0");
        assert_eq!(old.effective_user(None), Some("user"));
        assert_eq!(old.effective_user(Some("root")), Some("root"));
    }

    #[test]
    fn stream_header_set() {
        let c = test_conn("http://127.0.0.1:9", Some("tok"), "0.6.13");
        let body = serde_json::json!({"process": {"pid": 7}});
        let req = c
            .stream_request(
                "/process.Process/Connect",
                &body,
                None,
                Some(Duration::from_millis(1500)),
                None,
            )
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            header(&req, "content-type"),
            Some("application/connect+json")
        );
        assert_eq!(header(&req, "connect-protocol-version"), Some("1"));
        assert_eq!(header(&req, "keepalive-ping-interval"), Some("50"));
        assert_eq!(header(&req, "connect-timeout-ms"), Some("1500"));
        assert_eq!(header(&req, "x-access-token"), Some("tok"));
        assert_eq!(header(&req, "accept-encoding"), None);
        let bytes = req.body().and_then(|b| b.as_bytes()).unwrap();
        let json = br#"{"process":{"pid":7}}"#;
        assert_eq!(bytes[0], 0);
        assert_eq!(&bytes[1..5], &(json.len() as u32).to_be_bytes());
        assert_eq!(&bytes[5..], json);
        // no deadline: no header; an idle timeout lowers the keepalive interval (a third)
        let req = c
            .stream_request(
                "/process.Process/Start",
                &body,
                None,
                None,
                Some(Duration::from_secs(8)),
            )
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(header(&req, "connect-timeout-ms"), None);
        assert_eq!(header(&req, "keepalive-ping-interval"), Some("2"));
    }

    #[test]
    fn versions() {
        use semver::Version;
        assert_eq!(parse_version("0.6.13"), Some(Version::new(0, 6, 13)));
        assert_eq!(parse_version("v1.2"), Some(Version::new(1, 2, 0)));
        assert_eq!(parse_version("1"), Some(Version::new(1, 0, 0)));
        assert!(parse_version("0.4.0-rc1") < Some(Version::new(0, 4, 0)));
        assert!(parse_version("0.4.0-rc1") > Some(Version::new(0, 3, 9)));
        assert_eq!(parse_version("garbage"), None);
        assert_eq!(parse_version("1.x"), None);
    }
}
