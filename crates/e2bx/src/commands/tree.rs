//! `e2bx cp -r SRC DST`: a directory tree up (local → `sbx:PATH`) or down, as one tar
//! stream through one `tar` process of the sandbox user (`exec_world::tree`), with one
//! progress bar (files and bytes) on a terminal. The tree appears whole at the
//! destination or not at all; hostile archive entries are refused.

use std::path::{Path, PathBuf};

use exec_world::Fs as _;
use exec_world::tree::{self, TreeOptions, TreeSummary};
use fs_e2b::E2bFs;
use subprocess_e2b::E2bSubprocess;

use crate::cli::CpArgs;
use crate::commands::cp::{fs_error, remote_path, world_path};
use crate::error::{CliError, CliResult};
use crate::progress::TreeBar;

/// Copy a tree; returns 0.
pub async fn cp_tree(fs: &E2bFs, proc: &E2bSubprocess, args: &CpArgs, quiet: bool) -> CliResult {
    match (remote_path(&args.src), remote_path(&args.dst)) {
        (None, Some(dst)) => up(fs, proc, Path::new(&args.src), dst, quiet).await,
        (Some(src), None) => down(fs, proc, src, Path::new(&args.dst), quiet).await,
        _ => Err(CliError::msg(
            "cp -r copies between this machine and the sandbox: exactly one path takes sbx: (or :)",
        )),
    }
}

fn base(p: &str) -> Option<String> {
    p.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .map(str::to_owned)
}

fn report(sum: &TreeSummary, quiet: bool) {
    if quiet {
        return;
    }
    for (p, why) in &sum.skipped {
        eprintln!("e2bx: skipped {p} ({why:?}: not a regular file, directory or symlink)");
    }
    for p in &sum.sparse {
        eprintln!("e2bx: note: {p} is sparse; its holes were copied as zeros");
    }
}

async fn up(fs: &E2bFs, proc: &E2bSubprocess, src: &Path, dst: &str, quiet: bool) -> CliResult {
    let shown = src.display().to_string();
    if !src.is_dir() {
        return Err(CliError::msg(format!(
            "{shown}: not a directory; copy a file with `e2bx cp` (without -r)"
        )));
    }
    let canon = std::fs::canonicalize(src).map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
    let name = base(&canon.to_string_lossy()).unwrap_or_else(|| "tree".into());
    let into_dir = dst.is_empty()
        || dst.ends_with('/')
        || matches!(fs.stat(&world_path(dst)?).await, Ok(m) if m.is_dir());
    let target = if dst.is_empty() {
        name
    } else if into_dir {
        format!("{}/{name}", dst.trim_end_matches('/'))
    } else {
        dst.to_owned()
    };
    let abs = fs.resolve(&world_path(&target)?);
    let root = canon.clone();
    let (entries, bytes) = tokio::task::spawn_blocking(move || tree::local_totals(&root))
        .await
        .map_err(|e| CliError::msg(e.to_string()))?
        .map_err(|e| CliError::msg(format!("{shown}: {e}")))?;
    let bar = TreeBar::new(Some((entries, bytes)), quiet);
    let b2 = bar.clone();
    let opts = TreeOptions::default().progress(move |p| b2.set(p.files, p.bytes));
    // Through one file written by fs-e2b (envd `/files`, streamed): E2B's process stdin
    // is one request per 64 KiB, several times slower for a large tree.
    let res = tree::upload_via_file(fs, proc, &canon, &abs, &opts).await;
    bar.finish();
    let sum = res.map_err(|e| fs_error(&target, &e))?;
    report(&sum, quiet);
    Ok(0)
}

async fn down(fs: &E2bFs, proc: &E2bSubprocess, src: &str, dst: &Path, quiet: bool) -> CliResult {
    let abs = fs.resolve(&world_path(src)?);
    let name = base(abs.as_str()).unwrap_or_else(|| "tree".into());
    let target: PathBuf = if dst.is_dir() || dst.as_os_str().to_string_lossy().ends_with('/') {
        dst.join(name)
    } else {
        dst.to_owned()
    };
    let bar = TreeBar::new(None, quiet);
    let b2 = bar.clone();
    let opts = TreeOptions::default().progress(move |p| b2.set(p.files, p.bytes));
    // Through one archive file read by fs-e2b (envd `/files`): E2B streams process
    // output as events, slower for a large tree.
    let res = tree::download_via_file(fs, proc, &abs, &target, &opts).await;
    bar.finish();
    let sum = res.map_err(|e| fs_error(src, &e))?;
    report(&sum, quiet);
    Ok(0)
}
