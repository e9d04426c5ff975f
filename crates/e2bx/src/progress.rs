//! The copy progress bar (indicatif): shown only for files of at least 1 MiB, when stderr
//! is a terminal and `--quiet` is off; otherwise every call is a no-op.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Files smaller than this get no bar.
const MIN_BYTES: u64 = 1 << 20;

/// A byte-counting bar (cheap to clone), possibly hidden.
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar for `total` bytes.
    pub fn new(total: u64, quiet: bool) -> Progress {
        if quiet || total < MIN_BYTES || !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{bytes:>10}/{total_bytes:10} [{bar:30}] {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar: Some(bar) }
    }

    /// Count `n` more bytes.
    pub fn inc(&self, n: usize) {
        if let Some(b) = &self.bar {
            b.inc(n as u64);
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A tree copy's bar: files and bytes, against totals when known (upload), else a
/// spinner with the counts (download). Shown when stderr is a terminal and not `--quiet`.
#[derive(Clone)]
pub struct TreeBar {
    bar: Option<ProgressBar>,
}

impl TreeBar {
    /// A bar for `totals` = `(entries, bytes)`, or a spinner when `None`.
    pub fn new(totals: Option<(u64, u64)>, quiet: bool) -> TreeBar {
        if quiet || !std::io::stderr().is_terminal() {
            return TreeBar { bar: None };
        }
        let bar = match totals {
            Some((entries, bytes)) => {
                let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template(&format!(
                    "{{msg}}/{entries} files {{bytes:>10}}/{{total_bytes:10}} [{{bar:30}}] {{binary_bytes_per_sec}} eta {{eta}}"
                )) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar
            }
            None => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template(
                    "{spinner} {msg} files {bytes:>10} {binary_bytes_per_sec}",
                ) {
                    bar.set_style(style);
                }
                bar
            }
        };
        TreeBar { bar: Some(bar) }
    }

    /// Files and bytes done so far.
    pub fn set(&self, files: u64, bytes: u64) {
        if let Some(b) = &self.bar {
            b.set_position(bytes);
            b.set_message(files.to_string());
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
