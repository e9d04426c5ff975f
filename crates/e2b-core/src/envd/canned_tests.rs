//! Stream and error decoding against canned HTTP answers from a one-shot loopback server:
//! clean ends, error trailers, cut streams, partial frames, idle stalls, content types.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::StartProcess;
use super::conn::tests::test_conn;
use crate::error::{Error, Surface};
use crate::proto::connect::Code;
use crate::proto::envelope;

/// Serve one connection: read the request head and body, write `answer`, then keep the
/// socket open for `hold` before closing.
async fn serve_once(answer: Vec<u8>, hold: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        // read until the head is complete and the announced body has arrived
        loop {
            let n = sock.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let _ = sock.write_all(&answer).await;
        let _ = sock.flush().await;
        tokio::time::sleep(hold).await;
    });
    format!("http://{addr}")
}

fn stream_answer(body: &[u8]) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+json\r\nconnection: close\r\n\r\n"
            .to_vec();
    out.extend_from_slice(body);
    out
}

fn frames(msgs: &[&str], end: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&envelope::encode(0, m.as_bytes()));
    }
    if let Some(e) = end {
        out.extend_from_slice(&envelope::encode(envelope::FLAG_END_STREAM, e.as_bytes()));
    }
    out
}

const START: &str = r#"{"event":{"start":{"pid":42}}}"#;
const OUT: &str = r#"{"event":{"data":{"stdout":"aGkK"}}}"#;
const KEEPALIVE: &str = r#"{"event":{"keepalive":{}}}"#;
const END: &str = r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#;

async fn run(
    answer: Vec<u8>,
    hold: Duration,
    idle: Option<Duration>,
) -> Result<super::ProcessOutput, Error> {
    let url = serve_once(answer, hold).await;
    let conn = test_conn(&url, Some("tok"), "0.6.13");
    let mut spec = StartProcess::shell("echo hi");
    spec.idle_timeout = idle;
    conn.start_process(&spec).await?.wait_output().await
}

#[tokio::test]
async fn clean_stream_with_keepalives() {
    let body = frames(&[START, KEEPALIVE, OUT, KEEPALIVE, END], Some("{}"));
    let out = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap();
    assert_eq!(out.pid, 42);
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(out.end.exit_code, 0);
    assert!(out.end.exited);
}

#[tokio::test]
async fn unknown_event_kinds_are_skipped_but_garbage_is_not() {
    let future = r#"{"event":{"telemetry":{"cpu":1}}}"#;
    let body = frames(&[START, future, OUT, END], Some("{}"));
    let out = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap();
    assert_eq!(out.stdout, b"hi\n");
    let bad = r#"{"event":{"data":{"stdout":"%%%"}}}"#;
    let body = frames(&[START, bad, END], Some("{}"));
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn frames_split_into_single_bytes_still_decode() {
    // chunked transfer with one byte per chunk
    let body = frames(&[START, OUT, END], Some("{}"));
    let mut answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+json\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for b in &body {
        answer.extend_from_slice(format!("1\r\n{}\r\n", *b as char).as_bytes());
        answer.truncate(answer.len() - 3);
        answer.push(*b);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"0\r\n\r\n");
    let out = run(answer, Duration::ZERO, None).await.unwrap();
    assert_eq!(out.stdout, b"hi\n");
}

#[tokio::test]
async fn error_trailer_is_a_typed_error() {
    let body = frames(
        &[START, OUT],
        Some(r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#),
    );
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert_eq!(err.connect_code(), Some(Code::DeadlineExceeded), "{err:?}");
    assert!(err.is_timeout());
}

#[tokio::test]
async fn deadline_after_end_keeps_the_end() {
    let killed =
        r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#;
    let body = frames(
        &[START, killed],
        Some(r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#),
    );
    let out = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap();
    assert_eq!(out.end.exit_code, -1);
    // any other trailer error after the end still fails
    let body = frames(
        &[START, killed],
        Some(r#"{"error":{"code":"internal","message":"x"}}"#),
    );
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert_eq!(err.connect_code(), Some(Code::Internal));
}

#[tokio::test]
async fn error_before_start_fails_the_start() {
    let body = frames(
        &[],
        Some(r#"{"error":{"code":"invalid_argument","message":"cwd '/x' does not exist"}}"#),
    );
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert_eq!(err.connect_code(), Some(Code::InvalidArgument), "{err:?}");
}

#[tokio::test]
async fn missing_end_of_stream_is_an_error() {
    // the process even reported its end, but the end-of-stream frame never came
    let body = frames(&[START, OUT, END], None);
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::StreamCut {
                surface: Surface::Envd,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("end-of-stream"), "{err}");
}

#[tokio::test]
async fn partial_frame_is_an_error() {
    let mut body = frames(&[START, OUT], None);
    body.extend_from_slice(&envelope::encode(0, END.as_bytes())[..9]);
    let err = run(stream_answer(&body), Duration::ZERO, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StreamCut { .. }), "{err:?}");
    assert!(err.to_string().contains("inside"), "{err}");
}

#[tokio::test]
async fn idle_stall_times_out() {
    let body = frames(&[START], None);
    let err = run(
        stream_answer(&body),
        Duration::from_secs(30),
        Some(Duration::from_millis(200)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn wrong_content_type_and_unary_errors() {
    let answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi".to_vec();
    let err = run(answer, Duration::ZERO, None).await.unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("content type"), "{err}");

    let body = br#"{"code":"not_found","message":"process with pid 7 not found"}"#;
    let mut answer = format!(
        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    let url = serve_once(answer, Duration::ZERO).await;
    let conn = test_conn(&url, Some("tok"), "0.6.13");
    let err = conn.list_processes().await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.status(), Some(404));
    assert!(err.to_string().contains("pid 7"), "{err}");
}
