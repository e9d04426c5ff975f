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
//! stderr. A SCRIPT of `+` is the perl wrapper of the holders' work
//! ([`PERL_AS_USER`](crate::scripts::PERL_AS_USER)) done without its three execs: the
//! child compiles and runs the program (the first ARG) itself, with the environment and
//! locale the wrapper gives it and the request's bytes as its stdin (no pipe, no feeder)
//! and as `$main::INPUT`, a reference to them (a 1 MiB write copies them nowhere: on a
//! machine where fresh pages are slow to fault in, each copy cost milliseconds).
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
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessSelector, Signal};
use e2b_core::trusted_shell::TrustedShell;
use futures::StreamExt as _;

use crate::shell::ShellOutput;

/// The worker (see the module docs). `$1` is this program, run by `perl -e`.
const WORKER: &str = r#"exec perl -e "$1""#;

/// The worker's perl program.
const WORKER_PL: &str = r#"
# A `+` request's program, compiled and run in the forked child where nothing of the
# worker's is in scope.
sub run_perl { eval $_[0] }
use POSIX ();
use Fcntl ();
$| = 1;
binmode STDOUT;
# prctl(PR_SET_DUMPABLE, 0): the user's other processes can neither ptrace this one nor
# open its descriptors; a worker that cannot become so ends (fail closed).
my $nr = {x86_64 => 157, aarch64 => 167}->{(`uname -m` =~ s/\s+//gr)};
syscall($nr, 4, 0, 0, 0, 0) if $nr;
exit 71 unless $nr && (stat "/proc/self/fd")[4] == 0;
binmode STDIN;
# F_SETPIPE_SZ: a request's bytes (up to 1 MiB) fit in the pipe at once (best effort).
fcntl(STDIN, 1031, 1 << 20);
# One buffer for every request's bytes: no fresh pages to fault in per request.
my $buf = '';
while (defined(my $l = <STDIN>)) {
  chomp $l;
  my ($idf, @h) = split / /, $l;
  my ($id, $len) = split /:/, $idf;
  my $data;
  if (defined $len) { read(STDIN, $buf, $len) == $len or last; $data = \$buf }
  next unless @h;
  my $perl = $h[0] eq '+';
  shift @h if $perl;
  my @a = map { $_ eq '-' ? '' : pack('H*', $_) } @h;
  pipe(my $or, my $ow) or die; pipe(my $er, my $ew) or die;
  my ($ir, $iw);
  if (defined $data && !$perl) { pipe($ir, $iw) or die }
  my $pid = fork;
  if (!defined $pid) { print "$id -1 0 11\nfork failed"; next }
  if (!$pid) {
    close $or; close $er;
    if ($ir) { close $iw; open STDIN, '<&', $ir } else { open STDIN, '<', '/dev/null' }
    open STDOUT, '>&', $ow; open STDERR, '>&', $ew;
    if ($perl) {
      # As `env -i LC_ALL=C perl -e PROGRAM -- ARG...` would run it, without the three
      # execs: the environment, the locale, @ARGV; its stdin the request's bytes (fd 0
      # stays /dev/null). It stays non-dumpable, as the worker is.
      # STDIN is a handle of its own, never the worker's (a reopened STDIN still hands
      # out what the worker's buffer held: the next requests); the bytes are also
      # $main::INPUT, a reference: a program that takes it copies nothing.
      open(my $mem, '<', defined $data ? $data : \'') or POSIX::_exit(70);
      *STDIN = $mem;
      $main::INPUT = $data;
      %ENV = (LC_ALL => 'C');
      POSIX::setlocale(POSIX::LC_ALL(), 'C');
      my $prog = shift @a;
      @ARGV = @a;
      run_perl($prog);
      if ($@) { print STDERR $@; POSIX::_exit(255) }
      exit 0;
    }
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
      while ($off < $len) { my $w = syswrite($iw, $$data, $len - $off, $off); last unless $w; $off += $w }
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
        // The perl wrapper's work is done in the worker's fork (`+`, see `WORKER_PL`).
        let script = if script == crate::scripts::PERL_AS_USER {
            "+".to_owned()
        } else {
            field(script)
        };
        let mut line = match stdin {
            Some(data) => format!("{id}:{} {script}", data.len()),
            None => format!("{id} {script}"),
        };
        for a in args {
            line.push(' ');
            line.push_str(&field(a));
        }
        line.push('\n');
        *sent = true;
        // The line and the bytes go into the request as they are (one copy each).
        self.api
            .send_stdin_parts(
                ProcessSelector::Pid(self.pid),
                &[line.as_bytes(), stdin.unwrap_or_default()],
            )
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::process::{Command, Stdio};

    /// One answer of the worker: exit code, stdout, stderr.
    type Answer = (i64, Vec<u8>, Vec<u8>);
    /// One request: the script field as sent, the arguments, the bytes for stdin.
    type Request<'a> = (&'a str, Vec<String>, Option<&'a [u8]>);

    /// Runs [`WORKER_PL`] on this host with `requests` (the script field as sent: `+` or
    /// hex; the arguments; the bytes for stdin) and returns its answers in order.
    fn worker(requests: &[Request<'_>]) -> Vec<Answer> {
        let mut child = Command::new("perl")
            .args(["-e", WORKER_PL])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("perl");
        let mut input = Vec::new();
        for (i, (script, args, data)) in requests.iter().enumerate() {
            let mut line = match data {
                Some(d) => format!("{}:{} {script}", i + 1, d.len()),
                None => format!("{} {script}", i + 1),
            };
            for a in args {
                line.push(' ');
                line.push_str(&field(a));
            }
            line.push('\n');
            input.extend_from_slice(line.as_bytes());
            input.extend_from_slice(data.unwrap_or_default());
        }
        let mut stdin = child.stdin.take().expect("stdin");
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let mut out = Vec::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_end(&mut out)
            .expect("read");
        feeder.join().expect("feeder").expect("feed");
        child.wait().expect("wait");
        let mut answers = Vec::new();
        let mut rest = &out[..];
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let head = String::from_utf8_lossy(&rest[..nl]).into_owned();
            let n: Vec<i64> = head.split(' ').map(|x| x.parse().expect(&head)).collect();
            let (o, e) = (n[2] as usize, n[3] as usize);
            let body = &rest[nl + 1..];
            answers.push((n[1], body[..o].to_vec(), body[o..o + e].to_vec()));
            rest = &body[o + e..];
        }
        answers
    }

    #[test]
    fn a_perl_request_runs_as_the_wrapper_would_without_its_execs() {
        let probe = r#"our $INPUT;
my $in = do { local $/; <STDIN> };
printf "env=%s argv=%s stdin=%s input=%s fd0=%s dumpable=%d\n",
  join(',', sort keys %ENV), join('|', @ARGV), $in, (ref $INPUT ? $$INPUT : '-'),
  readlink('/proc/self/fd/0'), syscall(157, 3, 0, 0, 0, 0);
exit 7;"#;
        let args = |more: &[&str]| {
            std::iter::once(probe.to_owned())
                .chain(more.iter().map(|s| (*s).to_owned()))
                .collect::<Vec<_>>()
        };
        let answers = worker(&[
            ("+", args(&["a b", ""]), Some(b"bytes in")),
            ("+", args(&["x"]), None),
            ("+", vec!["die qq(boom\\n)".to_owned()], None),
            // The shell path still feeds stdin through its own pipe.
            (
                &field("cat; echo \" $#\""),
                vec!["1".into(), "2".into()],
                Some(b"via sh"),
            ),
        ]);
        assert_eq!(answers.len(), 4, "{answers:?}");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert_eq!(answers[0].0, 7);
        let first = text(&answers[0].1);
        assert!(
            first.starts_with("env=LC_ALL argv=a b| stdin=bytes in input=bytes in fd0=/dev/null"),
            "{first}"
        );
        // The fork stays non-dumpable (the wrapper's exec made its perl dumpable).
        if cfg!(target_arch = "x86_64") {
            assert!(first.ends_with("dumpable=0\n"), "{first}");
        }
        let second = text(&answers[1].1);
        assert!(second.contains("argv=x stdin= input=- "), "{second}");
        assert_eq!((answers[2].0, text(&answers[2].2)), (255, "boom\n".into()));
        assert_eq!(
            (answers[3].0, text(&answers[3].1)),
            (0, "via sh 2\n".into())
        );
    }
}
