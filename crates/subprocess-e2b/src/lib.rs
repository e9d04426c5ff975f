//! `exec_world::Subprocess` and `Terminal` over an E2B sandbox: [`E2bSubprocess`] takes
//! an `Arc<dyn e2b_core::EnvdApi>` and [`E2bSubprocessOptions`] and runs every program
//! through envd. Its builder methods (`user`, `output_buffer`, `process_timeout`,
//! `kill_after`) keep the cached user lookups.
//!
//! # How a spawn runs
//!
//! Once per sandbox and host process, one trusted command (root) places the spawn helper,
//! a short POSIX `sh` file ([`wrapper::helper_sh`]), in a fresh root-owned directory
//! `/run/.exec-world-spawn-<random>` (`/tmp` when `/run` is not a directory of root's that
//! no one else may write) and probes whether spawns can get a cgroup v2 of their own
//! (root can create a cgroup below its own in the sandbox's cgroup2 mount and move a
//! process into it, `cgroup.kill` exists, and `setpriv` can drop to the user). Every spawn
//! then runs that file by path: no script text travels with a spawn. Adapters made later
//! on the same sandbox (a harness that connects again for each turn) find the placement
//! and the user lookups and make no setup request; a placement in `/run` stays for a
//! minute after its last adapter went (the sandbox user cannot make that directory again
//! if it went), one in `/tmp` goes with its last adapter, and a spawn whose helper did not
//! start makes adapters created later set up afresh.
//!
//! The same command also places the *native spawn helper* beside it when this build has
//! one ([`native_helper_built`]: `build.rs` compiles `helper/spawn_helper.rs`, a `no_std`
//! x86_64 Linux program of about 16 KB, with `rustc` alone) and the sandbox runs it (the
//! setup probes it; a `noexec` `/tmp` or another architecture keeps the `sh` helper).
//! Piped spawns then start it directly: `spawn --root MOUNT NAME UID GID GROUPS
//! USERARGS…` as root (contained) or `spawn --user USERARGS…` as the user. In one exec it
//! does what the `sh` chain below does in five (`setsid`, `sh`, `setpriv`, `sh`, `env`):
//! a new session (forking only if envd made it a group leader), the cgroup join, the drop
//! to the user's uid, gid and supplementary groups, the group and session check, the
//! scrubbed environment (exec-world's one list, `env_scrub_list.rs`), the `PATH` lookup
//! with the user's rights, the same header line, then `execve`. An exec of `true` costs
//! 1.1-1.2x a raw envd `Start` with it against 2.8x through the `sh` chain (`spawn_bench`).
//! [`E2bSubprocessOptions::native_helper`] turns it off; terminals always use the `sh`
//! helper (their spec file, below). What follows describes the `sh` helper; the native
//! one keeps every guarantee it gives.
//!
//! A backstop ([`E2bSubprocessOptions::kill_after`]) is enforced in the sandbox, so it
//! holds when this host is gone: the native helper, started with `--kill-after SECS`,
//! forks first and stays as the program's watching parent (root in contained mode,
//! outside the spawn's cgroup, session and group); when the time is up it writes
//! `cgroup.kill` (plain mode: SIGKILL to the process group) and ends as the program did,
//! as `timeout -s KILL` would, without that program's exec. The pid envd knows is then
//! the watcher's, so `signal` goes through the trusted shell. The `sh` helper puts
//! `timeout -s KILL SECS` in front of the program instead (the process group only).
//!
//! A host lease ([`E2bSubprocessOptions::host_lease`], default [`DEFAULT_HOST_LEASE`],
//! 2 minutes; the `lease` module has the design) bounds how long a piped spawn that is not
//! durable outlives a lost host: the same watcher, started with `--lease FILE SECS`, ends
//! the spawn's cgroup (plain mode: its process group) once the adapter's lease file in
//! the root-owned helper directory stopped changing for SECS, and a reaper it leaves
//! behind does the same for what a program that ended first left running (unless the
//! host renews once more after that end). The host renews with one `POST /files` per
//! adapter every quarter of the bound while leased spawns run. Every native piped spawn
//! therefore has the watcher, and `signal(TERM|KILL)` goes through the trusted shell.
//! The `sh` helper has no lease (only `kill_after` bounds a spawn there); durable spawns
//! are started without it.
//!
//! `spawn` returns at once; a task does the remote start. With a cgroup per spawn
//! (contained mode) envd starts, as root,
//! `setsid -w /bin/sh HELPER --root MOUNT NAME SETPRIV UID GID USERARGS…`: the root part
//! moves itself into the spawn's own cgroup `MOUNT/NAME` and drops to the acting user
//! with `setpriv` before anything of the user runs. Without one (plain mode) envd starts
//! `setsid -w /bin/sh HELPER --user 0 '' USERARGS…` as the user. The argv and explicit
//! variables are positional parameters, never spliced into a script. `setsid` makes the
//! helper the leader of a new session and process group (in place: envd's pid stays the
//! program's pid). The helper reads `/proc/$$/stat`, checks that its group and session
//! ids are its own pid, looks the program up in the `PATH` of the environment it builds,
//! prints `EXEC-WORLD-PGID <pid> <cgroup>` as its first stdout line and `exec`s the
//! program (directly when the environment is known, else through `env`). The adapter
//! strips that line; [`Child::pid`](exec_world::Child::pid) stays `None` until it arrived
//! and parsed (the verified group id, not just envd's pid of the helper);
//! `EXEC-WORLD-FAIL enoent|eacces` becomes `NotFound` / `PermissionDenied` from
//! `started()` and `wait()`. No polling: the pid arrives on the output stream itself. The
//! header is printed just before the final `exec`, so a signal sent right after
//! `started()` may reach the helper `sh` (same pid and group) instead of the program; its
//! default action is the same, a trap of the program is not yet installed.
//!
//! Terminals: envd's PTY starts `/bin/sh HELPER [--root …] --file PATH`; the argv and
//! explicit env are in `PATH`, one `set -- '…' '…'` line that the helper sources and
//! deletes at once, so they never appear on a command line or in envd's `List`. In
//! contained mode the file is in the root-owned helper directory (created 0600 by root,
//! read by the root part); in plain mode in the adapter's state directory
//! `/tmp/.exec-world-proc-<random>` (created by root, mode 0700, owned by the user),
//! created empty with mode 0600 by the user (`umask 077; set -C`); then filled by an
//! upload.
//!
//! # Durable commands
//!
//! [`SpawnSpec::durable`](exec_world::SpawnSpec::durable) spawns outlive their `Child`
//! and this host: the native helper's watching parent (root) keeps a bounded record of
//! the output and the exit status in a root-owned directory per command
//! ([`DEFAULT_DURABLE_DIR`]), and any client of the sandbox lists, attaches to (from any
//! kept offset, then live) and collects them. See [`durable`] for the design, the
//! guarantees and the limits.
//!
//! # Environment
//!
//! The trusted shell (root, random root-level `HOME`, no profile) looks the user
//! up with `getent passwd` (home, shell) and reads envd's `PATH`, once per adapter.
//! Every process gets `EXEC_WORLD_SPAWN=<marker>` and:
//! - [`EnvBase::Clean`](exec_world::EnvBase): `env -i` + exactly the explicit variables;
//! - `Base`: `env -i` + `PATH` (envd's), `HOME` and `SHELL` (from `getent`), `USER`,
//!   `LOGNAME`, `LANG` (default `C.UTF-8`), terminals `TERM=xterm-256color`, then the
//!   explicit variables;
//! - `Inherit`: envd's environment for the user (its `PATH`, `HOME`, `USER`, `LOGNAME`,
//!   the sandbox's global variables) minus what exec-world's one scrub list
//!   ([`exec_world_sys::env_scrub`], shared with LocalSubprocess) drops: adapter-internal
//!   names (`EXEC_WORLD_*`), credential-shaped names (containing `KEY`,
//!   `SECRET`, `TOKEN`, `PASSWORD`, `PASSWD`, `CREDENTIAL` or `_AUTH`, or ending in
//!   `_PAT`, any case) and URLs with a password in their userinfo, removed with
//!   `env -u`; then the explicit variables.
//!
//! Explicit variables are the caller's choice and always pass. For piped spawns they
//! travel as positional arguments (so envd's `List` shows them while the helper runs).
//!
//! # Output, back-pressure, slow consumers
//!
//! envd's base64 chunks are decoded to raw bytes and delivered as they come. envd's event
//! stream is routed into a queue per stream bounded by [`E2bSubprocess::output_buffer`]
//! (default 1 MiB), driven by the reader of an output stream itself while its queue is
//! empty (no task between the HTTP body and the consumer), else by the spawn's
//! background task. When a queue is full the routing holds that chunk and stops
//! reading the HTTP body; TCP flow control then makes envd block, and envd blocks the
//! process's writes: a slow consumer slows the process, nothing is lost and host memory
//! stays bounded (envd only discards output while *no* stream is subscribed, and this
//! stream stays subscribed for the process's life). As with local pipes, a stream that is
//! neither read nor dropped eventually stalls the process (stdout and stderr share one
//! envd stream, so a full stderr queue also holds back stdout). Dropping a stream
//! discards its output. After `terminate` has killed the whole tree, the bound is lifted
//! so the end event arrives even if nobody reads (what remains is bounded by envd's
//! queue and the pipe buffers). For a copy of everything in the sandbox, see
//! [`spill`]: it tees a stream into a bounded file through exec-world's capture helper.
//!
//! # Signals and termination
//!
//! `Child::signal`: envd's SendSignal for TERM/KILL, `kill -s NAME PID` through the
//! trusted shell for the others. `terminate(grace)` (and `Drop`, with no grace, from a
//! background task) runs exec-world's `tree_script` through the trusted shell: TERM
//! (terminals: HUP too) and CONT to the group, the session, their descendants and every
//! process carrying the marker (which catches `setsid`'d and `nohup`'d escapees) and, in
//! contained mode, every process of the spawn's cgroup (which also catches a `setsid` +
//! `env -i` double fork: it lost both its parent and the marker, not its cgroup), up to
//! `grace`, then KILL rounds (each also writing the cgroup's `cgroup.kill`) until none is
//! left; [`ProcCapabilities::contained_escapes`](exec_world::ProcCapabilities) is `true`
//! exactly in contained mode; if it reports survivors or cannot run,
//! envd's SendSignal SIGKILL goes to the leader as the last resort. Then it waits for
//! envd's `end` and returns the leader's status. Terminal `signal` sends
//! `kill -s NAME -- -TPGID` to the terminal's foreground process group (`tpgid` from
//! `/proc/PID/stat`). A pipe child dropped after its observed exit kills nothing more; a
//! terminal dropped always runs the session kill.
//!
//! # Request cost (envd; no control-plane requests)
//!
//! - first use of an adapter: 1 `Start` (`getent`, root) + 1 `Start` (`id -un`) when no
//!   user was configured + 1 `Start` (helper placement and cgroup probe); cached;
//! - each piped spawn: 1 `Start` (the helper; its stream carries pid, output and exit);
//!   piped stdin adds 1 `SendInput` per 64 KiB written and 1 `CloseStdin`;
//! - each terminal: 1 `Start` (0600 spec file) + 1 `POST /files` (its content) +
//!   1 `Start` (the helper); without a cgroup per spawn the first terminal of an
//!   adapter adds 1 `Start` (state directory); `write` 1 `SendInput` per 64 KiB,
//!   `resize` 1 `Update`, `signal` 1 `Start`;
//! - `signal(TERM|KILL)` 1 `SendSignal` (1 `Start` when the spawn has a watching parent:
//!   a host lease, the default, or `kill_after`), other signals 1 `Start`;
//! - the host lease: 1 `POST /files` per adapter every quarter of the bound while a
//!   leased spawn runs (and once after the last one ended), in the background;
//! - `terminate` / `Drop` while running: 1 `Start` (tree kill), +1 `SendSignal` only as
//!   the last resort; `which`: 1 `Start`.
//!
//! - durable commands ([`durable`]): a durable spawn 1 `Start`; `durable_attach` 1
//!   `Start`; `durable_list` 1 `List` + 1 `Start`; `durable_collect` 1 `Start`.
//!
//! Nothing polls: waiting for the pid, the output and the exit are all the one stream.
//! (The tree kill rescans `/proc` every 50 ms inside the sandbox during the grace.)
//!
//! # Errors
//!
//! Every failure is an `exec_world::Error`; an `e2b_core::Error` becomes one through
//! e2b-core's one table (`e2b_core::world_error`): sandbox gone → `Gone`, timeouts →
//! `Timeout`, transport, protocol, 429 and 502–504 → `Transport` (temporary), envd
//! `invalid_argument` at start (a missing cwd) → `InvalidSpec`, 401/403 and envd
//! `permission_denied` → `PermissionDenied`, the rest → `Other`. A broken event stream ends `wait()` with
//! `Transport` (no reconnect: output while disconnected would be lost anyway), silence
//! past e2b-core's stream idle timeout (envd sends keepalives) with `Timeout`. Every
//! message names the operation (`starting PROGRAM in CWD`) and the cause once.
//!
//! Any end of the stream that is not the process's observed exit (a cut, a reset, envd's
//! `deadline_exceeded` of a process timeout, the idle timeout, a start whose answer was
//! lost) runs the tree kill (1 `Start`, through a new request) *before* `started()` /
//! `wait()` report it, for at most 20 s (so with e2b-core's default 60 s idle bound a
//! `wait` on a frozen envd errors within 90 s); if that kill cannot finish, dropping the
//! child runs it again, and the host lease ends the spawn in the sandbox.

mod boot;
mod child;
pub mod durable;
mod frames;
mod lease;
mod native;
mod options;
mod queue;
mod route;
mod session;
mod shell;
pub mod spill;
mod status;
mod subprocess;
mod terminal;
mod world;
pub mod wrapper;

pub use durable::DEFAULT_DURABLE_DIR;
pub use lease::DEFAULT_HOST_LEASE;
pub use options::{DEFAULT_OUTPUT_BUFFER, E2bSubprocessOptions};
pub use shell::UserInfo;
pub use subprocess::E2bSubprocess;

/// True when this build embeds the native spawn helper (built for x86_64 Linux by
/// `build.rs`); without it every spawn uses the `sh` helper.
///
/// ```
/// // On an x86_64 Linux build with a linker this is true.
/// let _ = subprocess_e2b::native_helper_built();
/// ```
pub fn native_helper_built() -> bool {
    native::available()
}

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
