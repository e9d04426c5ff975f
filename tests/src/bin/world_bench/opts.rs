//! world-bench options: sizes, iterations, which contenders, where the JSON goes.

/// What one run measures, shared with every contender (passed as `WB_*` variables).
#[derive(Debug, Clone)]
pub struct Opts {
    /// Sequential execs of `true`.
    pub iterations: u64,
    /// Rounds per concurrency level.
    pub rounds: u64,
    /// Concurrency levels (execs in flight per round).
    pub levels: Vec<u64>,
    /// Small-file write+read pairs.
    pub small_n: u64,
    /// Small-file size in bytes.
    pub small_bytes: u64,
    /// Large-file size in bytes.
    pub large_bytes: u64,
    /// Bytes printed to stdout in the flood.
    pub flood_bytes: u64,
    /// Contender ids to run (all when empty).
    pub only: Vec<String>,
    /// Skip the official SDKs (no node/python, no install).
    pub no_sdk: bool,
    /// Where to write the JSON report.
    pub json: Option<String>,
    /// Latency mode when above 0: the per-operation figures through a link with this round
    /// trip (`link.rs`) instead of the loopback figures.
    pub rtt_ms: u64,
    /// The link's bandwidth for the latency mode's transfer figures, Mbit/s (0: unlimited).
    pub bandwidth_mbit: u64,
    /// Timed runs of each operation in the latency mode.
    pub op_iterations: u64,
    /// The tree mode (`--trees`): tree transfers and watch latency (`trees/`).
    pub trees: bool,
    /// The tree mode's sizes.
    pub tree: super::trees::Sizes,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            iterations: 200,
            rounds: 5,
            levels: vec![64, 256],
            small_n: 100,
            small_bytes: 1 << 20,
            large_bytes: 256 << 20,
            flood_bytes: 512 << 20,
            only: Vec::new(),
            no_sdk: false,
            json: None,
            rtt_ms: 0,
            bandwidth_mbit: 200,
            op_iterations: 20,
            trees: false,
            tree: super::trees::Sizes::default(),
        }
    }
}

/// The usage text.
pub const USAGE: &str = "usage: world-bench [--quick | --tiny] [--iterations N] [--rounds N] \
[--levels 64,256] [--small-n N] [--small-kib K] [--large-mib M] [--flood-mib M] \
[--only raw,ours,...] [--no-sdk] [--json PATH] [--rtt-ms MS [--bandwidth-mbit N] \
[--op-iterations N]] [--trees]\n\
--rtt-ms above 0: each operation's latency and round trips, every contender through a \
link with that round trip (and the transfers of --large-mib at --bandwidth-mbit, default \
200; 0 is unlimited)\n\
--trees: tree upload and download (10,000 x 4 KiB + 20 x 4 MiB) and watch latency instead";

impl Opts {
    /// Parses the command line (after the program name).
    pub fn parse(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
            };
            let num = |v: String| {
                v.parse::<u64>()
                    .map_err(|e| format!("{a} {v}: {e}\n{USAGE}"))
            };
            match a.as_str() {
                "--quick" => {
                    o.iterations = 50;
                    o.rounds = 2;
                    o.small_n = 20;
                    o.large_bytes = 32 << 20;
                    o.flood_bytes = 64 << 20;
                    o.tree = super::trees::Sizes::quick();
                }
                "--tiny" => {
                    o.iterations = 3;
                    o.rounds = 1;
                    o.levels = vec![4, 8];
                    o.small_n = 2;
                    o.small_bytes = 64 << 10;
                    o.large_bytes = 1 << 20;
                    o.flood_bytes = 1 << 20;
                    o.op_iterations = 3;
                    o.tree = super::trees::Sizes::tiny();
                }
                "--iterations" => o.iterations = num(val()?)?,
                "--rounds" => o.rounds = num(val()?)?,
                "--levels" => {
                    o.levels = val()?
                        .split(',')
                        .map(|s| num(s.to_owned()))
                        .collect::<Result<_, _>>()?
                }
                "--small-n" => o.small_n = num(val()?)?,
                "--small-kib" => o.small_bytes = num(val()?)? << 10,
                "--large-mib" => o.large_bytes = num(val()?)? << 20,
                "--flood-mib" => o.flood_bytes = num(val()?)? << 20,
                "--only" => o.only = val()?.split(',').map(str::to_owned).collect(),
                "--no-sdk" => o.no_sdk = true,
                "--json" => o.json = Some(val()?),
                "--rtt-ms" => o.rtt_ms = num(val()?)?,
                "--bandwidth-mbit" => o.bandwidth_mbit = num(val()?)?,
                "--op-iterations" => o.op_iterations = num(val()?)?,
                "--trees" => o.trees = true,
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown option {other}\n{USAGE}")),
            }
        }
        Ok(o)
    }

    /// Timed sandbox creations (and connects) per contender: a quarter of the operations'.
    pub fn create_iterations(&self) -> u64 {
        (self.op_iterations / 4).max(2)
    }

    /// The `WB_*` variables a contender process reads.
    pub fn vars(&self, figure: &str, conc: u64) -> Vec<(String, String)> {
        [
            ("WB_FIGURE", figure.to_owned()),
            ("WB_ITER", self.iterations.to_string()),
            ("WB_ROUNDS", self.rounds.to_string()),
            ("WB_CONC", conc.to_string()),
            ("WB_SMALL_N", self.small_n.to_string()),
            ("WB_SMALL_BYTES", self.small_bytes.to_string()),
            ("WB_LARGE_BYTES", self.large_bytes.to_string()),
            ("WB_FLOOD_BYTES", self.flood_bytes.to_string()),
            ("WB_OP_ITER", self.op_iterations.to_string()),
            ("WB_CREATE_N", self.create_iterations().to_string()),
            ("WB_BG_COMMAND", super::plan::BG_COMMAND.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// A `WB_*` number in a contender process (0 when unset).
pub fn var(key: &str) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
