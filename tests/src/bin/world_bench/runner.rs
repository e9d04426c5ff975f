//! Runs one contender on one figure in a process of its own: this binary with
//! `--contender ID`, or an SDK driver. Answers its two `MARK`s after reading the
//! emulator's counters and CPU time, parses its `RESULT`, and takes its peak RSS (and
//! that of the processes it waited for) from `wait4`'s rusage.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::child::{AnyError, Outcome};
use super::emulator::{self, Counts, Emulator};
use super::opts::Opts;
use super::plan::{self, Figure};
use super::sdk;

/// One contender's figures on one figure.
#[derive(Debug, Clone, Serialize)]
pub struct Measure {
    /// The contender id (`raw`, `ours`, …).
    pub contender: String,
    /// What it reported.
    pub outcome: Outcome,
    /// Peak RSS of the contender process (and the children it waited for), MiB.
    pub peak_rss_mib: f64,
    /// Emulator requests during the timed part, per route key.
    pub requests: Counts,
    /// Emulator CPU during the timed part, milliseconds.
    pub emulator_cpu_ms: f64,
    /// The contender process's own CPU (user + system, all its threads) during the timed
    /// part, milliseconds (the host side of the client: 10 ms clock ticks).
    pub client_cpu_ms: f64,
}

/// User + system CPU of process `pid` so far, milliseconds (`/proc/PID/stat` fields 14
/// and 15, in clock ticks); `NaN` when it cannot be read.
fn process_cpu_ms(pid: libc::pid_t) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The fields after the command name (which may hold spaces) start at its `)`.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    (tick(11) + tick(12)) * 1000.0 / hz
}

fn command(contender: &str) -> Result<Command, AnyError> {
    match contender {
        "js" => sdk::js_command(),
        "py" => sdk::py_command(),
        other => {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("--contender").arg(other);
            Ok(c)
        }
    }
}

/// Runs `contender` on `fig`; a contender that fails is a `Measure` with its error. With
/// `link` (`http://127.0.0.1:N`), the contender reaches the emulator's control plane and
/// envd only through it (the counters are still read from the emulator directly).
pub fn run(
    rt: &tokio::runtime::Handle,
    emu: &Emulator,
    link: Option<&str>,
    opts: &Opts,
    fig: &Figure,
    contender: &str,
) -> Measure {
    let mut m = Measure {
        contender: contender.to_owned(),
        outcome: Outcome::default(),
        peak_rss_mib: 0.0,
        requests: Counts::new(),
        emulator_cpu_ms: 0.0,
        client_cpu_ms: f64::NAN,
    };
    if let Err(e) = run_into(rt, emu, link, opts, fig, contender, &mut m) {
        m.outcome.error = Some(e.to_string());
    }
    m
}

fn run_into(
    rt: &tokio::runtime::Handle,
    emu: &Emulator,
    link: Option<&str>,
    opts: &Opts,
    fig: &Figure,
    contender: &str,
    m: &mut Measure,
) -> Result<(), AnyError> {
    let mut cmd = command(contender)?;
    cmd.envs(&emu.vars);
    if let Some(url) = link {
        cmd.env("E2B_API_URL", url).env("E2B_SANDBOX_URL", url);
    }
    if fig.id.starts_with("op_") || fig.id.starts_with("bw_") {
        let dir = plan::work_dir(contender);
        cmd.env("WB_DIR", dir)
            .env("WB_SETUP", plan::setup_script(&fig.id, dir, opts))
            .env("WB_WARM", plan::WARM_UPS.to_string());
    }
    cmd.envs(super::trees::vars(&fig.id, contender));
    cmd.envs(opts.vars(&fig.id, fig.conc))
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in [
        "E2B_DOMAIN",
        "E2B_DEBUG",
        "E2B_ACCESS_TOKEN",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        cmd.env_remove(k);
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let err_tail = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        let s = String::from_utf8_lossy(&s).into_owned();
        let start = s.len().saturating_sub(600);
        s.get(start..).unwrap_or_default().to_owned()
    });
    let mut before: Option<(Counts, f64, f64)> = None;
    let mut result = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line == "MARK start" {
            before = Some((
                rt.block_on(emu.counters())?,
                emu.cpu_ms(),
                process_cpu_ms(pid),
            ));
            writeln!(stdin)?;
        } else if line == "MARK end" {
            let cpu = emu.cpu_ms();
            let client_cpu = process_cpu_ms(pid);
            let after = rt.block_on(emu.counters())?;
            if let Some((b, bcpu, bclient)) = &before {
                m.requests = emulator::diff(b, &after);
                m.emulator_cpu_ms = cpu - bcpu;
                m.client_cpu_ms = client_cpu - bclient;
            }
            writeln!(stdin)?;
        } else if let Some(j) = line.strip_prefix("RESULT ") {
            result = Some(serde_json::from_str::<Outcome>(j)?);
        }
    }
    drop(stdin);
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 on our own child's pid, which nothing
    // else waits for (the std Child is never waited).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r == pid {
        m.peak_rss_mib = ru.ru_maxrss as f64 / 1024.0;
    }
    let tail = err_tail.join().unwrap_or_default();
    m.outcome = result.ok_or_else(|| {
        format!(
            "{contender} on {}: no RESULT line (wait status {status}); stderr: {tail}",
            fig.id
        )
    })?;
    if let Some(e) = &mut m.outcome.error
        && !tail.is_empty()
    {
        e.push_str(&format!(" (stderr: {})", tail.trim()));
    }
    Ok(())
}
