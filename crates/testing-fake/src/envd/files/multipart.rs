//! A `multipart/form-data` upload: every `file` part written to its path.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use futures::StreamExt as _;

use super::super::{Envd, paths};
use super::gzip::BodyStream;
use super::write::{UploadedEntry, process_file};
use super::{Failure, Params};
use crate::template::TemplateUser;

/// Write each `file` part; `params.path`, else the part's file name, names its target.
pub(super) async fn multipart_upload(
    envd: &Envd,
    params: &Params,
    user: &TemplateUser,
    content_type: &str,
    body: BodyStream,
    metadata: &BTreeMap<String, String>,
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
