//! The [`Child`] of a local durable command, whether this process started it or attached
//! to it: its output followed from the record files, its stdin written as frames into the
//! record's FIFO, its status read from the record, signals sent only to the very process
//! the record names (pid and start time, through a pidfd). Dropping it leaves the command
//! running.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::net::unix::pipe;

use super::durable::{Meta, START_WINDOW, read_pids, read_status};
use super::tree::Tree;
use crate::durable::{Attached, DurableInfo, DurableState, OutputOffsets};
use crate::error::Error;
use crate::proc::{Child, ChildBackend, ExitStatus, InputSink, OutputStream, Signal};
use exec_world_sys::supervise::{STDIN_FRAME_MAX, alive, files, pidfd_checked, signal_checked};

/// One process for good: its pid and start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Identity {
    /// True while that very process lives.
    pub(crate) fn alive(&self) -> bool {
        alive(self.pid, self.start)
    }
}

/// The shortest and longest pause between two looks at a record that has nothing new.
const POLL_MIN: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);
/// How often `wait` looks at the supervisor while the command's pidfd is quiet.
const WATCH_SUPERVISOR: Duration = Duration::from_millis(250);
/// The largest chunk a stream yields.
const CHUNK: u64 = 256 * 1024;

/// What a record says about its end, looked at once.
enum End {
    Exited(ExitStatus),
    Running,
    Unknown(&'static str),
}

/// The record `dir` of a command started at `started`.
#[derive(Clone, Debug)]
struct Record {
    dir: PathBuf,
    started: SystemTime,
    id: String,
}

impl Record {
    /// The supervisor, when its pid file is there.
    fn supervisor(&self) -> Option<Identity> {
        read_pids(&self.dir).map(|(s, _)| s)
    }

    fn end(&self) -> End {
        if let Some(s) = read_status(&self.dir) {
            return End::Exited(s);
        }
        if !self.dir.exists() {
            return End::Unknown("its record was removed");
        }
        match self.supervisor() {
            Some(sup) if sup.alive() => End::Running,
            Some(_) => match read_status(&self.dir) {
                Some(s) => End::Exited(s),
                None => End::Unknown("its supervisor ended without recording a status"),
            },
            None if self.started.elapsed().unwrap_or_default() < START_WINDOW => End::Running,
            None => End::Unknown("its supervisor never recorded a start"),
        }
    }

    /// True once no more output will come: the supervisor finished (`closed`), or it is
    /// gone, or the record is.
    fn output_done(&self) -> bool {
        if self.dir.join(files::CLOSED).exists() {
            return true;
        }
        matches!(self.end(), End::Unknown(_)) || matches!(self.supervisor(), Some(s) if !s.alive())
    }
}

/// Follows one output file of a record from `at`.
struct Follow {
    file: Arc<std::fs::File>,
    record: Record,
    at: u64,
    cap: u64,
    pause: Duration,
    done: bool,
    what: &'static str,
}

impl Follow {
    async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        if self.done {
            return None;
        }
        loop {
            let size = match self.file.metadata() {
                Ok(m) => m.len(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(Error::io(self.what, e)));
                }
            };
            if size > self.at {
                let n = (size - self.at).min(CHUNK) as usize;
                let file = self.file.clone();
                let at = self.at;
                let read = tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; n];
                    file.read_exact_at(&mut buf, at).map(|()| buf)
                })
                .await;
                let buf = match read {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => {
                        self.done = true;
                        return Some(Err(Error::io(self.what, e)));
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(Error::other(format!("{}: {e}", self.what))));
                    }
                };
                // Bytes the cap dropped while we read them may read as zeros: the size
                // after the read says whether any of ours were (they lie before it - cap).
                let after = self.file.metadata().map(|m| m.len()).unwrap_or(size);
                let kept_from = after.saturating_sub(self.cap);
                if kept_from > self.at {
                    self.done = true;
                    return Some(Err(Error::interrupted(self.what).with_path(&self.record.id).with_detail(format!(
                        "this reader fell more than the output cap ({} bytes) behind: bytes {}..{} were dropped; attach again from offset {kept_from}",
                        self.cap, self.at, kept_from
                    ))));
                }
                self.at += buf.len() as u64;
                self.pause = POLL_MIN;
                return Some(Ok(Bytes::from(buf)));
            }
            let record = self.record.clone();
            let done = tokio::task::spawn_blocking(move || record.output_done())
                .await
                .unwrap_or(true);
            if done {
                // One last look: bytes written just before the end.
                if self.file.metadata().map(|m| m.len()).unwrap_or(0) > self.at {
                    continue;
                }
                self.done = true;
                return None;
            }
            tokio::time::sleep(self.pause).await;
            self.pause = (self.pause * 2).min(POLL_MAX);
        }
    }

    fn stream(self) -> OutputStream {
        Box::pin(futures::stream::unfold(self, |mut f| async move {
            f.next().await.map(|item| (item, f))
        }))
    }
}

/// Stdin of a durable command: frames into the record's FIFO (see
/// `exec_world_sys::supervise`). Only `shutdown` closes the command's stdin (the close
/// frame): dropping the sink, as a host that detaches or dies does, leaves it open for
/// the next attach.
struct FrameSink {
    tx: pipe::Sender,
    /// A frame being written (kept across `Pending`), and how many input bytes it holds.
    frame: Vec<u8>,
    frame_data: usize,
    closed: bool,
}

impl FrameSink {
    /// Writes `self.frame` (at most `PIPE_BUF` bytes: all at once or not at all).
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.tx.poll_write_ready(cx))?;
            match self.tx.try_write(&self.frame) {
                Ok(n) if n == self.frame.len() => {
                    self.frame.clear();
                    return Poll::Ready(Ok(()));
                }
                Ok(_) => {
                    return Poll::Ready(Err(std::io::Error::other(
                        "a stdin frame was cut (the FIFO is not a pipe?)",
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for FrameSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = &mut *self;
        if me.closed {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        if me.frame.is_empty() {
            if buf.is_empty() {
                return Poll::Ready(Ok(0));
            }
            let n = buf.len().min(STDIN_FRAME_MAX - 2);
            me.frame.extend_from_slice(&(n as u16).to_le_bytes());
            me.frame.extend_from_slice(&buf[..n]);
            me.frame_data = n;
        }
        ready!(me.poll_frame(cx))?;
        Poll::Ready(Ok(me.frame_data))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        if !me.frame.is_empty() {
            ready!(me.poll_frame(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        if me.closed {
            return Poll::Ready(Ok(()));
        }
        if !me.frame.is_empty() && me.frame_data > 0 {
            ready!(me.poll_frame(cx))?;
        }
        if me.frame.is_empty() {
            me.frame.extend_from_slice(&0u16.to_le_bytes());
            me.frame_data = 0;
        }
        ready!(me.poll_frame(cx))?;
        me.closed = true;
        Poll::Ready(Ok(()))
    }
}

/// The backend of a durable command's [`Child`].
struct DurableChild {
    record: Record,
    command: Option<Identity>,
    tree: Option<Tree>,
    stdin: std::sync::Mutex<Option<InputSink>>,
    stdout: std::sync::Mutex<Option<OutputStream>>,
    stderr: std::sync::Mutex<Option<OutputStream>>,
}

#[async_trait]
impl ChildBackend for DurableChild {
    fn pid(&self) -> Option<u32> {
        self.command.map(|c| c.pid)
    }

    async fn started(&self) -> Result<u32, Error> {
        self.command
            .map(|c| c.pid)
            .ok_or_else(|| Error::other("the durable command's pid is not recorded yet"))
    }

    fn take_stdin(&mut self) -> Option<InputSink> {
        self.stdin.get_mut().ok()?.take()
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        self.stdout.get_mut().ok()?.take()
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        self.stderr.get_mut().ok()?.take()
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        let mut pause = POLL_MIN;
        // While the command runs, its pidfd says when it ends (the status follows within
        // moments); the record is still looked at now and then, for a supervisor that
        // vanished.
        let mut exit = self
            .command
            .and_then(|c| pidfd_checked(c.pid, c.start).ok().flatten())
            .and_then(|fd| {
                // SAFETY: an OwnedFd is a valid open descriptor, owned by the AsyncFd.
                unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd,
                        tokio::io::Interest::READABLE,
                    )
                }
                .ok()
            });
        loop {
            let record = self.record.clone();
            let end = tokio::task::spawn_blocking(move || record.end())
                .await
                .map_err(|e| Error::other(format!("wait: {e}")))?;
            match end {
                End::Exited(s) => return Ok(s),
                End::Unknown(why) => {
                    return Err(Error::outcome_unknown(
                        format!("wait for durable command {}", self.record.id),
                        why,
                    ));
                }
                End::Running => {}
            }
            match &exit {
                Some(fd) => {
                    tokio::select! {
                        _ = fd.readable() => {
                            exit = None;
                            pause = POLL_MIN;
                        }
                        _ = tokio::time::sleep(WATCH_SUPERVISOR) => {}
                    }
                }
                None => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        if let Some(c) = self.command {
            signal_checked(c.pid, c.start, sig.number())
                .map_err(|e| Error::io("signal durable command", e).with_path(&self.record.id))?;
        }
        Ok(())
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        if let (Some(tree), Some(c)) = (&self.tree, self.command) {
            // The tree finds members by the leader's pid (group, session, parent chain):
            // only while that pid is the command, or names no process at all (then no
            // group of that id can be a stranger's). A pid reused by another process
            // means the command and its group are long gone.
            let same = exec_world_sys::supervise::start_time(c.pid).is_none_or(|t| t == c.start);
            if same {
                tree.terminate(grace, false).await;
            }
        }
        self.wait().await
    }

    fn detach(&mut self) {}
}

/// Opens the record `dir` (listed as `info`) for reading from `from`.
pub(crate) fn attach(
    dir: PathBuf,
    info: DurableInfo,
    meta: Meta,
    from: OutputOffsets,
) -> Result<Attached, Error> {
    let id = info.id.to_string();
    let open = |name: &str| {
        std::fs::File::open(dir.join(name))
            .map(Arc::new)
            .map_err(|e| Error::io("open durable command output", e).with_path(&id))
    };
    let (out, err) = (open(files::STDOUT)?, open(files::STDERR)?);
    let size = |f: &std::fs::File| f.metadata().map(|m| m.len()).unwrap_or(0);
    let kept = |f: &std::fs::File| size(f).saturating_sub(meta.cap);
    let start = OutputOffsets {
        stdout: from.stdout.max(kept(&out)),
        stderr: from.stderr.max(kept(&err)),
    };
    let dropped = OutputOffsets {
        stdout: start.stdout - from.stdout,
        stderr: start.stderr - from.stderr,
    };
    let record = Record {
        dir: dir.clone(),
        started: meta.started,
        id: id.clone(),
    };
    let follow = |file, at, what| {
        Follow {
            file,
            record: record.clone(),
            at,
            cap: meta.cap,
            pause: POLL_MIN,
            done: false,
            what,
        }
        .stream()
    };
    let stdout = follow(out, start.stdout, "read durable stdout");
    let stderr = follow(err, start.stderr, "read durable stderr");
    let command = read_pids(&dir).map(|(_, c)| c);
    let stdin = if meta.piped && info.state == DurableState::Running {
        // ENXIO: the supervisor closed it (stdin was closed, or the command ended).
        pipe::OpenOptions::new()
            .open_sender(dir.join(files::STDIN))
            .ok()
            .map(|tx| {
                Box::pin(FrameSink {
                    tx,
                    frame: Vec::with_capacity(STDIN_FRAME_MAX),
                    frame_data: 0,
                    closed: false,
                }) as InputSink
            })
    } else {
        None
    };
    // Also after the command ended: a descendant may live on (the tree finds it by group,
    // session, marker or cgroup, never a stranger that reused the pid).
    let tree = command.map(|c| Tree::new(c.pid, meta.marker.clone(), meta.cgroup.clone()));
    let child = Child::new(Box::new(DurableChild {
        record,
        command,
        tree,
        stdin: std::sync::Mutex::new(stdin),
        stdout: std::sync::Mutex::new(Some(stdout)),
        stderr: std::sync::Mutex::new(Some(stderr)),
    }));
    Ok(Attached {
        child,
        info,
        start,
        dropped,
    })
}
