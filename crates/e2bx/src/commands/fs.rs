//! `e2bx ls`, `cat` and `stat`: directory listing (one level, `ls -l`-like lines or JSON),
//! a file's bytes streamed raw to stdout, and one path's metadata (lines or JSON).

use e2b_core::EnvdApi;
use e2b_core::proto::filesystem::{EntryInfo, FileType};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::commands::cp::{fs_error, remote_path, world_path};
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

/// A name as `ls` shows it on a terminal: printable as is; with a control character
/// (newline, carriage return, ESC, ...), a backslash or a quote, in `$'...'` quoting with
/// C escapes, so a name can neither forge listing lines nor drive the terminal.
pub fn shown_name(name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| !c.is_control() && c != '\\' && c != '\'');
    if plain {
        return name.to_owned();
    }
    let mut out = String::from("$'");
    for c in name.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => out.push_str(&format!("\\{:03o}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn entry_line(e: &EntryInfo) -> String {
    let mut name = shown_name(&e.name);
    if e.file_type == FileType::Directory {
        name.push('/');
    }
    if let Some(t) = &e.symlink_target {
        name.push_str(" -> ");
        name.push_str(&shown_name(t));
    }
    format!(
        "{} {:<8} {:<8} {:>10} {} {}",
        e.permissions,
        shown_name(&e.owner),
        shown_name(&e.group),
        e.size,
        e.modified_time.as_deref().unwrap_or("-"),
        name
    )
}

/// `ls PATH`: a directory's entries sorted by name, or the entry itself for a file.
pub async fn ls(sandbox: &dyn EnvdApi, path: &str, json_out: bool) -> CliResult {
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
pub async fn stat(sandbox: &dyn EnvdApi, path: &str, json_out: bool) -> CliResult {
    let path = strip(path);
    let e = sandbox.stat(path, None).await.map_err(for_path(path))?;
    let text = if json_out {
        format!("{}\n", entry_json(&e))
    } else {
        let mut s = format!(
            "path: {}\ntype: {}\nsize: {}\nmode: {:o} ({})\nowner: {}\ngroup: {}\nmodified: {}\n",
            shown_name(&e.path),
            kind(e.file_type),
            e.size,
            e.mode,
            e.permissions,
            shown_name(&e.owner),
            shown_name(&e.group),
            e.modified_time.as_deref().unwrap_or("-"),
        );
        if let Some(t) = &e.symlink_target {
            s.push_str(&format!("symlink target: {}\n", shown_name(t)));
        }
        s
    };
    print_out(text.as_bytes()).await?;
    Ok(0)
}

/// `cat PATH`: raw bytes, streamed, read as the sandbox user.
pub async fn cat(fs: &fs_e2b::E2bFs, path: &str) -> CliResult {
    use exec_world::Fs as _;
    let path = strip(path);
    let mut body = fs
        .read_stream(&world_path(path)?)
        .await
        .map_err(|e| fs_error(path, &e))?;
    let mut stdout = tokio::io::stdout();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| fs_error(path, &e))?;
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
