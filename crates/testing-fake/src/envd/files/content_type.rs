//! The `Content-Type` of a download: by extension, else sniffed like Go's `http.DetectContentType`.

use axum::http::StatusCode;
use axum::response::Response;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::super::auth::json_error;
use super::super::paths;
use super::download::Source;

/// Go's `mime.TypeByExtension` for common extensions.
pub(super) fn type_by_extension(path: &str) -> Option<&'static str> {
    let base = paths::base(path);
    let ext = base.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    Some(match ext.as_str() {
        "txt" => "text/plain; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "xml" => "text/xml; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "ico" => "image/vnd.microsoft.icon",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "wasm" => "application/wasm",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        _ => return None,
    })
}

/// A small version of Go's `http.DetectContentType`.
fn sniff(head: &[u8]) -> &'static str {
    if head.is_empty() {
        return "text/plain; charset=utf-8";
    }
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return "image/png";
    }
    if head.starts_with(b"%PDF-") {
        return "application/pdf";
    }
    if head.starts_with(b"\x1f\x8b\x08") {
        return "application/x-gzip";
    }
    let binary = head
        .iter()
        .any(|b| matches!(b, 0x00..=0x08 | 0x0B | 0x0E..=0x1A | 0x1C..=0x1F));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// The type of a download: by `raw_path`'s extension, else sniffed from the first 512
/// bytes of `file` (which is then rewound).
pub(super) async fn content_type(
    file: &mut Box<dyn Source>,
    raw_path: &str,
) -> Result<&'static str, Response> {
    Ok(match type_by_extension(raw_path) {
        Some(t) => t,
        None => {
            let mut head = vec![0u8; 512];
            let mut got = 0;
            while got < head.len() {
                match file.read(&mut head[got..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            let t = sniff(&head[..got]);
            if file.seek(std::io::SeekFrom::Start(0)).await.is_err() {
                return Err(json_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "seeker can't seek",
                ));
            }
            t
        }
    })
}
