//! Memory without an allocator: decimal text in a stack buffer, one anonymous
//! mapping handed out front to back, C string lists for `execve`, and byte helpers.

use crate::sys::{SYS_MMAP, fail, memcpy, sys};

/// `v` in decimal, written at the end of `buf`.
pub(crate) fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Memory for the strings and pointer arrays this run builds: one anonymous mapping,
/// handed out front to back.
pub(crate) struct Arena {
    base: *mut u8,
    cap: usize,
    used: usize,
}

impl Arena {
    pub(crate) fn new(cap: usize) -> Arena {
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
    pub(crate) fn take(&mut self, n: usize) -> *mut u8 {
        let start = (self.used + 7) & !7;
        if start + n > self.cap {
            fail(b"memory", 125);
        }
        self.used = start + n;
        // SAFETY: `start + n <= cap`, inside the mapping.
        unsafe { self.base.add(start) }
    }

    /// The concatenation of `parts`, NUL-terminated; returns the bytes without the NUL.
    pub(crate) fn join(&mut self, parts: &[&[u8]]) -> &'static [u8] {
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
pub(crate) struct CList {
    pub(crate) ptrs: *mut *const u8,
    pub(crate) len: usize,
    cap: usize,
}

impl CList {
    pub(crate) fn new(arena: &mut Arena, cap: usize) -> CList {
        CList {
            ptrs: arena.take((cap + 1) * 8) as *mut *const u8,
            len: 0,
            cap,
        }
    }

    /// Adds `s`, which must be followed by a NUL in memory.
    pub(crate) fn push(&mut self, s: &[u8]) {
        if self.len == self.cap {
            fail(b"memory", 125);
        }
        // SAFETY: `len < cap`; the array has `cap + 1` slots, the last stays NULL.
        unsafe { *self.ptrs.add(self.len) = s.as_ptr() };
        self.len += 1;
    }

    pub(crate) fn get(&self, i: usize) -> &'static [u8] {
        // SAFETY: `i < len`: a pushed, NUL-terminated string.
        unsafe { cstr(*self.ptrs.add(i)) }
    }
}

/// The bytes of the C string at `p` (without its NUL).
///
/// # Safety
/// `p` points to a NUL-terminated string that lives for the rest of the run.
pub(crate) unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // SAFETY: the string ends in a NUL (the caller's contract).
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

pub(crate) fn parse_num(s: &[u8]) -> Option<u64> {
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

pub(crate) fn strip_prefix<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && &s[..prefix.len()] == prefix).then(|| &s[prefix.len()..])
}
