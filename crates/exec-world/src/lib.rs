//! The execution world as seams: the [`Fs`], [`Subprocess`] and [`Terminal`] traits and
//! types, local implementations ([`LocalFs`], [`LocalSubprocess`]), [`Rooted`] and the
//! `sandbox@1` contract. The conformance suites every backend runs are the crate
//! `exec-world-conformance` (a dev-dependency of each backend); the Linux plumbing the local
//! backends share with the emulator (PTYs, cgroups, spawn, reaping) is `exec-world-sys`.
//!
//! A consumer written against `&dyn Fs` / `&dyn Subprocess` runs unchanged on this
//! machine or in a remote sandbox: only the adapter changes.
//!
//! Policies, in one place:
//! - **cwd**: each `Fs` / `Subprocess` value carries an absolute cwd; relative
//!   [`WorldPath`]s resolve against it lexically by POSIX rules ([`Fs::with_cwd`] gives
//!   another handle on the same world).
//! - **environment**: a spawn starts from an explicit [`EnvBase`] (default: a small
//!   documented base, not the parent's environment) plus [`SpawnSpec::env`].
//! - **errors**: kinds a caller can act on ([`Error`], [`Error`]); a non-zero exit
//!   is data ([`ExitStatus`]).
//! - **lifetimes**: dropping a [`Child`] or [`Terminal`] kills its whole process tree
//!   unless [`Child::detach`]ed; [`Child::terminate`] is TERM, grace, KILL, and returns
//!   only when nothing survives; [`Child::wait_or_cancel`] takes a `CancellationToken`.
//! - **capabilities**: [`FsCapabilities`] / [`ProcCapabilities`] say what a backend
//!   claims; the conformance suite (`exec-world-conformance`) holds it to exactly that.
//!
//! ```no_run
//! use exec_world::{Fs, LocalFs, LocalSubprocess, SpawnSpec, Subprocess, WorldPath};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let fs = LocalFs::new()?;
//! let text = fs.read(&WorldPath::new("Cargo.toml")?, 1 << 20).await?;
//! let proc = LocalSubprocess::new()?;
//! let child = proc.spawn(SpawnSpec::new("ls").arg("-l"))?;
//! let status = child.wait().await?;
//! # let _ = (text, status); Ok(()) }
//! ```

pub mod durable;
mod error;
mod fs;
pub mod local;
pub mod output;
mod path;
mod proc;
pub mod rooted;
pub mod sandbox;
mod terminal;
pub mod tree;
pub mod watch;

pub use durable::{
    Attached, DEFAULT_OUTPUT_CAP, DurableId, DurableInfo, DurableSpec, DurableState, OutputOffsets,
};
pub use error::{BoxError, Error, ErrorKind, SharedError};
pub use fs::{
    ByteStream, Created, DirEntry, FileKind, Fs, FsCapabilities, Metadata, Version, WriteOptions,
    bytes_stream,
};
pub use local::{LocalFs, LocalSubprocess};
pub use path::{Target, WorldPath};
pub use proc::{
    Child, ChildBackend, EnvBase, ExitStatus, InputSink, OutputStream, ProcCapabilities, Signal,
    SpawnSpec, StdinMode, Subprocess,
};
pub use rooted::Rooted;
pub use terminal::{TermSize, Terminal, TerminalBackend, TerminalSpec};
pub use watch::{WatchEvent, WatchEventKind, WatchOptions, WatchStream};
