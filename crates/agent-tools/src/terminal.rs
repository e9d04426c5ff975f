//! A terminal session a harness can drive: a program on a pseudo-terminal from
//! [`Subprocess::spawn_terminal`], with key helpers, a bounded ring buffer of recent output
//! and `read_until(pattern, timeout)`. Written only against exec-world's [`Terminal`].
//!
//! Output is read by a background task into a ring of the last `buffer_bytes` bytes, so a
//! chatty program never grows memory. A *read cursor* (an absolute byte offset) tracks
//! what [`TerminalSession::read_until`] / [`TerminalSession::read_new`] already returned;
//! [`TerminalSession::screen`] shows the ring without moving it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exec_world::{Error, ExitStatus, Signal, Subprocess, TermSize, Terminal, TerminalSpec};
use futures::StreamExt;
use tokio::sync::watch;

/// Default ring size: the last 256 KiB of output.
pub const DEFAULT_BUFFER_BYTES: usize = 256 * 1024;

/// Common keys, as the bytes a terminal sends for them (xterm conventions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Key {
    /// Enter (carriage return, `\r`).
    Enter,
    /// Tab.
    Tab,
    /// Backspace (DEL, `\x7f`).
    Backspace,
    /// Escape.
    Escape,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow right.
    Right,
    /// Arrow left.
    Left,
    /// Home.
    Home,
    /// End.
    End,
    /// Delete (forward).
    Delete,
    /// Ctrl-C: the line discipline sends SIGINT to the foreground group.
    CtrlC,
    /// Ctrl-D: end of input at the start of a line.
    CtrlD,
    /// Ctrl-Z: SIGTSTP to the foreground group.
    CtrlZ,
    /// Ctrl-\: SIGQUIT to the foreground group.
    CtrlBackslash,
    /// Ctrl-L: redraw / clear in most shells.
    CtrlL,
    /// Ctrl plus a letter `a`–`z` (other characters send nothing).
    Ctrl(char),
}

impl Key {
    /// The bytes this key sends.
    ///
    /// ```
    /// # use agent_tools::terminal::Key;
    /// assert_eq!(Key::CtrlC.bytes(), b"\x03");
    /// assert_eq!(Key::Ctrl('a').bytes(), b"\x01");
    /// assert_eq!(Key::Up.bytes(), b"\x1b[A");
    /// ```
    pub fn bytes(self) -> &'static [u8] {
        const CTRL: [&[u8]; 26] = [
            b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06", b"\x07", b"\x08", b"\x09",
            b"\x0a", b"\x0b", b"\x0c", b"\x0d", b"\x0e", b"\x0f", b"\x10", b"\x11", b"\x12",
            b"\x13", b"\x14", b"\x15", b"\x16", b"\x17", b"\x18", b"\x19", b"\x1a",
        ];
        match self {
            Key::Enter => b"\r",
            Key::Tab => b"\t",
            Key::Backspace => b"\x7f",
            Key::Escape => b"\x1b",
            Key::Up => b"\x1b[A",
            Key::Down => b"\x1b[B",
            Key::Right => b"\x1b[C",
            Key::Left => b"\x1b[D",
            Key::Home => b"\x1b[H",
            Key::End => b"\x1b[F",
            Key::Delete => b"\x1b[3~",
            Key::CtrlC => b"\x03",
            Key::CtrlD => b"\x04",
            Key::CtrlZ => b"\x1a",
            Key::CtrlBackslash => b"\x1c",
            Key::CtrlL => b"\x0c",
            Key::Ctrl(c) => {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_lowercase() {
                    CTRL[(c as u8 - b'a') as usize]
                } else {
                    b""
                }
            }
        }
    }
}

/// Why a terminal operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TerminalError {
    /// `read_until` did not see the pattern in time; `output` is what arrived meanwhile
    /// (from the cursor, which did not move).
    #[error("timed out waiting for {pattern:?}")]
    Timeout {
        /// The pattern, lossy text.
        pattern: String,
        /// The output after the cursor, lossy text.
        output: String,
    },
    /// The terminal's output ended (the session exited) before the pattern appeared.
    #[error("terminal closed before {pattern:?} appeared")]
    Closed {
        /// The pattern, lossy text.
        pattern: String,
        /// The output after the cursor, lossy text.
        output: String,
    },
    /// The backend failed.
    #[error(transparent)]
    Proc(#[from] Error),
}

/// Output kept by the reader task.
#[derive(Debug)]
struct Ring {
    buf: VecDeque<u8>,
    cap: usize,
    /// Absolute offset of the first byte after the last one ever received.
    end: u64,
    /// The stream ended (EOF or error).
    closed: bool,
}

impl Ring {
    fn start(&self) -> u64 {
        self.end - self.buf.len() as u64
    }

    fn push(&mut self, data: &[u8]) {
        self.end += data.len() as u64;
        let data = if data.len() > self.cap {
            &data[data.len() - self.cap..]
        } else {
            data
        };
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(data);
    }

    /// Bytes from absolute offset `from` (clamped to what the ring still has) to the end.
    fn since(&self, from: u64) -> (u64, Vec<u8>) {
        let from = from.max(self.start());
        let skip = usize::try_from(from - self.start()).unwrap_or(usize::MAX);
        (from, self.buf.iter().skip(skip).copied().collect())
    }
}

/// A driven terminal session. Dropping it ends every process of the session (exec-world's
/// [`Terminal`] drop); prefer [`TerminalSession::close`] for a graceful end.
///
/// ```no_run
/// # use std::time::Duration;
/// # use agent_tools::terminal::{Key, TerminalSession};
/// # async fn demo(proc: &dyn exec_world::Subprocess) -> Result<(), agent_tools::terminal::TerminalError> {
/// let mut term = TerminalSession::spawn(proc, exec_world::TerminalSpec::shell())?;
/// term.write_line("echo $((6*7))").await?;
/// term.read_until(b"42", Duration::from_secs(10)).await?;
/// term.key(Key::CtrlD).await?;
/// term.close(Duration::from_secs(1)).await?;
/// # Ok(()) }
/// ```
pub struct TerminalSession {
    term: Arc<Terminal>,
    ring: Arc<Mutex<Ring>>,
    changed: watch::Receiver<u64>,
    cursor: u64,
    reader: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for TerminalSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalSession")
            .field("pid", &self.term.pid())
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl TerminalSession {
    /// Starts `spec` on a terminal of `proc`, keeping the last [`DEFAULT_BUFFER_BYTES`].
    pub fn spawn(proc: &dyn Subprocess, spec: TerminalSpec) -> Result<TerminalSession, Error> {
        Self::spawn_with_buffer(proc, spec, DEFAULT_BUFFER_BYTES)
    }

    /// Starts `spec`, keeping the last `buffer_bytes` bytes of output (at least 1).
    pub fn spawn_with_buffer(
        proc: &dyn Subprocess,
        spec: TerminalSpec,
        buffer_bytes: usize,
    ) -> Result<TerminalSession, Error> {
        let term = proc.spawn_terminal(spec)?;
        Ok(Self::from_terminal(term, buffer_bytes))
    }

    /// Drives an already started terminal (its output must not have been taken).
    pub fn from_terminal(mut term: Terminal, buffer_bytes: usize) -> TerminalSession {
        let cap = buffer_bytes.max(1);
        let ring = Arc::new(Mutex::new(Ring {
            buf: VecDeque::with_capacity(cap.min(64 * 1024)),
            cap,
            end: 0,
            closed: false,
        }));
        let (tx, rx) = watch::channel(0u64);
        let output = term.take_output();
        let reader = {
            let ring = ring.clone();
            tokio::spawn(async move {
                if let Some(mut output) = output {
                    while let Some(item) = output.next().await {
                        match item {
                            Ok(chunk) => {
                                let end = match ring.lock() {
                                    Ok(mut r) => {
                                        r.push(&chunk);
                                        r.end
                                    }
                                    Err(_) => break,
                                };
                                tx.send_replace(end);
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "terminal output ended with an error");
                                break;
                            }
                        }
                    }
                }
                if let Ok(mut r) = ring.lock() {
                    r.closed = true;
                }
                tx.send_modify(|_| {}); // wake waiters: they see `closed`
            })
        };
        TerminalSession {
            term: Arc::new(term),
            ring,
            changed: rx,
            cursor: 0,
            reader,
        }
    }

    /// The session leader's pid, once known.
    pub fn pid(&self) -> Option<u32> {
        self.term.pid()
    }

    /// Waits until the session started; its leader's pid, or the start error a remote
    /// backend reports.
    pub async fn started(&self) -> Result<u32, Error> {
        self.term.started().await
    }

    /// Writes raw bytes (keystrokes).
    pub async fn write(&self, data: &[u8]) -> Result<(), Error> {
        self.term.write(data).await
    }

    /// Sends one key.
    pub async fn key(&self, key: Key) -> Result<(), Error> {
        self.term.write(key.bytes()).await
    }

    /// Types `text` followed by Enter.
    pub async fn write_line(&self, text: &str) -> Result<(), Error> {
        let mut data = Vec::with_capacity(text.len() + 1);
        data.extend_from_slice(text.as_bytes());
        data.push(b'\r');
        self.term.write(&data).await
    }

    /// Resizes the terminal (the session gets SIGWINCH).
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), Error> {
        self.term.resize(TermSize { cols, rows }).await
    }

    /// Sends `sig` to the foreground process group.
    pub async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.term.signal(sig).await
    }

    /// The ring's current content (the most recent output), without moving the cursor.
    pub fn screen(&self) -> Vec<u8> {
        match self.ring.lock() {
            Ok(r) => r.buf.iter().copied().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Total bytes of output received so far (including those the ring dropped).
    pub fn total_bytes(&self) -> u64 {
        self.ring.lock().map(|r| r.end).unwrap_or(0)
    }

    /// True once the terminal's output has ended (the session exited).
    pub fn is_closed(&self) -> bool {
        self.ring.lock().map(|r| r.closed).unwrap_or(true)
    }

    /// Everything after the cursor (bytes the ring dropped are skipped); moves the cursor
    /// to the end.
    pub fn read_new(&mut self) -> Vec<u8> {
        let Ok(r) = self.ring.lock() else {
            return Vec::new();
        };
        let (_, data) = r.since(self.cursor);
        self.cursor = r.end;
        data
    }

    /// Waits until `pattern` appears after the cursor; returns the output from the cursor
    /// through the end of the first match and moves the cursor past it. On timeout or end
    /// of output the cursor stays and the error carries what arrived.
    pub async fn read_until(
        &mut self,
        pattern: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, TerminalError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            let (from, data, closed) = {
                let r = self
                    .ring
                    .lock()
                    .map_err(|_| Error::other("terminal ring poisoned"))?;
                let (from, data) = r.since(self.cursor);
                (from, data, r.closed)
            };
            if let Some(pos) = find(&data, pattern) {
                let end = pos + pattern.len();
                self.cursor = from + end as u64;
                let mut data = data;
                data.truncate(end);
                return Ok(data);
            }
            let lossy = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
            if closed {
                return Err(TerminalError::Closed {
                    pattern: lossy(pattern),
                    output: lossy(&data),
                });
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                // The reader task is gone: loop once more to report Closed.
                Ok(Err(_)) => {
                    if let Ok(mut r) = self.ring.lock() {
                        r.closed = true;
                    }
                }
                Err(_) => {
                    return Err(TerminalError::Timeout {
                        pattern: lossy(pattern),
                        output: lossy(&data),
                    });
                }
            }
        }
    }

    /// Waits for the session leader to exit.
    pub async fn wait(&self) -> Result<ExitStatus, Error> {
        self.term.wait().await
    }

    /// Ends every process group of the session: SIGHUP and SIGTERM, `grace`, then SIGKILL.
    /// Returns the leader's status.
    pub async fn close(self, grace: Duration) -> Result<ExitStatus, Error> {
        let status = self.term.terminate(grace).await;
        self.reader.abort();
        status
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The first index of `needle` in `hay` (an empty needle matches at 0).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_tail_and_absolute_offsets() {
        let mut r = Ring {
            buf: VecDeque::new(),
            cap: 4,
            end: 0,
            closed: false,
        };
        r.push(b"abc");
        r.push(b"def");
        assert_eq!(r.start(), 2);
        assert_eq!(r.since(0), (2, b"cdef".to_vec()));
        assert_eq!(r.since(5), (5, b"f".to_vec()));
        r.push(b"0123456789");
        assert_eq!(r.since(0), (12, b"6789".to_vec()));
        assert_eq!(r.end, 16);
    }

    #[test]
    fn finds_patterns() {
        assert_eq!(find(b"hello world", b"world"), Some(6));
        assert_eq!(find(b"hello", b"xyz"), None);
        assert_eq!(find(b"ab", b"abc"), None);
    }
}
