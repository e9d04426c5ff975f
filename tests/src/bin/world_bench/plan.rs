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
    /// Latency for execs, throughput for files and the flood.
    pub fn kind(&self) -> Kind {
        if self.id.starts_with("exec") {
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

/// The contender's name on a figure (`ours` is subprocess-e2b or fs-e2b).
pub fn display(contender: &str, figure: &str) -> &'static str {
    match contender {
        "tokio" => "bare tokio",
        "local" => "LocalSubprocess",
        "raw" if figure.starts_with("files") => "raw e2b-core /files",
        "raw" => "raw e2b-core Start",
        "rawsh" => "raw Start bash -c",
        "ours" if figure.starts_with("files") => "fs-e2b",
        "ours" => "subprocess-e2b",
        "sandbox" => "sandbox-e2b",
        "curl" => "curl",
        "js" => "JS SDK",
        "py" => "Python SDK",
        _ => "?",
    }
}

/// The figures for `opts` (levels and sizes named in the titles).
pub fn figures(opts: &super::opts::Opts) -> Vec<Figure> {
    let keep = |list: &[&'static str]| -> Vec<&'static str> {
        list.iter()
            .copied()
            .filter(|c| opts.only.is_empty() || opts.only.iter().any(|o| o == c))
            .filter(|c| !(opts.no_sdk && (*c == "js" || *c == "py")))
            .collect()
    };
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
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
    out
}
