//! Giving back, in the starters' maker, the memory it was forked with: every private
//! anonymous mapping of the emulator it will never touch, found in `/proc/self/maps`.

use std::ffi::c_void;
use std::os::fd::RawFd;

/// In the maker, once: unmap every private anonymous mapping it will never touch (the
/// emulator's heaps, other threads' stacks, buffers) and the main thread's stack (which
/// holds the emulator's environment: the host's, credentials included), so it keeps no
/// copy of the emulator's memory as the emulator changes it. Kept: mappings of files
/// (the program and its libraries), an anonymous mapping right after a file's (a
/// `.bss`), the other special ones (`[vdso]`, `[vvar]`, …), and the mappings holding our
/// stack and our thread pointer (TLS). The program is linked with immediate binding (no
/// lazy symbol resolution touches the loader's heap later).
///
/// # Safety
/// In the maker only, before anything of what it unmaps is used again.
pub(super) unsafe fn trim(maps: RawFd) {
    let marker = 0u8;
    let sp = &marker as *const u8 as usize;
    let mut fs: usize = 0;
    // SAFETY: arch_prctl reads our thread pointer into a local; the rest reads our maps
    // into locals and unmaps what the doc comment names.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        libc::syscall(
            libc::SYS_arch_prctl,
            0x1003, /* ARCH_GET_FS */
            &mut fs as *mut usize,
        );
        loop {
            let mut doomed = [(0usize, 0usize); 256];
            let mut count = 0;
            let mut full = false;
            libc::lseek(maps, 0, libc::SEEK_SET);
            let mut chunk = [0u8; 4096];
            let mut line = [0u8; 256];
            let mut line_len = 0;
            let mut prev_file_end = 0usize;
            'read: loop {
                let n = libc::read(maps, chunk.as_mut_ptr().cast(), chunk.len());
                if n <= 0 {
                    break;
                }
                for &b in chunk.get(..n as usize).unwrap_or(&[]) {
                    if b != b'\n' {
                        if line_len < line.len() {
                            line[line_len] = b;
                            line_len += 1;
                        }
                        continue;
                    }
                    let m = parse(line.get(..line_len).unwrap_or(&[]));
                    line_len = 0;
                    let Some((start, end, kind)) = m else {
                        continue;
                    };
                    let mine = (start <= sp && sp < end) || (start <= fs && fs < end);
                    let bss = kind == Kind::Anon && start == prev_file_end;
                    prev_file_end = if kind == Kind::File { end } else { 0 };
                    if mine || bss || !matches!(kind, Kind::Anon | Kind::Heap | Kind::MainStack) {
                        continue;
                    }
                    if count == doomed.len() {
                        full = true;
                        break 'read;
                    }
                    doomed[count] = (start, end);
                    count += 1;
                }
            }
            for &(start, end) in doomed.get(..count).unwrap_or(&[]) {
                libc::munmap(start as *mut c_void, end - start);
            }
            if !full {
                return;
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Anonymous, no name.
    Anon,
    /// `[heap]`.
    Heap,
    /// `[stack]`: the main thread's, with the program's arguments and environment.
    MainStack,
    /// A file's.
    File,
    /// `[vdso]`, `[vvar]`, …
    Special,
}

/// One line of `/proc/self/maps`: `start-end perms offset dev inode [name]`.
fn parse(line: &[u8]) -> Option<(usize, usize, Kind)> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(range.get(..dash)?)?;
    let end = hex(range.get(dash + 1..)?)?;
    let kind = match fields.nth(4).and_then(|name| name.first()) {
        None => Kind::Anon,
        Some(b'/') => Kind::File,
        Some(b'[') if line.ends_with(b"[heap]") => Kind::Heap,
        Some(b'[') if line.ends_with(b"[stack]") => Kind::MainStack,
        Some(b'[') => Kind::Special,
        // Other names (`anon_inode:…`, `/memfd:…` starts with '/'): keep.
        Some(_) => Kind::Special,
    };
    Some((start, end, kind))
}

fn hex(s: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for &b in s {
        let d = (b as char).to_digit(16)? as usize;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_is_read_as_its_range_and_kind() {
        let l = |s: &str| parse(s.as_bytes());
        assert_eq!(
            l("7f0000001000-7f0000003000 rw-p 00000000 00:00 0 ").map(|m| (m.0, m.1)),
            Some((0x7f00_0000_1000, 0x7f00_0000_3000))
        );
        assert!(l("55d0-55e0 rw-p 00000000 00:00 0").is_some_and(|m| m.2 == Kind::Anon));
        assert!(
            l("55d0-55e0 rw-p 00000000 00:00 0          [heap]").is_some_and(|m| m.2 == Kind::Heap)
        );
        assert!(
            l("55d0-55e0 r-xp 00000000 08:01 1234       /usr/lib/libc.so.6")
                .is_some_and(|m| m.2 == Kind::File)
        );
        assert!(l("55d0-55e0 r--p 00000000 00:00 0 [vvar]").is_some_and(|m| m.2 == Kind::Special));
        assert!(
            l("7ffd-7ffe rw-p 00000000 00:00 0 [stack]").is_some_and(|m| m.2 == Kind::MainStack)
        );
        assert_eq!(l("garbage"), None);
    }
}
