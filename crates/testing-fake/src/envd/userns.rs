//! The sandbox's user namespace: root in a sandbox is an unprivileged uid on the host.
//!
//! Every isolated sandbox gets a user namespace that maps its ids `0..65536` to the host
//! range `HOST_BASE..HOST_BASE + 65536` (one range for all sandboxes; their other
//! namespaces keep them apart). Sandbox processes join it last, after the mount, network,
//! time and cgroup namespaces (all owned by the host's user namespace, so nothing in the
//! sandbox can remount, reconfigure or leave them): their capabilities, root's and sudo's
//! included, then reach only what that namespace owns, which is nothing of the host's.
//!
//! The host's system files (owned by host uid 0) reach the sandbox through an idmapped
//! mount with this namespace ([`super::rootfs`]), so they show as root's inside and
//! `sudo` accepts them; what the sandbox (or envd, through [`IdMap::host_id`]) writes is
//! stored on the host with the shifted ids.

use std::os::fd::OwnedFd;

/// First host uid (and gid) of the sandboxes' range: far above any account of the host.
pub(crate) const HOST_BASE: u32 = 2_000_000_000;
/// How many ids a sandbox has (`0..65536`, as a Linux system uses).
pub(crate) const RANGE: u32 = 65_536;
/// The id unmapped host ids show as inside (the kernel's overflow id, `nobody`).
const OVERFLOW: u32 = 65_534;

/// How a sandbox's ids are stored on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdMap {
    base: u32,
}

impl IdMap {
    /// No shift: the sandbox's ids are the host's (only without isolation).
    pub(crate) const IDENTITY: IdMap = IdMap { base: 0 };
    /// The isolated sandbox's map.
    pub(crate) const SANDBOX: IdMap = IdMap { base: HOST_BASE };

    /// The host id of sandbox id `id`.
    pub(crate) fn host_id(self, id: u32) -> u32 {
        if self.base == 0 || id >= RANGE {
            return id;
        }
        self.base + id
    }

    /// The sandbox id of host id `id` (`nobody` when the sandbox cannot name it).
    pub(crate) fn sandbox_id(self, id: u32) -> u32 {
        if self.base == 0 {
            id
        } else if (self.base..self.base + RANGE).contains(&id) {
            id - self.base
        } else {
            OVERFLOW
        }
    }
}

/// A new user namespace mapping `0..RANGE` to `map`'s host range (uids and gids), as
/// an open `/proc/<pid>/ns/user`. The emulator writes its maps (as root on the host, so
/// `setgroups` stays allowed, which `sudo` needs) and keeps the namespace alive with the
/// descriptor.
pub(crate) fn create(map: IdMap) -> std::io::Result<OwnedFd> {
    in_new_namespaces(libc::CLONE_NEWUSER, &|| 0, |pid| {
        let line = format!("0 {} {RANGE}\n", map.host_id(0));
        std::fs::write(format!("/proc/{pid}/uid_map"), &line)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), &line)?;
        Ok(OwnedFd::from(std::fs::File::open(format!(
            "/proc/{pid}/ns/user"
        ))?))
    })
}

/// Start a short-lived helper in new namespaces (`flags`, made by its clone) that runs
/// `setup` there (raw syscalls only, returning 0 or an errno), then call `then` with its
/// pid while it waits (to write its id maps, open its `/proc/<pid>/ns/*`), and reap it.
///
/// The helper runs on our memory (`clone3` with `CLONE_VM` and the namespaces in its
/// flags, on a stack of its own), not on a copy: a fork would copy the emulator's page
/// tables (about 1 ms at a busy emulator's size) and leave its memory copy-on-write
/// behind it, at every sandbox's boot. While it runs, the calling thread only waits on
/// its pipe; it writes nothing of our memory but its own stack and the calling thread's
/// `errno` (its thread-local storage is that thread's), which that thread reads only
/// once the helper is blocked on the pipe or gone.
pub(crate) fn in_new_namespaces<T>(
    flags: libc::c_int,
    setup: &(dyn Fn() -> libc::c_int + Sync),
    then: impl FnOnce(libc::pid_t) -> std::io::Result<T>,
) -> std::io::Result<T> {
    in_new_namespaces_born_in(None, flags, setup, then)
}

/// What a helper of [`in_new_namespaces_born_in`] reads, on the caller's stack.
struct Helper<'a> {
    setup: &'a (dyn Fn() -> libc::c_int + Sync),
    parent: libc::pid_t,
    /// Ours, closed in the helper's descriptor table.
    up_r: libc::c_int,
    down_w: libc::c_int,
    /// The helper's.
    up_w: libc::c_int,
    down_r: libc::c_int,
}

/// The helper: `setup`, its status on `up_w`;
/// then it waits for a byte on `down_r` and exits.
///
/// # Safety
/// Only as the entry of a `clone3` child; `arg` is the [`Helper`], alive until it exits.
unsafe extern "C" fn helper(arg: *mut std::ffi::c_void) -> ! {
    // SAFETY: raw syscalls on inherited fds (its own descriptor table: no CLONE_FILES),
    // then _exit; see above for `arg`.
    unsafe {
        let h = &*(arg as *const Helper<'_>);
        // It dies with the thread that started it (which waits for it), and holds no
        // copy of the parent's ends: a parent that dies mid-way (the emulator
        // interrupted during a create) leaves no helper blocked forever.
        libc::close(h.up_r);
        libc::close(h.down_w);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != h.parent {
            libc::_exit(1);
        }
        let status = (h.setup)() as u8;
        libc::write(h.up_w, (&status as *const u8).cast(), 1);
        let mut b = 0u8;
        while libc::read(h.down_r, (&mut b as *mut u8).cast(), 1) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::_exit(0);
    }
}

/// [`in_new_namespaces`] with a helper born in the cgroup v2 directory `cgroup`
/// (`CLONE_INTO_CGROUP`) when given: it joins no group by writing `cgroup.procs`, which
/// on a quiet host waits for an RCU grace period. A helper the kernel killed at birth
/// (see `exec_world_sys::launch::Outcome::Unborn`) reads as an error, as any helper that
/// died before it reported.
pub(crate) fn in_new_namespaces_born_in<T>(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    flags: libc::c_int,
    setup: &(dyn Fn() -> libc::c_int + Sync),
    then: impl FnOnce(libc::pid_t) -> std::io::Result<T>,
) -> std::io::Result<T> {
    use exec_world_sys::launch::{CLONE_VM, ChildStack, CloneArgs};
    use std::os::fd::AsRawFd;
    let (up_r, up_w) = exec_world_sys::launch::pipe()?;
    let (down_r, down_w) = exec_world_sys::launch::pipe()?;
    let stack = ChildStack::new()?;
    let frame = Helper {
        setup,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        up_r: up_r.as_raw_fd(),
        down_w: down_w.as_raw_fd(),
        up_w: up_w.as_raw_fd(),
        down_r: down_r.as_raw_fd(),
    };
    let mut args = CloneArgs {
        flags: CLONE_VM | flags as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cg) = cgroup {
        args.born_in(cg.as_raw_fd());
    }
    stack.set_on(&mut args);
    // SAFETY: a fresh stack only this helper uses, alive until it is reaped below;
    // `helper` never returns, reads only `frame` (alive as long) and makes raw system
    // calls; this thread touches nothing the helper uses until it is reaped.
    let ret = unsafe {
        exec_world_sys::launch::clone3_entry(
            &mut args,
            helper,
            &frame as *const Helper<'_> as *mut std::ffi::c_void,
        )
    };
    if ret < 0 {
        return Err(std::io::Error::from_raw_os_error((-ret) as i32));
    }
    let pid = ret as libc::pid_t;
    drop(up_w);
    drop(down_r);
    let result = (|| {
        let mut status = 0u8;
        // SAFETY: reading one byte into a local.
        let n = unsafe { libc::read(up_r.as_raw_fd(), (&mut status as *mut u8).cast(), 1) };
        if n != 1 {
            return Err(std::io::Error::other("namespace child died"));
        }
        if status != 0 {
            return Err(std::io::Error::from_raw_os_error(status.into()));
        }
        then(pid)
    })();
    // Released by a byte, not by EOF: a process forked meanwhile by another thread may
    // hold a copy of the write end.
    // SAFETY: one byte from a local to our pipe.
    unsafe { libc::write(down_w.as_raw_fd(), b"g".as_ptr().cast(), 1) };
    drop(down_w);
    // SAFETY: reaping our own child (its stack and frame outlive it).
    unsafe {
        let mut st = 0;
        while libc::waitpid(pid, &mut st, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
    }
    drop(stack);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_shift_into_the_range_and_back() {
        let m = IdMap::SANDBOX;
        assert_eq!(m.host_id(0), HOST_BASE);
        assert_eq!(m.host_id(1000), HOST_BASE + 1000);
        assert_eq!(m.sandbox_id(HOST_BASE + 1000), 1000);
        assert_eq!(m.sandbox_id(0), OVERFLOW);
        assert_eq!(IdMap::IDENTITY.host_id(5), 5);
        assert_eq!(IdMap::IDENTITY.sandbox_id(5), 5);
    }

    /// Needs root (a user namespace with maps written by the host's root).
    #[test]
    fn a_helper_runs_in_its_new_namespaces_on_our_memory() {
        use std::os::unix::fs::MetadataExt;
        use std::sync::atomic::{AtomicI32, Ordering};
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root");
            return;
        }
        static SEEN: AtomicI32 = AtomicI32::new(0);
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        let (pid, net) = in_new_namespaces(
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
            // SAFETY: getpid has no preconditions.
            &|| {
                SEEN.store(unsafe { libc::getpid() }, Ordering::SeqCst);
                0
            },
            |pid| Ok((pid, std::fs::metadata(format!("/proc/{pid}/ns/net"))?.ino())),
        )
        .unwrap();
        assert_ne!(net, own, "the helper is in a network namespace of its own");
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            pid,
            "what the helper wrote is in our memory (it shares it)"
        );
        // A setup's errno is the error.
        let e = in_new_namespaces(0, &|| libc::EPERM, |_| Ok(())).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    }
}
