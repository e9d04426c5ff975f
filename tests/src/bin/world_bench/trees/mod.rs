//! The tree mode (`world-bench --trees`): issue 21's Performance section. Upload and
//! download of a tree (10,000 files of 4 KiB and 20 of 4 MiB by default) through
//! `exec_world::tree` on fs-e2b, against `tar` with one plain `curl` through envd's
//! `/files` and one envd process extracting (the fastest honest form of the same archive),
//! and against the official SDKs writing the same files (their multi-file `write`) and
//! reading them back (`list` then `read`, they have no tree download); and the latency of
//! a watch event (a file made in the sandbox, its event on the host).
//!
//! Every contender runs in a process of its own (`runner.rs`), so the RSS printed is that
//! process's peak (`wait4`): it makes its sandbox, does the untimed setup, the transfer
//! and nothing else of size (a download is checked by this process afterwards, an upload
//! by a `sha256sum` pipeline inside the sandbox).

mod data;
mod ours;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::child::{AnyError, Outcome};
use super::emulator::Emulator;
use super::opts::Opts;
use super::plan::Figure;
use super::report::{self, FigureResult, Target};
use super::runner::Measure;

/// The tree mode's sizes (`--tiny` and `--quick` shrink them).
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Small files.
    pub small_n: u64,
    /// Bytes of each small file.
    pub small_bytes: u64,
    /// Large files.
    pub large_n: u64,
    /// Bytes of each large file.
    pub large_bytes: u64,
    /// Timed watch events.
    pub watch_n: u64,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            small_n: 10_000,
            small_bytes: 4 << 10,
            large_n: 20,
            large_bytes: 4 << 20,
            watch_n: 200,
        }
    }
}

impl Sizes {
    /// `--quick`: a fifth of the tree.
    pub fn quick() -> Sizes {
        Sizes {
            small_n: 2_000,
            large_n: 4,
            watch_n: 50,
            ..Sizes::default()
        }
    }

    /// `--tiny`: a few files, to run every code path in a test.
    pub fn tiny() -> Sizes {
        Sizes {
            small_n: 30,
            small_bytes: 4 << 10,
            large_n: 2,
            large_bytes: 64 << 10,
            watch_n: 5,
        }
    }

    /// File content bytes of the tree.
    pub fn bytes(&self) -> u64 {
        self.small_n * self.small_bytes + self.large_n * self.large_bytes
    }
}

/// The host side of a run: the source tree, its archive, its digest, where downloads go.
struct Paths {
    /// The directory the trees and the emulator's root live in ([`tree_base`]).
    base: PathBuf,
    src: PathBuf,
    tar: PathBuf,
    digest: String,
    out: PathBuf,
    bytes: u64,
    watch_n: u64,
}

static PATHS: OnceLock<Paths> = OnceLock::new();

/// Whether `figure` is one of the tree mode's.
pub fn is_tree_figure(figure: &str) -> bool {
    figure.starts_with("tree_") || figure == "op_watch"
}

/// Where `contender` downloads to on `figure`.
fn out_dir(out: &Path, figure: &str, contender: &str) -> PathBuf {
    out.join(format!("{figure}-{contender}"))
}

/// The `WB_TREE_*` variables of a contender process on a tree figure (none otherwise).
pub fn vars(figure: &str, contender: &str) -> Vec<(String, String)> {
    let Some(p) = PATHS.get().filter(|_| is_tree_figure(figure)) else {
        return Vec::new();
    };
    [
        ("WB_TREE_SRC", p.src.display().to_string()),
        ("WB_TREE_TAR", p.tar.display().to_string()),
        ("WB_TREE_DIGEST", p.digest.clone()),
        (
            "WB_TREE_OUT",
            out_dir(&p.out, figure, contender).display().to_string(),
        ),
        ("WB_TREE_BYTES", p.bytes.to_string()),
        ("WB_WATCH_N", p.watch_n.to_string()),
        ("TMPDIR", p.base.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A `WB_TREE_*` string in a contender process.
pub fn env(key: &str) -> Result<String, AnyError> {
    std::env::var(key).map_err(|_| format!("{key} is not set").into())
}

const TRANSFER: &[&str] = &["tarcurl", "ours", "js", "py"];

fn figures(opts: &Opts) -> Vec<Figure> {
    let s = &opts.tree;
    let what = format!(
        "{} x {} KiB + {} x {} KiB ({:.1} MiB)",
        s.small_n,
        s.small_bytes >> 10,
        s.large_n,
        s.large_bytes >> 10,
        s.bytes() as f64 / (1024.0 * 1024.0)
    );
    let keep = |list: &[&'static str]| -> Vec<&'static str> {
        list.iter()
            .copied()
            .filter(|c| opts.only.is_empty() || opts.only.iter().any(|o| o == c))
            .filter(|c| !(opts.no_sdk && (*c == "js" || *c == "py")))
            .collect()
    };
    vec![
        Figure {
            id: "tree_up".into(),
            title: format!("tree upload, {what}, MiB/s"),
            conc: 0,
            contenders: keep(TRANSFER),
        },
        Figure {
            id: "tree_down".into(),
            title: format!("tree download, {what}, MiB/s"),
            conc: 0,
            contenders: keep(TRANSFER),
        },
        Figure {
            id: "op_watch".into(),
            title: format!(
                "watch: a file made in the sandbox to its event on the host, ms (n={})",
                s.watch_n
            ),
            conc: 0,
            contenders: keep(&["ours"]),
        },
    ]
}

/// Child mode: `contender` on a tree figure.
pub async fn contender(id: &str, figure: &str) -> Result<Outcome, AnyError> {
    match (id, figure) {
        ("ours", "op_watch") => watch::run().await,
        ("ours", f) => ours::run_ours(f).await,
        ("tarcurl", f) => ours::run_tarcurl(f).await,
        (other, f) => Err(format!("no tree contender {other} on {f}").into()),
    }
}

/// A download contender's output checked against the source: same digest, or the
/// measure fails.
fn check_download(m: &mut Measure, dir: &Path, want: &str) {
    if m.outcome.error.is_some() {
        return;
    }
    match data::digest(dir) {
        Ok(got) if got == want => {}
        Ok(got) => {
            m.outcome.error = Some(format!(
                "the downloaded tree differs from the source (digest {got}, want {want})"
            ))
        }
        Err(e) => m.outcome.error = Some(format!("checking the downloaded tree: {e}")),
    }
}

/// The tree mode: make the tree, run every figure's contenders, print the tables and
/// the targets, write the JSON.
/// Where the trees live, on both sides: `WB_TREE_DIR` when set, else `/dev/shm` when it
/// is a directory with at least 2 GiB free, else the temp directory.
///
/// On a disk file system the figures measure its inode allocator more than the transfer:
/// ext4 skips inodes freed in the last minute (`recently_deleted`), so creating 10,000
/// files right after 10,000 were removed (by the previous contender, or the previous run)
/// scans past every one of them, and whichever contender runs later loses five- to
/// tenfold. A memory file system gives every contender the same ground.
fn tree_base() -> PathBuf {
    if let Some(d) = std::env::var_os("WB_TREE_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    let free = {
        // SAFETY: statvfs is plain old data, all zeroes is a valid value; the call gets
        // a NUL-terminated path and a struct of the right type to fill.
        let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
        match unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut v) } {
            0 => (v.f_bavail as u64).saturating_mul(v.f_frsize as u64),
            _ => 0,
        }
    };
    if shm.is_dir() && free >= 2 << 30 {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

pub fn orchestrate(rt: &tokio::runtime::Runtime, opts: &Opts) -> Result<(), AnyError> {
    let base = tree_base();
    eprintln!(
        "world-bench: trees and the emulator's sandboxes under {} (WB_TREE_DIR to choose)",
        base.display()
    );
    let work = base.join(format!("world-bench-trees-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let r = orchestrate_in(rt, opts, &base, &work);
    let _ = std::fs::remove_dir_all(&work);
    r
}

fn orchestrate_in(
    rt: &tokio::runtime::Runtime,
    opts: &Opts,
    base: &Path,
    work: &Path,
) -> Result<(), AnyError> {
    let src = work.join("src");
    eprintln!("world-bench: making the tree ({} bytes)", opts.tree.bytes());
    data::make(&src, &opts.tree)?;
    let tar = work.join("tree.tar");
    data::archive(&src, &tar)?;
    let digest = data::digest(&src)?;
    let out = work.join("out");
    std::fs::create_dir_all(&out)?;
    let paths = Paths {
        base: base.to_path_buf(),
        src,
        tar,
        digest: digest.clone(),
        out: out.clone(),
        bytes: opts.tree.bytes(),
        watch_n: opts.tree.watch_n,
    };
    if PATHS.set(paths).is_err() {
        return Err("the tree mode runs once per process".into());
    }
    // The emulator's root (its sandboxes' files) goes there too: it is a temp directory.
    let tmpdir = base.display().to_string();
    let emu: Emulator = rt.block_on(Emulator::start_with(&[("TMPDIR", tmpdir.as_str())]))?;
    let mut results = Vec::new();
    for fig in figures(opts) {
        eprintln!("world-bench: {}", fig.title);
        let mut measures = Vec::new();
        for c in &fig.contenders {
            eprintln!("world-bench:   {}", super::plan::display(c, &fig.id));
            let mut m = super::runner::run(rt.handle(), &emu, None, opts, &fig, c);
            if fig.id == "tree_down" {
                let dir = out_dir(&out, &fig.id, c);
                check_download(&mut m, &dir, &digest);
                let _ = std::fs::remove_dir_all(&dir);
            }
            measures.push(m);
        }
        results.push(FigureResult {
            figure: fig,
            measures,
        });
    }
    rt.block_on(emu.stop());
    report::print(&results, 0);
    let targets = targets(&results);
    report::print_targets(&targets);
    if let Some(path) = &opts.json {
        let j = report::json(opts, &results, &targets);
        std::fs::write(path, serde_json::to_vec_pretty(&j)?)
            .map_err(|e| format!("writing {path}: {e}"))?;
        println!("\nJSON written to {path}");
    }
    Ok(())
}

fn measure<'a>(results: &'a [FigureResult], fig: &str, c: &str) -> Option<&'a Measure> {
    results
        .iter()
        .find(|r| r.figure.id == fig)?
        .measures
        .iter()
        .find(|m| m.contender == c && m.outcome.error.is_none())
}

fn mib_s(m: &Measure) -> f64 {
    m.outcome.bytes as f64 / (1024.0 * 1024.0) / m.outcome.secs
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v.get((((v.len().max(1) - 1) as f64) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// The targets: ours at least 0.8x tar + curl and 5x each SDK both ways, host
/// RSS under 32 MiB both ways, watch p99 at most 50 ms.
fn targets(results: &[FigureResult]) -> Vec<Target> {
    let mut t = Vec::new();
    for fig in ["tree_up", "tree_down"] {
        let ours = measure(results, fig, "ours");
        for (base, limit) in [("tarcurl", 0.8), ("js", 5.0), ("py", 5.0)] {
            let Some(b) = results
                .iter()
                .find(|r| r.figure.id == fig)
                .and_then(|r| r.measures.iter().find(|m| m.contender == base))
            else {
                continue;
            };
            let name = format!(
                "{fig}: fs-e2b >= {limit}x {}",
                super::plan::display(base, fig)
            );
            let (holds, detail) = match (ours, b.outcome.error.is_none()) {
                (Some(o), true) => {
                    let x = mib_s(o) / mib_s(b);
                    (
                        x.is_finite().then_some(x >= limit),
                        format!("{x:.2}x ({:.2} vs {:.2} MiB/s)", mib_s(o), mib_s(b)),
                    )
                }
                _ => (None, "not measured".to_owned()),
            };
            t.push(Target {
                name,
                holds,
                detail,
            });
        }
        if let Some(o) = ours {
            t.push(Target {
                name: format!("{fig}: fs-e2b host RSS < 32 MiB"),
                holds: Some(o.peak_rss_mib < 32.0),
                detail: format!("{:.1} MiB", o.peak_rss_mib),
            });
        }
    }
    if let Some(w) = measure(results, "op_watch", "ours") {
        let p99 = percentile(&w.outcome.samples_ms, 0.99);
        t.push(Target {
            name: "op_watch: fs-e2b event p99 <= 50 ms".into(),
            holds: p99.is_finite().then_some(p99 <= 50.0),
            detail: format!(
                "p50 {:.1} ms, p99 {p99:.1} ms",
                percentile(&w.outcome.samples_ms, 0.5)
            ),
        });
    }
    t
}
