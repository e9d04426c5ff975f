//! `e2bx sandbox snapshot|snapshots|fork|delete-snapshot`: snapshots of a sandbox's files
//! (create sandboxes from one with `--template SNAPSHOT_ID`) and forks of a running one.

use std::time::Duration;

use clap::Args;
use e2b_core::{ForkOptions, SnapshotQuery};
use serde_json::json;

use super::sandbox::say;
use crate::cli::Global;
use crate::error::{CliError, CliResult, for_sandbox};
use crate::target::Backend;

/// `e2bx sandbox snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Sandbox ID or name.
    #[arg(value_name = "ID|NAME")]
    pub id: String,
    /// Snapshot name (`name` or `name:tag`); a name in use gets a new build.
    #[arg(long)]
    pub name: Option<String>,
}

/// `e2bx sandbox snapshots`.
#[derive(Debug, Args)]
pub struct SnapshotsArgs {
    /// Only snapshots of this sandbox (ID or name).
    #[arg(long, value_name = "ID|NAME")]
    pub sandbox: Option<String>,
}

/// `e2bx sandbox fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Sandbox ID or name.
    #[arg(value_name = "ID|NAME")]
    pub id: String,
    /// How many forks (1..=100).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub count: u32,
    /// Lifetime of each fork in seconds.
    #[arg(long, value_name = "S", default_value_t = 300)]
    pub timeout: u64,
}

/// `e2bx sandbox delete-snapshot`.
#[derive(Debug, Args)]
pub struct DeleteSnapshotArgs {
    /// Snapshot ID or name.
    pub snapshot: String,
}

/// Snapshot a sandbox; prints the snapshot ID.
pub async fn snapshot(backend: &Backend, g: &Global, a: &SnapshotArgs) -> CliResult {
    let id = backend.resolve(&a.id).await?;
    let info = backend
        .client
        .create_snapshot(&id, a.name.as_deref())
        .await
        .map_err(for_sandbox(&id))?;
    if g.json {
        println!(
            "{}",
            json!({"snapshotId": info.snapshot_id, "names": info.names, "sandboxId": id})
        );
    } else {
        println!("{}", info.snapshot_id);
    }
    Ok(0)
}

/// List snapshots (one ID per line, or a JSON array).
pub async fn snapshots(backend: &Backend, g: &Global, a: &SnapshotsArgs) -> CliResult {
    let mut q = SnapshotQuery::new();
    if let Some(s) = &a.sandbox {
        q = q.sandbox(backend.resolve(s).await?);
    }
    let all = backend.client.list_all_snapshots(&q).await?;
    if g.json {
        let v: Vec<_> = all
            .iter()
            .map(|s| json!({"snapshotId": s.snapshot_id, "names": s.names}))
            .collect();
        println!("{}", serde_json::Value::Array(v));
    } else {
        for s in &all {
            println!("{}", s.snapshot_id);
        }
    }
    Ok(0)
}

/// Fork a sandbox; prints the new IDs. Exit 1 when any fork failed (the others are kept
/// and printed).
pub async fn fork(backend: &Backend, g: &Global, a: &ForkArgs) -> CliResult {
    let id = backend.resolve(&a.id).await?;
    let opts = ForkOptions::new()
        .count(a.count)
        .timeout(Duration::from_secs(a.timeout.max(1)));
    let results = backend.client.fork(&id, &opts).await.map_err(|e| {
        if e.is_conflict() {
            CliError::msg(format!(
                "sandbox {id} cannot be forked now (paused?); `e2bx sandbox resume {id}` first"
            ))
        } else {
            for_sandbox(&id)(e)
        }
    })?;
    let mut failed = 0;
    let mut ids = Vec::new();
    for r in results {
        match r {
            Ok(sb) => ids.push(sb.id().to_owned()),
            Err(e) => {
                failed += 1;
                eprintln!("e2bx: a fork of {id} failed: {e}");
            }
        }
    }
    if g.json {
        println!(
            "{}",
            json!({"sandboxId": id, "forks": ids, "failed": failed})
        );
    } else {
        for f in &ids {
            println!("{f}");
        }
    }
    Ok(i32::from(failed > 0))
}

/// Delete a snapshot.
pub async fn delete(backend: &Backend, g: &Global, a: &DeleteSnapshotArgs) -> CliResult {
    if backend.client.delete_snapshot(&a.snapshot).await? {
        say(g, &format!("deleted snapshot {}", a.snapshot));
        Ok(0)
    } else {
        Err(CliError::msg(format!(
            "no snapshot {}; see `e2bx sandbox snapshots`",
            a.snapshot
        )))
    }
}
