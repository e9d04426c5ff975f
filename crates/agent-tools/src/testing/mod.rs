//! The shared tests of agent-tools (feature `testing`): async functions written only
//! against `Arc<dyn Fs>` / `Arc<dyn Subprocess>`, run unchanged against the local adapters
//! (`tests/local_*.rs`) and against the E2B adapters on the emulator or real E2B.
//!
//! Each test is `pub async fn name(world: &ToolWorld)` and panics on failure. Run them all
//! for a backend with [`agent_tools_tests!`](crate::agent_tools_tests), giving an async
//! constructor of a fresh [`ToolWorld`]:
//!
//! ```ignore
//! // tests/tests/it/agent_tools_e2b.rs
//! async fn world() -> agent_tools::testing::ToolWorld {
//!     let (fs, proc, scratch, sandbox) = /* E2bFs + E2bSubprocess, empty dir */;
//!     agent_tools::testing::ToolWorld::new(fs, proc, scratch)
//!         .with_lsp_cache("/home/user/.cache/agent-tools-lsp".parse().unwrap())
//!         .with_guard(sandbox)
//! }
//! agent_tools::agent_tools_tests!(world);
//! ```
//!
//! Programs the world must have: `bash` (or `sh`), `sleep`, `printf`, `head`, `tr`,
//! `kill`, `grep`, `stty`, `pwd`, and for the LSP test `python3` with `pip` and access to
//! PyPI (or an already filled cache, see [`ToolWorld::with_lsp_cache`]). No test asserts
//! on wall-clock time; timeouts only turn a hang into a failure.

mod bash;
mod lsp;
mod terminal;

pub use bash::*;
pub use lsp::*;
pub use terminal::*;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use exec_world::{Fs, Subprocess, WorldPath};

use crate::bash::{BashRequest, BashTool};

/// Generous bound turning a hang into a failure (never a performance assertion).
pub(crate) const HANG: Duration = Duration::from_secs(60);

/// What a test runs against: `Fs` and `Subprocess` of one world, an empty scratch dir.
pub struct ToolWorld {
    /// The file system.
    pub fs: Arc<dyn Fs>,
    /// The processes (same world as `fs`).
    pub proc: Arc<dyn Subprocess>,
    /// An existing, empty, absolute directory private to this test.
    pub scratch: WorldPath,
    /// Where the LSP test installs python-lsp-server (default `scratch/lsp-cache`).
    pub lsp_cache: Option<WorldPath>,
    /// Bytes printed by [`bash_huge_output_is_bounded`] (default 200 MiB).
    pub huge_output_bytes: u64,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

impl ToolWorld {
    /// A world over `fs` and `proc` with scratch directory `scratch` (exists, empty).
    pub fn new(fs: Arc<dyn Fs>, proc: Arc<dyn Subprocess>, scratch: WorldPath) -> ToolWorld {
        ToolWorld {
            fs,
            proc,
            scratch,
            lsp_cache: None,
            huge_output_bytes: 200 * 1024 * 1024,
            _guard: None,
        }
    }

    /// Uses `dir` (absolute, in the world) as the pip `--target` cache of the LSP test:
    /// filled once if `pylsp`/`pyflakes` do not import from it, reused after. Keep it
    /// readable by the world's user (the test makes what it installs world-readable).
    pub fn with_lsp_cache(mut self, dir: WorldPath) -> ToolWorld {
        self.lsp_cache = Some(dir);
        self
    }

    /// Sets [`ToolWorld::huge_output_bytes`] (for a slow transport; keep it far above
    /// the 64 KiB cap the test uses).
    pub fn with_huge_output_bytes(mut self, bytes: u64) -> ToolWorld {
        self.huge_output_bytes = bytes;
        self
    }

    /// Keeps `guard` alive as long as the world (a temp dir, a sandbox handle…).
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> ToolWorld {
        self._guard = Some(Box::new(guard));
        self
    }

    /// `scratch/rel`.
    pub fn path(&self, rel: &str) -> WorldPath {
        self.scratch.join(rel).expect("valid scratch path")
    }

    pub(crate) fn bash(&self) -> BashTool {
        BashTool::new(self.proc.clone())
    }
}

/// Declares one `#[tokio::test]` per shared test, each on a fresh world from `$make`
/// (an `async fn() -> ToolWorld`). Needs `tokio` (with `macros`) in the caller's crate.
/// `agent_tools_tests!(world)` declares all of them; `agent_tools_tests!(world, bash)`,
/// `…, terminal)` and `…, lsp)` one group.
#[macro_export]
macro_rules! agent_tools_tests {
    ($make:path) => {
        $crate::agent_tools_tests!($make, bash);
        $crate::agent_tools_tests!($make, terminal);
        $crate::agent_tools_tests!($make, lsp);
    };
    ($make:path, bash) => {
        $crate::agent_tools_tests!(@each $make, [
            bash_exit_codes,
            bash_stderr_separate,
            bash_cwd_and_env,
            bash_timeout_kills_process_tree,
            bash_background_job_ended_after_exit,
            bash_keep_background,
            bash_stdin,
            bash_cancel_terminates,
            bash_output_cap_utf8_boundary,
            bash_output_non_utf8,
            bash_huge_output_is_bounded,
        ]);
    };
    ($make:path, terminal) => {
        $crate::agent_tools_tests!(@each $make, [
            terminal_type_and_read,
            terminal_resize_seen_by_stty,
            terminal_ctrl_c_interrupts_sleep,
            terminal_close_ends_every_process,
            terminal_ring_is_bounded,
            terminal_exit_reports_closed,
        ]);
    };
    ($make:path, lsp) => {
        $crate::agent_tools_tests!(@each $make, [lsp_bridge_scripted_server, lsp_pylsp_diagnostics]);
    };
    (@each $make:path, [$($name:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let world = $make().await;
                $crate::testing::$name(&world).await;
            }
        )*
    };
}

/// True while `pid` is a live (non-zombie) process in the world.
pub async fn is_alive(world: &ToolWorld, pid: u32) -> bool {
    let cmd = format!(
        "kill -0 {pid} 2>/dev/null || exit 1; \
         if grep -q '^State:[[:space:]]*[ZX]' /proc/{pid}/status 2>/dev/null; then exit 1; fi; exit 0"
    );
    let out = world
        .bash()
        .run(BashRequest::new(cmd).timeout(HANG))
        .await
        .expect("liveness check");
    out.exit_code == Some(0)
}

/// Reads a pid written by a command into `rel` under the scratch dir.
pub(crate) async fn read_pid(world: &ToolWorld, rel: &str) -> u32 {
    let data = world
        .fs
        .read(&world.path(rel), 64)
        .await
        .unwrap_or_else(|e| panic!("read pid file {rel}: {e}"));
    String::from_utf8_lossy(&data)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid file {rel} holds {data:?}: {e}"))
}

/// Waits (bounded) until `pid` is gone; false if it is still alive after [`HANG`].
pub(crate) async fn gone_eventually(world: &ToolWorld, pid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + HANG;
    while tokio::time::Instant::now() < deadline {
        if !is_alive(world, pid).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
