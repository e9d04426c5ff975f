//! The x86_64 `clone3` call of `launch.rs`: the kernel's `clone_args`, the child's own
//! stack (with a guard page, kept per thread) and the few lines of assembly that start
//! the child on it.

use super::*;

/// The child's stack size (it makes a handful of calls before `exec`).
const STACK: usize = 64 * 1024;
/// A guard page below it.
const GUARD: usize = 4096;

/// A child's stack with a guard page below it, unmapped on drop. With `CLONE_VFORK`
/// `clone3` returns only once the child has exec'd or exited, so one stack serves every
/// child its owner starts (`launch` keeps one per thread).
///
/// ```
/// let stack = exec_world_sys::launch::ChildStack::new().unwrap();
/// let mut args = exec_world_sys::launch::CloneArgs::default();
/// stack.set_on(&mut args);
/// assert!(args.stack != 0 && args.stack_size > 0);
/// ```
pub struct ChildStack(*mut c_void);

// SAFETY: a private mapping owned by the value; nothing else refers to it.
unsafe impl Send for ChildStack {}

impl ChildStack {
    /// Maps a fresh stack.
    pub fn new() -> io::Result<ChildStack> {
        // SAFETY: a fresh anonymous private mapping; the guard page is made
        // inaccessible before any use.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                GUARD + STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = ChildStack(p);
            if libc::mprotect(p, GUARD, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// Names this stack (the usable part, above the guard page) in `args`.
    pub fn set_on(&self, args: &mut CloneArgs) {
        args.stack = self.0 as u64 + GUARD as u64;
        args.stack_size = STACK as u64;
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, no longer in use.
        unsafe { libc::munmap(self.0, GUARD + STACK) };
    }
}

thread_local! {
    static STACKS: std::cell::RefCell<Option<ChildStack>> = const { std::cell::RefCell::new(None) };
}

/// `clone3(args)`; in the child, `f(arg)` on the stack `args` names (never returns).
/// Returns what the system call returned in the parent (the child's pid, or `-errno`).
///
/// # Safety
/// `args` must name a valid stack (16-byte aligned top, see [`ChildStack::set_on`]) that
/// no other child uses meanwhile, and `f` must never return. With `CLONE_VM`, `f` runs
/// on our memory while any other thread of ours may be anywhere: raw system calls only.
pub unsafe fn clone3_entry(
    args: &mut CloneArgs,
    f: unsafe extern "C" fn(*mut c_void) -> !,
    arg: *mut c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: the raw clone3 system call. In the parent it behaves as a plain system
    // call (rax: result; rcx, r11 clobbered; memory written: the pidfd). In the child
    // (rax = 0) the stack pointer is the new stack's top: it calls f(arg), which
    // never returns (ud2 guards that), so the child never runs the code after this
    // block or touches the parent's stack.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") f,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

pub(super) fn run(
    p: &Prepared,
    stdio: Stdio,
    cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<Outcome> {
    let ptrs = |v: &[CString]| -> Vec<*const c_char> {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let candidates = ptrs(&p.candidates);
    let argv = ptrs(&p.argv);
    let envp = ptrs(&p.env);
    let sh = c"/bin/sh";
    let mut sh_argv: Vec<*const c_char> = vec![sh.as_ptr(), std::ptr::null()];
    sh_argv.extend(argv.iter().skip(1));
    let child = ChildArgs {
        candidates: candidates.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        sh_argv: sh_argv.as_mut_ptr(),
        cwd: p.cwd.as_ptr(),
        stdio: [
            stdio.child[0].as_raw_fd(),
            stdio.child[1].as_raw_fd(),
            stdio.child[2].as_raw_fd(),
        ],
        error: AtomicI32::new(0),
    };
    let mut pidfd: c_int = -1;
    let ret = STACKS.with(|cell| -> io::Result<i64> {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(ChildStack::new()?);
        }
        let mut args = CloneArgs::with_pidfd(&mut pidfd);
        args.flags |= CLONE_VM | CLONE_VFORK;
        if let Some(stack) = slot.as_ref() {
            stack.set_on(&mut args);
        }
        if let Some(cg) = cgroup {
            args.born_in(cg.as_raw_fd());
        }
        // SAFETY: the stack is ours, mapped and unused (CLONE_VFORK: the previous
        // child of this thread is gone or exec'd); child_main never returns and
        // reads only `child`, which lives until clone3 returned here.
        Ok(unsafe {
            clone3_entry(
                &mut args,
                child_main,
                &child as *const ChildArgs as *mut c_void,
            )
        })
    })?;
    if ret < 0 {
        let e = -ret as c_int;
        if matches!(e, libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL) {
            // No clone3 (or not these flags) here: std's spawn from now on.
            if e == libc::ENOSYS || e == libc::EPERM {
                REFUSED.store(true, Ordering::Relaxed);
            }
            return Ok(Outcome::Unsupported);
        }
        if cgroup.is_some() {
            // The cgroup refused the child (e.g. a controller's limit): let the
            // fallback report it or place the child its own way.
            return Ok(Outcome::Unsupported);
        }
        return Err(io::Error::from_raw_os_error(e));
    }
    let pid = ret as u32;
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let failed = child.error.load(Ordering::Relaxed);
    if failed != RAN {
        // It exited before exec (127), or was killed before it ran: reap it.
        let mut status = 0;
        // SAFETY: waitpid(2) on the child just created; valid out pointer.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if failed == 0 {
            return Ok(Outcome::Unborn);
        }
        return Err(io::Error::from_raw_os_error(failed));
    }
    // The child's ends (`stdio.child`) close here, so EOF comes once its copies go.
    Ok(Outcome::Started(Launched {
        pid,
        pidfd,
        stdin: stdio.stdin,
        stdout: stdio.stdout,
        stderr: stdio.stderr,
    }))
}
