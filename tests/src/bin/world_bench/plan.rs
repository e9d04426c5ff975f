//! What one run measures: the speed and memory figures and the contenders of each.

/// One figure: an id (JSON key), a title, and its concurrency (exec rounds only).
#[derive(Debug, Clone)]
pub struct Figure {
    /// `exec_seq`, `exec_c64`, `files_small`, `files_large`, `flood`.
    pub id: String,
    /// The table heading.
    pub title: String,
    /// Execs in flight per round (0 for the others).
    pub conc: u64,
    /// The contender ids measured on it.
    pub contenders: Vec<&'static str>,
}

/// How a figure's value reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Milliseconds (p50 of samples), lower is better.
    Latency,
    /// MiB/s, higher is better.
    Throughput,
}

impl Figure {
    /// Latency for execs and single operations, throughput for files, transfers and the
    /// flood.
    pub fn kind(&self) -> Kind {
        if self.id.starts_with("exec") || self.id.starts_with("op_") {
            Kind::Latency
        } else {
            Kind::Throughput
        }
    }
}

const EXEC: &[&str] = &[
    "tokio", "local", "raw", "rawsh", "ours", "sandbox", "js", "py",
];
const FILES: &[&str] = &["curl", "raw", "ours", "sandbox", "js", "py"];
const FLOOD: &[&str] = &["tokio", "local", "raw", "ours", "js", "py"];
const DURABLE: &[&str] = &["ours", "durable"];
/// A command started in the background and attached to until it ends: ours (durable
/// start + attach) against the SDKs' `run(background)` + `connect(pid)` + `wait`.
const BACKGROUND: &[&str] = &["durable", "js", "py"];

/// What `exec_bg` runs: long enough for the SDKs' `connect` to find it running (they
/// keep nothing of an ended command).
pub const BG_COMMAND: &str = "sleep 0.2";

/// The latency mode's operations: id, what it times, contenders.
const OPS: &[(&str, &str, &[&str])] = &[
    (
        "op_exec",
        "exec `true`",
        &["raw", "ours", "sandbox", "js", "py"],
    ),
    ("op_read_4k", "read 4 KiB", FILE_OP),
    ("op_read_1m", "read 1 MiB", FILE_OP),
    ("op_write_4k", "write 4 KiB", FILE_OP),
    ("op_write_1m", "write 1 MiB", FILE_OP),
    ("op_stat", "stat", &["raw", "ours", "sandbox", "js", "py"]),
    ("op_list", "list a directory of 100 entries", FS_OP),
    ("op_mkdir", "mkdir", FS_OP),
    ("op_remove", "remove a file", FS_OP),
    ("op_rename", "rename a file", FS_OP),
    (
        "op_create",
        "create sandbox + first command",
        &["raw", "ours", "sandbox", "js", "py"],
    ),
    ("op_connect", "connect + first command", FS_OP),
];
const FILE_OP: &[&str] = &["curl", "raw", "ours", "sandbox", "js", "py"];
const FS_OP: &[&str] = &["raw", "ours", "js", "py"];
const TRANSFER: &[&str] = &["curl", "raw", "ours", "js", "py"];

/// Whether `figure` is one of the file system's (where `ours` is fs-e2b).
fn is_fs(figure: &str) -> bool {
    figure.starts_with("files")
        || figure.starts_with("bw_")
        || figure.starts_with("tree_")
        || (figure.starts_with("op_") && !matches!(figure, "op_exec" | "op_create" | "op_connect"))
}

/// The contender's name on a figure (`ours` is subprocess-e2b or fs-e2b).
pub fn display(contender: &str, figure: &str) -> &'static str {
    match contender {
        "tokio" => "bare tokio",
        "local" => "LocalSubprocess",
        "raw" if figure.starts_with("files") || figure.starts_with("bw_") => "raw e2b-core /files",
        "raw" if figure.starts_with("op_read") || figure.starts_with("op_write") => {
            "raw e2b-core /files"
        }
        "raw" if is_fs(figure) => "raw e2b-core RPC",
        "raw" => "raw e2b-core Start",
        "rawsh" => "raw Start bash -c",
        "ours" if figure == "attach_64m" => "fs-e2b read",
        "durable" if figure == "attach_64m" => "durable attach",
        "durable" => "durable start+attach",
        "ours" if is_fs(figure) => "fs-e2b",
        "ours" => "subprocess-e2b",
        "sandbox" => "sandbox-e2b",
        "curl" => "curl",
        "tarcurl" => "tar + curl /files",
        "js" => "JS SDK",
        "py" => "Python SDK",
        _ => "?",
    }
}

fn keep(opts: &super::opts::Opts, list: &[&'static str]) -> Vec<&'static str> {
    list.iter()
        .copied()
        .filter(|c| opts.only.is_empty() || opts.only.iter().any(|o| o == c))
        .filter(|c| !(opts.no_sdk && (*c == "js" || *c == "py")))
        .collect()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The latency mode's figures: each operation, then the upload and download of
/// `large_bytes` (on the link with the bandwidth limit).
pub fn latency_figures(opts: &super::opts::Opts) -> Vec<Figure> {
    let mut out: Vec<Figure> = OPS
        .iter()
        .map(|(id, what, list)| Figure {
            id: (*id).into(),
            title: format!(
                "{what} at {} ms RTT, ms (n={})",
                opts.rtt_ms,
                if matches!(*id, "op_create" | "op_connect") {
                    opts.create_iterations()
                } else {
                    opts.op_iterations
                }
            ),
            conc: 0,
            contenders: keep(opts, list),
        })
        .collect();
    let bw = match opts.bandwidth_mbit {
        0 => "unlimited".to_owned(),
        n => format!("{n} Mbit/s"),
    };
    for (id, what) in [("bw_up", "upload"), ("bw_down", "download")] {
        out.push(Figure {
            id: id.into(),
            title: format!(
                "{:.0} MiB {what} at {} ms RTT and {bw}, MiB/s",
                mib(opts.large_bytes),
                opts.rtt_ms
            ),
            conc: 0,
            contenders: keep(opts, TRANSFER),
        });
    }
    out
}

/// The figures for `opts` (levels and sizes named in the titles).
pub fn figures(opts: &super::opts::Opts) -> Vec<Figure> {
    if opts.rtt_ms > 0 {
        return latency_figures(opts);
    }
    let keep = |list: &[&'static str]| keep(opts, list);
    let mut out = vec![Figure {
        id: "exec_seq".into(),
        title: format!("exec `true` sequential, ms (n={})", opts.iterations),
        conc: 0,
        contenders: keep(EXEC),
    }];
    for &c in &opts.levels {
        out.push(Figure {
            id: format!("exec_c{c}"),
            title: format!(
                "{c} concurrent execs per round, ms ({} rounds)",
                opts.rounds
            ),
            conc: c,
            contenders: keep(EXEC),
        });
    }
    out.push(Figure {
        id: "files_small".into(),
        title: format!(
            "{:.2} MiB write+read x{}, MiB/s",
            mib(opts.small_bytes),
            opts.small_n
        ),
        conc: 0,
        contenders: keep(FILES),
    });
    out.push(Figure {
        id: "files_large".into(),
        title: format!("{:.0} MiB write+read, MiB/s", mib(opts.large_bytes)),
        conc: 0,
        contenders: keep(FILES),
    });
    out.push(Figure {
        id: "flood".into(),
        title: format!("{:.0} MiB stdout flood, MiB/s", mib(opts.flood_bytes)),
        conc: 0,
        contenders: keep(FLOOD),
    });
    out.push(Figure {
        id: "exec_durable".into(),
        title: format!(
            "durable start + attach of `true` vs exec, ms (n={})",
            opts.iterations
        ),
        conc: 0,
        contenders: keep(DURABLE),
    });
    out.push(Figure {
        id: "exec_bg".into(),
        title: format!(
            "background `{BG_COMMAND}` then attach to its end, ms (n={})",
            opts.iterations.min(20)
        ),
        conc: 0,
        contenders: keep(BACKGROUND),
    });
    out.push(Figure {
        id: "attach_64m".into(),
        title: format!(
            "attach to a finished command with {:.0} MiB kept vs an fs-e2b read, MiB/s",
            mib(opts.large_bytes.min(64 << 20))
        ),
        conc: 0,
        contenders: keep(DURABLE),
    });
    out
}

/// Untimed runs of each operation before the timed ones (in every contender).
pub const WARM_UPS: u64 = 2;

/// The directory a contender's latency operations work in (the sandbox@1 provider's
/// template works under `/workspace`).
pub fn work_dir(contender: &str) -> &'static str {
    if contender == "sandbox" {
        "/workspace/wb"
    } else {
        "/home/user/wb"
    }
}

/// The shell command that prepares `figure`'s files in `dir` before the timing, run by
/// each contender with its own exec (so the timed part holds only the operation):
/// `r.bin` to read and stat, `list/` with 100 files, `rm/0..` to remove, `a` to rename,
/// `big.bin` to download. The operations: `w.bin` (write), `m<i>` (mkdir), `a` <-> `b`
/// (rename).
pub fn setup_script(figure: &str, dir: &str, opts: &super::opts::Opts) -> String {
    let n = opts.op_iterations + WARM_UPS;
    let rest = match figure {
        "op_read_4k" | "op_stat" => format!("head -c 4096 /dev/urandom > {dir}/r.bin"),
        "op_read_1m" => format!("head -c 1048576 /dev/urandom > {dir}/r.bin"),
        "op_list" => {
            format!("mkdir -p {dir}/list && for i in $(seq 1 100); do : > {dir}/list/f$i; done")
        }
        "op_remove" => {
            format!("mkdir -p {dir}/rm && for i in $(seq 0 {n}); do : > {dir}/rm/$i; done")
        }
        "op_rename" => format!(": > {dir}/a"),
        "bw_down" => format!("head -c {} /dev/urandom > {dir}/big.bin", opts.large_bytes),
        _ => "true".to_owned(),
    };
    format!("mkdir -p {dir} && {rest}")
}
