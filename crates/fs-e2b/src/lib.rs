//! `exec_world::Fs` implemented over an E2B sandbox: [`E2bFs`].
//!
//! Built from any `Arc<dyn EnvdApi>` (a control-plane [`e2b_core::Sandbox`], a
//! bring-your-own sandbox, an in-process stand-in) and [`E2bFsOptions`]. What each
//! operation does in the sandbox:
//!
//! | operation | how |
//! | --- | --- |
//! | `stat` / `lstat` / `read_dir` | one shell command: GNU `find [-L] … -printf` (kind, mode, size, device, inode, mtime and ctime with nanoseconds, link text) |
//! | `read` | a process running as the acting user (never envd's `GET /files`, which opens files as root): it opens the file once, checks its kind and size (`TooLarge` before a byte is sent), prints the size, then at most `max_bytes + 1` bytes over envd's process stream |
//! | `read_stream` | the same reader without a limit, yielded in chunks of at most 1 MiB; dropping the stream kills the reader |
//! | `write` | shell command as the user: checks, `mkdir -m 0700` of a random sibling staging dir; `POST /files` into root's private upload dir (`/tmp/.e2b-upload-…`, root 0711, made once per handle: envd writes as root and follows links, so it never writes where the user can plant one); shell command as the user: link or copy the upload into the staging dir, `chmod`, `mv -T` over the target, stat of the renamed inode through an open descriptor; envd `Remove` of the upload |
//! | `create_if_absent` | same upload and staging, then `ln -T staged target` (a hard link fails if anything exists at the target) |
//! | `mkdir` / `remove` / `rename` | shell commands (`mkdir [-p]`, `rmdir` / `rm [-rf]`, `mv -T`) |
//!
//! Root (envd's `/files` routes and file RPCs) never acts on a path the user controls:
//! reads come from a process running as the user, uploads land in root's own directory,
//! and everything in the user's directories is done by the user's processes.
//!
//! Shell commands run as the acting user (`sh -c SCRIPT sh ARGS…`, paths only as
//! positional arguments, `LC_ALL=C`), so permissions and ownership are the user's. They
//! need GNU coreutils and findutils in the sandbox (E2B's templates are Debian-based).
//!
//! **Version**: `device:inode:size:mtime:ctime` (nanoseconds) as `find` reports them. Every
//! write renames a fresh inode over the target, and the rename sets its ctime, so an
//! identical rewrite gets a new token; `write` returns the version of the inode it
//! renamed (read through the still-open staged file), which is what `stat` reports next.

mod fs;
mod meta;
mod options;
mod read;
mod scripts;
mod shell;
mod write;

pub use fs::E2bFs;
pub use options::E2bFsOptions;

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
