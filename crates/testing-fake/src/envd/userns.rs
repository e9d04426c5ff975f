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

use std::os::fd::{FromRawFd, OwnedFd};

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

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A new user namespace mapping `0..RANGE` to `map`'s host range (uids and gids), as
/// an open `/proc/<pid>/ns/user`. The emulator writes its maps (as root on the host, so
/// `setgroups` stays allowed, which `sudo` needs) and keeps the namespace alive with the
/// descriptor.
pub(crate) fn create(map: IdMap) -> std::io::Result<OwnedFd> {
    in_new_namespaces(libc::CLONE_NEWUSER, &|| 0, &|| 0, |pid| {
        let line = format!("0 {} {RANGE}\n", map.host_id(0));
        std::fs::write(format!("/proc/{pid}/uid_map"), &line)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), &line)?;
        Ok(OwnedFd::from(std::fs::File::open(format!(
            "/proc/{pid}/ns/user"
        ))?))
    })
}

/// Fork a short-lived child that runs `before`, `unshare`s `flags` and runs `setup` (both
/// raw syscalls only, returning 0 or an errno), then call `then` with its pid while it
/// waits (to write its id maps, open its `/proc/<pid>/ns/*`), and reap it.
/// `unshare(CLONE_NEWUSER)` needs a single-threaded process: the child is one, the
/// emulator is not.
pub(crate) fn in_new_namespaces<T>(
    flags: libc::c_int,
    before: &(dyn Fn() -> libc::c_int + Sync),
    setup: &(dyn Fn() -> libc::c_int + Sync),
    then: impl FnOnce(libc::pid_t) -> std::io::Result<T>,
) -> std::io::Result<T> {
    in_new_namespaces_born_in(None, flags, before, setup, then)
}

/// [`in_new_namespaces`] with a child born in the cgroup v2 directory `cgroup` (`clone3`
/// with `CLONE_INTO_CGROUP`, fork semantics) when given: it joins no group by writing
/// `cgroup.procs`, which on a quiet host waits for an RCU grace period. A child the kernel
/// killed at birth (see `exec_world_sys::launch::Outcome::Unborn`) reads as an error,
/// as any child that died before it reported.
pub(crate) fn in_new_namespaces_born_in<T>(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    flags: libc::c_int,
    before: &(dyn Fn() -> libc::c_int + Sync),
    setup: &(dyn Fn() -> libc::c_int + Sync),
    then: impl FnOnce(libc::pid_t) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let mut up = [0 as libc::c_int; 2];
    let mut down = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into arrays we own.
    unsafe {
        if libc::pipe2(up.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(errno());
        }
        if libc::pipe2(down.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let e = errno();
            libc::close(up[0]);
            libc::close(up[1]);
            return Err(e);
        }
    }
    // SAFETY: fresh fds we own from here on (closed on every path by OwnedFd).
    let (up_r, up_w, down_r, down_w) = unsafe {
        (
            OwnedFd::from_raw_fd(up[0]),
            OwnedFd::from_raw_fd(up[1]),
            OwnedFd::from_raw_fd(down[0]),
            OwnedFd::from_raw_fd(down[1]),
        )
    };
    use std::os::fd::AsRawFd;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only calls async-signal-safe syscalls, then _exit; clone3 without
    // CLONE_VM is a fork (the child has its own copy of our memory).
    let pid = unsafe {
        match cgroup {
            None => libc::fork(),
            Some(cg) => {
                use exec_world_sys::launch::{CLONE_INTO_CGROUP, CloneArgs};
                let mut args = CloneArgs {
                    flags: CLONE_INTO_CGROUP,
                    exit_signal: libc::SIGCHLD as u64,
                    cgroup: cg.as_raw_fd() as u64,
                    ..CloneArgs::default()
                };
                exec_world_sys::launch::clone3_fork(&mut args) as libc::pid_t
            }
        }
    };
    if pid < 0 {
        return Err(errno());
    }
    if pid == 0 {
        // SAFETY: in the forked child: raw syscalls on inherited fds, then _exit.
        unsafe {
            // It dies with the thread that forked it (which waits for it below), and
            // holds no copy of the parent's ends: a parent that dies mid-way (the
            // emulator interrupted during a create) leaves no child blocked forever.
            libc::close(up_r.as_raw_fd());
            libc::close(down_w.as_raw_fd());
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent
            {
                libc::_exit(1);
            }
            let first = before();
            let status: u8 = if first != 0 {
                first as u8
            } else if libc::unshare(flags) != 0 {
                *libc::__errno_location() as u8
            } else {
                setup() as u8
            };
            libc::write(up_w.as_raw_fd(), (&status as *const u8).cast(), 1);
            let mut b = 0u8;
            while libc::read(down_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::_exit(0);
        }
    }
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
    // SAFETY: reaping our own child.
    unsafe {
        let mut st = 0;
        while libc::waitpid(pid, &mut st, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
    }
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
}
