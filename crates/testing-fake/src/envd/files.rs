//! `GET /files` (download) and `POST /files` (upload), streamed both ways: never a whole
//! file in memory. Checks, statuses and messages follow envd's `download.go`/`upload.go`.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Envd;
use super::auth::{check_files_access, json_error};
use super::filesystem::{FsCtx, go_err, read_metadata};
use super::paths;
use crate::template::TemplateUser;

/// Query parameters of `/files` (decoded; `None` when absent).
#[derive(Debug, Default)]
struct Params {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<String>,
}

fn decode_component(s: &str) -> String {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8_lossy()
        .into_owned()
}

fn parse_query(q: Option<&str>) -> Params {
    let mut p = Params::default();
    for pair in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode_component(k), decode_component(v));
        let slot = match k.as_str() {
            "path" => &mut p.path,
            "username" => &mut p.username,
            "signature" => &mut p.signature,
            "signature_expiration" => &mut p.signature_expiration,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    p
}

/// True when `query` (the raw query of a header-less `GET`/`POST /files`) carries a
/// signature that `token` made for this operation: such a request belongs to the sandbox
/// holding `token`, whether or not the signature has expired (envd then says so).
pub(crate) fn signed_with(query: Option<&str>, method: &axum::http::Method, token: &str) -> bool {
    let operation = match *method {
        axum::http::Method::GET => "read",
        axum::http::Method::POST => "write",
        _ => return false,
    };
    let p = parse_query(query);
    let Some(sig) = p.signature.as_deref() else {
        return false;
    };
    let Ok(exp) = p
        .signature_expiration
        .as_deref()
        .map(str::parse::<i64>)
        .transpose()
    else {
        return false;
    };
    let expected = super::auth::signature(
        p.path.as_deref().unwrap_or(""),
        operation,
        p.username.as_deref().unwrap_or(""),
        token,
        exp,
    );
    super::auth::constant_time_eq(expected.as_bytes(), sig.as_bytes())
}

/// True when `query` has a `signature` parameter.
pub(crate) fn has_signature(query: Option<&str>) -> bool {
    parse_query(query).signature.is_some()
}

fn lookup_user(envd: &Envd, params: &Params) -> Result<TemplateUser, Response> {
    let name = params
        .username
        .clone()
        .unwrap_or_else(|| envd.cfg.template.default_user.clone());
    envd.user(&name).cloned().ok_or_else(|| {
        json_error(
            StatusCode::UNAUTHORIZED,
            format!("error looking up user '{name}': user: unknown user {name}"),
        )
    })
}

/// Parse `Accept-Encoding` like envd: `Ok(true)` = gzip, `Ok(false)` = identity.
fn negotiate(headers: &HeaderMap) -> Result<bool, String> {
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

/// Go's `mime.TypeByExtension` for common extensions.
fn type_by_extension(path: &str) -> Option<&'static str> {
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

/// Go's `mime.FormatMediaType("inline", {"filename": name})`: a token as is, printable
/// ASCII (and tab) quoted, anything else (control bytes such as `\n`, `\r`, ESC, DEL, or
/// non-ASCII) as an RFC 2231 `filename*=utf-8''…` percent-encoding, never raw.
fn content_disposition(name: &str) -> String {
    let is_token = |c: char| c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?=".contains(c);
    if !name.is_empty() && name.chars().all(is_token) {
        return format!("inline; filename={name}");
    }
    // Go's `needsEncoding`: a byte outside ' '..='~' other than tab.
    let needs_encoding = name
        .bytes()
        .any(|b| !(b' '..=b'~').contains(&b) && b != b'\t');
    if !needs_encoding {
        let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
        return format!("inline; filename=\"{escaped}\"");
    }
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    format!(
        "inline; filename*=utf-8''{}",
        percent_encoding::utf8_percent_encode(name, SET)
    )
}

fn http_date(secs: i64) -> String {
    let Ok(t) = time::OffsetDateTime::from_unix_timestamp(secs) else {
        return String::new();
    };
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[t.weekday().number_days_from_monday() as usize],
        t.day(),
        MONTHS[u8::from(t.month()) as usize - 1],
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// `GET /files`.
pub(crate) async fn download(
    State(envd): State<Arc<Envd>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = parse_query(q.as_deref());
    let raw_path = params.path.clone().unwrap_or_default();
    if let Err(r) = check_files_access(
        &envd,
        &headers,
        &raw_path,
        "read",
        params.username.as_deref(),
        params.signature.as_deref(),
        params.signature_expiration.as_deref(),
    ) {
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
    let opened = envd
        .fs
        .run(
            move || -> Result<(std::fs::File, std::fs::Metadata, Option<Vec<u8>>), Response> {
                let host = ctx.host(&p);
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
            },
        )
        .await;
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
    let (mut file, size): (Box<dyn Source>, u64) = match snapshot {
        Some(bytes) => {
            let len = bytes.len() as u64;
            (Box::new(std::io::Cursor::new(bytes)), len)
        }
        None => (Box::new(tokio::fs::File::from_std(file)), md.len()),
    };
    if gzip {
        let ctype = type_by_extension(&raw_path).unwrap_or("application/octet-stream");
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
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::VARY, "Accept-Encoding")
            .header(header::CONTENT_DISPOSITION, disposition)
            .header(header::CONTENT_ENCODING, "gzip")
            .header(header::CONTENT_TYPE, ctype)
            .body(Body::from_stream(stream))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    let ctype = match type_by_extension(&raw_path) {
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
                return json_error(StatusCode::INTERNAL_SERVER_ERROR, "seeker can't seek");
            }
            t
        }
    };
    let last_modified = http_date(md.mtime());
    if let Some(ims) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_http_date)
        && md.mtime() <= ims
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

use tokio::io::AsyncSeekExt as _;

/// Files up to this size are read in one go when opened for download.
const SNAPSHOT_MAX: u64 = 1 << 20;

/// What a download body is read from: a file, or a snapshot of a small one.
trait Source: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin + Send> Source for T {}

/// What a `Range` header asks for (a single range; several ranges are served whole).
enum RangeSpec {
    Full,
    Unsatisfiable,
    Part(u64, u64),
}

/// Parse `bytes=a-b`, `bytes=a-`, `bytes=-n` like Go's `http.ServeContent`.
fn parse_range(h: &str, size: u64) -> RangeSpec {
    let Some(spec) = h.strip_prefix("bytes=") else {
        return RangeSpec::Unsatisfiable;
    };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeSpec::Unsatisfiable;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return RangeSpec::Unsatisfiable;
        };
        if n == 0 || size == 0 {
            return RangeSpec::Unsatisfiable;
        }
        let n = n.min(size);
        return RangeSpec::Part(size - n, n);
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeSpec::Unsatisfiable;
    };
    if start >= size {
        return RangeSpec::Unsatisfiable;
    }
    let end = if b.is_empty() {
        size - 1
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e.min(size - 1),
            _ => return RangeSpec::Unsatisfiable,
        }
    };
    RangeSpec::Part(start, end - start + 1)
}

/// Parse an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to unix seconds.
fn parse_http_date(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, day, mon, year, hms, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = MONTHS.iter().position(|m| m == mon)? as u8 + 1;
    let mut t = hms.split(':').map(|x| x.parse::<u8>().ok());
    let (h, m, sec) = (t.next()??, t.next()??, t.next()??);
    let date = time::Date::from_calendar_date(
        year.parse().ok()?,
        time::Month::try_from(month).ok()?,
        day.parse().ok()?,
    )
    .ok()?;
    let dt = date.with_hms(h, m, sec).ok()?.assume_utc();
    Some(dt.unix_timestamp())
}

/// One element of the upload response.
#[derive(Debug, Serialize)]
struct UploadedEntry {
    path: String,
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    metadata: std::collections::BTreeMap<String, String>,
}

type Failure = (StatusCode, String);

/// `X-Metadata-*` headers → metadata (key lowercased, first value wins), validated.
fn metadata_of(headers: &HeaderMap) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut out = std::collections::BTreeMap::new();
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        let Some(v) = headers.get(name) else { continue };
        let v = v
            .to_str()
            .map_err(|_| format!("value of key {key:?} is not printable ASCII"))?;
        out.entry(key.to_ascii_lowercase())
            .or_insert_with(|| v.to_string());
    }
    let mut total = 0;
    for (k, v) in &out {
        if k.len() > 246 {
            return Err(format!("key {k:?} is longer than 246 bytes"));
        }
        if !k
            .bytes()
            .chain(v.bytes())
            .all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(format!("key {k:?} or its value is not printable ASCII"));
        }
        total += k.len() + v.len();
    }
    if total > 4096 {
        return Err("metadata is larger than 4096 bytes".into());
    }
    Ok(out)
}

fn write_metadata(
    file: &std::fs::File,
    metadata: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut names = vec![0u8; 8192];
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if n > 0 {
        for name in names[..n as usize].split(|b| *b == 0) {
            if name.starts_with(b"user.e2b.")
                && let Ok(c) = std::ffi::CString::new(name)
            {
                // SAFETY: valid fd and NUL-terminated name.
                unsafe { libc::fremovexattr(fd, c.as_ptr()) };
            }
        }
    }
    for (k, v) in metadata {
        let c = std::ffi::CString::new(format!("user.e2b.{k}")).map_err(std::io::Error::other)?;
        // SAFETY: valid fd, name and value buffer.
        let rc = unsafe { libc::fsetxattr(fd, c.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Open the target for writing as envd's `processFile` does (on a worker).
fn open_target(ctx: &FsCtx, path: &str, user: &TemplateUser) -> Result<std::fs::File, Failure> {
    ctx.ensure_dirs(&paths::dir(path), user).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error ensuring directories: {e}"),
        )
    })?;
    let host = ctx.host(path);
    let existed = match std::fs::metadata(&host) {
        Ok(md) if md.is_dir() => {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("path is a directory: {path}"),
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error getting file info: stat {path}: {}", go_err(&e)),
            ));
        }
    };
    let mut chowned = false;
    if existed {
        match ctx.chown(&host, user) {
            Ok(()) => chowned = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err((
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "error changing file ownership: chown {path}: {}",
                        go_err(&e)
                    ),
                ));
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o666)
        .open(&host)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOSPC) {
                (
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!("not enough inodes available: open {path}: {}", go_err(&e)),
                )
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error opening file: open {path}: {}", go_err(&e)),
                )
            }
        })?;
    if !chowned && ctx.isolated {
        std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid)).map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "error changing file ownership: chown {path}: {}",
                    go_err(&e)
                ),
            )
        })?;
    }
    Ok(file)
}

/// Write one file from a stream of chunks; returns its upload entry.
async fn process_file<S>(
    envd: &Envd,
    path: String,
    user: &TemplateUser,
    mut data: S,
    metadata: &std::collections::BTreeMap<String, String>,
    content_length: Option<u64>,
) -> Result<UploadedEntry, Failure>
where
    S: Stream<Item = Result<Bytes, Failure>> + Unpin,
{
    let ctx = envd.fsctx.clone();
    let (p, u) = (path.clone(), user.clone());
    let file = envd
        .fs
        .run(move || open_target(&ctx, &p, &u))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let mut out = tokio::fs::File::from_std(file);
    let enospc = |e: &std::io::Error| {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            let base = "not enough disk space available";
            let msg = match content_length {
                Some(n) if n > 0 => format!("attempted to write {n} bytes: {base}"),
                _ => base.to_string(),
            };
            (StatusCode::INSUFFICIENT_STORAGE, msg)
        } else {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error writing file: write {path}: {}", go_err(e)),
            )
        }
    };
    while let Some(chunk) = data.next().await {
        let chunk = chunk?;
        out.write_all(&chunk).await.map_err(|e| enospc(&e))?;
    }
    out.flush().await.map_err(|e| enospc(&e))?;
    let std_file = out.into_std().await;
    let md = metadata.clone();
    let written = tokio::task::spawn_blocking(move || {
        let r = write_metadata(&std_file, &md);
        let host_path = format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            std_file.as_raw_fd()
        });
        let persisted = read_metadata(std::path::Path::new(&host_path));
        (r, persisted)
    })
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (r, persisted) = written;
    if let Err(e) = r
        && e.raw_os_error() != Some(libc::ENOTSUP)
    {
        return Err(
            if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
                (
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!("not enough space for file metadata: {}", go_err(&e)),
                )
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error writing file metadata: {}", go_err(&e)),
                )
            },
        );
    }
    Ok(UploadedEntry {
        name: paths::base(&path),
        path,
        kind: "file",
        metadata: persisted,
    })
}

/// The request body as a stream of chunks, gunzipped when `Content-Encoding: gzip`.
fn body_stream(
    body: Body,
    gzip: bool,
) -> std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Failure>> + Send>> {
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

/// Most bytes of a refused upload's body read (and discarded) before answering, as Go's
/// HTTP server does after a handler that did not read the body (`maxPostHandlerReadBytes`).
const REFUSED_BODY_DRAIN: u64 = 256 << 10;
/// Longest wait for that rest of the body.
const REFUSED_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A request body that the handler reads through [`SharedBody::body`] and that can still
/// be drained after the handler gave up on it.
struct SharedBody(Arc<std::sync::Mutex<axum::body::BodyDataStream>>);

impl SharedBody {
    fn new(body: Body) -> Self {
        SharedBody(Arc::new(std::sync::Mutex::new(body.into_data_stream())))
    }

    /// The body for the handler (reads from the shared stream).
    fn body(&self) -> Body {
        Body::from_stream(SharedStream(self.0.clone()))
    }

    /// Read and discard the rest, up to [`REFUSED_BODY_DRAIN`] bytes; true when it ended.
    async fn drain(&self) -> bool {
        let mut rest = SharedStream(self.0.clone());
        let mut read = 0u64;
        let all = async {
            while let Some(chunk) = rest.next().await {
                let Ok(chunk) = chunk else { return false };
                read += chunk.len() as u64;
                if read > REFUSED_BODY_DRAIN {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(REFUSED_BODY_WAIT, all)
            .await
            .unwrap_or(false)
    }
}

struct SharedStream(Arc<std::sync::Mutex<axum::body::BodyDataStream>>);

impl Stream for SharedStream {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.0.lock() {
            Ok(mut inner) => inner.poll_next_unpin(cx),
            Err(_) => std::task::Poll::Ready(None),
        }
    }
}

/// `POST /files`. A refused upload still reads (a bounded part of) its body before the
/// answer goes out, so the client sees the status instead of a broken pipe.
pub(crate) async fn upload(
    State(envd): State<Arc<Envd>>,
    RawQuery(q): RawQuery,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let shared = SharedBody::new(body);
    let mut resp = upload_body(envd, q, parts.headers, shared.body()).await;
    if !resp.status().is_success() && !shared.drain().await {
        // Too much left: answer and close, as Go does.
        resp.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

async fn upload_body(
    envd: Arc<Envd>,
    q: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = parse_query(q.as_deref());
    let raw_path = params.path.clone().unwrap_or_default();
    if let Err(r) = check_files_access(
        &envd,
        &headers,
        &raw_path,
        "write",
        params.username.as_deref(),
        params.signature.as_deref(),
        params.signature_expiration.as_deref(),
    ) {
        return r;
    }
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        }) {
        None => false,
        Some(e) if e.is_empty() || e == "identity" => false,
        Some(e) if e == "gzip" => true,
        Some(_) => {
            let raw = headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            return json_error(
                StatusCode::BAD_REQUEST,
                format!(
                    "error decompressing request body: unsupported Content-Encoding: {raw}, supported: [gzip]"
                ),
            );
        }
    };
    let user = match lookup_user(&envd, &params) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let metadata = match metadata_of(&headers) {
        Ok(m) => m,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, format!("invalid metadata: {e}")),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let content_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    let workdir = envd.template().workdir.clone();
    let result: Result<Vec<UploadedEntry>, Failure> = if media == "application/octet-stream" {
        match params.path.as_deref() {
            None => Err((
                StatusCode::BAD_REQUEST,
                "path query parameter is required for raw body upload".into(),
            )),
            Some(p) => match paths::resolve(p, &user, workdir.as_deref()) {
                Err(e) => Err((
                    StatusCode::BAD_REQUEST,
                    format!("error resolving path: {e}"),
                )),
                Ok(path) => process_file(
                    &envd,
                    path,
                    &user,
                    body_stream(body, gzip),
                    &metadata,
                    content_length,
                )
                .await
                .map(|e| vec![e]),
            },
        }
    } else if media.starts_with("multipart/") {
        multipart_upload(
            &envd,
            &params,
            &user,
            &content_type,
            body_stream(body, gzip),
            &metadata,
            content_length,
        )
        .await
    } else {
        Err((
            StatusCode::BAD_REQUEST,
            format!(
                "unsupported content type: {content_type}, expected multipart/form-data or application/octet-stream"
            ),
        ))
    };
    match result {
        Ok(entries) => {
            let json = serde_json::to_vec(&entries).unwrap_or_else(|_| b"[]".to_vec());
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                json,
            )
                .into_response()
        }
        Err((status, msg)) => json_error(status, msg),
    }
}

async fn multipart_upload(
    envd: &Envd,
    params: &Params,
    user: &TemplateUser,
    content_type: &str,
    body: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Failure>> + Send>>,
    metadata: &std::collections::BTreeMap<String, String>,
    content_length: Option<u64>,
) -> Result<Vec<UploadedEntry>, Failure> {
    let boundary = multer::parse_boundary(content_type).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error parsing multipart form: {e}"),
        )
    })?;
    let stream = body.map(|r| r.map_err(|(_, m)| std::io::Error::other(m)));
    let mut mp = multer::Multipart::new(stream, boundary);
    let workdir = envd.template().workdir.clone();
    let mut entries: Vec<UploadedEntry> = Vec::new();
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                return Err((
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error reading form: {e}"),
                ));
            }
        };
        if field.name() != Some("file") {
            continue;
        }
        let target = match &params.path {
            Some(p) => p.clone(),
            None => match field.file_name() {
                Some(f) if !f.is_empty() => f.to_string(),
                _ => {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        "error getting multipart custom part file name: filename is empty".into(),
                    ));
                }
            },
        };
        let path = paths::resolve(&target, user, workdir.as_deref()).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("error resolving path: {e}"),
            )
        })?;
        if entries.iter().any(|e| e.path == path) {
            let others: Vec<&str> = entries
                .iter()
                .filter(|e| e.path != path)
                .map(|e| e.path.as_str())
                .collect();
            let mut msg = format!(
                "you cannot upload multiple files to the same path '{path}' in one upload request, only the first specified file was uploaded"
            );
            if others.len() > 1 {
                msg.push_str(&format!(
                    ", also the following files were uploaded: {}",
                    others.join(", ")
                ));
            }
            return Err((StatusCode::BAD_REQUEST, msg));
        }
        let data = field.map(|r| {
            r.map_err(|e| {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("error writing file: {e}"),
                )
            })
        });
        let entry =
            process_file(envd, path, user, Box::pin(data), metadata, content_length).await?;
        entries.push(entry);
    }
    Ok(entries)
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

    #[test]
    fn ranges_and_dates() {
        assert!(matches!(
            parse_range("bytes=2-4", 10),
            RangeSpec::Part(2, 3)
        ));
        assert!(matches!(parse_range("bytes=-3", 10), RangeSpec::Part(7, 3)));
        assert!(matches!(parse_range("bytes=5-", 10), RangeSpec::Part(5, 5)));
        assert!(matches!(
            parse_range("bytes=10-", 10),
            RangeSpec::Unsatisfiable
        ));
        assert!(matches!(parse_range("bytes=0-1,3-4", 10), RangeSpec::Full));
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(content_disposition("a.txt"), "inline; filename=a.txt");
        assert_eq!(
            content_disposition("a b.txt"),
            "inline; filename=\"a b.txt\""
        );
        assert_eq!(
            content_disposition("a\nb\rc\u{1b}d"),
            "inline; filename*=utf-8''a%0Ab%0Dc%1Bd"
        );
        assert_eq!(
            content_disposition("tab\there"),
            "inline; filename=\"tab\there\""
        );
        for name in ["x\n", "x\r", "x\u{1b}", "x\u{7f}"] {
            assert!(
                axum::http::HeaderValue::from_str(&content_disposition(name)).is_ok(),
                "{name:?}"
            );
        }
    }
}
