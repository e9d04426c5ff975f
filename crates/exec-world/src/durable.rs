//! Durable commands: a spawn with a [`DurableId`] outlives its [`Child`] (and the host
//! process that started it). Its output is kept where it runs, bounded per stream; its
//! exit status is recorded there by its supervising parent. Another adapter instance, or
//! a new host process, finds it again with [`Subprocess::durable_list`] and
//! [`Subprocess::durable_attach`], reads its output from any kept offset, writes its stdin
//! and learns how it ended; [`Subprocess::durable_collect`] forgets an ended one.
//!
//! A start with an id that exists (running, or ended and not collected) fails with
//! [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) and runs nothing, so a
//! retried start is never a replay. When the end of a command cannot be known (its record
//! is gone, its supervisor was killed, the sandbox rebooted), `wait` answers
//! [`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown): never a guess.
//!
//! ```no_run
//! use exec_world::{DurableId, DurableSpec, LocalSubprocess, OutputOffsets, SpawnSpec, Subprocess};
//! # async fn demo() -> Result<(), exec_world::Error> {
//! let proc = LocalSubprocess::new()?;
//! let id: DurableId = "migrate-42".parse()?;
//! let child = proc.spawn(SpawnSpec::new("sh").arg("-c").arg("make migrate").durable(DurableSpec::new(id.clone())))?;
//! child.detach(); // (dropping it would leave it running too)
//! // ... later, maybe from another host process:
//! let attached = proc.durable_attach(&id, OutputOffsets::default()).await?;
//! let status = attached.child.wait().await?;
//! proc.durable_collect(&id).await?;
//! # let _ = status; Ok(()) }
//! ```
//!
//! [`Child`]: crate::Child
//! [`Subprocess::durable_list`]: crate::Subprocess::durable_list
//! [`Subprocess::durable_attach`]: crate::Subprocess::durable_attach
//! [`Subprocess::durable_collect`]: crate::Subprocess::durable_collect

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use crate::error::Error;
use crate::path::WorldPath;
use crate::proc::{Child, ExitStatus};

/// The default number of bytes kept per output stream of a durable command (16 MiB).
pub const DEFAULT_OUTPUT_CAP: u64 = 16 << 20;

/// A durable command's id: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`.
///
/// ```
/// use exec_world::DurableId;
/// let id: DurableId = "build-7.log".parse()?;
/// assert_eq!(id.as_str(), "build-7.log");
/// assert!("../etc".parse::<DurableId>().is_err());
/// assert_eq!(DurableId::random().as_str().len(), 16);
/// # Ok::<(), exec_world::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DurableId(String);

impl DurableId {
    /// `id` if it matches `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`, else
    /// [`ErrorKind::InvalidSpec`](crate::ErrorKind::InvalidSpec).
    pub fn new(id: impl Into<String>) -> Result<DurableId, Error> {
        let id = id.into();
        let b = id.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 64
            && b[0].is_ascii_alphanumeric()
            && b[1..]
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if ok {
            Ok(DurableId(id))
        } else {
            Err(Error::invalid_spec(format!(
                "durable id {id:?}: it must match ^[A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}$"
            )))
        }
    }

    /// A new random id: 16 lowercase hex characters (64 bits from the OS's random source).
    pub fn random() -> DurableId {
        DurableId(format!("{:016x}", random_u64()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// 64 random bits: `/dev/urandom`, else (no such device) a hash of the time, the pid and a
/// counter under std's randomly keyed hasher.
fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl fmt::Display for DurableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for DurableId {
    type Err = Error;
    fn from_str(s: &str) -> Result<DurableId, Error> {
        DurableId::new(s)
    }
}

impl TryFrom<&str> for DurableId {
    type Error = Error;
    fn try_from(s: &str) -> Result<DurableId, Error> {
        DurableId::new(s)
    }
}

impl TryFrom<String> for DurableId {
    type Error = Error;
    fn try_from(s: String) -> Result<DurableId, Error> {
        DurableId::new(s)
    }
}

impl AsRef<str> for DurableId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Makes a spawn durable: [`SpawnSpec::durable`](crate::SpawnSpec::durable).
///
/// ```
/// use exec_world::{DurableId, DurableSpec, SpawnSpec, DEFAULT_OUTPUT_CAP};
/// let spec = DurableSpec::new(DurableId::random()).tag("nightly")?.output_cap(1 << 20);
/// assert_eq!(spec.output_cap, 1 << 20);
/// assert_eq!(DurableSpec::new(DurableId::random()).output_cap, DEFAULT_OUTPUT_CAP);
/// let spawn = SpawnSpec::new("make").durable(spec);
/// assert!(spawn.durable.is_some());
/// # Ok::<(), exec_world::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurableSpec {
    /// The id the command is found by.
    pub id: DurableId,
    /// A free label, listed with it: `^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$` (as sandbox tags).
    pub tag: Option<String>,
    /// Bytes kept per output stream; beyond it the oldest are dropped (and counted).
    /// Default [`DEFAULT_OUTPUT_CAP`].
    ///
    /// The command never waits for a reader (its output goes to the record, not to a
    /// pipe the reader holds): a reader that falls more than the cap behind gets an
    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted) item naming the offset
    /// to attach again from, never a silently shortened stream.
    pub output_cap: u64,
}

impl DurableSpec {
    /// A durable spec with id `id`, no tag, the default cap.
    pub fn new(id: DurableId) -> DurableSpec {
        DurableSpec {
            id,
            tag: None,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }

    /// Sets the tag; InvalidSpec unless it matches `^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`.
    pub fn tag(mut self, tag: impl Into<String>) -> Result<DurableSpec, Error> {
        let tag = tag.into();
        validate_tag(&tag)?;
        self.tag = Some(tag);
        Ok(self)
    }

    /// Sets the per-stream cap of kept output bytes.
    pub fn output_cap(mut self, cap: u64) -> DurableSpec {
        self.output_cap = cap;
        self
    }

    /// Checks the fields a caller may have set directly (the tag); backends call it
    /// before starting anything.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(t) = &self.tag {
            validate_tag(t)?;
        }
        Ok(())
    }
}

/// A tag: `^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`.
fn validate_tag(tag: &str) -> Result<(), Error> {
    let b = tag.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_spec(format!(
            "durable tag {tag:?}: it must match ^[a-zA-Z0-9][a-zA-Z0-9_-]{{0,63}}$"
        )))
    }
}

/// Where a durable command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurableState {
    /// It runs (its supervisor is alive and has recorded no status).
    Running,
    /// It ended; the status its supervisor recorded.
    Exited(ExitStatus),
    /// Its end cannot be known: the supervisor vanished without recording a status (or
    /// the record is damaged). Never a guess.
    Unknown,
}

/// A durable command as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableInfo {
    /// Its id.
    pub id: DurableId,
    /// Its tag, if any.
    pub tag: Option<String>,
    /// The program as given in the spec.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its absolute working directory.
    pub cwd: WorldPath,
    /// When it was started.
    pub started: SystemTime,
    /// Its pid in the world, when known.
    pub pid: Option<u32>,
    /// Running, exited, or unknown.
    pub state: DurableState,
}

/// Byte offsets into the kept stdout / stderr of a durable command (0 = from the first
/// byte ever written).
///
/// ```
/// let from = exec_world::OutputOffsets { stdout: 4096, ..Default::default() };
/// assert_eq!(from.stderr, 0);
/// ```
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputOffsets {
    /// Offset into stdout.
    pub stdout: u64,
    /// Offset into stderr.
    pub stderr: u64,
}

/// What [`Subprocess::durable_attach`](crate::Subprocess::durable_attach) gives.
#[derive(Debug)]
pub struct Attached {
    /// The command: its streams start at [`Attached::start`], then go on live until it
    /// ends; `wait` gives its status (or [`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown));
    /// `take_stdin` works when it was started with piped stdin and its stdin is still open.
    /// Dropping it leaves the command running.
    ///
    /// **stdin of a durable command** closes only on an explicit `shutdown()` of the sink:
    /// dropping the sink (or the `Child`, or losing the host) leaves it open, so another
    /// attach can go on writing.
    pub child: Child,
    /// The command as listed.
    pub info: DurableInfo,
    /// Where the streams actually begin (past the asked offset when the cap dropped bytes).
    pub start: OutputOffsets,
    /// Bytes between the asked offset and [`Attached::start`] that the cap dropped.
    pub dropped: OutputOffsets,
}
