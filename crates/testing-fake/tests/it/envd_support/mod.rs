//! Shared helpers of the envd tests: boot an envd on 127.0.0.1, call its RPCs.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use e2b_proto::envelope::{self, FrameDecoder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use testing_fake::envd::{Envd, EnvdConfig};
use testing_fake::template::Template;

/// A running envd.
pub struct Fake {
    pub envd: Arc<Envd>,
    pub url: String,
    pub http: reqwest::Client,
    pub token: Option<String>,
    _dir: TempDir,
    server: tokio::task::JoinHandle<()>,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub async fn boot(template: &str, token: Option<&str>) -> Fake {
    boot_with(template, token, true).await
}

/// [`boot`] with the sandbox's internet access chosen (`false`: loopback-only network).
pub async fn boot_with(template: &str, token: Option<&str>, allow_internet: bool) -> Fake {
    boot_named(template, token, allow_internet, "").await
}

/// [`boot_with`] in a sandbox directory whose name ends with `suffix`.
pub async fn boot_named(
    template: &str,
    token: Option<&str>,
    allow_internet: bool,
    suffix: &str,
) -> Fake {
    let dir = std::env::temp_dir().join(format!(
        "envd-test-{}-{}{suffix}",
        std::process::id(),
        uuid_like()
    ));
    let mut env_vars = BTreeMap::new();
    env_vars.insert("GLOBAL_A".to_string(), "1".to_string());
    let cfg = EnvdConfig {
        sandbox_id: "itestsandbox".into(),
        template: Template::lookup(template).unwrap(),
        root: dir.clone(),
        access_token: token.map(str::to_string),
        env_vars,
        allow_internet,
        volumes: Vec::new(),
        hidden: Vec::new(),
    };
    let token = token.map(str::to_string);
    serve(Envd::boot(cfg).await.unwrap(), TempDir(dir), token).await
}

/// Serve `envd` (whose access token is `token`) on a loopback port; `dir` is removed
/// when the [`Fake`] drops.
pub async fn serve(envd: Arc<Envd>, dir: TempDir, token: Option<String>) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = envd.router();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Fake {
        envd,
        url: format!("http://{addr}"),
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        token,
        _dir: dir,
        server,
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{t}-{}", N.fetch_add(1, Ordering::SeqCst))
}

pub fn basic(user: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

impl Fake {
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut b = self.http.request(method, format!("{}{}", self.url, path));
        if let Some(t) = &self.token {
            b = b.header("X-Access-Token", t);
        }
        b
    }

    /// Unary call: (status, JSON body).
    pub async fn unary<T: Serialize>(
        &self,
        path: &str,
        body: &T,
        user: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let mut b = self
            .req(reqwest::Method::POST, path)
            .header("Content-Type", "application/json")
            .header("Connect-Protocol-Version", "1")
            .body(serde_json::to_vec(body).unwrap());
        if let Some(u) = user {
            b = b.header("Authorization", basic(u));
        }
        let r = b.send().await.unwrap();
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Open a server stream.
    pub async fn stream<T: Serialize>(
        &self,
        path: &str,
        body: &T,
        headers: &[(&str, &str)],
    ) -> Stream {
        let mut b = self
            .req(reqwest::Method::POST, path)
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .body(envelope::encode_json(body).unwrap().to_vec());
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let r = b.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.headers().get("content-type").unwrap(),
            "application/connect+json"
        );
        Stream {
            resp: r,
            dec: FrameDecoder::default(),
            ended: false,
        }
    }
}

/// A server-streaming response being read.
pub struct Stream {
    resp: reqwest::Response,
    dec: FrameDecoder,
    pub ended: bool,
}

/// One item of a stream.
#[derive(Debug)]
pub enum Item {
    Msg(serde_json::Value),
    End(serde_json::Value),
}

impl Stream {
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(f) = self.dec.next_frame().unwrap() {
                let v: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
                if f.is_end_stream() {
                    assert!(!self.ended, "second end-of-stream frame");
                    self.ended = true;
                    return Some(Item::End(v));
                }
                assert!(!self.ended, "data after end-of-stream");
                return Some(Item::Msg(v));
            }
            match tokio::time::timeout(Duration::from_secs(20), self.resp.chunk()).await {
                Ok(Ok(Some(c))) => self.dec.push(&c),
                Ok(Ok(None)) => {
                    self.dec.finish().unwrap();
                    return None;
                }
                Ok(Err(e)) => panic!("stream error: {e}"),
                Err(_) => panic!("stream stalled"),
            }
        }
    }

    pub async fn msg(&mut self) -> serde_json::Value {
        match self.next().await {
            Some(Item::Msg(v)) => v,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Read to the end: (messages, end frame).
    pub async fn collect(&mut self) -> (Vec<serde_json::Value>, serde_json::Value) {
        let mut msgs = Vec::new();
        loop {
            match self.next().await {
                Some(Item::Msg(v)) => msgs.push(v),
                Some(Item::End(e)) => {
                    assert!(self.next().await.is_none(), "bytes after end-of-stream");
                    return (msgs, e);
                }
                None => panic!("stream ended without end-of-stream frame"),
            }
        }
    }
}

/// Decode stdout/stderr/pty of process events; returns (stdout, stderr, pty, end).
pub fn outputs(
    msgs: &[serde_json::Value],
) -> (Vec<u8>, Vec<u8>, Vec<u8>, Option<serde_json::Value>) {
    let (mut o, mut e, mut p, mut end) = (Vec::new(), Vec::new(), Vec::new(), None);
    for m in msgs {
        let ev = &m["event"];
        if let Some(d) = ev.get("data") {
            let dec = |k: &str| e2b_proto::json::decode_base64(d[k].as_str().unwrap()).unwrap();
            if d.get("stdout").is_some() {
                o.extend(dec("stdout"));
            }
            if d.get("stderr").is_some() {
                e.extend(dec("stderr"));
            }
            if d.get("pty").is_some() {
                p.extend(dec("pty"));
            }
        }
        if let Some(x) = ev.get("end") {
            assert!(end.is_none(), "two end events");
            end = Some(x.clone());
        }
    }
    (o, e, p, end)
}

/// Run a command through `/bin/bash -l -c` like the SDK and collect everything.
pub async fn run(
    fake: &Fake,
    cmd: &str,
    user: Option<&str>,
) -> (Vec<u8>, Vec<u8>, serde_json::Value) {
    let body =
        serde_json::json!({"process":{"cmd":"/bin/bash","args":["-l","-c",cmd]},"stdin":false});
    let auth = user.map(basic);
    let mut headers = vec![];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    let mut s = fake.stream("/process.Process/Start", &body, &headers).await;
    let (msgs, end) = s.collect().await;
    assert_eq!(end, serde_json::json!({}), "stream error: {end}");
    assert!(
        msgs[0]["event"].get("start").is_some(),
        "first event must be start"
    );
    let (o, e, _, ev) = outputs(&msgs);
    (o, e, ev.unwrap())
}

pub fn decode_json<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}
