//! The warm worker: one long-lived process of the acting user per adapter that runs the
//! shell commands of the file operations (stat, lstat, listing, mkdir, remove, rename,
//! and the read holder's work for reads of at most 2 MiB), so that on a
//! remote sandbox such an operation is one `SendInput` (a unary request) answered on a
//! stream that is already open, instead of a process `Start` in the sandbox per call.
//!
//! The worker is `perl` reading one request per line on stdin (`ID SCRIPT ARG…`, each
//! field hex, `-` for empty; `ID:LEN …` when LEN bytes for the command's stdin follow
//! the line); for each it forks a child that runs `/bin/sh -c SCRIPT sh ARG…` exactly as
//! the per-call path does (same user, environment, `/` as cwd, stdin `/dev/null` or
//! those bytes, fed by a second fork), and once the child ended answers on stdout with
//! a line `ID CODE OUTLEN ERRLEN` followed by that many bytes of its stdout, then of its
//! stderr.
//! It makes itself non-dumpable first (and ends when it cannot), so the sandbox user can
//! neither attach to it nor open its stdin or stdout to inject or forge an answer; the
//! user can kill it, which only sends the next calls back to the per-call path.
//!
//! It is used only when it is idle (one call at a time; concurrent calls take the
//! per-call path), and started in the background by the first call, which itself takes
//! the per-call path. Any failure (the stream ends, an answer that does not parse, the
//! command timeout) ends the worker; the next call starts a new one. A call whose request
//! never reached the worker is made the ordinary way; one whose answer was lost after it
//! may have reached the worker is made again only when it changes nothing (stat,
//! listing), else it fails as
//! [`ErrorKind::OutcomeUnknown`](exec_world::ErrorKind::OutcomeUnknown): a command is
//! never run twice.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector, Signal};
use e2b_core::trusted_shell::TrustedShell;
use futures::StreamExt as _;

use crate::shell::ShellOutput;

/// The worker (see the module docs). `$1` is this program, run by `perl -e`.
const WORKER: &str = r#"exec perl -e "$1""#;

/// The worker's perl program.
const WORKER_PL: &str = r#"
$| = 1;
binmode STDOUT;
# prctl(PR_SET_DUMPABLE, 0): the user's other processes can neither ptrace this one nor
# open its descriptors; a worker that cannot become so ends (fail closed).
my $nr = {x86_64 => 157, aarch64 => 167}->{(`uname -m` =~ s/\s+//gr)};
syscall($nr, 4, 0, 0, 0, 0) if $nr;
exit 71 unless $nr && (stat "/proc/self/fd")[4] == 0;
binmode STDIN;
while (defined(my $l = <STDIN>)) {
  chomp $l;
  my ($idf, @h) = split / /, $l;
  my ($id, $len) = split /:/, $idf;
  my $data;
  if (defined $len) { read(STDIN, $data, $len) == $len or last }
  next unless @h;
  my @a = map { $_ eq '-' ? '' : pack('H*', $_) } @h;
  pipe(my $or, my $ow) or die; pipe(my $er, my $ew) or die;
  my ($ir, $iw);
  if (defined $data) { pipe($ir, $iw) or die }
  my $pid = fork;
  if (!defined $pid) { print "$id -1 0 11\nfork failed"; next }
  if (!$pid) {
    close $or; close $er;
    if ($ir) { close $iw; open STDIN, '<&', $ir } else { open STDIN, '<', '/dev/null' }
    open STDOUT, '>&', $ow; open STDERR, '>&', $ew;
    exec '/bin/sh', '-c', $a[0], 'sh', @a[1 .. $#a];
    exit 127;
  }
  close $ow; close $ew;
  my $feeder;
  if ($iw) {
    # The command's stdin, fed by a fork of ours while we read its output.
    close $ir;
    $feeder = fork;
    if (defined $feeder && !$feeder) {
      close $or; close $er;
      $SIG{PIPE} = 'IGNORE';
      my $off = 0;
      while ($off < $len) { my $w = syswrite($iw, $data, $len - $off, $off); last unless $w; $off += $w }
      exit 0;
    }
    close $iw;
  }
  my ($o, $e) = ('', '');
  my %fh = (fileno($or) => [$or, \$o], fileno($er) => [$er, \$e]);
  while (%fh) {
    my $r = '';
    vec($r, $_, 1) = 1 for keys %fh;
    next if select($r, undef, undef, undef) < 0;
    for my $fd (keys %fh) {
      next unless vec($r, $fd, 1);
      my $n = sysread($fh{$fd}[0], my $b, 65536);
      if ($n) { ${$fh{$fd}[1]} .= $b } else { close $fh{$fd}[0]; delete $fh{$fd} }
    }
  }
  waitpid($pid, 0);
  my $c = ($? & 127) ? -1 : ($? >> 8);
  waitpid($feeder, 0) if $feeder;
  print $id, ' ', $c, ' ', length($o), ' ', length($e), "\n", $o, $e;
}
"#;

/// Most bytes of one answer (both outputs); past it the worker is ended and the call
/// made the ordinary way, which has its own bound.
const MAX_ANSWER: usize = 8 << 20;

/// How a call on the worker went.
pub(crate) enum Outcome {
    /// Its answer.
    Answered(ShellOutput),
    /// Not sent (the worker is busy, not running, or the request was refused before
    /// envd took it): make the call the ordinary way.
    NotSent,
    /// Sent, but its answer was lost: it may or may not have run.
    Lost(&'static str),
}

/// The worker of one adapter.
pub(crate) struct Warm {
    shell: TrustedShell,
    timeout: Duration,
    slot: tokio::sync::Mutex<Slot>,
}

impl std::fmt::Debug for Warm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm").finish_non_exhaustive()
    }
}

enum Slot {
    /// Not running (never started, or ended after a failure).
    Cold,
    /// Being started by a background task.
    Starting,
    /// Running and idle.
    Ready(Worker),
}

struct Worker {
    api: Arc<dyn EnvdApi>,
    pid: u32,
    events: ProcessStream,
    /// Bytes of stdout after the last complete answer.
    pending: Vec<u8>,
    next_id: u64,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closing ends its loop; the kill is for a worker stuck in a command.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (api, sel) = (self.api.clone(), ProcessSelector::Pid(self.pid));
        handle.spawn(async move {
            let _ = api.close_stdin(sel.clone()).await;
            let _ = api.send_signal(sel, Signal::Sigkill).await;
        });
    }
}

impl Warm {
    /// A worker running as `shell`'s user with its environment; each call answered
    /// within `timeout`.
    pub(crate) fn new(shell: TrustedShell, timeout: Duration) -> Warm {
        Warm {
            shell,
            timeout,
            slot: tokio::sync::Mutex::new(Slot::Cold),
        }
    }

    /// Runs `script` with `args` on the worker when it is running and idle (a cold
    /// worker is started in the background; a failed one is ended); `stdin`: the bytes
    /// the command reads on stdin (else `/dev/null`).
    pub(crate) async fn run(
        self: &Arc<Self>,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Outcome {
        let Ok(mut slot) = self.slot.try_lock() else {
            return Outcome::NotSent;
        };
        let worker = match &mut *slot {
            Slot::Ready(w) => w,
            Slot::Starting => return Outcome::NotSent,
            Slot::Cold => {
                *slot = Slot::Starting;
                drop(slot);
                self.start_in_background();
                return Outcome::NotSent;
            }
        };
        let mut sent = false;
        let r =
            tokio::time::timeout(self.timeout, worker.call(script, args, stdin, &mut sent)).await;
        let why = match r {
            Ok(Ok(out)) => return Outcome::Answered(out),
            Ok(Err(why)) => why,
            Err(_) => "no answer within the command timeout",
        };
        tracing::debug!(why, sent, "the warm worker failed and is ended");
        *slot = Slot::Cold;
        if sent {
            Outcome::Lost(why)
        } else {
            Outcome::NotSent
        }
    }

    fn start_in_background(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        handle.spawn(async move {
            let mut spec = this.shell.command(WORKER, &[WORKER_PL]);
            spec.timeout = None;
            spec.stdin = true;
            let api = this.shell.api().clone();
            let started = api.start_process(spec).await;
            let mut slot = this.slot.lock().await;
            *slot = match started {
                Ok(events) => Slot::Ready(Worker {
                    api,
                    pid: events.pid(),
                    events,
                    pending: Vec::new(),
                    next_id: 1,
                }),
                Err(e) => {
                    tracing::debug!(error = %e, "the warm worker did not start");
                    Slot::Cold
                }
            };
        });
    }
}

fn field(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        hex::encode(s)
    }
}

impl Worker {
    /// One call: the request on stdin, then stdout up to its answer line; `sent` is set
    /// once the request may have reached the worker.
    async fn call(
        &mut self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        sent: &mut bool,
    ) -> Result<ShellOutput, &'static str> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = match stdin {
            Some(data) => format!("{id}:{} {}", data.len(), field(script)),
            None => format!("{id} {}", field(script)),
        };
        for a in args {
            line.push(' ');
            line.push_str(&field(a));
        }
        line.push('\n');
        let mut request = line.into_bytes();
        request.extend_from_slice(stdin.unwrap_or_default());
        *sent = true;
        self.api
            .send_input(ProcessSelector::Pid(self.pid), ProcessInput::Stdin(request))
            .await
            .map_err(|e| {
                // Refused before envd took it (429, 503): it never reached the worker.
                if matches!(
                    e.disposition(),
                    e2b_core::Disposition::Temporary {
                        maybe_executed: false,
                        ..
                    }
                ) {
                    *sent = false;
                }
                "the request was not delivered"
            })?;
        loop {
            if let Some(nl) = self.pending.iter().position(|&b| b == b'\n') {
                let head =
                    std::str::from_utf8(&self.pending[..nl]).map_err(|_| "answer not text")?;
                let mut f = head.split(' ');
                let mut num = || {
                    f.next()
                        .and_then(|x| x.parse::<i64>().ok())
                        .ok_or("an answer's line is not four numbers")
                };
                let (got, code, out_len, err_len) = (num()?, num()?, num()?, num()?);
                if got != i64::try_from(id).unwrap_or(-1) {
                    return Err("an answer to another request");
                }
                let (out_len, err_len) = (
                    usize::try_from(out_len).map_err(|_| "a negative length")?,
                    usize::try_from(err_len).map_err(|_| "a negative length")?,
                );
                if out_len.saturating_add(err_len) > MAX_ANSWER {
                    return Err("answer too large");
                }
                let body = nl + 1;
                if self.pending.len() >= body + out_len + err_len {
                    let stdout = self.pending[body..body + out_len].to_vec();
                    let stderr = self.pending[body + out_len..body + out_len + err_len].to_vec();
                    self.pending.drain(..body + out_len + err_len);
                    return Ok(ShellOutput {
                        exit_code: i32::try_from(code).map_err(|_| "an exit code out of range")?,
                        stdout,
                        stderr,
                    });
                }
            }
            if self.pending.len() > MAX_ANSWER + 4096 {
                return Err("answer too large");
            }
            match self.events.next().await {
                Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b)))) => {
                    self.pending.extend_from_slice(&b)
                }
                Some(Ok(ProcessEvent::Data(_) | ProcessEvent::Start(_))) => {}
                Some(Ok(ProcessEvent::Keepalive(_))) => {}
                Some(Ok(ProcessEvent::End(_))) | None => return Err("the worker ended"),
                Some(Err(_)) => return Err("the worker's stream failed"),
            }
        }
    }
}
