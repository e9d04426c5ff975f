//! gzip both ways: `Accept-Encoding` negotiation and the compressed download body, and the
//! gunzipped upload body.

use std::io::Write as _;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};

use tokio::io::AsyncReadExt as _;

use super::Failure;
use super::download::Source;

/// Parse `Accept-Encoding` like envd: `Ok(true)` = gzip, `Ok(false)` = identity.
pub(super) fn negotiate(headers: &HeaderMap) -> Result<bool, String> {
    let header = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if header.is_empty() {
        return Ok(false);
    }
    let mut encs: Vec<(String, f64)> = header
        .split(',')
        .map(|v| {
            let mut parts = v.split(';');
            let enc = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut q = 1.0;
            for param in parts {
                let param = param.trim();
                if param.len() >= 2 && param[..2].eq_ignore_ascii_case("q=") {
                    if let Ok(v) = param[2..].parse::<f64>() {
                        q = v;
                    }
                }
            }
            (enc, q)
        })
        .collect();
    let identity_explicit = encs.iter().any(|(e, q)| e == "identity" && *q != 0.0);
    let mut identity_rejected = encs.iter().any(|(e, q)| e == "identity" && *q == 0.0);
    if encs.iter().any(|(e, q)| e == "*" && *q == 0.0) && !identity_explicit {
        identity_rejected = true;
    }
    encs.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    for (e, q) in &encs {
        if *q == 0.0 {
            continue;
        }
        match e.as_str() {
            "identity" => return Ok(false),
            "*" => return Ok(identity_rejected),
            "gzip" => return Ok(true),
            _ => {}
        }
    }
    if !identity_rejected {
        return Ok(false);
    }
    Err("no acceptable encoding found, supported: [gzip]".into())
}

/// `file` gzipped as a streamed body (compressed by a task as the client reads).
pub(super) fn gzip_body(mut file: Box<dyn Source>) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    if enc.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    let out = std::mem::take(enc.get_mut());
                    if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
        if let Ok(out) = enc.finish()
            && !out.is_empty()
        {
            let _ = tx.send(Ok(Bytes::from(out))).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Body::from_stream(stream)
}

/// An upload body: chunks, or the refusal that ended it.
pub(super) type BodyStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Failure>> + Send>>;

/// The request body as a stream of chunks, gunzipped when `Content-Encoding: gzip`.
pub(super) fn body_stream(body: Body, gzip: bool) -> BodyStream {
    let raw = body.into_data_stream().map(|r| {
        r.map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error reading body: {e}"),
            )
        })
    });
    if !gzip {
        return Box::pin(raw);
    }
    let state = (
        Box::pin(raw),
        flate2::write::MultiGzDecoder::new(Vec::new()),
        false,
    );
    Box::pin(futures::stream::unfold(
        state,
        |(mut raw, mut dec, done)| async move {
            if done {
                return None;
            }
            loop {
                match raw.next().await {
                    Some(Ok(chunk)) => {
                        if let Err(e) = dec.write_all(&chunk) {
                            return Some((
                                Err((
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    format!("error writing file: {e}"),
                                )),
                                (raw, dec, true),
                            ));
                        }
                        let out = std::mem::take(dec.get_mut());
                        if !out.is_empty() {
                            return Some((Ok(Bytes::from(out)), (raw, dec, false)));
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), (raw, dec, true))),
                    None => {
                        return match dec.try_finish() {
                            Ok(()) => {
                                let out = std::mem::take(dec.get_mut());
                                if out.is_empty() {
                                    None
                                } else {
                                    Some((Ok(Bytes::from(out)), (raw, dec, true)))
                                }
                            }
                            Err(e) => Some((
                                Err((
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    format!("error writing file: {e}"),
                                )),
                                (raw, dec, true),
                            )),
                        };
                    }
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg(v: &str) -> Result<bool, String> {
        let mut h = HeaderMap::new();
        if let Ok(v) = v.parse() {
            h.insert(header::ACCEPT_ENCODING, v);
        }
        negotiate(&h)
    }

    #[test]
    fn accept_encoding_like_envd() {
        assert_eq!(neg(""), Ok(false));
        assert_eq!(neg("gzip"), Ok(true));
        assert_eq!(neg("gzip, deflate, br"), Ok(true));
        assert_eq!(neg("gzip;q=0, identity"), Ok(false));
        assert_eq!(neg("*"), Ok(false));
        assert_eq!(neg("*;q=0, gzip"), Ok(true));
        assert!(neg("identity;q=0").is_err());
        assert!(neg("br, identity;q=0").is_err());
        assert!(neg("*;q=0").is_err());
    }
}
