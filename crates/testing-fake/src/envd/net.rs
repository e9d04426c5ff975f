//! The sandbox's network: a network namespace of its own for every isolated sandbox and,
//! for a sandbox with internet access, `pasta` (Debian's `passt`) as its uplink.
//!
//! The namespace ([`NetNs`]) is owned by a user namespace of its own (not the sandbox's:
//! root in the sandbox holds no capability over its network, so no `CAP_NET_RAW` or
//! `CAP_NET_ADMIN` there) and starts with only loopback up: a sandbox without internet
//! access keeps exactly that. Two sandboxes have two loopbacks, so they can listen on the
//! same port, and the port proxy reaches a listener inside the namespace
//! ([`connect_tcp`]), never the host's.
//!
//! With internet access, [`Pasta`] gives the namespace an `eth0` with the host's IPv4
//! address, route and gateway and translates its TCP, UDP and ICMP echo traffic to
//! sockets of the host (or of the uplink namespace `E2B_LOCAL_UPLINK_NETNS` names), set so
//! that the host does not serve the sandbox:
//! * no port is forwarded either way (`-t/-u/-T/-U none`): the host's loopback is not the
//!   namespace's, and nothing the sandbox binds appears on the host;
//! * the gateway is the real one (`--no-map-gw`), not an alias of the host's loopback;
//! * its sockets are bound to the host's default-route interface (`--outbound-if4`), so an
//!   address the host holds on another interface (a bridge, a VPN) is not reached, and the
//!   address it holds on that interface is the sandbox's own inside;
//! * IPv4 only (`-4`): over IPv6 the host's link-local address would be reachable.
//!
//! pasta runs as the host's uid 0 but with its capabilities in the namespace's own user
//! namespace only (and under its own seccomp filter, in an empty mount namespace); it
//! dies with the sandbox, and with the emulator (`PR_SET_PDEATHSIG`).

use std::io::Read as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::userns;

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// How long pasta gets to configure the namespace.
const PASTA_READY: Duration = Duration::from_secs(10);
/// The interface pasta makes in the namespace (as on an E2B sandbox).
const SANDBOX_IF: &str = "eth0";

/// A sandbox's network namespace and the user namespace that owns it.
pub(crate) struct NetNs {
    /// `/proc/<pid>/ns/net` of the namespace.
    pub(crate) net: OwnedFd,
    /// Its owning user namespace (pasta joins it to configure the namespace).
    owner: OwnedFd,
}

/// In the namespace child: loopback up (the child holds every capability of its new user
/// namespace, which owns the new network namespace). Returns 0 or an errno.
fn loopback_up() -> libc::c_int {
    // SAFETY: raw syscalls in the forked child; the ifreq lives on this stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return *libc::__errno_location();
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr);
        if rc == 0 {
            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr);
        }
        let e = *libc::__errno_location();
        libc::close(fd);
        if rc != 0 { e } else { 0 }
    }
}

impl NetNs {
    /// A new network namespace with only loopback, up.
    pub(crate) fn create() -> std::io::Result<NetNs> {
        userns::in_new_namespaces(
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
            &loopback_up,
            |pid| {
                let open = |kind: &str| -> std::io::Result<OwnedFd> {
                    Ok(OwnedFd::from(std::fs::File::open(format!(
                        "/proc/{pid}/ns/{kind}"
                    ))?))
                };
                Ok(NetNs {
                    net: open("net")?,
                    owner: open("user")?,
                })
            },
        )
    }
}

/// Run `f` on a fresh thread that joined the network namespace `net` (a thread's network
/// namespace is its own: the emulator's other threads stay on the host's).
pub(crate) fn in_netns<R: Send>(
    net: &OwnedFd,
    f: impl FnOnce() -> std::io::Result<R> + Send,
) -> std::io::Result<R> {
    let raw = net.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on an fd we hold open; it moves only this thread.
            if unsafe { libc::setns(raw, libc::CLONE_NEWNET) } != 0 {
                return Err(errno());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("network namespace thread panicked")))
    })
}

/// A TCP connection to `port` on the loopback of the namespace `net` (IPv4, then IPv6):
/// how the port proxy reaches a sandbox's listener.
pub(crate) fn connect_tcp(net: &OwnedFd, port: u16) -> std::io::Result<std::net::TcpStream> {
    in_netns(net, || {
        let v4 = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
        let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
        let timeout = Duration::from_secs(5);
        std::net::TcpStream::connect_timeout(&v4, timeout)
            .or_else(|_| std::net::TcpStream::connect_timeout(&v6, timeout))
    })
}

/// The interface of the first IPv4 default route in the calling thread's network
/// namespace (`/proc/thread-self/net/route`).
fn default_route_if() -> Option<String> {
    let text = std::fs::read_to_string("/proc/thread-self/net/route").ok()?;
    default_route_in(&text)
}

/// The interface of the first default route (destination and mask 0) in a
/// `/proc/net/route` table.
fn default_route_in(table: &str) -> Option<String> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.len() > 7 && cols[1] == "00000000" && cols[7] == "00000000")
            .then(|| cols[0].to_owned())
    })
}

/// True when pasta can be found (tests that need it).
#[cfg(test)]
pub(crate) fn pasta_available() -> std::io::Result<PathBuf> {
    pasta_binary()
}

/// True when the namespace has a default route (pasta configured it).
#[cfg(test)]
pub(crate) fn has_default_route(ns: &NetNs) -> std::io::Result<bool> {
    in_netns(&ns.net, || Ok(default_route_if().is_some()))
}

/// The pasta binary: `E2B_LOCAL_PASTA`, else `pasta` on `PATH`.
fn pasta_binary() -> std::io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("E2B_LOCAL_PASTA").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("E2B_LOCAL_PASTA={} is not a file", p.display()),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("pasta"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "pasta is not installed (not on PATH)",
            )
        })
}

/// pasta's arguments: the namespace is fd 3 and its user namespace fd 4 of pasta.
fn pasta_args(outbound_if: &str) -> Vec<String> {
    [
        "--foreground",
        "--quiet",
        "--ipv4-only",
        "--runas",
        "0",
        "--ns-ifname",
        SANDBOX_IF,
        "--config-net",
        "--no-map-gw",
        "--tcp-ports",
        "none",
        "--udp-ports",
        "none",
        "--tcp-ns",
        "none",
        "--udp-ns",
        "none",
        "--outbound-if4",
        outbound_if,
        "--userns",
        "/proc/self/fd/4",
        "--netns",
        "/proc/self/fd/3",
        "--no-netns-quit",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// What the thread that owns pasta reports.
enum Report {
    Started(u32, OwnedFd),
    Failed(std::io::Error),
    /// pasta ended; the end of what it printed.
    Exited(String),
}

/// A running pasta: the sandbox's uplink.
pub(crate) struct Pasta {
    pid: u32,
    pidfd: OwnedFd,
    /// The namespace pasta configures (to see it done).
    net: OwnedFd,
    /// What its thread reports once pasta ends (taken by [`Pasta::ready`]).
    reports: std::sync::Mutex<Option<mpsc::Receiver<Report>>>,
}

impl std::fmt::Debug for Pasta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pasta").field("pid", &self.pid).finish()
    }
}

impl Pasta {
    /// Start pasta on `ns`; [`Pasta::ready`] waits until it configured the namespace (the
    /// rest of the sandbox is built meanwhile). An error says why (pasta missing, the
    /// uplink namespace, no default route).
    pub(crate) fn spawn(ns: &NetNs) -> std::io::Result<Pasta> {
        let bin = pasta_binary()?;
        let uplink = match std::env::var_os("E2B_LOCAL_UPLINK_NETNS").filter(|p| !p.is_empty()) {
            Some(p) => Some(OwnedFd::from(std::fs::File::open(&p).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "E2B_LOCAL_UPLINK_NETNS={}: {e}",
                        PathBuf::from(&p).display()
                    ),
                )
            })?)),
            None => None,
        };
        let net = ns.net.try_clone()?;
        let owner = ns.owner.try_clone()?;
        let (tx, rx) = mpsc::channel::<Report>();
        // pasta is spawned and reaped by a thread of its own: PR_SET_PDEATHSIG fires when
        // that thread ends, which is when pasta ended or the emulator died.
        std::thread::Builder::new()
            .name("envd-pasta".into())
            .spawn(move || run_pasta(bin, uplink, net, owner, tx))?;
        match rx.recv() {
            Ok(Report::Started(pid, pidfd)) => Ok(Pasta {
                pid,
                pidfd,
                net: ns.net.try_clone()?,
                reports: std::sync::Mutex::new(Some(rx)),
            }),
            Ok(Report::Failed(e)) => Err(e),
            _ => Err(std::io::Error::other("the pasta thread died")),
        }
    }

    /// Wait until the namespace has pasta's interface and default route, or say why not
    /// (pasta's own last words when it exited).
    pub(crate) fn ready(&self) -> std::io::Result<()> {
        let Some(rx) = self.reports.lock().ok().and_then(|mut r| r.take()) else {
            return Ok(());
        };
        let pid = self.pid;
        in_netns(&self.net, move || {
            let deadline = Instant::now() + PASTA_READY;
            loop {
                if let Ok(Report::Exited(said)) = rx.try_recv() {
                    return Err(std::io::Error::other(format!(
                        "pasta (pid {pid}) exited: {said}"
                    )));
                }
                if default_route_if().is_some() {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "pasta (pid {pid}) did not configure the namespace within {PASTA_READY:?}"
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    }

    /// True while pasta runs (its pidfd is not readable: a process that ended, reaped
    /// or not, makes it so).
    pub(crate) fn running(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own, no waiting.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 0
    }

    /// Kill pasta (the namespace loses its uplink).
    pub(crate) fn stop(&self) {
        let _ = exec_world_sys::supervise::pidfd_signal(self.pidfd.as_fd(), libc::SIGKILL);
    }
}

impl Drop for Pasta {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The body of the `envd-pasta` thread: join the uplink namespace (if any), spawn pasta
/// bound to its default-route interface, report, drain its stderr, reap it.
fn run_pasta(
    bin: PathBuf,
    uplink: Option<OwnedFd>,
    net: OwnedFd,
    owner: OwnedFd,
    tx: mpsc::Sender<Report>,
) {
    let fail = |e| {
        let _ = tx.send(Report::Failed(e));
    };
    if let Some(up) = &uplink {
        // SAFETY: setns on an fd we hold; it moves only this thread (and pasta with it).
        if unsafe { libc::setns(up.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return fail(errno());
        }
    }
    let Some(outbound) = default_route_if() else {
        return fail(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the host has no IPv4 default route to give the sandbox",
        ));
    };
    let (net_raw, owner_raw) = (net.as_raw_fd(), owner.as_raw_fd());
    let Some(program) = bin.to_str() else {
        return fail(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a UTF-8 path", bin.display()),
        ));
    };
    let (err_r, err_w) = match exec_world_sys::launch::pipe() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let cmd = super::spawn::Spawn {
        argv: std::iter::once(program.to_owned())
            .chain(pasta_args(&outbound))
            .collect(),
        env: Vec::new(),
        stdio: [
            super::spawn::Io::Null,
            super::spawn::Io::Null,
            super::spawn::Io::Fd(err_w),
        ],
    };
    // Raw syscalls only, on descriptors opened before the clone.
    let setup = move |_: bool| -> std::io::Result<()> {
        // SAFETY: see above; the child has a descriptor table of its own.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(errno());
            }
            // The usual priority, whatever the thread that made it ahead ran at (see
            // `spare::BACKGROUND_NICE`): it carries the sandbox's traffic.
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
            // Out of the way first (either may already be 3 or 4), then in place; dup2
            // clears close-on-exec on the copies pasta keeps.
            let n = libc::fcntl(net_raw, libc::F_DUPFD_CLOEXEC, 10);
            let o = libc::fcntl(owner_raw, libc::F_DUPFD_CLOEXEC, 10);
            if n < 0 || o < 0 || libc::dup2(n, 3) != 3 || libc::dup2(o, 4) != 4 {
                return Err(errno());
            }
            Ok(())
        }
    };
    // On our memory (`CLONE_VM | CLONE_VFORK`) until it execs: no copy of the emulator's
    // page tables for every sandbox with internet access.
    let started = cmd
        .prepare(None)
        .and_then(|p| p.start(super::spawn::Via::SharedMemory, None, &setup))
        .and_then(|child| Ok((child.pidfd()?, child)));
    let (pidfd, child) = match started {
        Ok(c) => c,
        Err(e) => {
            return fail(std::io::Error::new(
                e.kind(),
                format!("starting {}: {e}", bin.display()),
            ));
        }
    };
    drop((net, owner, uplink));
    let pid = child.id();
    if tx.send(Report::Started(pid, pidfd)).is_err() {
        child.start_kill();
    }
    // Its messages, kept short (pasta also tries the system log, which may be absent).
    let mut said = Vec::new();
    let _ = std::fs::File::from(err_r).read_to_end(&mut said);
    let text: Vec<String> = String::from_utf8_lossy(&said)
        .lines()
        .filter(|l| !l.starts_with("Failed to send") && !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    let tail = text[text.len().saturating_sub(4)..].join("; ");
    let status = child.wait_blocking();
    tracing::debug!(pid, ?status, said = %tail, "pasta ended");
    let _ = tx.send(Report::Exited(tail));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_is_found_by_destination_and_mask() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth1\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(default_route_in(table).as_deref(), Some("eth0"));
        assert_eq!(default_route_in("Iface\tDestination\n"), None);
    }

    #[test]
    fn pasta_forwards_no_port_and_keeps_the_gateway_real() {
        let args = pasta_args("eth0");
        let pair = |k: &str| {
            args.iter()
                .position(|a| a == k)
                .and_then(|i| args.get(i + 1))
                .map(String::as_str)
        };
        for k in ["--tcp-ports", "--udp-ports", "--tcp-ns", "--udp-ns"] {
            assert_eq!(pair(k), Some("none"), "{k}");
        }
        assert!(args.iter().any(|a| a == "--no-map-gw"));
        assert!(args.iter().any(|a| a == "--ipv4-only"));
        assert_eq!(pair("--outbound-if4"), Some("eth0"));
    }
}
