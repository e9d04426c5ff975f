//! `GET /files`: open the file as the acting user's sandbox sees it, then answer whole,
//! gzipped, as a range or as "not modified".

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncSeekExt as _};

use super::super::auth::json_error;
use super::super::filesystem::{FsCtx, go_err};
use super::super::{Envd, paths};
use super::content_type::content_type;
use super::disposition::content_disposition;
use super::gzip::{gzip_body, negotiate};
use super::http_date::{http_date, parse_http_date};
use super::range::{RangeSpec, parse_range};
use super::{check_access, lookup_user, parse_query};

/// Files up to this size are read in one go when opened for download.
const SNAPSHOT_MAX: u64 = 1 << 20;

/// What a download body is read from: a file, or a snapshot of a small one.
pub(super) trait Source: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin + Send> Source for T {}

/// An opened download: the file, its metadata, and its bytes when small.
type Opened = (std::fs::File, std::fs::Metadata, Option<Vec<u8>>);

/// `GET /files`.
pub(crate) async fn download(
    State(envd): State<Arc<Envd>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = parse_query(q.as_deref());
    let raw_path = params.path.clone().unwrap_or_default();
    if let Err(r) = check_access(&envd, &headers, &params, "read") {
        return r;
    }
    let user = match lookup_user(&envd, &params) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let path = match paths::resolve(&raw_path, &user, envd.template().workdir.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                format!("error expanding and resolving path '{raw_path}': {e}"),
            );
        }
    };
    let ctx = envd.fsctx.clone();
    let p = path.clone();
    let opened = envd.fs.run(move || open_for_download(&ctx, &p)).await;
    let (file, md, snapshot) = match opened {
        Ok(Ok(v)) => v,
        Ok(Err(r)) => return r,
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let gzip = match negotiate(&headers) {
        Ok(g) => g,
        Err(e) => {
            return json_error(
                StatusCode::NOT_ACCEPTABLE,
                format!("error parsing Accept-Encoding: {e}"),
            );
        }
    };
    let conditional = ["range", "if-modified-since", "if-none-match", "if-range"]
        .iter()
        .any(|h| headers.contains_key(*h));
    let gzip = gzip && !conditional;
    let disposition = content_disposition(&paths::base(&path));
    let (file, size): (Box<dyn Source>, u64) = match snapshot {
        Some(bytes) => {
            let len = bytes.len() as u64;
            (Box::new(std::io::Cursor::new(bytes)), len)
        }
        None => (Box::new(tokio::fs::File::from_std(file)), md.len()),
    };
    if gzip {
        return gzipped(file, &raw_path, disposition);
    }
    serve_content(file, size, md.mtime(), &raw_path, disposition, &headers).await
}

/// Stat and open `p` (on a worker, in the sandbox's view) with envd's errors for a missing
/// path or a directory.
fn open_for_download(ctx: &FsCtx, p: &str) -> Result<Opened, Response> {
    let host = ctx.host(p);
    let md = match std::fs::metadata(&host) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(json_error(
                StatusCode::NOT_FOUND,
                format!("path '{p}' does not exist"),
            ));
        }
        Err(e) => {
            return Err(json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "error checking if path exists '{p}': stat {p}: {}",
                    go_err(&e)
                ),
            ));
        }
    };
    if md.is_dir() {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            format!("path '{p}' is a directory"),
        ));
    }
    let mut f = std::fs::File::open(&host).map_err(|e| {
        json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error opening file '{p}': open {p}: {}", go_err(&e)),
        )
    })?;
    // Size and time of what was opened; small files are read at once so a
    // concurrent rewrite cannot make the body disagree with Content-Length.
    let md = f.metadata().unwrap_or(md);
    let snapshot = if md.len() <= SNAPSHOT_MAX {
        let mut buf = Vec::with_capacity(md.len() as usize);
        std::io::Read::read_to_end(&mut f, &mut buf)
            .ok()
            .map(|_| buf)
    } else {
        None
    };
    Ok((f, md, snapshot))
}

/// The whole file, gzipped (no length, no ranges), typed by its extension only.
fn gzipped(file: Box<dyn Source>, raw_path: &str, disposition: String) -> Response {
    let ctype =
        super::content_type::type_by_extension(raw_path).unwrap_or("application/octet-stream");
    Response::builder()
        .status(StatusCode::OK)
        .header(header::VARY, "Accept-Encoding")
        .header(header::CONTENT_DISPOSITION, disposition)
        .header(header::CONTENT_ENCODING, "gzip")
        .header(header::CONTENT_TYPE, ctype)
        .body(gzip_body(file))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Go's `http.ServeContent`: "not modified", one range, or the whole file.
async fn serve_content(
    mut file: Box<dyn Source>,
    size: u64,
    mtime: i64,
    raw_path: &str,
    disposition: String,
    headers: &HeaderMap,
) -> Response {
    let ctype = match content_type(&mut file, raw_path).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let last_modified = http_date(mtime);
    if let Some(ims) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_http_date)
        && mtime <= ims
        && !headers.contains_key(header::IF_NONE_MATCH)
    {
        return Response::builder()
            .status(StatusCode::NOT_MODIFIED)
            .header(header::VARY, "Accept-Encoding")
            .header(header::CONTENT_DISPOSITION, disposition)
            .header(header::LAST_MODIFIED, last_modified)
            .body(Body::empty())
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    if let Some(range) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        match parse_range(range, size) {
            RangeSpec::Full => {}
            RangeSpec::Unsatisfiable => {
                return Response::builder()
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header(header::CONTENT_RANGE, format!("bytes */{size}"))
                    .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                    .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
                    .body(Body::from("invalid range: failed to overlap\n"))
                    .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
            }
            RangeSpec::Part(start, len) => {
                if file.seek(std::io::SeekFrom::Start(start)).await.is_err() {
                    return json_error(StatusCode::INTERNAL_SERVER_ERROR, "seeker can't seek");
                }
                let stream = tokio_util::io::ReaderStream::with_capacity(file.take(len), 64 * 1024);
                return Response::builder()
                    .status(StatusCode::PARTIAL_CONTENT)
                    .header(header::VARY, "Accept-Encoding")
                    .header(header::CONTENT_DISPOSITION, disposition)
                    .header(header::ACCEPT_RANGES, "bytes")
                    .header(header::CONTENT_TYPE, ctype)
                    .header(header::LAST_MODIFIED, last_modified)
                    .header(
                        header::CONTENT_RANGE,
                        format!("bytes {start}-{}/{size}", start + len - 1),
                    )
                    .header(header::CONTENT_LENGTH, len)
                    .body(Body::from_stream(stream))
                    .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
            }
        }
    }
    let stream = tokio_util::io::ReaderStream::with_capacity(file.take(size), 64 * 1024);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::VARY, "Accept-Encoding")
        .header(header::CONTENT_DISPOSITION, disposition)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, ctype)
        .header(header::LAST_MODIFIED, last_modified)
        .header(header::CONTENT_LENGTH, size)
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
