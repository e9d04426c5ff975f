//! Shared by the `e2bx mcp` tests: the official MCP clients (npm `@modelcontextprotocol/sdk`
//! and PyPI `mcp`, pinned in `tests/sdk/versions.txt`) installed once into the target
//! directory's `sdk-cache/` (`emulator_fixture::sdk_install`), and the runs of the client
//! scripts in `tests/mcp/` against a server on stdio (the client starts it) or on HTTP
//! (started here on 127.0.0.1, port 0).
//!
//! An install failure (no registry, no `npm` / `python3`) fails the test loudly: CI has
//! them, and a skipped client test would hide a broken server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use emulator_fixture::sdk_install::{self, Registry};

use crate::support::bin;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target() -> PathBuf {
    let workspace = manifest().join("../..");
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                workspace.join(t)
            }
        })
        .unwrap_or_else(|| workspace.join("target"))
}

/// Installs `name` at its pinned version; returns the directory for `NODE_PATH` /
/// `PYTHONPATH`.
async fn install(registry: Registry, name: &'static str) -> PathBuf {
    tokio::task::spawn_blocking(move || sdk_install::install(&target(), registry, name))
        .await
        .expect("install task")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A client: the program, its script, and the variable pointing it at the install.
pub struct McpClient {
    program: &'static str,
    script: PathBuf,
    path_var: (&'static str, PathBuf),
    marker: &'static str,
}

/// The TypeScript client (installed on first use).
pub async fn js() -> McpClient {
    McpClient {
        program: "node",
        script: manifest().join("tests/mcp/client.cjs"),
        path_var: (
            "NODE_PATH",
            install(Registry::Npm, "@modelcontextprotocol/sdk").await,
        ),
        marker: "MCP JS OK",
    }
}

/// The Python client (installed on first use).
pub async fn py() -> McpClient {
    McpClient {
        program: "python3",
        script: manifest().join("tests/mcp/client.py"),
        path_var: ("PYTHONPATH", install(Registry::PyPi, "mcp").await),
        marker: "MCP PY OK",
    }
}

/// Where the server runs and what it is started with.
pub enum Transport<'a> {
    /// The client starts `e2bx mcp ARGS` on stdio.
    Stdio(&'a [String]),
    /// A server already listening here.
    Http(&'a str),
}

/// The environment of every e2bx the tests start: no E2B variables (the embedded
/// emulator) unless `env` sets them.
fn scrub(cmd: &mut Command, env: &[(String, String)]) {
    for k in [
        "E2B_API_KEY",
        "E2B_API_URL",
        "E2B_DOMAIN",
        "E2B_SANDBOX_URL",
        "RUST_BACKTRACE",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env("NO_PROXY", "127.0.0.1,localhost");
}

impl McpClient {
    /// Runs `scenario` (see `tests/mcp/client.py`) to completion; it must print the marker.
    pub async fn run(&self, scenario: &str, t: Transport<'_>, env: &[(String, String)]) {
        let mut cmd = Command::new(self.program);
        cmd.arg(&self.script).arg(scenario);
        match t {
            Transport::Stdio(args) => {
                cmd.arg("stdio").arg(bin()).arg("mcp").args(args);
            }
            Transport::Http(url) => {
                cmd.arg("http").arg(url);
            }
        }
        scrub(&mut cmd, env);
        cmd.env(self.path_var.0, &self.path_var.1)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{} {scenario} timed out", self.program))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.program));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(self.marker),
            "{} {} {scenario} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            self.program,
            self.script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `e2bx mcp --http 127.0.0.1:0 ARGS`, running until dropped (killed) or [`HttpServer::stop`].
pub struct HttpServer {
    child: Child,
    /// The endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl HttpServer {
    /// Starts one and waits for the address it prints.
    pub async fn start(args: &[String], env: &[(String, String)]) -> HttpServer {
        let mut cmd = Command::new(bin());
        cmd.args(["mcp", "--http", "127.0.0.1:0"]).args(args);
        scrub(&mut cmd, env);
        // The scripts check that the world never sees the server's environment.
        cmd.env("E2BX_TEST_SECRET", "must-not-leak");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("e2bx mcp starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.expect("stderr line") {
                if let Some(i) = line.find("http://") {
                    return line[i..].trim().to_owned();
                }
            }
            panic!("e2bx mcp --http exited without printing its address");
        })
        .await
        .expect("the address within 30 s");
        // Keep draining stderr so the server never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        HttpServer { child, url }
    }

    /// SIGTERM, and the exit code (128+15 after a clean shutdown).
    pub async fn stop(mut self) -> Option<i32> {
        let pid = self.child.id().expect("running");
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).expect("pid"),
            rustix::process::Signal::TERM,
        )
        .expect("SIGTERM");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exits within 30 s after SIGTERM")
            .expect("wait")
            .code()
    }
}

/// A fresh directory for `--local` or `--state-dir`.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// `p` as a flag value.
pub fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
