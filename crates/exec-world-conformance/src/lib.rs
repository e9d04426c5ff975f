//! The conformance suite: one set of async tests every backend runs unchanged.
//!
//! Each test is a `pub async fn name(world: &World)` that panics on failure and returns
//! early (printing `skipped: …`) when a capability flag says the backend does not claim
//! the behaviour. A backend runs the whole suite with the macros, one `#[tokio::test]` per
//! test, giving an async constructor of a fresh [`World`]:
//!
//! ```ignore
//! // crates/fs-e2b/tests/conformance.rs (needs tokio as a dev-dependency)
//! async fn world() -> exec_world_conformance::World { /* sandbox + scratch dir */ }
//! exec_world_conformance::fs_conformance_tests!(world);
//! exec_world_conformance::proc_conformance_tests!(world);
//! exec_world_conformance::terminal_conformance_tests!(world);
//! ```
//!
//! Symlinks are made with the backend's own `Subprocess` (`ln -s`), and liveness is checked
//! with `kill -0` plus `/proc/<pid>/status` (a zombie counts as dead), so the same code
//! works remotely. Programs used: `sh`, `cat`, `printf`, `env`, `pwd`, `sleep`, `ln`,
//! `kill`, `sed`, `nohup`, `setsid`, `stty`. No test asserts on wall-clock time; waits
//! are bounded only to turn a hang into a failure.

pub mod durable;
pub mod fs;
pub mod proc;
pub mod sandbox;
mod sandbox_durable;
mod sandbox_fork;
pub mod terminal;
pub mod tree;
pub mod watch;

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use exec_world::{
    ExitStatus, Fs, OutputStream, SpawnSpec, StdinMode, Subprocess, WorldPath, bytes_stream,
};

/// What a test runs against: an `Fs` and a `Subprocess` on the same world, and an empty
/// scratch directory private to the test.
pub struct World {
    /// The file system.
    pub fs: Arc<dyn Fs>,
    /// The processes (same world as `fs`).
    pub proc: Arc<dyn Subprocess>,
    /// An existing, empty, absolute directory for this test only.
    pub scratch: WorldPath,
    /// Where `fs`'s `/` is in `proc`'s view, when they differ (a [`exec_world::Rooted`] view
    /// over a world whose processes see the real tree); `None`: the same tree.
    pub proc_root: Option<WorldPath>,
    fresh: Option<ProcFactory>,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

/// Makes a new adapter instance on the same world (a new client, as a restarted host or
/// another replica would have): see [`World::with_fresh_proc`].
pub type ProcFactory =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Arc<dyn Subprocess>> + Send + Sync>;

impl World {
    /// A world over `fs` and `proc` with scratch directory `scratch` (must exist, empty).
    pub fn new(fs: Arc<dyn Fs>, proc: Arc<dyn Subprocess>, scratch: WorldPath) -> World {
        World {
            fs,
            proc,
            scratch,
            proc_root: None,
            fresh: None,
            _guard: None,
        }
    }

    /// Gives the suite a way to make a *new* adapter instance on the same world (the
    /// durable tests attach from one, as a restarted host would). Without it they use
    /// [`World::proc`] again.
    pub fn with_fresh_proc(
        mut self,
        make: impl Fn() -> futures::future::BoxFuture<'static, Arc<dyn Subprocess>>
        + Send
        + Sync
        + 'static,
    ) -> World {
        self.fresh = Some(Arc::new(make));
        self
    }

    /// A new adapter instance on this world (see [`World::with_fresh_proc`]).
    pub async fn fresh_proc(&self) -> Arc<dyn Subprocess> {
        match &self.fresh {
            Some(make) => make().await,
            None => self.proc.clone(),
        }
    }

    /// Tells the suite that `fs`'s `/` is the directory `real` in `proc`'s view, so the
    /// symlinks it makes with `proc` land where `fs` sees them.
    pub fn with_proc_root(mut self, real: WorldPath) -> World {
        self.proc_root = Some(real);
        self
    }

    /// `p` (a path of `fs`) as `proc` sees it.
    pub fn proc_path(&self, p: &WorldPath) -> WorldPath {
        match &self.proc_root {
            None => p.clone(),
            Some(root) => root
                .join(p.as_str().trim_start_matches('/'))
                .expect("valid proc path"),
        }
    }

    /// Keeps `guard` alive as long as the world (a temp dir, a sandbox handle…).
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> World {
        self._guard = Some(Box::new(guard));
        self
    }

    /// `scratch/rel`.
    pub fn path(&self, rel: &str) -> WorldPath {
        self.scratch.join(rel).expect("valid scratch path")
    }
}

/// A conformance test as a plain function pointer (see [`fs_tests`]).
pub type TestFn = for<'a> fn(&'a World) -> futures::future::BoxFuture<'a, ()>;

/// Declares one `#[tokio::test]` per listed test of `$module`. Internal to the macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($make:path, $module:ident, [$($name:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let world = $make().await;
                $crate::$module::$name(&world).await;
            }
        )*
    };
}

/// Builds the `(name, TestFn)` list of `$module`. Internal.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_list {
    ($module:ident, [$($name:ident),* $(,)?]) => {{
        $(
            fn $name(w: &$crate::World) -> ::futures::future::BoxFuture<'_, ()> {
                Box::pin($crate::$module::$name(w))
            }
        )*
        vec![$((stringify!($name), $name as $crate::TestFn)),*]
    }};
}

/// The file-system tests, by name. The single list both the macro and [`fs_tests`] use.
#[doc(hidden)]
#[macro_export]
macro_rules! __fs_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            fs_stat_lstat_files_and_dirs,
            fs_symlinks,
            fs_read_dir_one_level,
            fs_bounded_read,
            fs_large_file_streaming,
            fs_write_versions_modes_parents,
            fs_atomic_write_concurrent_reader,
            fs_failed_write_keeps_old,
            fs_dropped_write_keeps_old,
            fs_create_if_absent_race,
            fs_mkdir_and_remove,
            fs_rename,
            fs_relative_paths,
            fs_canonical_targets,
        ] }
    };
}

/// The watch tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __watch_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            watch_create_write_remove_rename,
            watch_recursive,
            watch_overflow,
            watch_stops_on_drop,
            watch_permission_and_kinds,
            watch_recursive_hides_unreadable_subdirs,
        ] }
    };
}

/// The tree-transfer tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __tree_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            tree_round_trip_hashed,
            tree_special_files_reported,
            tree_limits,
            tree_hostile_destinations,
            tree_hostile_archives,
            tree_cancelled_transfers_leave_no_staging,
            tree_denied_is_permission_denied,
        ] }
    };
}

/// The process tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __proc_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            proc_spawn_args_env_cwd,
            proc_clean_env,
            proc_stdio_bytes,
            proc_exit_codes_and_signals,
            proc_which,
            proc_missing_program,
            proc_terminate_reaches_every_descendant,
            proc_escape_suite,
            proc_terminate_grace_then_kill,
            proc_concurrent_spawns,
            proc_drop_kills_group,
            proc_exit_before_output_eof,
            proc_cancel_terminates,
            proc_capture_with_spill,
            proc_runs_script_written_through_fs,
        ] }
    };
}

/// The durable-command tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __durable_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            durable_ids_and_tags_validated,
            durable_list_and_attach_ended_from_fresh_instance,
            durable_attach_running_from_fresh_instance,
            durable_unheard_output_arrives_complete,
            durable_cap_drops_oldest_and_counts,
            durable_cap_64_mib_through_16_mib,
            durable_cut_attach_resumes_exactly,
            durable_start_never_runs_twice,
            durable_two_attaches_get_everything,
            durable_stdin_closed_by_default,
            durable_stdin_piped_across_attaches,
            durable_drop_and_detach_leave_it_running,
            durable_signal_and_terminate_attached,
            durable_collect_semantics,
        ] }
    };
}

/// The terminal tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __terminal_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            term_io_and_exit,
            term_resize,
            term_signal_foreground,
            term_terminate_every_group,
        ] }
    };
}

/// One `#[tokio::test]` per file-system conformance test; `$make` is an `async fn() -> World`.
#[macro_export]
macro_rules! fs_conformance_tests {
    ($make:path) => {
        $crate::__fs_test_names!(__conformance_tests!($make, fs,));
    };
}

/// One `#[tokio::test]` per watch conformance test; `$make` is an `async fn() -> World`.
#[macro_export]
macro_rules! watch_conformance_tests {
    ($make:path) => {
        $crate::__watch_test_names!(__conformance_tests!($make, watch,));
    };
}

/// One `#[tokio::test]` per tree-transfer conformance test; `$make` is an `async fn() -> World`.
#[macro_export]
macro_rules! tree_conformance_tests {
    ($make:path) => {
        $crate::__tree_test_names!(__conformance_tests!($make, tree,));
    };
}

/// One `#[tokio::test]` per process conformance test; `$make` is an `async fn() -> World`.
#[macro_export]
macro_rules! proc_conformance_tests {
    ($make:path) => {
        $crate::__proc_test_names!(__conformance_tests!($make, proc,));
    };
}

/// One `#[tokio::test]` per durable-command conformance test; `$make` is an
/// `async fn() -> World` (give it [`World::with_fresh_proc`]).
#[macro_export]
macro_rules! durable_conformance_tests {
    ($make:path) => {
        $crate::__durable_test_names!(__conformance_tests!($make, durable,));
    };
}

/// One `#[tokio::test]` per terminal conformance test; `$make` is an `async fn() -> World`.
#[macro_export]
macro_rules! terminal_conformance_tests {
    ($make:path) => {
        $crate::__terminal_test_names!(__conformance_tests!($make, terminal,));
    };
}

/// The file-system tests as `(name, fn)`, for runners that share one world (e.g. one real
/// sandbox) across tests: give each test its own empty scratch directory.
pub fn fs_tests() -> Vec<(&'static str, TestFn)> {
    crate::__fs_test_names!(__conformance_list!(fs,))
}

/// The watch tests as `(name, fn)`.
pub fn watch_tests() -> Vec<(&'static str, TestFn)> {
    crate::__watch_test_names!(__conformance_list!(watch,))
}

/// The tree-transfer tests as `(name, fn)`.
pub fn tree_tests() -> Vec<(&'static str, TestFn)> {
    crate::__tree_test_names!(__conformance_list!(tree,))
}

/// The process tests as `(name, fn)`.
pub fn proc_tests() -> Vec<(&'static str, TestFn)> {
    crate::__proc_test_names!(__conformance_list!(proc,))
}

/// The durable-command tests as `(name, fn)` (each gated on
/// [`ProcCapabilities::durable`](exec_world::ProcCapabilities::durable)).
pub fn durable_tests() -> Vec<(&'static str, TestFn)> {
    crate::__durable_test_names!(__conformance_list!(durable,))
}

/// The terminal tests as `(name, fn)`.
pub fn terminal_tests() -> Vec<(&'static str, TestFn)> {
    crate::__terminal_test_names!(__conformance_list!(terminal,))
}

/// Prints why a test is skipped (shows with `--nocapture`).
pub(crate) fn skip(test: &str, flag: &str) {
    println!("skipped: {test}: backend does not claim `{flag}`");
}

/// Awaits `fut`, failing the test if it takes longer than `secs` (a hang guard only).
pub(crate) async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {secs} s"),
    }
}

/// A path from a literal.
pub(crate) fn wp(s: &str) -> WorldPath {
    WorldPath::new(s).expect("valid literal path")
}

/// What a finished process produced.
#[derive(Debug)]
pub(crate) struct Output {
    pub status: ExitStatus,
    pub stdout: Bytes,
    pub stderr: Bytes,
}

impl Output {
    pub(crate) fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Drains a stream into memory.
pub(crate) async fn collect(stream: Option<OutputStream>) -> Bytes {
    let mut buf = BytesMut::new();
    if let Some(mut s) = stream {
        while let Some(chunk) = s.next().await {
            buf.extend_from_slice(&chunk.expect("output stream item"));
        }
    }
    buf.freeze()
}

/// Runs `spec` to the end, feeding `stdin` (then EOF) and draining both pipes together.
pub(crate) async fn run(proc: &dyn Subprocess, spec: SpawnSpec, stdin: Option<Bytes>) -> Output {
    let spec = if stdin.is_some() {
        spec.stdin(StdinMode::Piped)
    } else {
        spec
    };
    let mut child = proc.spawn(spec).expect("spawn");
    let input = child.take_stdin();
    let out = child.take_stdout();
    let err = child.take_stderr();
    let feed = async move {
        if let (Some(mut w), Some(data)) = (input, stdin) {
            w.write_all(&data).await.expect("write stdin");
            w.shutdown().await.expect("close stdin");
        }
    };
    let (_, stdout, stderr) = within(
        60,
        "process output",
        futures::future::join3(feed, collect(out), collect(err)),
    )
    .await;
    let status = within(60, "process exit", child.wait())
        .await
        .expect("wait");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Runs `sh -c script` with `args` as `$1…`.
pub(crate) async fn sh(proc: &dyn Subprocess, script: &str, args: &[String]) -> Output {
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args.iter().cloned());
    run(proc, spec, None).await
}

/// Makes a symlink `link` → `target` with the world's own `ln -s`.
pub(crate) async fn symlink(world: &World, target: &str, link: &WorldPath) {
    let out = run(
        world.proc.as_ref(),
        SpawnSpec::new("ln")
            .arg("-s")
            .arg(target)
            .arg(world.proc_path(link).as_str()),
        None,
    )
    .await;
    assert!(out.status.success(), "ln -s failed: {out:?}");
}

/// Writes `data` to `p` through the Fs.
pub(crate) async fn put(fs: &dyn Fs, p: &WorldPath, data: &[u8]) {
    fs.write(
        p,
        bytes_stream(Bytes::copy_from_slice(data)),
        Default::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("write {p}: {e}"));
}

/// The pids among `pids` still alive in the world (a zombie counts as dead).
/// The pids of `pids` still alive after giving a background kill up to ~10 s to land
/// (remote backends kill from a task); empty once all are gone.
pub(crate) async fn survivors_eventually(proc: &dyn Subprocess, pids: &[u32]) -> Vec<u32> {
    let mut alive = pids.to_vec();
    for _ in 0..100 {
        alive = survivors(proc, pids).await;
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    alive
}

pub(crate) async fn survivors(proc: &dyn Subprocess, pids: &[u32]) -> Vec<u32> {
    let script = r#"for p in "$@"; do
  if kill -0 "$p" 2>/dev/null; then
    s=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null)
    [ "$s" = Z ] || [ "$s" = X ] || echo "$p"
  fi
done"#;
    let args: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    let out = sh(proc, script, &args).await;
    out.stdout_text()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Every number following `pid ` in `text`.
pub(crate) fn pids_in(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("pid ") {
        rest = &rest[i + 4..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = digits.parse() {
            out.push(n);
        }
    }
    out
}

/// Reads `stream` into `seen` until `done(seen)` holds; panics after `secs` or at EOF.
pub(crate) async fn read_until(
    stream: &mut OutputStream,
    seen: &mut Vec<u8>,
    secs: u64,
    what: &str,
    done: impl Fn(&str) -> bool,
) {
    let fut = async {
        loop {
            if done(&String::from_utf8_lossy(seen)) {
                return;
            }
            match stream.next().await {
                Some(Ok(chunk)) => seen.extend_from_slice(&chunk),
                Some(Err(e)) => panic!("{what}: stream error {e}"),
                None => panic!(
                    "{what}: stream ended; seen: {:?}",
                    String::from_utf8_lossy(seen)
                ),
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .is_err()
    {
        panic!(
            "{what}: not seen within {secs} s; seen: {:?}",
            String::from_utf8_lossy(seen)
        );
    }
}
