//! `world-bench`: the speed and memory figures with their targets, every contender side
//! by side, against one emulator, in one run.
//!
//! Run: `cargo run --release -p integration-tests --bin world-bench -- [--quick | --tiny]
//! [--json PATH] [--rtt-ms 50 [--bandwidth-mbit 200]]` (`--help` lists the options).
//!
//! `--boundary [N]` measures the emulator's sandbox boundary instead (`boundary.rs`):
//! create + first command, exec and memory per idle sandbox, isolated with and without
//! internet access against `E2B_LOCAL_NO_ISOLATION=1`.
//!
//! With `--rtt-ms` above 0 (the latency mode) it measures single operations instead, each
//! contender reaching the emulator through a link with that round trip (`link.rs`), and
//! prints each operation's sequential round trips next to the official SDKs' (`ops.rs`,
//! `report.rs`).
//!
//! Figures: exec `true` sequential (p50/p99), rounds of 64 and 256 concurrent execs (p50
//! per round, errors), 1 MiB write+read x100 and 256 MiB write+read (MiB/s), a 512 MiB
//! stdout flood (MiB/s). Contenders (`plan.rs`): bare tokio::process, `LocalSubprocess`,
//! raw e2b-core (envd `Start` of the program itself; `/files`), ours (subprocess-e2b,
//! fs-e2b), the sandbox@1 provider (sandbox-e2b), curl, and the official JS and Python
//! SDKs (`tests/sdk/bench.*`, installed under the target directory's `sdk-cache/`).
//!
//! The emulator runs in a child process, and so does every contender on every figure
//! (this binary with `--contender ID`, or node/python), so each peak RSS is the
//! contender's own (`wait4` rusage) and the emulator's request counters and CPU time are
//! read around each timed part. The output: a table per figure with ratios against the
//! issue's baselines, the targets (which hold), and JSON (`--json PATH`). Figures,
//! not assertions: the machine is shared and noisy.

mod boundary;
mod child;
mod curl;
mod data;
mod durable;
mod emulator;
mod files;
mod link;
mod local;
mod ops;
mod opts;
mod ours;
mod plan;
mod provider;
mod raw;
mod report;
mod runner;
mod sandbox_env;
mod sdk;
mod trees;

use child::AnyError;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("world-bench: cannot start a tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match args.first().map(String::as_str) {
        Some("--serve-emulator") => match rt.block_on(emulator::serve()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("world-bench emulator: {e}");
                1
            }
        },
        Some("--boundary") => match rt.block_on(boundary::run(&args[1..])) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("world-bench --boundary: {e}");
                1
            }
        },
        Some("--contender") => {
            let id = args.get(1).cloned().unwrap_or_default();
            let figure = std::env::var("WB_FIGURE").unwrap_or_default();
            child::report(rt.block_on(contender(&id, &figure)));
            0
        }
        _ => match opts::Opts::parse(&args) {
            Ok(o) => match orchestrate(&rt, &o) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("world-bench: {e}");
                    1
                }
            },
            Err(usage) => {
                eprintln!("{usage}");
                2
            }
        },
    };
    drop(rt);
    std::process::exit(code);
}

/// Child mode: one contender on one figure.
async fn contender(id: &str, figure: &str) -> Result<child::Outcome, AnyError> {
    if trees::is_tree_figure(figure) {
        return trees::contender(id, figure).await;
    }
    if figure.starts_with("op_") || figure.starts_with("bw_") {
        return ops::run(id, figure).await;
    }
    if matches!(figure, "exec_durable" | "exec_bg" | "attach_64m") {
        return durable::run(id, figure).await;
    }
    match id {
        "tokio" => local::tokio_run(figure).await,
        "local" => local::local_run(figure).await,
        "raw" => raw::run(figure).await,
        "rawsh" => raw::run_shell(figure).await,
        "ours" => ours::run(figure).await,
        "sandbox" => provider::run(figure).await,
        "curl" => curl::run(figure).await,
        other => Err(format!("no contender {other}").into()),
    }
}

fn orchestrate(rt: &tokio::runtime::Runtime, opts: &opts::Opts) -> Result<(), AnyError> {
    if opts.trees {
        return trees::orchestrate(rt, opts);
    }
    let emu = rt.block_on(emulator::Emulator::start())?;
    // The latency mode's links: one for the operations (the round trip only), one for
    // the transfers (and the bandwidth).
    let links = if opts.rtt_ms > 0 {
        let upstream = emu.addr()?;
        let rtt = std::time::Duration::from_millis(opts.rtt_ms);
        let ops = rt.block_on(link::Link::start(
            upstream,
            link::Shape {
                rtt,
                bytes_per_sec: None,
            },
        ))?;
        let bw = rt.block_on(link::Link::start(
            upstream,
            link::Shape {
                rtt,
                bytes_per_sec: (opts.bandwidth_mbit > 0)
                    .then(|| opts.bandwidth_mbit as f64 * 1e6 / 8.0),
            },
        ))?;
        Some((ops, bw))
    } else {
        None
    };
    let mut results = Vec::new();
    for fig in plan::figures(opts) {
        eprintln!("world-bench: {}", fig.title);
        let url = links.as_ref().map(|(ops, bw)| {
            if fig.id.starts_with("bw_") {
                bw.url()
            } else {
                ops.url()
            }
        });
        let mut measures = Vec::new();
        for c in &fig.contenders {
            eprintln!("world-bench:   {}", plan::display(c, &fig.id));
            measures.push(runner::run(
                rt.handle(),
                &emu,
                url.as_deref(),
                opts,
                &fig,
                c,
            ));
        }
        results.push(report::FigureResult {
            figure: fig,
            measures,
        });
    }
    drop(links);
    rt.block_on(emu.stop());
    report::print(&results, opts.rtt_ms);
    let targets = if opts.rtt_ms > 0 {
        report::print_round_trips(&results, opts.rtt_ms);
        report::latency_targets(&results, opts.rtt_ms)
    } else {
        report::targets(&results)
    };
    report::print_targets(&targets);
    if let Some(path) = &opts.json {
        let j = report::json(opts, &results, &targets);
        std::fs::write(path, serde_json::to_vec_pretty(&j)?)
            .map_err(|e| format!("writing {path}: {e}"))?;
        println!("\nJSON written to {path}");
    }
    Ok(())
}
