//! The connection to one sandbox's envd: base URL, routing and auth headers (§1.3), and
//! the two Connect call shapes (unary JSON and server-streaming envelopes).

use std::time::Duration;

use base64::Engine as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::stream::{MessageStream, message_stream};
use crate::config::{Config, Secret};
use crate::error::{Error, Surface};
use crate::http;
use crate::proto::connect::ConnectErrorBody;
use crate::proto::{ENVD_PORT, envelope, headers};

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
}

/// `Authorization: Basic base64("<user>:")`.
pub fn basic_auth(user: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

/// Parse `major.minor.patch` (extra suffixes ignored); `None` when unparsable.
pub(crate) fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or("");
    let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((
        it.next()??,
        it.next().flatten().unwrap_or(0),
        it.next().flatten().unwrap_or(0),
    ))
}

impl EnvdConn {
    /// Secrets to keep out of error messages.
    pub(crate) fn secrets(&self) -> Vec<&Secret> {
        self.access_token.iter().collect()
    }

    /// True when the sandbox's envd is at least `min` (unknown versions count as new).
    pub(crate) fn envd_at_least(&self, min: (u64, u64, u64)) -> bool {
        parse_version(&self.envd_version).is_none_or(|v| v >= min)
    }

    /// The user to name on the wire: the chosen one, else `user` for envd < 0.4.0 (which
    /// has no default user), else none (§7.4).
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

    fn rpc_request(
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
        let body = serde_json::to_vec(req)
            .map_err(|e| Error::Config(format!("cannot encode the request: {e}")))?;
        let resp = self
            .rpc_request(path, user, CT_JSON)
            .timeout(self.request_timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| self.send_error(e, "envd unary call"))?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(http::error_from(
                Surface::Envd,
                resp,
                self.request_timeout,
                &self.secrets(),
            )
            .await);
        }
        let ct = http::media_type(&resp);
        if ct != CT_JSON {
            return Err(Error::protocol(
                Surface::Envd,
                format!("unexpected response content type {ct:?} for {path} (want {CT_JSON})"),
            ));
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.send_error(e, "envd unary response body"))?;
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

    /// Open a server-streaming Connect call: send the enveloped request, check the status
    /// and content type within the handshake timeout, and return the decoded messages.
    /// `deadline` becomes `Connect-Timeout-Ms`.
    pub(crate) async fn server_stream<
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Send + 'static,
    >(
        &self,
        path: &str,
        req: &Req,
        user: Option<&str>,
        deadline: Option<Duration>,
        idle: Option<Duration>,
    ) -> Result<MessageStream<Resp>, Error> {
        let json = serde_json::to_vec(req)
            .map_err(|e| Error::Config(format!("cannot encode the request: {e}")))?;
        let frame = envelope::encode(0, &json);
        let idle = idle.or(self.stream_idle_timeout);
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
        let resp = tokio::time::timeout(self.request_timeout, rb.send())
            .await
            .map_err(|_| Error::Timeout {
                what: "envd stream handshake",
                after: self.request_timeout,
            })?
            .map_err(|e| self.send_error(e, "envd stream handshake"))?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(http::error_from(
                Surface::Envd,
                resp,
                self.request_timeout,
                &self.secrets(),
            )
            .await);
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
mod tests {
    use super::*;

    #[test]
    fn basic_auth_header() {
        assert_eq!(basic_auth("user"), "Basic dXNlcjo=");
        assert_eq!(basic_auth("root"), "Basic cm9vdDo=");
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("0.6.13"), Some((0, 6, 13)));
        assert_eq!(parse_version("v1.2"), Some((1, 2, 0)));
        assert_eq!(parse_version("0.4.0-rc1"), Some((0, 4, 0)));
        assert_eq!(parse_version("garbage"), None);
    }
}
