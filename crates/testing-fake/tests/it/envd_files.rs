//! envd plain HTTP surface: /health, /files up and down (404/400/401/406, gzip both ways,
//! multipart and octet-stream, ownership, signed URLs), access token, reserved routes,
//! /envs, and a streamed 64 MiB round trip.
#![allow(clippy::unwrap_used)]

use crate::envd_support;

use std::io::{Read as _, Write as _};

use envd_support::boot;
use futures::StreamExt as _;
use serde_json::json;

const TOKEN: &str = "access-token";

#[tokio::test]
async fn health_envs_reserved_and_token() {
    let fake = boot("base", Some(TOKEN)).await;
    let r = fake
        .http
        .get(format!("{}/health", fake.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(r.bytes().await.unwrap().is_empty());

    // no token on an RPC → 401 JSON
    let r = fake
        .http
        .post(format!("{}/process.Process/List", fake.url))
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        r.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"})
    );
    // with the token
    let (st, _) = fake.unary("/process.Process/List", &json!({}), None).await;
    assert_eq!(st, 200);

    let r = fake
        .req(reqwest::Method::GET, "/envs")
        .send()
        .await
        .unwrap();
    let envs: serde_json::Value = r.json().await.unwrap();
    assert_eq!(envs["E2B_SANDBOX"], "true");
    assert_eq!(envs["GLOBAL_A"], "1");

    let r = fake
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let m: serde_json::Value = r.json().await.unwrap();
    for k in [
        "ts",
        "cpu_count",
        "cpu_used_pct",
        "mem_total",
        "mem_used",
        "mem_cache",
        "mem_total_mib",
        "mem_used_mib",
        "disk_used",
        "disk_total",
    ] {
        assert!(m.get(k).is_some(), "{k} missing in {m}");
    }

    let r = fake
        .http
        .post(format!("{}/init", fake.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["path"], "/init");
    assert_eq!(body["code"], 404);
}

#[tokio::test]
async fn download_errors_and_encodings() {
    let fake = boot("base", None).await;
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user/missing")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code":404,"message":"path '/home/user/missing' does not exist"})
    );
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = fake
        .req(reqwest::Method::GET, "/files?path=a.txt&username=bob")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["message"],
        "error looking up user 'bob': user: unknown user bob"
    );
    let r = fake
        .req(reqwest::Method::GET, "/files?path=~bob/x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);

    // octet-stream upload, relative path → home
    let r = fake
        .req(reqwest::Method::POST, "/files?path=d/a.txt")
        .header("Content-Type", "application/octet-stream")
        .body("hello\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!([{"path":"/home/user/d/a.txt","name":"a.txt","type":"file"}])
    );
    // identity download
    let r = fake
        .req(reqwest::Method::GET, "/files?path=~/d/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-length"], "6");
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.headers()["content-disposition"], "inline; filename=a.txt");
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"hello\n");
    // gzip only when asked (reqwest has no gzip feature here: bytes arrive compressed)
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user/d/a.txt")
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let gz = r.bytes().await.unwrap();
    let mut out = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "hello\n");
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user/d/a.txt")
        .header("Accept-Encoding", "br, identity;q=0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 406);
    // empty file
    fake.req(reqwest::Method::POST, "/files?path=/home/user/empty")
        .header("Content-Type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/home/user/empty")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-length"], "0");
}

#[tokio::test]
async fn uploads_multipart_gzip_and_ownership() {
    let fake = boot("base", None).await;
    // multipart without path: filename is the full target path; two files
    let boundary = "XBOUNDARYX";
    let body = format!(
        "--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/m/a.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nAAA\r\n--{b}\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nignored\r\n--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"rel/b.txt\"\r\n\r\nBBB\r\n--{b}--\r\n",
        b = boundary
    );
    let r = fake
        .req(reqwest::Method::POST, "/files")
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header("X-Metadata-Owner", "me")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let got: serde_json::Value = r.json().await.unwrap();
    assert_eq!(got[0]["path"], "/home/user/m/a.txt");
    assert_eq!(got[1]["path"], "/home/user/rel/b.txt");
    if got[0].get("metadata").is_some() {
        assert_eq!(got[0]["metadata"], json!({"owner":"me"}));
    }
    let (_, st) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"/home/user/m/a.txt"}),
            None,
        )
        .await;
    assert_eq!(st["entry"]["size"], "3");
    if fake.envd.is_isolated() {
        assert_eq!(st["entry"]["owner"], "user");
        assert_eq!(st["entry"]["group"], "user");
        let (_, dir) = fake
            .unary(
                "/filesystem.Filesystem/Stat",
                &json!({"path":"/home/user/m"}),
                None,
            )
            .await;
        assert_eq!(dir["entry"]["owner"], "user");
        assert_eq!(dir["entry"]["permissions"], "drwxr-xr-x");
        // as root via username
        let r = fake
            .req(
                reqwest::Method::POST,
                "/files?path=/root/r.txt&username=root",
            )
            .header("Content-Type", "application/octet-stream")
            .body("r")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let (_, st) = fake
            .unary(
                "/filesystem.Filesystem/Stat",
                &json!({"path":"/root/r.txt"}),
                Some("root"),
            )
            .await;
        assert_eq!(st["entry"]["owner"], "root");
    }
    // gzip request body
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(b"zipped!").unwrap();
    let r = fake
        .req(reqwest::Method::POST, "/files?path=/tmp/z.txt")
        .header("Content-Type", "application/octet-stream")
        .header("Content-Encoding", "gzip")
        .body(enc.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/z.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"zipped!");
    // errors: octet-stream without path, unknown content type, upload onto a directory
    let r = fake
        .req(reqwest::Method::POST, "/files")
        .header("Content-Type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = fake
        .req(reqwest::Method::POST, "/files?path=x")
        .header("Content-Type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = fake
        .req(reqwest::Method::POST, "/files?path=/home/user")
        .header("Content-Type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["message"], "path is a directory: /home/user");
}

fn signed(path: &str, op: &str, user: &str, exp: Option<i64>) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let raw = match exp {
        Some(e) => format!("{path}:{op}:{user}:{TOKEN}:{e}"),
        None => format!("{path}:{op}:{user}:{TOKEN}"),
    };
    let sig = format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(raw))
    );
    percent_encoding::utf8_percent_encode(&sig, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[tokio::test]
async fn signed_urls() {
    let fake = boot("base", Some(TOKEN)).await;
    let p = "/home/user/s.txt";
    // write with a signature, no token header
    let url = format!(
        "{}/files?path={p}&signature={}",
        fake.url,
        signed(p, "write", "", None)
    );
    let r = fake
        .http
        .post(url)
        .header("Content-Type", "application/octet-stream")
        .body("signed")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // read with expiration
    let exp = time_now() + 60;
    let url = format!(
        "{}/files?username=user&path={p}&signature={}&signature_expiration={exp}",
        fake.url,
        signed(p, "read", "user", Some(exp))
    );
    let r = fake.http.get(url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"signed");
    // wrong op, expired, missing, wrong header token
    let url = format!(
        "{}/files?path={p}&signature={}",
        fake.url,
        signed(p, "write", "", None)
    );
    let r = fake.http.get(url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["message"], "invalid signature");
    let old = time_now() - 10;
    let url = format!(
        "{}/files?path={p}&signature={}&signature_expiration={old}",
        fake.url,
        signed(p, "read", "", Some(old))
    );
    let r = fake.http.get(url).send().await.unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["message"], "signature is already expired");
    let r = fake
        .http
        .get(format!("{}/files?path={p}", fake.url))
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["message"], "missing signature query parameter");
    let r = fake
        .http
        .get(format!("{}/files?path={p}", fake.url))
        .header("X-Access-Token", "wrong")
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["message"],
        "access token present in header but does not match"
    );
}

fn time_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn streamed_64_mib_round_trip() {
    let fake = boot("base", None).await;
    const SIZE: u64 = 64 << 20;
    const CHUNK: usize = 1 << 20;
    // upload a generated stream: the client never holds the file either
    let stream = futures::stream::iter(0..(SIZE as usize / CHUNK)).map(|i| {
        let block: Vec<u8> = (0..CHUNK).map(|j| ((i * 31 + j) % 251) as u8).collect();
        Ok::<_, std::io::Error>(block)
    });
    let r = fake
        .req(reqwest::Method::POST, "/files?path=/tmp/big.bin")
        .header("Content-Type", "application/octet-stream")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/big.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-length"], SIZE.to_string().as_str());
    let mut body = r.bytes_stream();
    let mut offset: usize = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        for (k, b) in chunk.iter().enumerate() {
            let pos = offset + k;
            let (i, j) = (pos / CHUNK, pos % CHUNK);
            assert_eq!(*b, ((i * 31 + j) % 251) as u8, "byte {pos}");
        }
        offset += chunk.len();
    }
    assert_eq!(offset as u64, SIZE);
}

#[tokio::test]
async fn range_conditional_and_cors() {
    let fake = boot("base", None).await;
    fake.req(reqwest::Method::POST, "/files?path=/tmp/r.txt")
        .header("Content-Type", "application/octet-stream")
        .body("0123456789")
        .send()
        .await
        .unwrap();
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/r.txt")
        .header("Range", "bytes=2-4")
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 2-4/10");
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"234");
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/r.txt")
        .header("Range", "bytes=-3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"789");
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/r.txt")
        .header("Range", "bytes=20-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 416);
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/r.txt")
        .send()
        .await
        .unwrap();
    let lm = r.headers()["last-modified"].to_str().unwrap().to_string();
    let r = fake
        .req(reqwest::Method::GET, "/files?path=/tmp/r.txt")
        .header("If-Modified-Since", lm)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    // CORS preflight and exposed headers
    let r = fake
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/files", fake.url))
        .header("Origin", "http://example.test")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type,x-access-token",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert_eq!(r.headers()["access-control-allow-methods"], "POST");
    assert_eq!(r.headers()["access-control-max-age"], "7200");
    let r = fake
        .http
        .get(format!("{}/health", fake.url))
        .header("Origin", "http://example.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn download_while_the_file_is_rewritten() {
    let fake = boot("base", None).await;
    let body = json!({"process":{"cmd":"/bin/bash","args":["-c","while true; do date +%s%N > /tmp/tick; done"]},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    for _ in 0..100 {
        let r = fake
            .req(reqwest::Method::GET, "/files?path=/tmp/tick")
            .send()
            .await
            .unwrap();
        assert!(matches!(r.status().as_u16(), 200 | 404));
        r.bytes().await.expect("body matches its Content-Length");
    }
    fake.unary(
        "/process.Process/SendSignal",
        &json!({"process":{"pid":pid},"signal":"SIGNAL_SIGKILL"}),
        None,
    )
    .await;
    s.collect().await;
}
