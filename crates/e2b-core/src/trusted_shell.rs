//! The adapter-internal trusted shell: short trusted commands (mkdir, chmod, atomic
//! link, group kill …) run inside the sandbox through envd, for the adapters and the
//! lifecycle owner.
//!
//! A shell command is `/bin/sh -c SCRIPT sh ARG…`: arguments travel as positional
//! parameters, never spliced into the script, so no quoting mistake can turn a path into
//! code. It runs as a trusted user (default `root`) with a random root-level `HOME` that
//! does not exist, and without `-l`, so no login profile from the sandbox user's mutable
//! home runs before it. Output is bounded; a command that prints more is truncated, never
//! buffered without limit.

use std::sync::Arc;
use std::time::Duration;

use exec_world::output::Prefix;
use futures::StreamExt as _;

use crate::envd::StartProcess;
use crate::error::{Error, Surface};
use crate::proto::process::{DataEvent, ProcessEvent};
use crate::sandbox::EnvdApi;

/// Default bound on what a shell command may print on each stream.
pub const DEFAULT_MAX_OUTPUT: usize = 1 << 20;

/// What a shell command produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlOutput {
    /// Exit code (-1 when killed by a signal).
    pub exit_code: i32,
    /// envd's status text of the end (`exit status 1`, `signal: killed`).
    pub status: String,
    /// stdout, at most the configured bound.
    pub stdout: Vec<u8>,
    /// stderr, at most the configured bound.
    pub stderr: Vec<u8>,
    /// True when either stream was cut at the bound.
    pub truncated: bool,
}

impl ControlOutput {
    /// stdout as text (lossy), trailing newlines removed.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout)
            .trim_end_matches('\n')
            .to_owned()
    }
}

/// Runs trusted commands in a sandbox.
///
/// ```no_run
/// # async fn demo(api: std::sync::Arc<dyn e2b_core::EnvdApi>) -> Result<(), e2b_core::Error> {
/// use e2b_core::trusted_shell::TrustedShell;
/// let shell = TrustedShell::new(api);
/// shell.run_ok(r#"mkdir -p -- "$1" && chmod 0700 -- "$1""#, &["/home/user/.state"]).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TrustedShell {
    api: Arc<dyn EnvdApi>,
    user: Option<String>,
    home: String,
    envs: Vec<(String, String)>,
    timeout: Option<Duration>,
    max_output: usize,
}

impl TrustedShell {
    /// A trusted shell running as `root` with a fresh random root-level `HOME`.
    pub fn new(api: Arc<dyn EnvdApi>) -> Self {
        TrustedShell {
            api,
            user: Some("root".to_owned()),
            home: format!("/.e2b-control-{}", random_suffix()),
            envs: Vec::new(),
            timeout: Some(Duration::from_secs(120)),
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }

    /// Run as another user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Run as `user`, or as envd's default user when `None` (no Basic-auth header).
    pub fn acting_user(mut self, user: Option<String>) -> Self {
        self.user = user;
        self
    }

    /// An extra environment variable for every command (after `HOME`).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Process lifetime for each command (envd kills it at expiry); `None` = unbounded.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Bound on each output stream.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    /// The `HOME` shell commands see.
    pub fn home(&self) -> &str {
        &self.home
    }

    /// The envd API this shell runs on.
    pub fn api(&self) -> &Arc<dyn EnvdApi> {
        &self.api
    }

    /// The `StartProcess` for `script` with positional `args` (for callers that need the
    /// stream themselves, e.g. long-running wrappers).
    pub fn command(&self, script: &str, args: &[&str]) -> StartProcess {
        let mut argv = vec!["-c".to_owned(), script.to_owned(), "sh".to_owned()];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let mut spec = StartProcess::new("/bin/sh")
            .args(argv)
            .env("HOME", self.home.clone())
            .cwd("/");
        spec.user = self.user.clone();
        for (k, v) in &self.envs {
            spec = spec.env(k.clone(), v.clone());
        }
        if let Some(t) = self.timeout {
            spec = spec.timeout(t);
        }
        spec
    }

    /// Run `script` and collect its bounded output; a non-zero exit is data.
    pub async fn run(&self, script: &str, args: &[&str]) -> Result<ControlOutput, Error> {
        let mut stream = self.api.start_process(self.command(script, args)).await?;
        let (mut stdout, mut stderr) = (Prefix::new(self.max_output), Prefix::new(self.max_output));
        let mut exit_code = None;
        let mut status = String::new();
        while let Some(ev) = stream.next().await {
            match ev? {
                ProcessEvent::Data(DataEvent::Stdout(b)) => {
                    stdout.push(&b);
                }
                ProcessEvent::Data(DataEvent::Stderr(b) | DataEvent::Pty(b)) => {
                    stderr.push(&b);
                }
                ProcessEvent::End(end) => {
                    exit_code = Some(end.exit_code);
                    status = end.status;
                }
                ProcessEvent::Start(_) | ProcessEvent::Keepalive(_) => {}
            }
        }
        let Some(exit_code) = exit_code else {
            return Err(Error::protocol(
                Surface::Envd,
                "shell command stream ended without an end event",
            ));
        };
        Ok(ControlOutput {
            exit_code,
            status,
            truncated: stdout.truncated() || stderr.truncated(),
            stdout: stdout.into_vec(),
            stderr: stderr.into_vec(),
        })
    }

    /// Run `script`; a non-zero exit becomes [`Error::ControlCommand`] with bounded stderr.
    pub async fn run_ok(&self, script: &str, args: &[&str]) -> Result<ControlOutput, Error> {
        let out = self.run(script, args).await?;
        if out.exit_code != 0 {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(Error::ControlCommand {
                exit_code: out.exit_code,
                stderr: crate::error::snippet(stderr.trim_end().as_bytes(), &[]),
            });
        }
        Ok(out)
    }
}

/// 20 random lowercase alphanumerics from the OS random source (via std's hasher seeds
/// and the clock as a fallback mix).
pub fn random_suffix() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(20);
    while out.len() < 20 {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        let mut v = h.finish();
        for _ in 0..10 {
            out.push(ALPHABET[(v % 36) as usize] as char);
            v /= 36;
        }
    }
    out.truncate(20);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_suffixes_are_distinct_and_well_formed() {
        let a = random_suffix();
        let b = random_suffix();
        assert_eq!(a.len(), 20);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(a, b);
    }
}
