//! The native spawn helper: one small static program (Linux x86_64, no libc, raw system
//! calls, about 3 KB) that does in a single exec what the `sh` helper (`src/wrapper.rs`)
//! does with `setsid`, two shells, `setpriv` and `env`. `build.rs` compiles it with `rustc`
//! alone; the adapter places it once per sandbox in a root-owned directory and runs it by
//! path for every piped spawn. Its arguments and its header line are the `sh` helper's:
//!
//! - `spawn --probe`: prints `exec-world-spawn 1` (the setup checks the file runs here).
//! - `spawn --root MOUNT NAME UID GID GROUPS USERARGS…` (run as root): new session, joins
//!   the cgroup `MOUNT<own cgroup>/NAME` (`NAME.<pid>` when a live process is still in
//!   `NAME`), drops to `UID`/`GID` with the supplementary `GROUPS` (comma-separated; `UID`
//!   empty: stays root), then the user part.
//! - `spawn --user USERARGS…` (run as the acting user): new session, then the user part.
//!
//! The user part checks that its process group and session are its own pid, builds the
//! environment (`USERARGS`: `MODE TERM HOME SHELL USER PATH FAST NENV K=V… PROGRAM ARGS…`,
//! `FAST` unused here), finds the program in that environment's `PATH` with the user's
//! rights, prints `EXEC-WORLD-PGID <pid> <cgroup dir>` (or `EXEC-WORLD-FAIL <why>`, exit
//! 127 for a missing program, 126 for one that cannot be run, 125 otherwise) and execs
//! the program in place. When envd already made it a process group leader, `setsid` is
//! refused: it forks, the child goes on and the parent waits and ends as the child did
//! (`setsid -w`).
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

/// The credential scrub list shared with exec-world (`env_scrub.rs` includes the same file).
mod scrub_list {
    include!("../../exec-world/src/env_scrub_list.rs");
}

global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call helper_main",
    "ud2",
);

// System call numbers and constants (x86_64).
const SYS_READ: usize = 0;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_MMAP: usize = 9;
const SYS_RT_SIGACTION: usize = 13;
const SYS_RT_SIGPROCMASK: usize = 14;
const SYS_GETPID: usize = 39;
const SYS_FORK: usize = 57;
const SYS_EXECVE: usize = 59;
const SYS_WAIT4: usize = 61;
const SYS_KILL: usize = 62;
const SYS_SETSID: usize = 112;
const SYS_SETGROUPS: usize = 116;
const SYS_SETRESUID: usize = 117;
const SYS_SETRESGID: usize = 119;
const SYS_GETPGID: usize = 121;
const SYS_GETSID: usize = 124;
const SYS_SETRLIMIT: usize = 160;
const SYS_EXIT_GROUP: usize = 231;
const SYS_OPENAT: usize = 257;
const SYS_MKDIRAT: usize = 258;
const SYS_NEWFSTATAT: usize = 262;
const SYS_FACCESSAT: usize = 269;

const AT_FDCWD: isize = -100;
const O_RDONLY: usize = 0;
const O_WRONLY: usize = 1;
const O_CLOEXEC: usize = 0o2000000;
const EPERM: isize = 1;
const EINTR: isize = 4;
const ENOEXEC: isize = 8;
const EEXIST: isize = 17;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const X_OK: usize = 1;

/// One raw system call; a negative result is `-errno`.
///
/// # Safety
/// The arguments must be valid for system call `n`.
unsafe fn sys(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let r: isize;
    // SAFETY: the caller passes arguments valid for `n`; `syscall` clobbers rcx and r11.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e, in("r9") f,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// A system call without pointer arguments (ids, pids, signals).
fn sys_plain(n: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: only called with calls whose arguments are plain numbers.
    unsafe { sys(n, a, b, c, 0, 0, 0) }
}

/// The byte copy `core` emits calls to (no libc here).
///
/// # Safety
/// As C's `memcpy`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: as memcpy; `rep movsb` copies rcx bytes from rsi to rdi.
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
             options(nostack, preserves_flags));
    }
    dst
}

/// The byte fill `core` emits calls to.
///
/// # Safety
/// As C's `memset`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: as memset; `rep stosb` stores al rcx times at rdi.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8,
             options(nostack, preserves_flags));
    }
    dst
}

/// The byte comparison `core` emits calls to (slice equality).
///
/// # Safety
/// As C's `memcmp`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: both regions hold `n` bytes (the caller's contract).
        let (x, y) = unsafe {
            (
                core::ptr::read_volatile(a.add(i)),
                core::ptr::read_volatile(b.add(i)),
            )
        };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// `bcmp`, which LLVM may call for equality-only comparisons.
///
/// # Safety
/// As C's `bcmp`.
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract as memcmp.
    unsafe { memcmp(a, b, n) }
}

/// The length of a C string, which LLVM may call for a NUL scan.
///
/// # Safety
/// As C's `strlen`.
#[unsafe(no_mangle)]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: `s` is NUL-terminated (the caller's contract).
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// Referenced by the prebuilt `core`'s unwind tables; never called (panics abort).
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}

#[panic_handler]
fn on_panic(_: &core::panic::PanicInfo) -> ! {
    fail(b"internal", 125)
}

fn exit(code: i32) -> ! {
    loop {
        sys_plain(SYS_EXIT_GROUP, code as usize, 0, 0);
    }
}

fn write_all(fd: usize, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for reads of its length.
        let n = unsafe { sys(SYS_WRITE, fd, buf.as_ptr() as usize, buf.len(), 0, 0, 0) };
        if n == -EINTR {
            continue;
        }
        if n <= 0 {
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Prints `EXEC-WORLD-FAIL <why>` as the first output line and exits with `code`.
fn fail(why: &[u8], code: i32) -> ! {
    let mut line = [0u8; 160];
    let mut w = Writer {
        buf: &mut line,
        len: 0,
    };
    w.put(b"EXEC-WORLD-FAIL ");
    w.put(why);
    w.put(b"\n");
    let len = w.len;
    write_all(1, &line[..len]);
    exit(code)
}

/// A bounded byte writer over a fixed buffer (what does not fit is dropped).
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn put(&mut self, s: &[u8]) {
        for &b in s {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn num(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.put(&digits[i..]);
    }
}

/// Memory for the strings and pointer arrays this run builds: one anonymous mapping,
/// handed out front to back.
struct Arena {
    base: *mut u8,
    cap: usize,
    used: usize,
}

impl Arena {
    fn new(cap: usize) -> Arena {
        // SAFETY: an anonymous private mapping; no pointer argument.
        let p = unsafe { sys(SYS_MMAP, 0, cap, 3, 0x22, usize::MAX, 0) };
        if p < 0 {
            fail(b"memory", 125);
        }
        Arena {
            base: p as *mut u8,
            cap,
            used: 0,
        }
    }

    /// `n` zeroed bytes aligned to 8.
    fn take(&mut self, n: usize) -> *mut u8 {
        let start = (self.used + 7) & !7;
        if start + n > self.cap {
            fail(b"memory", 125);
        }
        self.used = start + n;
        // SAFETY: `start + n <= cap`, inside the mapping.
        unsafe { self.base.add(start) }
    }

    /// The concatenation of `parts`, NUL-terminated; returns the bytes without the NUL.
    fn join(&mut self, parts: &[&[u8]]) -> &'static [u8] {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let p = self.take(len + 1);
        let mut at = 0;
        for part in parts {
            // SAFETY: `p` has room for `len + 1` bytes; the parts do not overlap it.
            unsafe { memcpy(p.add(at), part.as_ptr(), part.len()) };
            at += part.len();
        }
        // SAFETY: the mapping lives until exec or exit.
        unsafe { core::slice::from_raw_parts(p, len) }
    }
}

/// A list of C string pointers, NULL-terminated (argv and envp for `execve`).
struct CList {
    ptrs: *mut *const u8,
    len: usize,
    cap: usize,
}

impl CList {
    fn new(arena: &mut Arena, cap: usize) -> CList {
        CList {
            ptrs: arena.take((cap + 1) * 8) as *mut *const u8,
            len: 0,
            cap,
        }
    }

    /// Adds `s`, which must be followed by a NUL in memory.
    fn push(&mut self, s: &[u8]) {
        if self.len == self.cap {
            fail(b"memory", 125);
        }
        // SAFETY: `len < cap`; the array has `cap + 1` slots, the last stays NULL.
        unsafe { *self.ptrs.add(self.len) = s.as_ptr() };
        self.len += 1;
    }

    fn get(&self, i: usize) -> &'static [u8] {
        // SAFETY: `i < len`: a pushed, NUL-terminated string.
        unsafe { cstr(*self.ptrs.add(i)) }
    }
}

/// The bytes of the C string at `p` (without its NUL).
///
/// # Safety
/// `p` points to a NUL-terminated string that lives for the rest of the run.
unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // SAFETY: the string ends in a NUL (the caller's contract).
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

fn open(path: &[u8], flags: usize) -> isize {
    // SAFETY: `path` is NUL-terminated (arena strings and argv strings are).
    unsafe {
        sys(
            SYS_OPENAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            flags | O_CLOEXEC,
            0,
            0,
            0,
        )
    }
}

fn read(fd: isize, buf: &mut [u8]) -> isize {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe {
            sys(
                SYS_READ,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
                0,
                0,
            )
        };
        if n != -EINTR {
            return n;
        }
    }
}

fn close(fd: isize) {
    sys_plain(SYS_CLOSE, fd as usize, 0, 0);
}

/// The mode bits of `path` (following symlinks, as `[ -e ]` does), or `None`.
fn stat_mode(path: &[u8]) -> Option<u32> {
    let mut st = [0u64; 18];
    // SAFETY: `path` is NUL-terminated; `st` has room for a `struct stat` (144 bytes).
    let r = unsafe {
        sys(
            SYS_NEWFSTATAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            st.as_mut_ptr() as usize,
            0,
            0,
            0,
        )
    };
    (r == 0).then_some((st[3] & 0xffff_ffff) as u32)
}

fn executable(path: &[u8]) -> bool {
    // SAFETY: `path` is NUL-terminated.
    unsafe {
        sys(
            SYS_FACCESSAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            X_OK,
            0,
            0,
            0,
        ) == 0
    }
}

fn parse_num(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(c - b'0');
    }
    Some(v)
}

fn strip_prefix<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && &s[..prefix.len()] == prefix).then(|| &s[prefix.len()..])
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// exec-world's scrub decision (`exec_world::env_scrub::is_scrubbed`) for `name=value`.
fn scrubbed(name: &[u8], value: &[u8]) -> bool {
    if scrub_list::NAME_FRAGMENTS
        .iter()
        .any(|f| contains(name, f.as_bytes()))
        || scrub_list::NAME_SUFFIXES.iter().any(|s| {
            name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
        })
        || scrub_list::INTERNAL_PREFIXES
            .iter()
            .any(|p| strip_prefix(name, p.as_bytes()).is_some())
    {
        return true;
    }
    // A URL with a password: `scheme://user:pw@host…` in any `://` segment.
    let mut rest = value;
    while let Some(i) = rest.windows(3).position(|w| w == b"://") {
        rest = &rest[i + 3..];
        let authority = &rest[..rest.iter().position(|&c| c == b'/').unwrap_or(rest.len())];
        if let Some(at) = authority.iter().rposition(|&c| c == b'@') {
            if authority[..at].contains(&b':') {
                return true;
            }
        }
    }
    false
}

/// The name of a `NAME=VALUE` entry (all of it without `=`).
fn name_of(entry: &[u8]) -> &[u8] {
    &entry[..entry.iter().position(|&c| c == b'=').unwrap_or(entry.len())]
}

/// Joins the cgroup `mount + own cgroup + / + name` (or `name.<pid>` when that one still
/// has a live member); returns its directory.
fn join_cgroup(arena: &mut Arena, mount: &[u8], name: &[u8], pid: &[u8]) -> &'static [u8] {
    let mut buf = [0u8; 4096];
    let fd = open(b"/proc/self/cgroup\0", O_RDONLY);
    if fd < 0 {
        fail(b"cgroup", 125);
    }
    let n = read(fd, &mut buf);
    close(fd);
    if n <= 0 {
        fail(b"cgroup", 125);
    }
    let text = &buf[..n as usize];
    let mut base: &[u8] = b"";
    for line in text.split(|&c| c == b'\n') {
        if let Some(rest) = strip_prefix(line, b"0::") {
            base = rest;
        }
    }
    while let [head @ .., b'/'] = base {
        base = head;
    }
    let mut dir = arena.join(&[mount, base, b"/", name]);
    // SAFETY: `dir` is NUL-terminated (arena string).
    let made = unsafe {
        sys(
            SYS_MKDIRAT,
            AT_FDCWD as usize,
            dir.as_ptr() as usize,
            0o755,
            0,
            0,
            0,
        )
    };
    if made == -EEXIST {
        let procs = arena.join(&[dir, b"/cgroup.procs"]);
        let fd = open(procs, O_RDONLY);
        if fd < 0 {
            fail(b"cgroup", 125);
        }
        let mut one = [0u8; 16];
        let n = read(fd, &mut one);
        close(fd);
        if n != 0 {
            dir = arena.join(&[dir, b".", pid]);
            // SAFETY: as above.
            let r = unsafe {
                sys(
                    SYS_MKDIRAT,
                    AT_FDCWD as usize,
                    dir.as_ptr() as usize,
                    0o755,
                    0,
                    0,
                    0,
                )
            };
            if r != 0 {
                fail(b"cgroup", 125);
            }
        }
    } else if made != 0 {
        fail(b"cgroup", 125);
    }
    let procs = arena.join(&[dir, b"/cgroup.procs"]);
    let fd = open(procs, O_WRONLY);
    if fd < 0 {
        fail(b"cgroup", 125);
    }
    // SAFETY: `pid` is valid for reads of its length.
    let w = unsafe {
        sys(
            SYS_WRITE,
            fd as usize,
            pid.as_ptr() as usize,
            pid.len(),
            0,
            0,
            0,
        )
    };
    close(fd);
    if w != pid.len() as isize {
        fail(b"cgroup", 125);
    }
    dir
}

/// Drops to `uid`/`gid` with the supplementary `groups` (comma-separated numbers).
fn drop_to(arena: &mut Arena, uid: &[u8], gid: &[u8], groups: &[u8]) {
    let (Some(uid), Some(gid)) = (parse_num(uid), parse_num(gid)) else {
        fail(b"ids", 125)
    };
    let count = if groups.is_empty() {
        0
    } else {
        groups.split(|&c| c == b',').count()
    };
    let list = arena.take(count.max(1) * 4) as *mut u32;
    for (i, g) in groups.split(|&c| c == b',').take(count).enumerate() {
        let Some(g) = parse_num(g) else {
            fail(b"ids", 125)
        };
        // SAFETY: `i < count`, the list holds `count` slots.
        unsafe { *list.add(i) = g as u32 };
    }
    // SAFETY: `list` holds `count` gids; the id calls take plain numbers.
    let ok = unsafe { sys(SYS_SETGROUPS, count, list as usize, 0, 0, 0, 0) } == 0
        && sys_plain(SYS_SETRESGID, gid as usize, gid as usize, gid as usize) == 0
        && sys_plain(SYS_SETRESUID, uid as usize, uid as usize, uid as usize) == 0;
    if !ok {
        fail(b"drop", 125);
    }
}

/// The parent of a forced fork: waits for `child` and ends as it did.
fn wait_and_mirror(child: isize) -> ! {
    let mut status: i32 = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let r = unsafe {
            sys(
                SYS_WAIT4,
                child as usize,
                &mut status as *mut i32 as usize,
                0,
                0,
                0,
                0,
            )
        };
        if r == child {
            break;
        }
        if r != -EINTR {
            exit(125);
        }
    }
    let sig = status & 0x7f;
    if sig == 0 {
        exit((status >> 8) & 0xff);
    }
    // Die of the same signal, without a core file.
    let no_core = [0u64; 2];
    let default_action = [0u64; 4];
    let set: u64 = 1 << (sig - 1);
    // SAFETY: valid pointers to a zero rlimit, a SIG_DFL sigaction and a signal set.
    unsafe {
        sys(SYS_SETRLIMIT, 4, no_core.as_ptr() as usize, 0, 0, 0, 0);
        sys(
            SYS_RT_SIGACTION,
            sig as usize,
            default_action.as_ptr() as usize,
            0,
            8,
            0,
            0,
        );
        sys(
            SYS_RT_SIGPROCMASK,
            1,
            &set as *const u64 as usize,
            0,
            8,
            0,
            0,
        );
    }
    sys_plain(
        SYS_KILL,
        sys_plain(SYS_GETPID, 0, 0, 0) as usize,
        sig as usize,
        0,
    );
    exit(128 + sig)
}

/// Entry point (from `_start`): `sp` is the initial stack (argc, argv…, NULL, envp…, NULL).
///
/// # Safety
/// Called once by `_start` with the kernel's initial stack pointer.
#[unsafe(no_mangle)]
unsafe extern "C" fn helper_main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack layout.
    let (argc, argv, envp) = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        (argc, argv, argv.add(argc + 1))
    };
    // SAFETY: argv holds argc strings.
    let arg = |i: usize| -> &'static [u8] { unsafe { cstr(*argv.add(i)) } };
    let mut envc = 0;
    // SAFETY: envp is NULL-terminated.
    while unsafe { !(*envp.add(envc)).is_null() } {
        envc += 1;
    }
    if argc == 2 && arg(1) == b"--probe" {
        write_all(1, b"exec-world-spawn 1\n");
        exit(0);
    }
    let mut bytes = 4096;
    for i in 0..argc {
        bytes += arg(i).len() + 1;
    }
    for i in 0..envc {
        // SAFETY: i < envc.
        bytes += unsafe { cstr(*envp.add(i)) }.len() + 1;
    }
    // Room for every string rebuilt at most a few times (PATH entries joined with the
    // program name, the fixed variables) and both pointer lists.
    let mut arena = Arena::new(bytes * 4 + (argc + envc + 32) * 16);

    let first = if argc >= 2 { Some(arg(1)) } else { None };
    let (root, user_at) = match (argc, first) {
        (n, Some(b"--root")) if n >= 7 => (true, 7),
        (n, Some(b"--user")) if n >= 2 => (false, 2),
        _ => fail(b"usage", 125),
    };

    // A session of its own; envd made us a group leader: fork, as `setsid -w` does.
    if sys_plain(SYS_SETSID, 0, 0, 0) == -EPERM {
        let child = sys_plain(SYS_FORK, 0, 0, 0);
        if child < 0 {
            fail(b"fork", 125);
        }
        if child > 0 {
            wait_and_mirror(child);
        }
        if sys_plain(SYS_SETSID, 0, 0, 0) < 0 {
            fail(b"setsid", 125);
        }
    }
    let pid = sys_plain(SYS_GETPID, 0, 0, 0);
    let mut pid_buf = [0u8; 24];
    let mut w = Writer {
        buf: &mut pid_buf,
        len: 0,
    };
    w.num(pid as u64);
    let pid_len = w.len;
    let pid_text = arena.join(&[&pid_buf[..pid_len]]);

    let mut cgroup: &[u8] = b"";
    if root {
        cgroup = join_cgroup(&mut arena, arg(2), arg(3), pid_text);
        if !arg(4).is_empty() {
            drop_to(&mut arena, arg(4), arg(5), arg(6));
        }
    }
    if sys_plain(SYS_GETPGID, 0, 0, 0) != pid || sys_plain(SYS_GETSID, 0, 0, 0) != pid {
        fail(b"session", 125);
    }

    // USERARGS: MODE TERM HOME SHELL USER PATH FAST NENV K=V… PROGRAM ARGS…
    if argc < user_at + 9 {
        fail(b"usage", 125);
    }
    let u = |i: usize| arg(user_at + i);
    let (mode, term, home, shell, user, envd_path) = (u(0), u(1), u(2), u(3), u(4), u(5));
    let Some(nenv) = parse_num(u(7)).map(|n| n as usize) else {
        fail(b"usage", 125)
    };
    let prog_at = user_at + 8 + nenv;
    if prog_at >= argc {
        fail(b"usage", 125);
    }
    let inherit = mode == b"inherit";
    let base = mode == b"base";
    if !inherit && !base && mode != b"clean" {
        fail(b"usage", 125);
    }

    // The environment: explicit variables first (they win), then the mode's fixed ones,
    // then (inherit) envd's own, each name once.
    let mut env = CList::new(&mut arena, nenv + envc + 8);
    let add = |env: &mut CList, entry: &'static [u8]| {
        let name = name_of(entry);
        if !(0..env.len).any(|i| name_of(env.get(i)) == name) {
            env.push(entry);
        }
    };
    for i in 0..nenv {
        add(&mut env, arg(user_at + 8 + i));
    }
    let inherited = |name: &[u8]| -> Option<&'static [u8]> {
        (0..envc).find_map(|i| {
            // SAFETY: i < envc.
            let e = unsafe { cstr(*envp.add(i)) };
            (name_of(e) == name).then(|| &e[name.len() + 1..])
        })
    };
    if base || inherit {
        add(&mut env, arena.join(&[b"HOME=", home]));
        add(&mut env, arena.join(&[b"USER=", user]));
        add(&mut env, arena.join(&[b"LOGNAME=", user]));
    }
    if base {
        add(&mut env, arena.join(&[b"PATH=", envd_path]));
        add(&mut env, arena.join(&[b"SHELL=", shell]));
        let lang = inherited(b"LANG")
            .filter(|l| !l.is_empty())
            .unwrap_or(b"C.UTF-8");
        add(&mut env, arena.join(&[b"LANG=", lang]));
    }
    if term == b"1" && (base || inherit) {
        let t = if inherit {
            inherited(b"TERM").filter(|t| !t.is_empty())
        } else {
            None
        };
        add(
            &mut env,
            arena.join(&[b"TERM=", t.unwrap_or(b"xterm-256color")]),
        );
    }
    if inherit {
        for i in 0..envc {
            // SAFETY: i < envc.
            let e = unsafe { cstr(*envp.add(i)) };
            let name = name_of(e);
            if name.len() < e.len() && !scrubbed(name, &e[name.len() + 1..]) {
                add(&mut env, e);
            }
        }
    }

    // The program, looked up in that environment's PATH with the user's rights.
    let prog = arg(prog_at);
    let path = (0..env.len)
        .map(|i| env.get(i))
        .find_map(|e| strip_prefix(e, b"PATH="))
        .unwrap_or(b"/bin:/usr/bin");
    let mut seen = false;
    let mut found = false;
    let mut check = |candidate: &[u8]| {
        if let Some(mode) = stat_mode(candidate) {
            seen = true;
            found = mode & S_IFMT == S_IFREG && executable(candidate);
        }
        found
    };
    let exe: &'static [u8] = if prog.contains(&b'/') {
        check(prog);
        prog
    } else {
        // One buffer for every candidate `DIR/PROGRAM`: the last one built is the find.
        let buf = arena.take(path.len() + prog.len() + 3);
        let mut candidate: &'static [u8] = b"";
        for dir in path.split(|&c| c == b':') {
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let len = dir.len() + 1 + prog.len();
            // SAFETY: `buf` has room for any `DIR/PROGRAM` plus its NUL.
            candidate = unsafe {
                memcpy(buf, dir.as_ptr(), dir.len());
                *buf.add(dir.len()) = b'/';
                memcpy(buf.add(dir.len() + 1), prog.as_ptr(), prog.len());
                *buf.add(len) = 0;
                core::slice::from_raw_parts(buf, len)
            };
            if check(candidate) {
                break;
            }
        }
        candidate
    };
    if !found {
        if seen {
            fail(b"eacces", 126)
        }
        fail(b"enoent", 127)
    }

    let mut argv_out = CList::new(&mut arena, argc - prog_at + 2);
    for i in prog_at..argc {
        argv_out.push(arg(i));
    }
    let header = arena.join(&[b"EXEC-WORLD-PGID ", pid_text, b" ", cgroup, b"\n"]);
    write_all(1, header);
    // SAFETY: NUL-terminated path, NULL-terminated argv and envp.
    let mut r = unsafe {
        sys(
            SYS_EXECVE,
            exe.as_ptr() as usize,
            argv_out.ptrs as usize,
            env.ptrs as usize,
            0,
            0,
            0,
        )
    };
    if r == -ENOEXEC {
        // No shebang: run it with /bin/sh, as execvp and the shell do.
        let mut sh_argv = CList::new(&mut arena, argc - prog_at + 3);
        sh_argv.push(b"/bin/sh\0");
        sh_argv.push(exe);
        for i in prog_at + 1..argc {
            sh_argv.push(arg(i));
        }
        // SAFETY: as above.
        r = unsafe {
            sys(
                SYS_EXECVE,
                b"/bin/sh\0".as_ptr() as usize,
                sh_argv.ptrs as usize,
                env.ptrs as usize,
                0,
                0,
                0,
            )
        };
    }
    let mut msg = [0u8; 256];
    let mut w = Writer {
        buf: &mut msg,
        len: 0,
    };
    w.put(b"exec-world-spawn: cannot run ");
    w.put(prog);
    w.put(b": error ");
    w.num(r.unsigned_abs() as u64);
    w.put(b"\n");
    let len = w.len;
    write_all(2, &msg[..len]);
    exit(if r == -2 { 127 } else { 126 })
}
