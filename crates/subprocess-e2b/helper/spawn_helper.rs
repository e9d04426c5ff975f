//! The native spawn helper: one small static program (Linux x86_64, no libc, raw system
//! calls, about 16 KB) that does in a single exec what the `sh` helper (`src/wrapper.rs`)
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
//! - `spawn --kill-after SECS --root|--user …`: as above, but the helper forks first and
//!   stays as the watching parent that kills the program's tree after SECS seconds
//!   (`backstop.rs`); the program runs in the child.
//! - `spawn [--kill-after SECS] --lease FILE SECS --root|--user …`: the watching parent
//!   also kills the tree once the host stopped renewing `FILE` for SECS (`lease.rs`);
//!   durable spawns are started without it.
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

use core::arch::global_asm;

mod backstop;
mod env;
mod lease;
mod mem;
mod process;
mod record;
mod sys;
mod tail;

use backstop::watch;
use env::{name_of, scrubbed};
use mem::{Arena, CList, cstr, decimal, parse_num, strip_prefix};
use process::{cgroup_dir, drop_to, enter_cgroup, wait_and_mirror};
use sys::*;

global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call helper_main",
    "ud2",
);

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
    let mut arena = Arena::new(bytes * 4 + (argc + envc + 32) * 16 + (256 << 10));
    // The record readers (`--tail`, `--list`, `--collect`) end here.
    tail::dispatch(argc, &arg, &mut arena);
    // `--durable STATE ID CAP META` first (the record), then `--kill-after SECS`.
    let (durable, at) = record::parse(argc, &arg, 1);
    let (kill_after, at) = match (argc, (argc > at + 1).then(|| arg(at))) {
        (n, Some(b"--kill-after")) if n >= at + 2 => match parse_num(arg(at + 1)) {
            Some(secs) => (Some(secs), at + 2),
            None => fail(b"usage", 125),
        },
        _ => (None, at),
    };
    // `--lease FILE SECS` next: the host lease.
    let (lease, at) = match lease::Lease::parse(&arg, argc, at) {
        Some((l, next)) => (Some(l), next),
        None => (None, at),
    };
    let first = if argc > at { Some(arg(at)) } else { None };
    let (root, user_at) = match (argc - at, first) {
        (n, Some(b"--root")) if n >= 6 => (true, at + 6),
        (n, Some(b"--user")) if n >= 1 => (false, at + 1),
        _ => fail(b"usage", 125),
    };

    // A durable spawn's record is made first: an id that exists runs nothing.
    let mut record = durable.as_ref().map(|d| record::create(d, &mut arena));
    // The cgroup is made before any fork, so that the backstop's parent knows it
    // (`--root` with an empty MOUNT: no cgroup, only the drop).
    let mut cgroup: &[u8] = b"";
    if root && !arg(at + 1).is_empty() {
        let own = sys_plain(SYS_GETPID, 0, 0, 0);
        let own_text = arena.join(&[decimal(own as u64, &mut [0u8; 20])]);
        cgroup = cgroup_dir(&mut arena, arg(at + 1), arg(at + 2), own_text);
    }

    // A session of its own. The backstop forks and stays as the watching parent; else,
    // when envd made us a group leader (`setsid` refused), fork as `setsid -w` does.
    if kill_after.is_some() || record.is_some() || lease.is_some() {
        let cgroup_kill: &[u8] = if cgroup.is_empty() {
            b""
        } else {
            arena.join(&[cgroup, b"/cgroup.kill"])
        };
        let child = sys_plain(SYS_FORK, 0, 0, 0);
        if child < 0 {
            fail(b"fork", 125);
        }
        match (child > 0, &mut record) {
            (true, Some(r)) => record::watch(r, child, kill_after, cgroup, cgroup_kill, &mut arena),
            (true, None) => watch(child, kill_after, cgroup_kill, lease),
            (false, Some(r)) => record::child_side(r),
            (false, None) => {}
        }
        if sys_plain(SYS_SETSID, 0, 0, 0) < 0 {
            fail(b"setsid", 125);
        }
    } else if sys_plain(SYS_SETSID, 0, 0, 0) == -EPERM {
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
    let pid_text = arena.join(&[decimal(pid as u64, &mut [0u8; 20])]);

    if root {
        if !cgroup.is_empty() {
            enter_cgroup(&mut arena, cgroup, pid_text);
        }
        if !arg(at + 3).is_empty() {
            drop_to(&mut arena, arg(at + 3), arg(at + 4), arg(at + 5));
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
    if let Some(r) = &record {
        record::redirect(r);
    }
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
        sh_argv.push(c"/bin/sh".to_bytes_with_nul());
        sh_argv.push(exe);
        for i in prog_at + 1..argc {
            sh_argv.push(arg(i));
        }
        // SAFETY: as above.
        r = unsafe {
            sys(
                SYS_EXECVE,
                c"/bin/sh".as_ptr() as usize,
                sh_argv.ptrs as usize,
                env.ptrs as usize,
                0,
                0,
                0,
            )
        };
    }
    let mut digits = [0u8; 20];
    let errno = decimal(r.unsigned_abs() as u64, &mut digits);
    write_line(
        2,
        &[
            b"exec-world-spawn: cannot run ",
            prog,
            b": error ",
            errno,
            b"\n",
        ],
    );
    exit(if r == -2 { 127 } else { 126 })
}
