//! Reading durable records (`record.rs`), run by the adapter as root through envd:
//!
//! - `spawn --tail STATE ID OUT ERR [BULK]`: the record's description, then its stdout
//!   and stderr from byte offsets `OUT` and `ERR` (the oldest kept byte when those were
//!   dropped), then live as the watcher appends, then how it ended. With `BULK` above 0,
//!   a record that had ended when the tail began hands a stream of at least `BULK` kept
//!   bytes over instead of sending it: a `b` frame `o FROM TO CAP` (or `e …`) says bytes
//!   `FROM..TO` are in the ring file `out` (`err`) at `16 + n % CAP`, final (the status
//!   is written after the last byte), for the reader to fetch itself;
//! - `spawn --list STATE`: every record with its description and state;
//! - `spawn --collect STATE ID`: removes an ended record (a running one stays).
//!
//! Only root-owned directories nobody else can write are read, every name is opened
//! relative to them without following links, and only regular files are read. The
//! answer is frames on stdout: a kind byte, a little-endian `u32` length, the payload.
//! Kinds: `n` no such record; `r` a record's id (list); `m` its `meta`; `p` its `proc`;
//! `i` `PID CGROUP` (the program's pid and cgroup directory, `-` for none); `a` the
//! state when the tail began (`R`, the status, or `u`); `s` `START_OUT START_ERR DROPPED_OUT DROPPED_ERR`; `o` / `e`
//! output bytes; `g` `o N` / `e N`: N bytes the cap overwrote before they were read;
//! `b` a handed-over range; `R` running; `x` the status (`exit N` / `signal N`); `u` unknown (why); `c` collected.
//! The state is `x` when the watcher recorded a status, else `u` when the sandbox booted
//! since (another boot id) or the watcher is gone (no such pid, a zombie, or another
//! process's start time), else `R`.

use crate::mem::{Arena, decimal};
use crate::record::*;
use crate::sys::*;

const SYS_NANOSLEEP: usize = 35;
const SYS_GETDENTS64: usize = 217;
const SYS_INOTIFY_ADD_WATCH: usize = 254;
const SYS_INOTIFY_INIT1: usize = 294;
const AT_REMOVEDIR: usize = 0x200;
/// `IN_MODIFY | IN_MOVED_TO | IN_CREATE`.
const IN_EVENTS: usize = 0x2 | 0x80 | 0x100;
/// Biggest `meta` read (the host's description of the command).
const META_MAX: usize = 1 << 20;

/// Runs a reading mode when `arg(1)` names one; returns otherwise.
pub(crate) fn dispatch(argc: usize, arg: &dyn Fn(usize) -> &'static [u8], arena: &mut Arena) {
    match (argc, arg(1)) {
        (6 | 7, b"--tail") => {
            let (Some(out), Some(err)) = (num(arg(4)), num(arg(5))) else {
                fail(b"usage", 125)
            };
            let bulk = if argc == 7 { num(arg(6)) } else { Some(0) };
            let Some(bulk) = bulk else { fail(b"usage", 125) };
            tail(arg(2), arg(3), [out, err], bulk, arena)
        }
        (3, b"--list") => list(arg(2), arena),
        (4, b"--collect") => collect(arg(2), arg(3), arena),
        _ => {}
    }
}

/// One frame: `kind`, the length, `payload`.
fn frame(kind: u8, payload: &[u8]) {
    let mut h = [kind, 0, 0, 0, 0];
    h[1..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    write_all(1, &h);
    write_all(1, payload);
}

/// Opens record `id` of `state` (`None`: no such record).
fn open_record(state: &[u8], id: &[u8]) -> Option<(isize, isize)> {
    if !valid_id(id) {
        fail(b"usage", 125);
    }
    let st = open_state(state, false)?;
    let mut buf = [0u8; 256];
    let dir = openat(st, c_name(id, &mut buf), O_DIRECTORY | O_NOFOLLOW | O_RDONLY, 0);
    let ok = dir >= 0 && fstat(dir).is_some_and(|(m, u, _)| m & S_IFMT == 0o040000 && u == 0 && m & 0o077 == 0);
    if !ok {
        if dir >= 0 {
            close(dir);
        }
        close(st);
        return None;
    }
    Some((st, dir))
}

/// Opens the regular file `name` (NUL-terminated) in `dir`.
fn open_in(dir: isize, name: &[u8]) -> Option<isize> {
    let fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if fd < 0 {
        return None;
    }
    if !fstat(fd).is_some_and(|(m, _, _)| m & S_IFMT == S_IFREG) {
        close(fd);
        return None;
    }
    Some(fd)
}

/// The content of the small file `name` in `dir` (at most `max` bytes), in the arena.
fn read_small(dir: isize, name: &[u8], max: usize, arena: &mut Arena) -> Option<&'static [u8]> {
    let fd = open_in(dir, name)?;
    let size = fstat(fd).map_or(0, |(_, _, s)| s as usize).min(max);
    let p = arena.take(size + 1);
    // SAFETY: `p` holds `size + 1` bytes.
    let buf = unsafe { core::slice::from_raw_parts_mut(p, size) };
    let mut at = 0;
    while at < size {
        let n = pread(fd, &mut buf[at..], at as u64);
        if n <= 0 {
            break;
        }
        at += n as usize;
    }
    close(fd);
    Some(&buf[..at])
}

/// `proc`: the watcher's pid and start time, the boot id, the cap.
struct ProcInfo {
    watcher: &'static [u8],
    start: u64,
    boot: &'static [u8],
    cap: u64,
}

fn parse_proc(text: &'static [u8]) -> Option<ProcInfo> {
    let line = text.split(|&c| c == b'\n').next()?;
    let mut f = line.split(|&c| c == b' ');
    let watcher = f.next()?;
    let start = parse_num_long(f.next()?)?;
    let boot = f.next()?;
    let cap = parse_num_long(f.next()?)?;
    Some(ProcInfo {
        watcher,
        start,
        boot,
        cap,
    })
}

/// How a record stands.
enum State {
    Running,
    Ended(&'static [u8]),
    Unknown(&'static [u8]),
}

fn state(dir: isize, proc: Option<&ProcInfo>, arena: &mut Arena) -> State {
    if let Some(s) = read_small(dir, b"status\0", 64, arena) {
        return State::Ended(s);
    }
    let Some(p) = proc else {
        return State::Unknown(b"the record has no watcher");
    };
    let mut boot = [0u8; 64];
    if boot_id(&mut boot) != p.boot {
        return State::Unknown(b"the sandbox booted again since the command started");
    }
    let alive = start_time(p.watcher, arena).is_some_and(|(s, zombie)| s == p.start && !zombie);
    if alive {
        return State::Running;
    }
    // It may have recorded the status just before it ended.
    match read_small(dir, b"status\0", 64, arena) {
        Some(s) => State::Ended(s),
        None => State::Unknown(b"the command's watcher ended without recording a status"),
    }
}

fn end_frame(s: &State) {
    match s {
        State::Running => frame(b'R', b""),
        State::Ended(st) => frame(b'x', trim(st)),
        State::Unknown(why) => frame(b'u', why),
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let end = s.iter().position(|&c| c == b'\n').unwrap_or(s.len());
    &s[..end]
}

fn sleep_ms(ms: u64) {
    let ts = [(ms / 1000) as i64, ((ms % 1000) * 1_000_000) as i64];
    // SAFETY: a valid timespec.
    unsafe { sys(SYS_NANOSLEEP, ts.as_ptr() as usize, 0, 0, 0, 0, 0) };
}

/// The total bytes ever written to a ring (its header, read until both copies agree).
fn total(fd: isize) -> u64 {
    loop {
        let mut h = [0u8; 16];
        if pread(fd, &mut h, 0) != 16 {
            return 0;
        }
        let (a, b) = h.split_at(8);
        if a == b {
            let mut t = [0u8; 8];
            t.copy_from_slice(a);
            return u64::from_le_bytes(t);
        }
    }
}

/// One stream being tailed.
struct Tailed {
    fd: isize,
    pos: u64,
    kind: u8,
}

/// Sends what `t` has from its position, at most `rounds` chunks; true when it sent any.
fn pump(t: &mut Tailed, cap: u64, buf: &mut [u8], rounds: usize) -> bool {
    let mut sent = false;
    for _ in 0..rounds {
        let end = total(t.fd);
        let low = end.saturating_sub(cap);
        if t.pos < low {
            gap(t, low);
        }
        if t.pos >= end {
            break;
        }
        let at = t.pos % cap;
        let n = (end - t.pos).min(cap - at).min((buf.len() - 5) as u64) as usize;
        let got = pread(t.fd, &mut buf[5..5 + n], HEADER + at);
        if got <= 0 {
            break;
        }
        let got = got as usize;
        // Bytes the writer overwrote while they were read are not sent.
        let low = total(t.fd).saturating_sub(cap);
        if t.pos < low {
            gap(t, low);
            continue;
        }
        buf[0] = t.kind;
        buf[1..5].copy_from_slice(&(got as u32).to_le_bytes());
        write_all(1, &buf[..5 + got]);
        t.pos += got as u64;
        sent = true;
    }
    sent
}

/// Reports the bytes from `t`'s position to `low` as dropped and moves there.
fn gap(t: &mut Tailed, low: u64) {
    let mut d = [0u8; 20];
    let mut line = [0u8; 24];
    line[0] = t.kind;
    line[1] = b' ';
    let n = decimal(low - t.pos, &mut d);
    line[2..2 + n.len()].copy_from_slice(n);
    frame(b'g', &line[..2 + n.len()]);
    t.pos = low;
}

fn tail(state_dir: &[u8], id: &[u8], from: [u64; 2], bulk: u64, arena: &mut Arena) -> ! {
    let Some((st, dir)) = open_record(state_dir, id) else {
        frame(b'n', b"");
        exit(0)
    };
    close(st);
    // Watch the directory before reading anything, so no change is missed.
    let ino = sys_plain(SYS_INOTIFY_INIT1, O_CLOEXEC | O_NONBLOCK, 0, 0);
    if ino >= 0 {
        let mut d = [0u8; 20];
        let path = arena.join(&[b"/proc/self/fd/", decimal(dir as u64, &mut d)]);
        // SAFETY: NUL-terminated path.
        unsafe { sys(SYS_INOTIFY_ADD_WATCH, ino as usize, path.as_ptr() as usize, IN_EVENTS, 0, 0, 0) };
    }
    frame(b'm', read_small(dir, b"meta\0", META_MAX, arena).unwrap_or(b""));
    let proc_text = read_small(dir, b"proc\0", 512, arena);
    frame(b'p', proc_text.unwrap_or(b""));
    let proc = proc_text.and_then(parse_proc);
    // The pid file follows the fork at once; wait for it while the watcher lives.
    let pid = loop {
        if let Some(p) = read_small(dir, b"pid\0", 4096, arena) {
            break p;
        }
        if !matches!(state(dir, proc.as_ref(), arena), State::Running) {
            break b"";
        }
        sleep_ms(5);
    };
    frame(b'i', trim(pid));
    let began = state(dir, proc.as_ref(), arena);
    match began {
        State::Running => frame(b'a', b"R"),
        State::Ended(st) => frame(b'a', trim(st)),
        State::Unknown(_) => frame(b'a', b"u"),
    }
    let cap = proc.as_ref().map_or(0, |p| p.cap);
    let (Some(out), Some(err)) = (open_in(dir, b"out\0"), open_in(dir, b"err\0")) else {
        frame(b'u', b"the record has no output files");
        exit(0)
    };
    let mut streams = [
        Tailed { fd: out, pos: from[0], kind: b'o' },
        Tailed { fd: err, pos: from[1], kind: b'e' },
    ];
    let mut dropped = [0u64; 2];
    for (t, d) in streams.iter_mut().zip(dropped.iter_mut()) {
        let low = total(t.fd).saturating_sub(cap);
        if t.pos < low {
            *d = low - t.pos;
            t.pos = low;
        }
    }
    let (mut a, mut b, mut c, mut d) = ([0u8; 20], [0u8; 20], [0u8; 20], [0u8; 20]);
    let line = arena.join(&[
        decimal(streams[0].pos, &mut a),
        b" ",
        decimal(streams[1].pos, &mut b),
        b" ",
        decimal(dropped[0], &mut c),
        b" ",
        decimal(dropped[1], &mut d),
    ]);
    frame(b's', line);
    if bulk > 0 && cap > 0 && matches!(began, State::Ended(_)) {
        for t in streams.iter_mut() {
            let end = total(t.fd);
            if end > t.pos && end - t.pos >= bulk {
                let (mut a, mut b, mut c) = ([0u8; 20], [0u8; 20], [0u8; 20]);
                let line = arena.join(&[
                    &[t.kind, b' '],
                    decimal(t.pos, &mut a),
                    b" ",
                    decimal(end, &mut b),
                    b" ",
                    decimal(cap, &mut c),
                ]);
                frame(b'b', line);
                t.pos = end;
            }
        }
    }
    let p = arena.take(CHUNK + 5);
    // SAFETY: `p` holds CHUNK + 5 bytes for this run.
    let buf = unsafe { core::slice::from_raw_parts_mut(p, CHUNK + 5) };
    let mut last: Option<State> = None;
    loop {
        let mut sent = false;
        if cap > 0 {
            for t in streams.iter_mut() {
                sent |= pump(t, cap, buf, 16);
            }
        } else {
            // Nothing is kept: every byte is a gap.
            for t in streams.iter_mut() {
                let end = total(t.fd);
                if t.pos < end {
                    gap(t, end);
                }
            }
        }
        if sent {
            continue;
        }
        if let Some(s) = &last {
            end_frame(s);
            exit(0);
        }
        let s = state(dir, proc.as_ref(), arena);
        if !matches!(s, State::Running) {
            // Once more: the last output was recorded before the status.
            last = Some(s);
            continue;
        }
        if ino >= 0 {
            let mut fds = [PollFd { fd: ino as i32, events: POLLIN, revents: 0 }];
            poll(&mut fds, 250);
            let mut events = [0u8; 4096];
            while read(ino, &mut events) > 0 {}
        } else {
            sleep_ms(20);
        }
    }
}

fn list(state_dir: &[u8], arena: &mut Arena) -> ! {
    let Some(st) = open_state(state_dir, false) else {
        exit(0)
    };
    let p = arena.take(8192);
    // SAFETY: `p` holds 8192 bytes for this run.
    let buf = unsafe { core::slice::from_raw_parts_mut(p, 8192) };
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { sys(SYS_GETDENTS64, st as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            let reclen = u16::from_le_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            let name: &'static [u8] = arena.join(&[name]);
            at += reclen;
            if !valid_id(name) {
                continue;
            }
            let Some((s2, dir)) = open_record(state_dir, name) else {
                continue;
            };
            close(s2);
            frame(b'r', name);
            frame(b'm', read_small(dir, b"meta\0", META_MAX, arena).unwrap_or(b""));
            let proc_text = read_small(dir, b"proc\0", 512, arena);
            frame(b'p', proc_text.unwrap_or(b""));
            frame(b'i', trim(read_small(dir, b"pid\0", 4096, arena).unwrap_or(b"")));
            let proc = proc_text.and_then(parse_proc);
            end_frame(&state(dir, proc.as_ref(), arena));
            close(dir);
        }
    }
    exit(0)
}

fn collect(state_dir: &[u8], id: &[u8], arena: &mut Arena) -> ! {
    let Some((st, dir)) = open_record(state_dir, id) else {
        frame(b'n', b"");
        exit(0)
    };
    let proc = read_small(dir, b"proc\0", 512, arena).and_then(parse_proc);
    let s = state(dir, proc.as_ref(), arena);
    if matches!(s, State::Running) {
        frame(b'R', b"");
        exit(0);
    }
    // The spawn's cgroup (a root-written path in the record), if it is empty now.
    if let Some(cg) = read_small(dir, b"pid\0", 4096, arena)
        .and_then(|t| trim(t).split(|&c| c == b' ').nth(1))
        .filter(|c| c.first() == Some(&b'/') && !c.windows(2).any(|w| w == b".."))
    {
        let path = arena.join(&[cg]);
        // SAFETY: NUL-terminated path.
        unsafe { sys(SYS_UNLINKAT, AT_FDCWD as usize, path.as_ptr() as usize, AT_REMOVEDIR, 0, 0, 0) };
    }
    for name in [
        &b"meta\0"[..],
        b"proc\0",
        b"proc.tmp\0",
        b"pid\0",
        b"pid.tmp\0",
        b"out\0",
        b"err\0",
        b"status\0",
        b"status.tmp\0",
    ] {
        // SAFETY: NUL-terminated names.
        unsafe { sys(SYS_UNLINKAT, dir as usize, name.as_ptr() as usize, 0, 0, 0, 0) };
    }
    close(dir);
    let mut buf = [0u8; 256];
    let name = c_name(id, &mut buf);
    // SAFETY: NUL-terminated name.
    let r = unsafe { sys(SYS_UNLINKAT, st as usize, name.as_ptr() as usize, AT_REMOVEDIR, 0, 0, 0) };
    if r != 0 {
        fail(b"collect", 125);
    }
    frame(b'c', b"");
    exit(0)
}
