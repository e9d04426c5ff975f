//! Shared helpers of the e2bx CLI tests: the binary, commands against the embedded emulator
//! (no key in the environment) or against an emulator started in the test process.

#![allow(dead_code)]

use std::process::Stdio;

use testing_fake::{Emulator, EmulatorConfig};
use tokio::process::Command;

/// Path of the built binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_e2bx")
}

/// A command with every E2B variable removed (the embedded emulator path).
pub fn embedded() -> Command {
    let mut c = Command::new(bin());
    for k in [
        "E2B_API_KEY",
        "E2B_API_URL",
        "E2B_DOMAIN",
        "E2B_SANDBOX_URL",
        "RUST_BACKTRACE",
    ] {
        c.env_remove(k);
    }
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

/// An emulator in the test process, and commands pointed at it.
pub struct Remote {
    /// The emulator.
    pub emu: Emulator,
}

impl Remote {
    /// Start one.
    pub async fn start() -> Remote {
        let emu = Emulator::start(EmulatorConfig::default())
            .await
            .expect("emulator starts");
        Remote { emu }
    }

    /// A command with `E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY` of the emulator.
    pub fn cmd(&self) -> Command {
        let mut c = embedded();
        c.env("E2B_API_URL", self.emu.api_url())
            .env("E2B_SANDBOX_URL", self.emu.sandbox_url())
            .env("E2B_API_KEY", self.emu.api_key());
        c
    }

    /// Our client for the emulator.
    pub fn client(&self) -> e2b_core::Client {
        e2b_core::Client::new(
            e2b_core::Config::new()
                .with_api_key(self.emu.api_key())
                .with_api_url(self.emu.api_url())
                .with_sandbox_url(self.emu.sandbox_url()),
        )
        .expect("client")
    }

    /// Run e2bx with these args to completion.
    pub async fn out(&self, args: &[&str]) -> Out {
        Out::of(self.cmd().args(args)).await
    }
}

/// A finished run.
#[derive(Debug)]
pub struct Out {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// stdout.
    pub stdout: Vec<u8>,
    /// stderr as text.
    pub stderr: String,
}

impl Out {
    /// Run `cmd` to completion.
    pub async fn of(cmd: &mut Command) -> Out {
        let o = cmd.output().await.expect("e2bx runs");
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: o.stdout,
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// stdout as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Assert exit 0 and return stdout text.
    pub fn ok(&self) -> String {
        assert_eq!(self.code, 0, "stderr: {}", self.stderr);
        self.text()
    }

    /// stdout parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.text()))
    }

    /// Assert a one-line error with exit 1 and return that line.
    pub fn one_line_error(&self) -> String {
        assert_eq!(
            self.code,
            1,
            "stdout: {} stderr: {}",
            self.text(),
            self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "stderr: {}", self.stderr);
        assert!(lines[0].starts_with("e2bx: "), "{}", lines[0]);
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        assert!(!self.stderr.contains("backtrace"), "{}", self.stderr);
        lines[0].to_owned()
    }
}
