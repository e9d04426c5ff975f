//! The emulator as a separate process: the `e2b-local` binary started as a child of the
//! test, so a test can freeze it (`SIGSTOP`), thaw it and kill it (`SIGKILL`) while its
//! sandboxes' processes keep running, as a frozen or dead envd leaves a real sandbox.
//!
//! The binary is the workspace's own: `E2B_LOCAL_BIN` when set, else `e2b-local` in the
//! target directory this test binary was built into, built there with cargo (`CARGO`,
//! `-p testing-fake --bin e2b-local`) when missing (a `cargo test -p` of another crate
//! does not build it).
//!
//! ```no_run
//! # async fn demo() {
//! let emu = emulator_fixture::child::ChildEmulator::start(false);
//! let client = e2b_core::Client::new(emu.config(std::time::Duration::from_secs(30)))
//!     .expect("client");
//! emu.freeze();
//! emu.thaw();
//! # drop(client);
//! # }
//! ```

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use e2b_core::Config;

/// An `e2b-local` process serving on 127.0.0.1; ended (SIGTERM, then SIGKILL) on drop.
pub struct ChildEmulator {
    child: Child,
    api_url: String,
    sandbox_url: String,
    api_key: String,
    /// The emulator's root directory (removed on drop, after the process).
    root: Option<PathBuf>,
}

impl std::fmt::Debug for ChildEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildEmulator")
            .field("pid", &self.child.id())
            .field("api_url", &self.api_url)
            .finish_non_exhaustive()
    }
}

/// One build of the binary at a time (tests of one binary run in parallel).
static BUILD: Mutex<()> = Mutex::new(());

/// The `e2b-local` binary (see the module docs); panics when it cannot be found or built.
pub fn e2b_local_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("E2B_LOCAL_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test binary>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf();
    let bin = profile_dir.join("e2b-local");
    let _one = BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if bin.is_file() {
        return bin;
    }
    let target = profile_dir
        .parent()
        .expect("target directory")
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "testing-fake", "--bin", "e2b-local"])
        .env("CARGO_TARGET_DIR", &target);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("cargo runs");
    assert!(
        status.success() && bin.is_file(),
        "building e2b-local failed"
    );
    bin
}

impl ChildEmulator {
    /// Starts `e2b-local` on a free port of 127.0.0.1 (`no_isolation`: its sandboxes are
    /// plain host processes, which outlive it; else they die with it, their PID
    /// namespace's init being its child) and waits for its address lines. Panics when it
    /// does not come up within 120 s (test helper).
    pub fn start(no_isolation: bool) -> ChildEmulator {
        let root = std::env::temp_dir().join(format!(
            "e2b-local-child-{}-{}",
            std::process::id(),
            e2b_core::trusted_shell::random_suffix()
        ));
        std::fs::create_dir_all(&root).expect("emulator root");
        let mut cmd = Command::new(e2b_local_binary());
        cmd.args(["--port", "0", "--bind", "127.0.0.1", "--root"])
            .arg(&root)
            .env_remove("E2B_LOCAL_API_KEY")
            .env_remove("E2B_LOCAL_NO_ISOLATION")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if no_isolation {
            cmd.arg("--no-isolation");
        }
        let mut child = cmd.spawn().expect("e2b-local starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut api_url, mut sandbox_url, mut api_key) = (None, None, None);
        while api_url.is_none() || sandbox_url.is_none() || api_key.is_none() {
            let line = match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) => l,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("e2b-local printed no address within 120 s");
                }
            };
            if let Some(v) = line.strip_prefix("E2B_API_URL=") {
                api_url = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("E2B_SANDBOX_URL=") {
                sandbox_url = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("E2B_API_KEY=") {
                api_key = Some(v.to_owned());
            }
        }
        ChildEmulator {
            child,
            api_url: api_url.unwrap_or_default(),
            sandbox_url: sandbox_url.unwrap_or_default(),
            api_key: api_key.unwrap_or_default(),
            root: Some(root),
        }
    }

    /// The process id of `e2b-local`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A client configuration for it, with `request_timeout` on every call.
    pub fn config(&self, request_timeout: Duration) -> Config {
        Config::new()
            .with_api_key(self.api_key.clone())
            .with_api_url(self.api_url.clone())
            .with_sandbox_url(self.sandbox_url.clone())
            .with_request_timeout(request_timeout)
            .with_connect_timeout(Duration::from_secs(5))
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid (not yet reaped: `wait` only in `kill`
        // and `drop`).
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    /// Freezes it (`SIGSTOP`): envd and the control plane stop answering; the
    /// sandboxes' processes run on.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Thaws it (`SIGCONT`).
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Kills it (`SIGKILL`, no cleanup) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildEmulator {
    /// SIGCONT and SIGTERM (the emulator ends its sandboxes and cleans up), SIGKILL after
    /// 15 s; then its root directory is removed.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.thaw();
            self.signal(libc::SIGTERM);
            for _ in 0..150 {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            self.kill();
        }
        if let Some(root) = self.root.take() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}
