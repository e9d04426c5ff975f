//! The exec loop both providers share: read a child's stdout and stderr into one
//! budget, stop at the timeout or on cancel by killing the whole tree, and say whether
//! the kill (or the end of the output) did not come in time ("stuck"), so a provider can
//! fall back to something stronger (E2B: reboot the sandbox).

use std::time::Duration;

use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use crate::output::utf8_complete_len;
use crate::{Child, Error, ExitStatus, OutputStream};

/// What [`run_capped`] saw.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// The leader's status, when the command ended by itself.
    pub status: Option<ExitStatus>,
    /// stdout kept (stdout + stderr together at most the cap).
    pub stdout: Vec<u8>,
    /// stderr kept.
    pub stderr: Vec<u8>,
    /// Output past the cap was dropped.
    pub truncated: bool,
    /// Stopped at the timeout.
    pub timed_out: bool,
    /// Stopped by the cancellation token.
    pub cancelled: bool,
    /// After a stop, the tree kill failed or did not finish (with the end of the output)
    /// within the stop wait: something may still run.
    pub stuck: bool,
}

impl RunOutcome {
    /// The [`ExecOutput`](super::ExecOutput) a provider answers: the shell's exit code
    /// ([`exit_code_of`]) and both streams as text ([`utf8_cut`]).
    ///
    /// ```
    /// use exec_world::{ExitStatus, sandbox::RunOutcome};
    /// let r = RunOutcome { status: Some(ExitStatus { code: Some(3), signal: None }),
    ///     stdout: b"hi".to_vec(), ..Default::default() };
    /// assert_eq!(r.output().exit_code, Some(3));
    /// assert_eq!(r.output().stdout, "hi");
    /// ```
    pub fn output(&self) -> super::ExecOutput {
        super::ExecOutput {
            exit_code: self.status.as_ref().and_then(exit_code_of),
            stdout: utf8_cut(&self.stdout, self.truncated),
            stderr: utf8_cut(&self.stderr, self.truncated),
            truncated: self.truncated,
            timed_out: self.timed_out,
        }
    }
}

struct Budget {
    left: usize,
    truncated: bool,
}

impl Budget {
    fn take(&mut self, into: &mut Vec<u8>, chunk: &[u8]) {
        let n = chunk.len().min(self.left);
        into.extend_from_slice(&chunk[..n]);
        self.left -= n;
        if n < chunk.len() {
            self.truncated = true;
        }
    }
}

/// Runs `child` to its end, its timeout or `cancel`, keeping at most `cap` bytes of
/// output (the rest is read and dropped, so the host never holds more).
///
/// On timeout or cancel it runs [`Child::terminate`] with no grace (the whole tree) and
/// drains the output, each bounded by `stop_wait`; `stuck` is set when either did not
/// finish. A child that ended by itself is detached (background processes it left keep
/// running, like in a shell). Stream errors before a stop are returned as errors.
pub async fn run_capped(
    mut child: Child,
    timeout: Duration,
    cancel: &CancellationToken,
    cap: usize,
    stop_wait: Duration,
) -> Result<RunOutcome, Error> {
    let mut out = child.take_stdout();
    let mut err = child.take_stderr();
    let mut res = RunOutcome::default();
    let mut budget = Budget {
        left: cap,
        truncated: false,
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        if out.is_none() && err.is_none() {
            tokio::select! {
                s = child.wait() => { res.status = Some(s?); break; }
                _ = &mut deadline => { res.timed_out = true; break; }
                _ = cancel.cancelled() => { res.cancelled = true; break; }
            }
        }
        tokio::select! {
            c = next(&mut out) => match c {
                Some(Ok(b)) => budget.take(&mut res.stdout, &b),
                Some(Err(e)) => return Err(e),
                None => out = None,
            },
            c = next(&mut err) => match c {
                Some(Ok(b)) => budget.take(&mut res.stderr, &b),
                Some(Err(e)) => return Err(e),
                None => err = None,
            },
            _ = &mut deadline => { res.timed_out = true; break; }
            _ = cancel.cancelled() => { res.cancelled = true; break; }
        }
    }
    if res.status.is_some() {
        res.truncated = budget.truncated;
        child.detach();
        return Ok(res);
    }
    let kill = tokio::time::timeout(stop_wait, child.terminate(Duration::ZERO));
    let drain = tokio::time::timeout(stop_wait, async {
        while out.is_some() || err.is_some() {
            tokio::select! {
                c = next(&mut out) => match c {
                    Some(Ok(b)) => budget.take(&mut res.stdout, &b),
                    _ => out = None,
                },
                c = next(&mut err) => match c {
                    Some(Ok(b)) => budget.take(&mut res.stderr, &b),
                    _ => err = None,
                },
            }
        }
    });
    let (killed, drained) = tokio::join!(kill, drain);
    res.stuck = !matches!(killed, Ok(Ok(_))) || drained.is_err();
    if res.stuck {
        tracing::warn!(
            ?killed,
            drained = drained.is_ok(),
            "command tree not stopped in time"
        );
    }
    res.truncated = budget.truncated;
    Ok(res)
}

/// The next chunk of an optional stream; pending forever when the stream is gone.
async fn next(s: &mut Option<OutputStream>) -> Option<Result<bytes::Bytes, Error>> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// The exit code a shell would show: the code, or `128 + n` for a signal `n` with a
/// name (1..=31), else `None`.
///
/// ```
/// use exec_world::{ExitStatus, sandbox::exit_code_of};
/// assert_eq!(exit_code_of(&ExitStatus { code: None, signal: Some(9) }), Some(137));
/// assert_eq!(exit_code_of(&ExitStatus { code: None, signal: Some(40) }), None);
/// ```
pub fn exit_code_of(s: &ExitStatus) -> Option<i32> {
    match (s.code, s.signal) {
        (Some(c), _) => Some(c),
        (None, Some(n)) if (1..=31).contains(&n) => Some(128 + n),
        _ => None,
    }
}

/// Output as text: when `truncated`, an incomplete UTF-8 character at the end is cut
/// off; other invalid bytes become U+FFFD.
///
/// ```
/// let euro = "€".as_bytes();
/// assert_eq!(exec_world::sandbox::utf8_cut(&[b'a', euro[0], euro[1]], true), "a");
/// ```
pub fn utf8_cut(buf: &[u8], truncated: bool) -> String {
    let end = if truncated {
        utf8_complete_len(buf)
    } else {
        buf.len()
    };
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_only_incomplete_tail() {
        let s = "aé€😀";
        let b = s.as_bytes();
        for n in 0..=b.len() {
            let got = utf8_cut(&b[..n], true);
            assert!(s.starts_with(&got), "{n}: {got:?}");
            assert!(b[..n].len() - got.len() < 4);
        }
        assert_eq!(utf8_cut(&b[..2], false), "a\u{fffd}");
    }

    #[test]
    fn budget_cuts_across_streams() {
        let mut b = Budget {
            left: 5,
            truncated: false,
        };
        let (mut o, mut e) = (Vec::new(), Vec::new());
        b.take(&mut o, b"abc");
        b.take(&mut e, b"def");
        assert_eq!(
            (o.as_slice(), e.as_slice(), b.truncated),
            (&b"abc"[..], &b"de"[..], true)
        );
    }
}
