//! The one emulator of a run, in a child process (this binary with `--serve-emulator`), so
//! its memory and CPU are apart from every contender's; its request counters (the
//! `/_emulator/counters` endpoint) and CPU time (`/proc/<pid>/stat`) are read around each
//! timed part.

use std::collections::BTreeMap;

use tokio::io::{AsyncBufReadExt as _, BufReader};

use super::child::AnyError;

/// Child mode: run the emulator, print its env lines and `READY`, live until stdin closes.
pub async fn serve() -> Result<(), AnyError> {
    let emu = testing_fake::Emulator::start(testing_fake::EmulatorConfig::default()).await?;
    print!("{}", emu.env_lines());
    println!("READY");
    let mut line = String::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    while stdin.read_line(&mut line).await? > 0 {
        line.clear();
    }
    emu.shutdown().await;
    Ok(())
}

/// The running emulator child.
pub struct Emulator {
    child: tokio::process::Child,
    pid: u32,
    /// `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_API_KEY`.
    pub vars: BTreeMap<String, String>,
    http: reqwest::Client,
}

/// Request counts per route key (`envd POST /process.Process/Start`, …).
pub type Counts = BTreeMap<String, u64>;

impl Emulator {
    /// Starts the emulator child and waits for its `READY`.
    pub async fn start() -> Result<Emulator, AnyError> {
        Emulator::start_with(&[]).await
    }

    /// [`Emulator::start`] with `envs` added to the child's environment.
    pub async fn start_with(envs: &[(&str, &str)]) -> Result<Emulator, AnyError> {
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .arg("--serve-emulator")
            .envs(envs.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or("emulator child has no pid")?;
        let stdout = child.stdout.take().ok_or("emulator child has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut vars = BTreeMap::new();
        while let Some(line) = lines.next_line().await? {
            if line == "READY" {
                break;
            }
            if let Some((k, v)) = line.split_once('=') {
                vars.insert(k.to_owned(), v.to_owned());
            }
        }
        for k in ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"] {
            if !vars.contains_key(k) {
                return Err(format!("the emulator did not print {k}").into());
            }
        }
        Ok(Emulator {
            child,
            pid,
            vars,
            http: reqwest::Client::builder().no_proxy().build()?,
        })
    }

    /// The emulator child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The emulator's listen address (from `E2B_API_URL`, `http://127.0.0.1:N`).
    pub fn addr(&self) -> Result<std::net::SocketAddr, AnyError> {
        let url = &self.vars["E2B_API_URL"];
        let hostport = url.strip_prefix("http://").unwrap_or(url);
        Ok(hostport
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("the emulator's address {url}: {e}"))?)
    }

    /// Every counter now, keyed `"<plane> <route key>"`.
    pub async fn counters(&self) -> Result<Counts, AnyError> {
        let url = format!("{}/_emulator/counters", self.vars["E2B_API_URL"]);
        let resp = self
            .http
            .get(&url)
            .header("X-API-KEY", &self.vars["E2B_API_KEY"])
            .send()
            .await?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", resp.status()).into());
        }
        let v: serde_json::Value = serde_json::from_slice(&resp.bytes().await?)?;
        let mut out = Counts::new();
        for plane in ["control", "envd"] {
            if let Some(m) = v.get(plane).and_then(|m| m.as_object()) {
                for (k, n) in m {
                    out.insert(format!("{plane} {k}"), n.as_u64().unwrap_or(0));
                }
            }
        }
        Ok(out)
    }

    /// The emulator process's own CPU time (user + system) in milliseconds.
    pub fn cpu_ms(&self) -> f64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return 0.0;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return 0.0;
        };
        // After the command: state(0) ... utime(11) stime(12), in clock ticks.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (ticks(11) + ticks(12)) * 1000.0 / hz
    }

    /// Closes the emulator's stdin and waits (bounded) for it to exit.
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.child.wait()).await;
    }
}

/// `after - before` per key, zeros dropped.
pub fn diff(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, &n)| {
            let d = n.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}
