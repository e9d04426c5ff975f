//! `e2bx ls`, `cat` and `stat`: directory listing (one level, `ls -l`-like lines or JSON),
//! a file's bytes streamed raw to stdout, and one path's metadata (lines or JSON).

use e2b_core::proto::filesystem::{EntryInfo, FileType};
use e2b_core::{EnvdApi as _, Sandbox};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::commands::cp::remote_path;
use crate::error::{CliResult, for_path};

fn strip(path: &str) -> &str {
    remote_path(path).unwrap_or(path)
}

fn kind(t: FileType) -> &'static str {
    match t {
        FileType::File => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

/// The JSON shape of one entry (stable for scripts).
pub fn entry_json(e: &EntryInfo) -> Value {
    json!({
        "name": e.name,
        "path": e.path,
        "type": kind(e.file_type),
        "size": e.size,
        "mode": format!("{:o}", e.mode),
        "permissions": e.permissions,
        "owner": e.owner,
        "group": e.group,
        "modified": e.modified_time,
        "symlinkTarget": e.symlink_target,
    })
}

fn entry_line(e: &EntryInfo) -> String {
    let mut name = e.name.clone();
    if e.file_type == FileType::Directory {
        name.push('/');
    }
    if let Some(t) = &e.symlink_target {
        name.push_str(" -> ");
        name.push_str(t);
    }
    format!(
        "{} {:<8} {:<8} {:>10} {} {}",
        e.permissions,
        e.owner,
        e.group,
        e.size,
        e.modified_time.as_deref().unwrap_or("-"),
        name
    )
}

/// `ls PATH`: a directory's entries sorted by name, or the entry itself for a file.
pub async fn ls(sandbox: &Sandbox, path: &str, json_out: bool) -> CliResult {
    let path = strip(path);
    let info = sandbox.stat(path, None).await.map_err(for_path(path))?;
    let mut entries = if info.file_type == FileType::Directory {
        sandbox
            .list_dir(path, 1, None)
            .await
            .map_err(for_path(path))?
    } else {
        vec![info]
    };
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    if json_out {
        let all: Vec<Value> = entries.iter().map(entry_json).collect();
        out.push_str(&Value::Array(all).to_string());
        out.push('\n');
    } else {
        for e in &entries {
            out.push_str(&entry_line(e));
            out.push('\n');
        }
    }
    print_out(out.as_bytes()).await?;
    Ok(0)
}

/// `stat PATH`.
pub async fn stat(sandbox: &Sandbox, path: &str, json_out: bool) -> CliResult {
    let path = strip(path);
    let e = sandbox.stat(path, None).await.map_err(for_path(path))?;
    let text = if json_out {
        format!("{}\n", entry_json(&e))
    } else {
        let mut s = format!(
            "path: {}\ntype: {}\nsize: {}\nmode: {:o} ({})\nowner: {}\ngroup: {}\nmodified: {}\n",
            e.path,
            kind(e.file_type),
            e.size,
            e.mode,
            e.permissions,
            e.owner,
            e.group,
            e.modified_time.as_deref().unwrap_or("-"),
        );
        if let Some(t) = &e.symlink_target {
            s.push_str(&format!("symlink target: {t}\n"));
        }
        s
    };
    print_out(text.as_bytes()).await?;
    Ok(0)
}

/// `cat PATH`: raw bytes, streamed.
pub async fn cat(sandbox: &Sandbox, path: &str) -> CliResult {
    let path = strip(path);
    let mut body = sandbox.download(path, None).await.map_err(for_path(path))?;
    let mut stdout = tokio::io::stdout();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(for_path(path))?;
        stdout.write_all(&chunk).await?;
    }
    stdout.flush().await?;
    Ok(0)
}

async fn print_out(b: &[u8]) -> std::io::Result<()> {
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b).await?;
    stdout.flush().await
}
