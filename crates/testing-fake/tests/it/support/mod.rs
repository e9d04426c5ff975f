//! Shared helpers of the control-plane tests: an emulator plus a small JSON client, and
//! envd helpers (Connect streaming `Process.Start`, `/files`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use e2b_proto::envelope::{FrameDecoder, encode_json};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use testing_fake::{Emulator, EmulatorConfig};

/// An answer: status, headers, body as JSON (`Value::Null` when empty or not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Answer {
    /// Assert a control-plane error body: `code` equals the status.
    pub fn assert_api_error(&self, status: u16) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert_eq!(self.json["code"], json!(status), "body: {}", self.text);
        assert!(self.json["message"].is_string(), "body: {}", self.text);
    }
}

pub struct Env {
    pub emu: Emulator,
    pub http: reqwest::Client,
}

impl Env {
    pub async fn start() -> Env {
        Self::with(EmulatorConfig::default()).await
    }

    pub async fn with(cfg: EmulatorConfig) -> Env {
        // `RUST_LOG=testing_fake=debug` shows the emulator's logs in failing tests.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
        let emu = Emulator::start(cfg).await.expect("emulator starts");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Env { emu, http }
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.emu.api_url(), path));
        if let Some(k) = key {
            req = req.header("X-API-KEY", k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request reaches the emulator");
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    pub async fn api(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let key = self.emu.api_key().to_owned();
        self.send(method, path, Some(&key), body).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.api(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.api(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.api(Method::DELETE, path, None).await
    }

    /// Pause sandbox `id` without its memory (asserting the 204), then resume it with a
    /// cold boot (`connect` with `memory: false`), returning the connect answer.
    pub async fn pause_and_resume_cold(&self, id: &str) -> Answer {
        let a = self
            .post(&format!("/sandboxes/{id}/pause"), json!({}))
            .await;
        assert_eq!(a.status, StatusCode::NO_CONTENT, "pause: {}", a.text);
        self.post(
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60, "memory": false}),
        )
        .await
    }

    /// Create a `base` sandbox (v2), returning its create answer.
    pub async fn create(&self, extra: Value) -> Value {
        let mut body = json!({"templateID": "base", "timeout": 300});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let a = self.post("/v2/sandboxes", body).await;
        assert_eq!(a.status, StatusCode::CREATED, "create: {}", a.text);
        a.json
    }

    pub async fn state(&self, id: &str) -> Option<String> {
        let a = self.get(&format!("/sandboxes/{id}")).await;
        if a.status == StatusCode::NOT_FOUND {
            return None;
        }
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        a.json["state"].as_str().map(str::to_owned)
    }

    /// Poll until the sandbox reaches `want` (`None` = gone), or panic after `limit`.
    pub async fn wait_state(&self, id: &str, want: Option<&str>, limit: Duration) {
        let start = Instant::now();
        loop {
            let s = self.state(id).await;
            if s.as_deref() == want {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "sandbox {id} still {s:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An envd request builder for a sandbox (create answer `sbx`).
    pub fn envd(&self, method: Method, path: &str, sbx: &Value) -> reqwest::RequestBuilder {
        envd_at(&self.http, &self.emu.sandbox_url(), method, path, sbx)
    }

    /// Start `cmd` with `/bin/bash -l -c` and return the open response plus the pid.
    pub async fn start_process(&self, sbx: &Value, cmd: &str) -> (reqwest::Response, u32) {
        let msg =
            json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}, "stdin": false});
        let mut resp = self
            .envd(Method::POST, "/process.Process/Start", sbx)
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .body(encode_json(&msg).unwrap())
            .send()
            .await
            .expect("Start reaches envd");
        assert_eq!(resp.status(), StatusCode::OK);
        let mut dec = FrameDecoder::default();
        loop {
            if let Some(f) = dec.next_frame().unwrap() {
                let v: Value = serde_json::from_slice(&f.payload).unwrap();
                let pid = v["event"]["start"]["pid"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("first event is start: {v}"));
                return (resp, u32::try_from(pid).unwrap());
            }
            let chunk = resp
                .chunk()
                .await
                .unwrap()
                .expect("stream has a start event");
            dec.push(&chunk);
        }
    }

    /// Run `cmd` to completion; returns (frames as JSON, saw end-of-stream).
    pub async fn run_frames(&self, sbx: &Value, cmd: &str) -> (Vec<Value>, bool) {
        run_frames_at(&self.http, &self.emu.sandbox_url(), sbx, cmd).await
    }

    /// Write a file through envd (`application/octet-stream`).
    pub async fn write_file(&self, sbx: &Value, path: &str, data: &str) -> StatusCode {
        self.envd(Method::POST, &format!("/files?path={path}"), sbx)
            .header("Content-Type", "application/octet-stream")
            .body(data.to_owned())
            .send()
            .await
            .expect("upload reaches envd")
            .status()
    }

    /// Read a file through envd.
    pub async fn read_file(&self, sbx: &Value, path: &str) -> (StatusCode, String) {
        let r = self
            .envd(Method::GET, &format!("/files?path={path}"), sbx)
            .send()
            .await
            .unwrap_or_else(|e| panic!("download reaches envd: {e:?}"));
        let s = r.status();
        (s, r.text().await.unwrap_or_default())
    }
}

/// An envd request builder for sandbox `sbx` (its create answer) of the emulator whose
/// sandbox URL is `sandbox_url` (in process or an `e2b-local`).
pub fn envd_at(
    http: &reqwest::Client,
    sandbox_url: &str,
    method: Method,
    path: &str,
    sbx: &Value,
) -> reqwest::RequestBuilder {
    let mut req = http
        .request(method, format!("{sandbox_url}{path}"))
        .header("E2b-Sandbox-Id", sbx["sandboxID"].as_str().unwrap())
        .header("E2b-Sandbox-Port", "49983");
    if let Some(t) = sbx["envdAccessToken"].as_str() {
        req = req.header("X-Access-Token", t);
    }
    req
}

/// Run `cmd` (`/bin/bash -l -c`) to completion in sandbox `sbx` of the emulator at
/// `sandbox_url`: (frames as JSON, saw end-of-stream).
pub async fn run_frames_at(
    http: &reqwest::Client,
    sandbox_url: &str,
    sbx: &Value,
    cmd: &str,
) -> (Vec<Value>, bool) {
    let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}, "stdin": false});
    let resp = envd_at(
        http,
        sandbox_url,
        Method::POST,
        "/process.Process/Start",
        sbx,
    )
    .header("Content-Type", "application/connect+json")
    .header("Connect-Protocol-Version", "1")
    .body(encode_json(&msg).unwrap())
    .send()
    .await
    .expect("Start reaches envd");
    read_frames(resp).await
}

/// Read every frame of a streaming response: (data frames as JSON, saw end-of-stream).
pub async fn read_frames(mut resp: reqwest::Response) -> (Vec<Value>, bool) {
    let mut dec = FrameDecoder::default();
    let mut frames = Vec::new();
    let mut ended = false;
    loop {
        while let Some(f) = dec.next_frame().unwrap() {
            if f.is_end_stream() {
                ended = true;
            } else {
                frames.push(serde_json::from_slice(&f.payload).unwrap());
            }
        }
        match resp.chunk().await {
            Ok(Some(c)) => dec.push(&c),
            _ => return (frames, ended),
        }
    }
}

/// The stdout of a process's frames, decoded.
pub fn stdout_of(frames: &[Value]) -> String {
    let mut out = Vec::new();
    for f in frames {
        if let Some(d) = f["event"]["data"]["stdout"].as_str() {
            out.extend(e2b_proto::json::decode_base64(d).unwrap());
        }
    }
    String::from_utf8(out).unwrap()
}

/// True while `/proc/<pid>` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// The names in host directory `dir` (what a boot may have written there).
pub fn names_in(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect()
}
