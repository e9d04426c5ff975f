//! `e2bx ls`, `cat` and `stat`: directory listing (one level, `ls -l`-like lines or JSON),
//! a file's bytes streamed raw to stdout, and one path's metadata (lines or JSON). All
//! three go through fs-e2b, so they see what the sandbox user may see.

use exec_world::{FileKind, Fs as _, Metadata, WorldPath};
use fs_e2b::E2bFs;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::commands::cp::{fs_error, remote_path, world_path};
use crate::error::CliResult;

fn strip(path: &str) -> &str {
    remote_path(path).unwrap_or(path)
}

fn kind(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        _ => "other",
    }
}

/// `ls -l`'s ten-character mode string (`drwxr-xr-x`, with `s`/`t` for the special bits).
pub fn permissions(k: FileKind, mode: u32) -> String {
    let mut out = String::with_capacity(10);
    out.push(match k {
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::File => '-',
        _ => '?',
    });
    let special = [(0o4000, 's'), (0o2000, 's'), (0o1000, 't')];
    for (i, (bit, letter)) in special.iter().enumerate() {
        let shift = 6 - 3 * i;
        out.push(if mode & (0o4 << shift) != 0 { 'r' } else { '-' });
        out.push(if mode & (0o2 << shift) != 0 { 'w' } else { '-' });
        let x = mode & (0o1 << shift) != 0;
        out.push(match (mode & bit != 0, x) {
            (true, true) => *letter,
            (true, false) => letter.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    out
}

/// RFC 3339 UTC time of `m`'s modification, when known.
fn modified(m: &Metadata) -> Option<String> {
    let t = time::OffsetDateTime::from(m.mtime?);
    t.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// One listed or stat-ed path: its absolute path, base name and metadata.
struct Entry {
    path: WorldPath,
    name: String,
    meta: Metadata,
}

/// The JSON shape of one entry (stable for scripts).
fn entry_json(e: &Entry) -> Value {
    let mode = e.meta.mode.unwrap_or(0);
    json!({
        "name": e.name,
        "path": e.path.as_str(),
        "type": kind(e.meta.kind),
        "size": e.meta.size,
        "mode": format!("{mode:o}"),
        "permissions": permissions(e.meta.kind, mode),
        "owner": e.meta.owner,
        "group": e.meta.group,
        "modified": modified(&e.meta),
        "symlinkTarget": e.meta.symlink_target,
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

fn entry_line(e: &Entry) -> String {
    let m = &e.meta;
    let mut name = shown_name(&e.name);
    if m.kind == FileKind::Dir {
        name.push('/');
    }
    if let Some(t) = &m.symlink_target {
        name.push_str(" -> ");
        name.push_str(&shown_name(t));
    }
    format!(
        "{} {:<8} {:<8} {:>10} {} {}",
        permissions(m.kind, m.mode.unwrap_or(0)),
        shown_name(m.owner.as_deref().unwrap_or("-")),
        shown_name(m.group.as_deref().unwrap_or("-")),
        m.size,
        modified(m).as_deref().unwrap_or("-"),
        name
    )
}

/// `path` made absolute against `fs`'s working directory.
fn absolute(fs: &E2bFs, path: &str) -> CliResult<WorldPath> {
    Ok(world_path(path)?.resolve(fs.cwd()))
}

/// The entry for `abs` itself (`lstat`, as `ls -l` shows a link; its name is the last
/// component, `/` for the root).
async fn self_entry(fs: &E2bFs, abs: WorldPath, shown: &str) -> CliResult<Entry> {
    let meta = fs.lstat(&abs).await.map_err(|e| fs_error(shown, &e))?;
    let name = abs.as_str().rsplit('/').next().filter(|n| !n.is_empty());
    let name = name.unwrap_or("/").to_owned();
    Ok(Entry {
        path: abs,
        name,
        meta,
    })
}

/// `ls PATH`: a directory's entries sorted by name, or the entry itself for a file.
pub async fn ls(fs: &E2bFs, path: &str, json_out: bool) -> CliResult {
    let shown = strip(path);
    let abs = absolute(fs, shown)?;
    let is_dir = fs
        .stat(&abs)
        .await
        .map_err(|e| fs_error(shown, &e))?
        .is_dir();
    let mut entries = if is_dir {
        fs.read_dir(&abs)
            .await
            .map_err(|e| fs_error(shown, &e))?
            .into_iter()
            .map(|d| Entry {
                path: d.path,
                name: d.name,
                meta: d.metadata,
            })
            .collect()
    } else {
        vec![self_entry(fs, abs, shown).await?]
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

/// `stat PATH` (of the path itself: a symlink is shown as a link, as `stat` does).
pub async fn stat(fs: &E2bFs, path: &str, json_out: bool) -> CliResult {
    let shown = strip(path);
    let e = self_entry(fs, absolute(fs, shown)?, shown).await?;
    let m = &e.meta;
    let text = if json_out {
        format!("{}\n", entry_json(&e))
    } else {
        let mode = m.mode.unwrap_or(0);
        let mut s = format!(
            "path: {}\ntype: {}\nsize: {}\nmode: {:o} ({})\nowner: {}\ngroup: {}\nmodified: {}\n",
            shown_name(e.path.as_str()),
            kind(m.kind),
            m.size,
            mode,
            permissions(m.kind, mode),
            shown_name(m.owner.as_deref().unwrap_or("-")),
            shown_name(m.group.as_deref().unwrap_or("-")),
            modified(m).as_deref().unwrap_or("-"),
        );
        if let Some(t) = &m.symlink_target {
            s.push_str(&format!("symlink target: {}\n", shown_name(t)));
        }
        s
    };
    print_out(text.as_bytes()).await?;
    Ok(0)
}

/// `cat PATH`: raw bytes, streamed, read as the sandbox user.
pub async fn cat(fs: &E2bFs, path: &str) -> CliResult {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(FileKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(FileKind::File, 0o644), "-rw-r--r--");
        assert_eq!(permissions(FileKind::Symlink, 0o777), "lrwxrwxrwx");
        assert_eq!(permissions(FileKind::File, 0o4755), "-rwsr-xr-x");
        assert_eq!(permissions(FileKind::File, 0o2644), "-rw-r-Sr--");
        assert_eq!(permissions(FileKind::Dir, 0o1777), "drwxrwxrwt");
        assert_eq!(permissions(FileKind::Other, 0o600), "?rw-------");
    }
}
