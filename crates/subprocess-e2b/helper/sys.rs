//! Raw Linux x86_64 system calls, the few C symbols `core` calls (no libc here), and the
//! file and exit helpers built on them.

use core::arch::asm;

pub(crate) const SYS_READ: usize = 0;
pub(crate) const SYS_WRITE: usize = 1;
pub(crate) const SYS_CLOSE: usize = 3;
pub(crate) const SYS_MMAP: usize = 9;
pub(crate) const SYS_RT_SIGACTION: usize = 13;
pub(crate) const SYS_RT_SIGPROCMASK: usize = 14;
pub(crate) const SYS_GETPID: usize = 39;
pub(crate) const SYS_FORK: usize = 57;
pub(crate) const SYS_EXECVE: usize = 59;
pub(crate) const SYS_WAIT4: usize = 61;
pub(crate) const SYS_KILL: usize = 62;
pub(crate) const SYS_SETSID: usize = 112;
pub(crate) const SYS_SETGROUPS: usize = 116;
pub(crate) const SYS_SETRESUID: usize = 117;
pub(crate) const SYS_SETRESGID: usize = 119;
pub(crate) const SYS_GETPGID: usize = 121;
pub(crate) const SYS_GETSID: usize = 124;
pub(crate) const SYS_RT_SIGTIMEDWAIT: usize = 128;
pub(crate) const SYS_SETRLIMIT: usize = 160;
pub(crate) const SYS_CLOCK_GETTIME: usize = 228;
pub(crate) const SYS_CLOCK_NANOSLEEP: usize = 230;
pub(crate) const SYS_EXIT_GROUP: usize = 231;
pub(crate) const SYS_OPENAT: usize = 257;
pub(crate) const SYS_MKDIRAT: usize = 258;
pub(crate) const SYS_NEWFSTATAT: usize = 262;
pub(crate) const SYS_FACCESSAT: usize = 269;

pub(crate) const AT_FDCWD: isize = -100;
pub(crate) const O_RDONLY: usize = 0;
pub(crate) const O_WRONLY: usize = 1;
pub(crate) const O_CLOEXEC: usize = 0o2000000;
pub(crate) const EPERM: isize = 1;
pub(crate) const EINTR: isize = 4;
pub(crate) const ENOEXEC: isize = 8;
pub(crate) const ESRCH: isize = 3;
pub(crate) const EEXIST: isize = 17;
pub(crate) const SIGKILL: usize = 9;
pub(crate) const SIGCHLD: usize = 17;
pub(crate) const SIG_BLOCK: usize = 0;
pub(crate) const SIG_UNBLOCK: usize = 1;
pub(crate) const WNOHANG: usize = 1;
pub(crate) const CLOCK_MONOTONIC: usize = 1;
pub(crate) const TIMER_ABSTIME: usize = 1;
pub(crate) const S_IFMT: u32 = 0o170000;
pub(crate) const S_IFREG: u32 = 0o100000;
pub(crate) const X_OK: usize = 1;

/// One raw system call; a negative result is `-errno`.
///
/// # Safety
/// The arguments must be valid for system call `n`.
pub(crate) unsafe fn sys(
    n: usize,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> isize {
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
pub(crate) fn sys_plain(n: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: only called with calls whose arguments are plain numbers.
    unsafe { sys(n, a, b, c, 0, 0, 0) }
}

/// The byte copy `core` emits calls to (no libc here).
///
/// # Safety
/// As C's `memcpy`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
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
pub(crate) fn on_panic(_: &core::panic::PanicInfo) -> ! {
    fail(b"internal", 125)
}

/// Resets signal `sig` to its default action (`SIG_DFL`).
pub(crate) fn default_action(sig: usize) {
    let action = [0u64; 4];
    // SAFETY: a valid pointer to a zeroed (SIG_DFL) kernel sigaction.
    unsafe { sys(SYS_RT_SIGACTION, sig, action.as_ptr() as usize, 0, 8, 0, 0) };
}

/// `rt_sigprocmask(how, {sig})`: blocks (`SIG_BLOCK`) or unblocks (`SIG_UNBLOCK`) `sig`.
pub(crate) fn mask(how: usize, sig: usize) {
    let set: u64 = 1 << (sig - 1);
    // SAFETY: a valid pointer to a signal set.
    unsafe {
        sys(
            SYS_RT_SIGPROCMASK,
            how,
            &set as *const u64 as usize,
            0,
            8,
            0,
            0,
        )
    };
}

pub(crate) fn exit(code: i32) -> ! {
    loop {
        sys_plain(SYS_EXIT_GROUP, code as usize, 0, 0);
    }
}

pub(crate) fn write_all(fd: usize, mut buf: &[u8]) {
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

/// Writes the concatenation of `parts` (its first 256 bytes) to `fd` in one `write`.
pub(crate) fn write_line(fd: usize, parts: &[&[u8]]) {
    let mut line = [0u8; 256];
    let mut len = 0;
    for &b in parts.iter().flat_map(|p| p.iter()) {
        if len < line.len() {
            line[len] = b;
            len += 1;
        }
    }
    write_all(fd, &line[..len]);
}

/// Prints `EXEC-WORLD-FAIL <why>` as the first output line and exits with `code`.
pub(crate) fn fail(why: &[u8], code: i32) -> ! {
    write_line(1, &[b"EXEC-WORLD-FAIL ", why, b"\n"]);
    exit(code)
}

/// The first bytes of the file `path` (NUL-terminated) into `buf`: the count, or
/// `-errno`.
pub(crate) fn read_start(path: &[u8], buf: &mut [u8]) -> isize {
    let fd = open(path, O_RDONLY);
    if fd < 0 {
        return fd;
    }
    let n = read(fd, buf);
    close(fd);
    n
}

/// `mkdir(path, 0755)`; `path` must be NUL-terminated.
pub(crate) fn mkdir(path: &[u8]) -> isize {
    // SAFETY: `path` is NUL-terminated (the caller's contract: arena strings are).
    unsafe {
        sys(
            SYS_MKDIRAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            0o755,
            0,
            0,
            0,
        )
    }
}

/// One `write` of `buf` to `fd`.
pub(crate) fn write(fd: isize, buf: &[u8]) -> isize {
    // SAFETY: `buf` is valid for reads of its length.
    unsafe {
        sys(
            SYS_WRITE,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
            0,
            0,
            0,
        )
    }
}

pub(crate) fn open(path: &[u8], flags: usize) -> isize {
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

pub(crate) fn read(fd: isize, buf: &mut [u8]) -> isize {
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

pub(crate) fn close(fd: isize) {
    sys_plain(SYS_CLOSE, fd as usize, 0, 0);
}

/// The mode bits of `path` (following symlinks, as `[ -e ]` does), or `None`.
pub(crate) fn stat_mode(path: &[u8]) -> Option<u32> {
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

pub(crate) fn executable(path: &[u8]) -> bool {
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
