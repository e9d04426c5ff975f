//! `exec_world::Fs` implemented over an E2B sandbox: [`E2bFs`].
//!
//! Built from any `Arc<dyn EnvdApi>` (a control-plane [`e2b_core::Sandbox`], a
//! bring-your-own sandbox, an in-process stand-in) and [`E2bFsOptions`]. What each
//! operation does in the sandbox:
//!
//! | operation | how |
//! | --- | --- |
//! | `stat` / `lstat` / `read_dir` | one shell command: GNU `find [-L] … -printf` (kind, mode, size, device, inode, mtime and ctime with nanoseconds, link text) |
//! | `read` | a holder process of the acting user (forked by a root `perl` wrapper, it becomes the user without exec'ing, so it stays non-dumpable) opens the file with that user's rights and checks its kind and size (`TooLarge` before a byte moves). A file of at most 2 MiB it copies to its own output: one request. A larger one it holds; envd's `GET /files` of `/proc/PID/fd/FD` reads that open file, never a path the user controls; then the holder's stdin is closed and it ends (see `src/holder.rs`); at most `max_bytes + 1` bytes are taken |
//! | `read_stream` | the same, streamed in chunks of at most 1 MiB (no process runs while a held file streams) |
//! | `write` | a holder of the acting user checks the parent (made when asked) and the target, makes a random sibling staging dir (0700) and creates `data` in it. At most 1 MiB: the bytes travel in the holder's start request (uuencoded in its root wrapper's environment, which only root can read), the holder writes them into `data`, sets the mode, renames it over the target and prints the record of the new inode: one request. Larger: envd's `POST /files` writes `/proc/PID/fd/FD`, the file the holder created and holds, and on `commit` (stdin) the holder does the rest: three requests (start, upload, commit). With [`E2bFsOptions::root_staging`], a larger write is envd's root upload into that root-only directory, then one holder start whose root parent opens (and unlinks) the staged file and whose user process copies it in and commits: two requests |
//! | `read_head` (inherent) | a holder of the acting user opens the file (`O_NONBLOCK`, kind checked on the descriptor) and copies at most `max` bytes to its output: one request |
//! | `write_file` (inherent) | `write` with parents made and a final link followed with the user's rights |
//! | `create_if_absent` | the same holder (and upload when larger than 1 MiB), committed with a hard link to the target (fails if anything exists there) |
//! | `watch` | a check of the directory as the acting user (exists, a directory, readable and searchable: else `PermissionDenied`), then envd's `WatchDir` stream; a broken stream is reported as an overflow event and reopened (see `src/watch.rs`) |
//! | `mkdir` / `remove` / `rename` | `perl` as the acting user (`mkdir`, `rmdir` / `unlink` / a recursive remove, `rename`; `mv -T` across file systems) |
//!
//! Root (envd's `/files` routes and file RPCs) never acts on a path the user controls:
//! it reads and writes only files a holder of the user opened (through the holder's
//! descriptor), and everything in the user's directories is done by the user's
//! processes. Holders need `perl` (Debian's essential `perl-base`).
//!
//! Error kinds come from exit codes only: 64–69 (not found, exists, not a directory, is a
//! directory, too large, not a regular file), 76 (a holder stopped or killed by the user:
//! `Interrupted`), `100 + errno` of the call that failed (a `find` that failed has its
//! call redone in `perl` for the errno); a tool's text is only ever the detail. A holder's
//! root parent watches it: a stopped holder is killed and the operation is interrupted at
//! once, never after the command timeout.
//!
//! Shell commands run as the acting user (`sh -c SCRIPT sh ARGS…`, paths only as
//! positional arguments, `LC_ALL=C`), so permissions and ownership are the user's. They
//! need GNU coreutils and findutils in the sandbox (E2B's templates are Debian-based).
//! With [`E2bFsOptions::warm_worker`] (the default), `stat`, `lstat`, `read_dir`,
//! `mkdir`, `remove`, `rename`, `read` / `read_head` with a limit of at most 2 MiB
//! (the read holder's work, as the user, answered inline) and `write` /
//! `create_if_absent` of at most 1 MiB (the write holder's work, as the user, the bytes
//! on its stdin) run on a warm worker: one
//! long-lived, non-dumpable `perl` of the acting user per adapter that forks each command
//! and answers on its open stream, so such a call is one `SendInput` instead of a process
//! `Start` (at 50 ms round trip: a stat in 56 ms instead of 67). It is used when idle,
//! restarted after any failure, and a change whose answer was lost is
//! `OutcomeUnknown`, never made twice (see `src/warm.rs`).
//!
//! **Version**: `device:inode:size:mtime:ctime` (nanoseconds) as `find` reports them. Every
//! write renames a fresh inode over the target, and the rename sets its ctime, so an
//! identical rewrite gets a new token; `write` returns the version of the inode it
//! renamed (read through the still-open staged file), which is what `stat` reports next.

mod fs;
mod holder;
mod meta;
mod options;
mod read;
mod scripts;
mod shell;
mod warm;
mod watch;
mod write;

pub use fs::E2bFs;
pub use options::E2bFsOptions;

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
