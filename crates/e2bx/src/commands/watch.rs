//! `e2bx watch PATH`: the changes under a sandbox directory, one line each (or one JSON
//! object a line with `--json`), until Ctrl-C or the watch fails.

use std::io::Write as _;

use exec_world::{Fs as _, WatchOptions};
use fs_e2b::E2bFs;
use futures::StreamExt as _;

use crate::cli::WatchArgs;
use crate::commands::cp::{fs_error, remote_path, world_path};
use crate::error::{CliError, CliResult};

/// Watch until interrupted; returns 0 only if the stream ends by itself.
pub async fn watch(fs: &E2bFs, args: &WatchArgs, json: bool) -> CliResult {
    let path = remote_path(&args.path).unwrap_or(&args.path);
    let wp = world_path(path)?;
    let mut events = fs
        .watch(&wp, WatchOptions::default().recursive(args.recursive))
        .await
        .map_err(|e| fs_error(path, &e))?;
    let mut out = std::io::stdout();
    while let Some(ev) = events.next().await {
        let ev = ev.map_err(|e| fs_error(path, &e))?;
        let line = if json {
            serde_json::json!({"seq": ev.seq, "kind": ev.kind.as_str(), "path": ev.path})
                .to_string()
        } else {
            format!("{} {} {}", ev.seq, ev.kind, ev.path)
        };
        // Line by line: a reader piping this sees each change as it happens.
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| CliError::msg(format!("stdout: {e}")))?;
    }
    Ok(0)
}
