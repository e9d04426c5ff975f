//! The supervisor of a durable command: a process that is not the host's child, started
//! by a double fork, that runs the command as its own child and outlives the host.
//!
//! [`supervise`] forks (raw `clone`, no `atfork` handlers) an intermediate that leaves the
//! host's session (`setsid`) and forks the supervisor, then exits; the supervisor is
//! adopted by init (or the nearest subreaper), never the host's zombie. Between the fork
//! and its end the supervisor makes only raw async-signal-safe system calls on memory
//! prepared before the fork (no allocation, no lock: another thread of the host may have
//! held one at the fork). It
//!
//! 1. resets every signal handler, ignores SIGPIPE, points its own stdio at `/dev/null`
//!    and closes every descriptor of the host but its own (so it holds none of the host's
//!    pipes, sockets or terminals open);
//! 2. forks the command: its own session and process group, the spawn's cgroup joined
//!    (`cgroup.procs`), stdin from `/dev/null` or from a pipe the supervisor feeds,
//!    stdout/stderr into pipes the supervisor reads, then `execve` along `PATH`;
//! 3. writes `pid` into the record directory (its own and the command's pid and start
//!    time), tells the host the command started (or why it did not), then unmaps the
//!    host's memory it still shares copy-on-write (heap, anonymous mappings; see
//!    `shed_host_memory`), so it does not pin pages the host later changes;
//! 4. copies stdout and stderr into the record files `stdout` / `stderr`, where a byte's
//!    file offset is its stream offset: beyond `cap` kept bytes the oldest are punched out
//!    (`fallocate(PUNCH_HOLE)`, the file stays sparse), so a reader knows from the size
//!    alone what is kept: `[size - cap, size)`;
//! 5. feeds stdin from the FIFO `stdin` in frames ([`STDIN_FRAME_MAX`]; a frame of length 0
//!    closes the command's stdin), so writers of several host processes may come and go
//!    (a writer that vanishes does not close it);
//! 6. records the command's end in `status` (`exit N` / `signal N`, written to a temporary
//!    file and renamed) as soon as it is reaped, keeps copying output until both pipes
//!    reach EOF (a background descendant may hold them), removes the command's cgroup
//!    when it is empty, then creates `closed` and exits.
//!
//! A record with no `status` whose supervisor is gone (pid and start time no longer
//! match) has an unknown outcome.
//!
//! Limits: records are not `fsync`ed (they survive the host process, not a machine
//! crash); where the file system refuses `PUNCH_HOLE` the record files keep every byte on
//! disk (readers still see only the last `cap`).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::launch::{Launch, Prepared, dev_null, errno, exec_along, pipe};

/// The record's files (names inside the record directory).
pub mod files {
    /// The kept stdout bytes (offset = stream offset; punched before `size - cap`).
    pub const STDOUT: &str = "stdout";
    /// The kept stderr bytes.
    pub const STDERR: &str = "stderr";
    /// The FIFO stdin frames are written to (only with piped stdin).
    pub const STDIN: &str = "stdin";
    /// `supervisor PID START\ncommand PID START\n` (START: `/proc/PID/stat` field 22).
    pub const PID: &str = "pid";
    /// `exit N\n` or `signal N\n`, once the command was reaped.
    pub const STATUS: &str = "status";
    /// Present once both output pipes reached EOF and the supervisor is done.
    pub const CLOSED: &str = "closed";
}

/// The largest stdin frame written to the FIFO (2-byte little-endian length + data): one
/// `write` of at most `PIPE_BUF` bytes, so frames of several writers never interleave.
pub const STDIN_FRAME_MAX: usize = 4096;

/// The supervisor punches dropped bytes out in steps of at least this many bytes.
const PUNCH_STEP: u64 = 1 << 20;

/// What to start under a supervisor.
pub struct Supervise<'a> {
    /// The program: a path with a `/`, or a name searched along the child's `PATH`.
    pub program: &'a str,
    /// Arguments after `argv[0]`.
    pub args: &'a [String],
    /// The whole environment of the command.
    pub env: &'a BTreeMap<String, String>,
    /// The command's working directory (absolute).
    pub cwd: &'a str,
    /// The record directory, open (`stdout`, `stderr` and, with piped stdin, the FIFO
    /// `stdin` exist in it already).
    pub record: BorrowedFd<'a>,
    /// The record's `stdout` and `stderr`, open for writing.
    pub stdout: BorrowedFd<'a>,
    /// See `stdout`.
    pub stderr: BorrowedFd<'a>,
    /// The FIFO `stdin`, open read-write (piped stdin), else `None` (`/dev/null`).
    pub stdin_fifo: Option<BorrowedFd<'a>>,
    /// Bytes kept per stream.
    pub cap: u64,
    /// The spawn cgroup's `cgroup.procs`, open for writing (the command joins it).
    pub cgroup_procs: Option<BorrowedFd<'a>>,
    /// The spawn cgroup's directory: removed by the supervisor at the end when empty.
    pub cgroup_dir: Option<&'a std::path::Path>,
}

/// A started supervised command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Supervised {
    /// The supervisor's pid.
    pub supervisor: u32,
    /// The command's pid (it leads its own session and process group).
    pub pid: u32,
}

/// The start time of `pid` (`/proc/PID/stat` field 22, clock ticks since boot), or `None`
/// when there is no such process. With the pid it names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// True when `pid` is alive (not a zombie) and started at `start`.
pub fn alive(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    parse_start_time(&stat) == Some(start) && !matches!(stat_state(&stat), Some(b'Z' | b'X'))
}

/// A pidfd of `pid` if it is still the process that started at `start` (opened first,
/// checked after: the pidfd pins the process, so a pid reused in between is never
/// named by it). `Ok(None)`: that process is gone. Readable once the process exited.
pub fn pidfd_checked(pid: u32, start: u64) -> io::Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open(2) on a pid number; the result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a fresh descriptor from pidfd_open.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    Ok(alive(pid, start).then_some(fd))
}

/// Sends `sig` to `pid` only if it is still the process that started at `start`, through
/// a checked pidfd ([`pidfd_checked`]). `Ok(false)`: that process is gone (nothing sent).
pub fn signal_checked(pid: u32, start: u64, sig: i32) -> io::Result<bool> {
    let Some(fd) = pidfd_checked(pid, start)? else {
        return Ok(false);
    };
    pidfd_signal(fd.as_fd(), sig)
}

/// Sends `sig` to the process behind `pidfd`. `Ok(false)`: it has ended (nothing sent).
///
/// ```
/// use std::os::fd::{AsFd, FromRawFd, OwnedFd};
/// use exec_world_sys::supervise::pidfd_signal;
/// let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
/// // SAFETY: pidfd_open on our own, unreaped child.
/// let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as i32, 0) };
/// let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
/// assert!(pidfd_signal(fd.as_fd(), libc::SIGKILL).unwrap());
/// child.wait().unwrap();
/// assert!(!pidfd_signal(fd.as_fd(), libc::SIGKILL).unwrap(), "reaped: nothing sent");
/// ```
pub fn pidfd_signal(pidfd: BorrowedFd<'_>, sig: i32) -> io::Result<bool> {
    // SAFETY: pidfd_send_signal(2) on a pidfd the caller holds open; no siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(true)
}

/// The state letter of a `/proc/PID/stat` text.
fn stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// Field 22 (starttime) of a `/proc/PID/stat` text; no allocation (the supervisor uses it).
fn parse_start_time(stat: &[u8]) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold anything: count after
    // the last ')'. Field 3 is the first after it; field 22 is the 20th.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut field = 2;
    let mut value: Option<u64> = None;
    let mut in_word = false;
    for &b in &stat[close + 1..] {
        if b == b' ' || b == b'\n' {
            if in_word && field == 22 {
                return value;
            }
            in_word = false;
            continue;
        }
        if !in_word {
            in_word = true;
            field += 1;
            value = Some(0);
        }
        if field == 22 {
            let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
            value = value.and_then(|v| v.checked_mul(10)?.checked_add(u64::from(d)));
        }
    }
    if field == 22 { value } else { None }
}

/// Starts `s` under a supervisor (see the module docs). Returns once the command runs, or
/// with the reason it could not start (`NotFound`, `PermissionDenied`, ...): then nothing
/// ran and the supervisor is gone.
pub fn supervise(s: &Supervise<'_>) -> io::Result<Supervised> {
    crate::reap::reap_orphans();
    let prepared = Prepared::new(&Launch {
        program: s.program,
        args: s.args,
        env: s.env,
        cwd: s.cwd,
        stdin_piped: false,
        cgroup: None,
    })?;
    let ptrs = |v: &[CString]| -> Vec<*const c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let candidates = ptrs(&prepared.candidates);
    let argv = ptrs(&prepared.argv);
    let envp = ptrs(&prepared.env);
    let mut sh_argv: Vec<*const c_char> = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
    sh_argv.extend(argv.iter().skip(1));

    // Every descriptor the supervisor keeps: all above 2, close-on-exec.
    let dup =
        |fd: BorrowedFd<'_>| -> io::Result<OwnedFd> { Ok(rustix::io::fcntl_dupfd_cloexec(fd, 3)?) };
    let record = dup(s.record)?;
    let out_file = dup(s.stdout)?;
    let err_file = dup(s.stderr)?;
    let fifo = s.stdin_fifo.map(dup).transpose()?;
    let procs = s.cgroup_procs.map(dup).transpose()?;
    let null = dev_null()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (in_r, in_w) = if fifo.is_some() {
        let (r, w) = pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    // The command's exec failure (its errno), to the supervisor; EOF at exec.
    let (exec_r, exec_w) = pipe()?;
    // The supervisor's report, to us: 12 bytes (errno, supervisor pid, command pid).
    let (report_r, report_w) = pipe()?;
    let raw = |f: &Option<OwnedFd>| f.as_ref().map_or(-1, |f| f.as_raw_fd());
    let mut keep: Vec<RawFd> = vec![
        record.as_raw_fd(),
        out_file.as_raw_fd(),
        err_file.as_raw_fd(),
        null.as_raw_fd(),
        out_r.as_raw_fd(),
        out_w.as_raw_fd(),
        err_r.as_raw_fd(),
        err_w.as_raw_fd(),
        exec_r.as_raw_fd(),
        exec_w.as_raw_fd(),
        report_w.as_raw_fd(),
    ];
    keep.extend(
        [&fifo, &procs, &in_r, &in_w]
            .into_iter()
            .filter_map(|f| f.as_ref().map(|f| f.as_raw_fd())),
    );
    keep.sort_unstable();
    let max_fd = {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit(2) with a valid out pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur.min(1 << 20) as c_int
        } else {
            65536
        }
    };
    let cgroup_dir = match s.cgroup_dir {
        Some(d) => Some(
            CString::new(d.as_os_str().as_encoded_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a cgroup path"))?,
        ),
        None => None,
    };
    // The supervisor's buffers: a mapping of their own (its copy survives when it sheds
    // the host's memory), unmapped here when this function returns.
    let buffers = Buffers::new()?;
    let plan = Plan {
        candidates: candidates.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        sh_argv: sh_argv.as_mut_ptr(),
        cwd: prepared.cwd.as_ptr(),
        keep: &keep,
        max_fd,
        record: record.as_raw_fd(),
        out_file: out_file.as_raw_fd(),
        err_file: err_file.as_raw_fd(),
        fifo: raw(&fifo),
        procs: raw(&procs),
        null: null.as_raw_fd(),
        out_r: out_r.as_raw_fd(),
        out_w: out_w.as_raw_fd(),
        err_r: err_r.as_raw_fd(),
        err_w: err_w.as_raw_fd(),
        in_r: raw(&in_r),
        in_w: raw(&in_w),
        exec_r: exec_r.as_raw_fd(),
        exec_w: exec_w.as_raw_fd(),
        report_w: report_w.as_raw_fd(),
        cap: s.cap,
        cgroup_dir: cgroup_dir.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        buf: buffers.0,
        buf_len: BUF,
        stdin_buf: buffers.0.wrapping_add(BUF),
        stdin_buf_len: BUF,
    };

    // SAFETY: a raw fork (no CLONE_VM): the child has a copy of our memory and runs only
    // `intermediate`, which never returns and makes only raw system calls on `plan`.
    let pid = unsafe { raw_fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child, on memory prepared above.
        unsafe { intermediate(&plan) }
    }
    // The intermediate exits right after forking the supervisor: reap it.
    let mut status = 0;
    loop {
        // SAFETY: waitpid(2) on our own child; valid out pointer.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::__WALL) };
        if r >= 0 || errno() != libc::EINTR {
            break;
        }
    }
    drop(report_w);
    // Our copies of the command's and supervisor's ends close here (the supervisor holds
    // its own).
    drop((out_w, err_w, in_r, in_w, exec_w, exec_r, out_r, err_r));
    let mut report = [0u8; 12];
    let mut got = 0;
    while got < report.len() {
        // SAFETY: read(2) into the rest of a stack buffer.
        let n = unsafe {
            libc::read(
                report_r.as_raw_fd(),
                report[got..].as_mut_ptr().cast(),
                report.len() - got,
            )
        };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            break;
        }
        got += n as usize;
    }
    if got < report.len() {
        return Err(io::Error::other(
            "the supervisor of a durable command ended before it reported a start",
        ));
    }
    let word =
        |i: usize| u32::from_le_bytes([report[i], report[i + 1], report[i + 2], report[i + 3]]);
    let err = word(0);
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err as i32));
    }
    Ok(Supervised {
        supervisor: word(4),
        pid: word(8),
    })
}

/// The size of each of the supervisor's two buffers.
const BUF: usize = 64 * 1024;

/// The supervisor's buffers (`2 * BUF` bytes), an anonymous mapping.
struct Buffers(*mut u8);

impl Buffers {
    fn new() -> io::Result<Buffers> {
        // SAFETY: a fresh anonymous private mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * BUF,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Buffers(p.cast()))
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new` (our copy; the supervisor's
        // copy is its own).
        unsafe { libc::munmap(self.0.cast(), 2 * BUF) };
    }
}

/// Everything the forked processes use, prepared before the fork.
struct Plan<'a> {
    candidates: *const *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    sh_argv: *mut *const c_char,
    cwd: *const c_char,
    /// The descriptors to keep, sorted.
    keep: &'a [RawFd],
    max_fd: c_int,
    record: RawFd,
    out_file: RawFd,
    err_file: RawFd,
    fifo: RawFd,
    procs: RawFd,
    null: RawFd,
    out_r: RawFd,
    out_w: RawFd,
    err_r: RawFd,
    err_w: RawFd,
    in_r: RawFd,
    in_w: RawFd,
    exec_r: RawFd,
    exec_w: RawFd,
    report_w: RawFd,
    cap: u64,
    /// NULL, or the cgroup directory to remove at the end (copied to the stack before
    /// the host's memory is shed).
    cgroup_dir: *const c_char,
    buf: *mut u8,
    buf_len: usize,
    stdin_buf: *mut u8,
    stdin_buf_len: usize,
}

/// `fork()` as one raw `clone` system call (no `atfork` handlers run).
///
/// # Safety
/// In the child only async-signal-safe calls may follow.
unsafe fn raw_fork() -> libc::pid_t {
    // SAFETY: clone(SIGCHLD, NULL stack): fork semantics.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        ) as libc::pid_t
    }
}

/// Writes all of `data` to `fd` (raw, retrying EINTR); false on error.
fn write_all(fd: RawFd, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        // SAFETY: write(2) from a valid slice.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        data = &data[n as usize..];
    }
    true
}

/// Formats `n` into `out` in decimal; returns the length. No allocation (usable between
/// `fork` and `exec`).
///
/// ```
/// let mut b = [0u8; 20];
/// let n = exec_world_sys::supervise::fmt_num(&mut b, -42);
/// assert_eq!(&b[..n], b"-42");
/// ```
pub fn fmt_num(out: &mut [u8], n: i64) -> usize {
    let mut digits = [0u8; 20];
    let mut len = 0;
    let mut v = n.unsigned_abs();
    loop {
        digits[len] = b'0' + (v % 10) as u8;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut i = 0;
    if n < 0 {
        out[0] = b'-';
        i = 1;
    }
    for k in (0..len).rev() {
        out[i] = digits[k];
        i += 1;
    }
    i
}

/// A small line buffer on the stack.
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }
    fn text(&mut self, t: &[u8]) -> &mut Line {
        let n = t.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&t[..n]);
        self.len += n;
        self
    }
    fn num(&mut self, n: i64) -> &mut Line {
        if self.len + 21 <= self.buf.len() {
            self.len += fmt_num(&mut self.buf[self.len..], n);
        }
        self
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The start time of `pid`, read with raw calls into a stack buffer.
fn start_time_raw(pid: i32) -> u64 {
    let mut path = Line::new();
    path.text(b"/proc/").num(i64::from(pid)).text(b"/stat\0");
    // SAFETY: open(2) of a NUL-terminated path on our stack.
    let fd = unsafe {
        libc::open(
            path.bytes().as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut stat = [0u8; 1024];
    let mut got = 0;
    while got < stat.len() {
        // SAFETY: read(2) into the rest of a stack buffer.
        let n = unsafe { libc::read(fd, stat[got..].as_mut_ptr().cast(), stat.len() - got) };
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    parse_start_time(&stat[..got]).unwrap_or(0)
}

/// Writes `data` to the record file `name` atomically (a temporary file, renamed).
fn write_record(dir: RawFd, tmp: &CStr, name: &CStr, data: &[u8]) {
    // SAFETY: openat/write/close/renameat on NUL-terminated names and our own descriptors.
    unsafe {
        let fd = libc::openat(
            dir,
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return;
        }
        let ok = write_all(fd, data);
        libc::close(fd);
        if ok {
            libc::renameat(dir, tmp.as_ptr(), dir, name.as_ptr());
        }
    }
}

/// The intermediate process: leaves the host's session, forks the supervisor, exits.
///
/// # Safety
/// Runs in a raw fork of the host: only async-signal-safe calls.
unsafe fn intermediate(p: &Plan<'_>) -> ! {
    // SAFETY: raw system calls only; `supervisor` never returns.
    unsafe {
        libc::setsid();
        let pid = raw_fork();
        if pid == 0 {
            supervisor(p)
        }
        if pid < 0 {
            let mut report = [0u8; 12];
            report[..4].copy_from_slice(&(errno() as u32).to_le_bytes());
            write_all(p.report_w, &report);
        }
        libc::_exit(0)
    }
}

/// The supervisor (see the module docs).
///
/// # Safety
/// Runs in a raw fork of the host: only async-signal-safe calls.
unsafe fn supervisor(p: &Plan<'_>) -> ! {
    // SAFETY: raw system calls on descriptors and memory prepared before the fork.
    unsafe {
        // 1. Signals: every handled one back to its default (the host's handlers are code
        // of a process we are not; ignored ones stay ignored, as CLONE_CLEAR_SIGHAND and
        // std's spawn leave them), SIGPIPE ignored (a command that closed its stdin),
        // nothing blocked.
        for sig in 1..=64 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && old.sa_sigaction != libc::SIG_IGN
            {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        for target in 0..3 {
            libc::dup2(p.null, target);
        }
        close_others(p.keep, p.max_fd);

        // 2. The command.
        let report_fail = |e: c_int| -> ! {
            let mut report = [0u8; 12];
            report[..4].copy_from_slice(&(e as u32).to_le_bytes());
            write_all(p.report_w, &report);
            libc::_exit(0)
        };
        let cmd = raw_fork();
        if cmd < 0 {
            report_fail(errno());
        }
        if cmd == 0 {
            command(p)
        }
        libc::close(p.out_w);
        libc::close(p.err_w);
        libc::close(p.exec_w);
        if p.in_r >= 0 {
            libc::close(p.in_r);
        }
        if p.procs >= 0 {
            // Only the command joins the cgroup; nothing else is written there.
            libc::close(p.procs);
        }
        let mut e = [0u8; 4];
        let mut got = 0;
        loop {
            let n = libc::read(p.exec_r, e[got..].as_mut_ptr().cast(), 4 - got);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
            if got == 4 {
                break;
            }
        }
        libc::close(p.exec_r);
        if got == 4 {
            let mut st = 0;
            libc::waitpid(cmd, &mut st, 0);
            report_fail(i32::from_le_bytes(e));
        }

        // 3. The pid file, then the report.
        let me = libc::getpid();
        let mut line = Line::new();
        line.text(b"supervisor ")
            .num(i64::from(me))
            .text(b" ")
            .num(start_time_raw(me) as i64)
            .text(b"\ncommand ")
            .num(i64::from(cmd))
            .text(b" ")
            .num(start_time_raw(cmd) as i64)
            .text(b"\n");
        write_record(p.record, c"pid.tmp", c"pid", line.bytes());
        let mut report = [0u8; 12];
        report[4..8].copy_from_slice(&(me as u32).to_le_bytes());
        report[8..12].copy_from_slice(&(cmd as u32).to_le_bytes());
        write_all(p.report_w, &report);
        libc::close(p.report_w);

        // The cgroup path, onto our stack (it lives on the host's heap).
        let mut cg = [0u8; 512];
        let mut have_cg = false;
        if !p.cgroup_dir.is_null() {
            let src = CStr::from_ptr(p.cgroup_dir).to_bytes();
            if src.len() < cg.len() {
                cg[..src.len()].copy_from_slice(src);
                have_cg = true;
            }
        }
        // The command runs: nothing of the host's memory is needed any more.
        shed_host_memory(&[p.buf as usize]);

        // 4-6.
        pump(p, cmd);
        // The cgroup goes before `closed`, so a record marked closed has none left
        // behind (unless a descendant still lives in it).
        if have_cg {
            remove_cgroup(cg.as_ptr().cast());
        }
        mark_closed(p.record);
        libc::_exit(0)
    }
}

/// Unmaps the host's memory this fork still shares copy-on-write (the heap, anonymous
/// mappings, other threads' stacks), so the supervisor does not keep pages the host
/// later changes or frees: a long-lived supervisor would otherwise pin up to the host's
/// whole footprint at the time of the fork. Kept: every file-backed mapping and the
/// anonymous one right after each (a library's `.bss`), the named kernel mappings
/// (`[stack]`, `[vdso]`, …), the mapping holding our stack pointer, the one holding our
/// thread's TLS block (x86_64's fs base; `errno` lives there), and those holding `keep`.
/// Only on x86_64 (elsewhere the TLS base is not read, so nothing is unmapped).
///
/// # Safety
/// Only raw system calls; afterwards nothing of the host's heap may be touched.
unsafe fn shed_host_memory(keep: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: raw system calls on our own address space; see the list of what is kept.
    unsafe {
        let mut fs_base: usize = 0;
        const ARCH_GET_FS: c_int = 0x1003;
        if libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_GET_FS,
            &mut fs_base as *mut usize,
        ) != 0
        {
            return;
        }
        let here = 0u8;
        let sp = &here as *const u8 as usize;
        // Passes: each collects up to `ranges.len()` mappings to drop, then drops them.
        loop {
            let mut ranges = [(0usize, 0usize); 128];
            let mut n = 0;
            let mut full = false;
            let fd = libc::open(
                c"/proc/self/maps".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return;
            }
            let mut buf = [0u8; 4096];
            let mut len = 0;
            let mut prev_end = 0usize;
            let mut prev_file = false;
            'read: loop {
                let r = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
                if r <= 0 {
                    break;
                }
                len += r as usize;
                let mut start = 0;
                while let Some(nl) = buf[start..len].iter().position(|&b| b == b'\n') {
                    let line = &buf[start..start + nl];
                    start += nl + 1;
                    let Some(m) = MapLine::parse(line) else {
                        continue;
                    };
                    let anon = m.inode == 0
                        && (m.name.is_empty()
                            || m.name == b"[heap]"
                            || m.name.starts_with(b"[anon:"));
                    let after_file = m.lo == prev_end && prev_file;
                    prev_end = m.hi;
                    prev_file = m.inode != 0;
                    let holds = |a: usize| m.lo <= a && a < m.hi;
                    if !anon
                        || !m.private
                        || after_file
                        || holds(sp)
                        || holds(fs_base)
                        || keep.iter().any(|&k| holds(k))
                    {
                        continue;
                    }
                    if n == ranges.len() {
                        full = true;
                        break 'read;
                    }
                    ranges[n] = (m.lo, m.hi);
                    n += 1;
                }
                buf.copy_within(start..len, 0);
                len -= start;
                if len == buf.len() {
                    // A line longer than the buffer (a huge name): give up on the rest.
                    break;
                }
            }
            libc::close(fd);
            for &(lo, hi) in &ranges[..n] {
                libc::munmap(lo as *mut libc::c_void, hi - lo);
            }
            if !full {
                return;
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = keep;
}

/// One line of `/proc/self/maps`: `lo-hi perms offset dev inode name`.
struct MapLine<'a> {
    lo: usize,
    hi: usize,
    private: bool,
    inode: u64,
    name: &'a [u8],
}

impl<'a> MapLine<'a> {
    fn parse(line: &'a [u8]) -> Option<MapLine<'a>> {
        let hex = |t: &[u8]| -> Option<usize> {
            let mut v: usize = 0;
            for &b in t {
                let d = (b as char).to_digit(16)? as usize;
                v = v.checked_mul(16)?.checked_add(d)?;
            }
            Some(v)
        };
        let mut fields = line.splitn(6, |&b| b == b' ');
        let range = fields.next()?;
        let perms = fields.next()?;
        let _offset = fields.next()?;
        let _dev = fields.next()?;
        let inode = fields.next()?;
        let name = fields.next().unwrap_or(b"");
        let dash = range.iter().position(|&b| b == b'-')?;
        let mut ino: u64 = 0;
        for &b in inode {
            ino = ino
                .checked_mul(10)?
                .checked_add(u64::from(b.checked_sub(b'0').filter(|d| *d < 10)?))?;
        }
        let start = name.iter().position(|&b| b != b' ').unwrap_or(name.len());
        Some(MapLine {
            lo: hex(&range[..dash])?,
            hi: hex(&range[dash + 1..])?,
            private: perms.get(3) == Some(&b'p'),
            inode: ino,
            name: &name[start..],
        })
    }
}

/// Closes every descriptor but `keep` (sorted) up to `max_fd`.
///
/// # Safety
/// Only raw system calls.
unsafe fn close_others(keep: &[RawFd], max_fd: c_int) {
    let close_range = |lo: c_int, hi: c_int| {
        if lo > hi {
            return;
        }
        // SAFETY: close_range(2) on descriptors we own (in the forked process).
        let r = unsafe { libc::syscall(libc::SYS_close_range, lo as u32, hi as u32, 0u32) };
        if r != 0 {
            for fd in lo..=hi.min(max_fd) {
                // SAFETY: close(2) of a descriptor number; EBADF is harmless.
                unsafe { libc::close(fd) };
            }
        }
    };
    let mut lo = 3;
    for &k in keep {
        if k >= lo {
            close_range(lo, k - 1);
            lo = k + 1;
        }
    }
    close_range(lo, c_int::MAX);
}

/// The command, in the supervisor's fork: session, cgroup, stdio, cwd, exec.
///
/// # Safety
/// Only raw system calls.
unsafe fn command(p: &Plan<'_>) -> ! {
    // SAFETY: raw system calls on descriptors and memory prepared before the fork.
    unsafe {
        let fail = |e: c_int| -> ! {
            write_all(p.exec_w, &e.to_le_bytes());
            libc::_exit(127)
        };
        if libc::setsid() < 0 {
            fail(errno());
        }
        if p.procs >= 0 {
            // A failure leaves it outside (the marker scan still finds it), as for any spawn.
            libc::write(p.procs, b"0".as_ptr().cast(), 1);
        }
        let stdin = if p.in_r >= 0 { p.in_r } else { p.null };
        for (target, src) in [(0, stdin), (1, p.out_w), (2, p.err_w)] {
            if libc::dup2(src, target) < 0 {
                fail(errno());
            }
        }
        if libc::chdir(p.cwd) < 0 {
            fail(errno());
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        fail(exec_along(p.candidates, p.argv, p.envp, p.sh_argv))
    }
}

/// An output stream being copied into its record file.
struct Sink {
    pipe: RawFd,
    file: RawFd,
    /// Bytes written so far (= the file's size).
    written: u64,
    /// Bytes punched out so far (from 0).
    punched: u64,
    /// Punching is not supported by the file system (or failed): stop trying.
    no_punch: bool,
}

impl Sink {
    /// Copies what the pipe has; false at EOF (or a read error).
    fn copy(&mut self, buf: &mut [u8], cap: u64) -> bool {
        // SAFETY: read(2)/pwrite(2) on our descriptors into/from `buf`.
        unsafe {
            let n = libc::read(self.pipe, buf.as_mut_ptr().cast(), buf.len());
            if n < 0 {
                return matches!(errno(), libc::EINTR | libc::EAGAIN);
            }
            if n == 0 {
                return false;
            }
            let mut data = &buf[..n as usize];
            while !data.is_empty() {
                let w = libc::pwrite(
                    self.file,
                    data.as_ptr().cast(),
                    data.len(),
                    self.written as libc::off_t,
                );
                if w < 0 {
                    if errno() == libc::EINTR {
                        continue;
                    }
                    // The disk refused (full): these bytes are lost; the offsets go on so
                    // a reader sees zeros rather than a shifted stream.
                    self.written += data.len() as u64;
                    break;
                }
                self.written += w as u64;
                data = &data[w as usize..];
            }
            self.punch(cap, false);
            true
        }
    }

    /// Punches out what lies before `written - cap` (in steps, or all when `last`).
    fn punch(&mut self, cap: u64, last: bool) {
        let keep_from = self.written.saturating_sub(cap);
        if self.no_punch || keep_from <= self.punched {
            return;
        }
        if !last && keep_from - self.punched < PUNCH_STEP {
            return;
        }
        // SAFETY: fallocate(2) on our own record file.
        let r = unsafe {
            libc::fallocate(
                self.file,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                self.punched as libc::off_t,
                (keep_from - self.punched) as libc::off_t,
            )
        };
        if r == 0 {
            self.punched = keep_from;
        } else if errno() != libc::EINTR {
            self.no_punch = true;
        }
    }
}

/// The command's stdin, fed from the FIFO's frames.
struct Feed {
    fifo: RawFd,
    pipe: RawFd,
    /// Bytes of the frame being read that are still to come.
    frame_left: usize,
    /// Header bytes read so far of the next frame.
    header: [u8; 2],
    header_len: usize,
    /// Data for the command: `pending[at..len]`.
    at: usize,
    len: usize,
    /// A close frame was read: close once `pending` is written.
    closing: bool,
}

impl Feed {
    /// Closes the command's stdin and the FIFO.
    fn close(&mut self) {
        // SAFETY: closes our own descriptors once.
        unsafe {
            if self.pipe >= 0 {
                libc::close(self.pipe);
            }
            if self.fifo >= 0 {
                libc::close(self.fifo);
            }
        }
        self.pipe = -1;
        self.fifo = -1;
    }

    /// Reads frames from the FIFO into `buf` (only when nothing is pending).
    fn read(&mut self, buf: &mut [u8]) {
        let mut raw = [0u8; STDIN_FRAME_MAX];
        // SAFETY: read(2) into a stack buffer.
        let n = unsafe { libc::read(self.fifo, raw.as_mut_ptr().cast(), raw.len()) };
        if n <= 0 {
            return;
        }
        self.at = 0;
        self.len = 0;
        for &b in &raw[..n as usize] {
            if self.frame_left > 0 {
                if self.len < buf.len() {
                    buf[self.len] = b;
                    self.len += 1;
                }
                self.frame_left -= 1;
                continue;
            }
            self.header[self.header_len] = b;
            self.header_len += 1;
            if self.header_len == 2 {
                self.header_len = 0;
                let len = u16::from_le_bytes(self.header) as usize;
                if len == 0 {
                    self.closing = true;
                } else {
                    self.frame_left = len;
                }
            }
        }
    }

    /// Writes what is pending to the command; closes when asked and done.
    fn write(&mut self, buf: &[u8]) {
        while self.at < self.len && self.pipe >= 0 {
            // SAFETY: write(2) from `buf`.
            let n = unsafe {
                libc::write(
                    self.pipe,
                    buf[self.at..self.len].as_ptr().cast(),
                    self.len - self.at,
                )
            };
            if n < 0 {
                match errno() {
                    libc::EINTR => continue,
                    libc::EAGAIN => return,
                    // EPIPE: the command closed its stdin; nothing more goes to it.
                    _ => {
                        self.at = self.len;
                        break;
                    }
                }
            }
            self.at += n.max(0) as usize;
        }
        if self.at >= self.len && self.closing {
            self.close();
        }
    }
}

/// Steps 4-6: copy output, feed stdin, record the end.
///
/// # Safety
/// Only raw system calls.
unsafe fn pump(p: &Plan<'_>, cmd: libc::pid_t) {
    // SAFETY: raw system calls on our descriptors; `buf` / `stdin_buf` are ours (our copy
    // of the host's memory).
    unsafe {
        let buf = std::slice::from_raw_parts_mut(p.buf, p.buf_len);
        let sbuf = std::slice::from_raw_parts_mut(p.stdin_buf, p.stdin_buf_len);
        let mut out = Sink {
            pipe: p.out_r,
            file: p.out_file,
            written: 0,
            punched: 0,
            no_punch: false,
        };
        let mut err = Sink {
            pipe: p.err_r,
            file: p.err_file,
            written: 0,
            punched: 0,
            no_punch: false,
        };
        let mut feed = Feed {
            fifo: p.fifo,
            pipe: p.in_w,
            frame_left: 0,
            header: [0; 2],
            header_len: 0,
            at: 0,
            len: 0,
            closing: false,
        };
        if feed.pipe >= 0 {
            let fl = libc::fcntl(feed.pipe, libc::F_GETFL);
            libc::fcntl(feed.pipe, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let pidfd = libc::syscall(libc::SYS_pidfd_open, cmd, 0) as c_int;
        let mut out_open = true;
        let mut err_open = true;
        let mut reaped = false;
        while out_open || err_open || !reaped {
            let mut fds = [libc::pollfd {
                fd: -1,
                events: 0,
                revents: 0,
            }; 5];
            if out_open {
                fds[0] = libc::pollfd {
                    fd: out.pipe,
                    events: libc::POLLIN,
                    revents: 0,
                };
            }
            if err_open {
                fds[1] = libc::pollfd {
                    fd: err.pipe,
                    events: libc::POLLIN,
                    revents: 0,
                };
            }
            if !reaped && pidfd >= 0 {
                fds[2] = libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                };
            }
            if feed.fifo >= 0 && feed.at >= feed.len && !feed.closing {
                fds[3] = libc::pollfd {
                    fd: feed.fifo,
                    events: libc::POLLIN,
                    revents: 0,
                };
            }
            if feed.pipe >= 0 && feed.at < feed.len {
                fds[4] = libc::pollfd {
                    fd: feed.pipe,
                    events: libc::POLLOUT,
                    revents: 0,
                };
            }
            // Without a pidfd (old kernels) the end is polled for.
            let timeout = if pidfd < 0 && !reaped { 50 } else { -1 };
            let r = libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout);
            if r < 0 && errno() != libc::EINTR {
                // Cannot wait for anything any more: leave the outcome unknown.
                libc::_exit(1);
            }
            let ready = |i: usize| fds[i].fd >= 0 && fds[i].revents != 0;
            if ready(0) {
                out_open = out.copy(buf, p.cap);
            }
            if ready(1) {
                err_open = err.copy(buf, p.cap);
            }
            if ready(3) {
                feed.read(sbuf);
                feed.write(sbuf);
            }
            if ready(4) {
                feed.write(sbuf);
            }
            if feed.closing && feed.at >= feed.len {
                feed.close();
            }
            if !reaped && (pidfd < 0 || ready(2)) {
                let mut st: c_int = 0;
                let w = libc::waitpid(cmd, &mut st, libc::WNOHANG);
                if w == cmd {
                    reaped = true;
                    feed.close();
                    let mut line = Line::new();
                    if libc::WIFSIGNALED(st) {
                        line.text(b"signal ").num(i64::from(libc::WTERMSIG(st)));
                    } else {
                        line.text(b"exit ").num(i64::from(libc::WEXITSTATUS(st)));
                    }
                    line.text(b"\n");
                    write_record(p.record, c"status.tmp", c"status", line.bytes());
                } else if w < 0 && errno() == libc::ECHILD {
                    // Not ours to wait for any more (cannot happen): unknown.
                    libc::_exit(1);
                }
            }
        }
        out.punch(p.cap, true);
        err.punch(p.cap, true);
    }
}

/// Creates the record's `closed` marker: no more output will come.
fn mark_closed(record: RawFd) {
    // SAFETY: openat/close on a NUL-terminated name and our own descriptor.
    unsafe {
        let fd = libc::openat(
            record,
            c"closed".as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

/// Removes the command's (empty) cgroup. The kernel may still count a task it just
/// released for a moment (`EBUSY`), so a busy cgroup is tried again for up to 200 ms;
/// one that still has members stays (the next terminate, or a sweep, removes it).
///
/// # Safety
/// `path` is NUL-terminated.
unsafe fn remove_cgroup(path: *const c_char) {
    for _ in 0..40 {
        // SAFETY: rmdir and nanosleep on a NUL-terminated path and our own timespec.
        unsafe {
            if libc::rmdir(path) == 0 || errno() != libc::EBUSY {
                return;
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 5_000_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_after_the_name() {
        let stat =
            b"42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(stat_state(stat), Some(b'S'));
        assert_eq!(parse_start_time(b"42 (x) S 1 2"), None);
        let me = std::process::id();
        let t = start_time(me).expect("own start time");
        assert!(alive(me, t));
        assert!(!alive(me, t + 1));
        assert_eq!(start_time_raw(me as i32), t);
    }

    #[test]
    fn maps_lines_parse() {
        let l = MapLine::parse(b"7f0000000000-7f0000021000 rw-p 00000000 00:00 0 ").expect("anon");
        assert_eq!(
            (l.lo, l.hi, l.private, l.inode),
            (0x7f00_0000_0000, 0x7f00_0002_1000, true, 0)
        );
        assert!(l.name.is_empty());
        let l = MapLine::parse(b"55d0-55e0 r-xp 00001000 08:01 1234   /usr/bin/x y").expect("file");
        assert_eq!((l.inode, l.name), (1234, &b"/usr/bin/x y"[..]));
        let l = MapLine::parse(b"1000-2000 rw-s 00000000 00:01 77 /dev/zero (deleted)")
            .expect("shared");
        assert!(!l.private);
    }

    #[test]
    fn fmt_num_formats_signed() {
        let mut b = [0u8; 24];
        let n = fmt_num(&mut b, -120);
        assert_eq!(&b[..n], b"-120");
        let n = fmt_num(&mut b, 0);
        assert_eq!(&b[..n], b"0");
    }
}
