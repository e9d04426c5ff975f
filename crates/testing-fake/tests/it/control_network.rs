//! Every sandbox has a network of its own, probed as an agent would (as `user` and as root
//! through `sudo`): with internet access its uplink is pasta, and neither the host's
//! loopback, nor another address of the host, nor the uplink's gateway-as-loopback trick,
//! nor another sandbox is reachable; root in it has no `CAP_NET_RAW` or `CAP_NET_ADMIN`;
//! a sandbox that asked for internet access and cannot get it is not created.
//!
//! Traffic goes only to loopback and to network namespaces these tests make: the
//! "internet" of [`internet_goes_through_pasta_and_the_uplink_host_is_not_reachable`] is a
//! namespace behind a veth pair of another namespace that plays the host (`e2b-local`
//! runs pasta there through `E2B_LOCAL_UPLINK_NETNS`). Needs root, `ip` (iproute2),
//! `unshare`/`nsenter` (util-linux) and pasta (passt).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::control_boundary::{create_with, start_local, stop};
use crate::support::{Env, run_frames_at, stdout_of};

/// A bash line printing what `host:port` answers (its first line), or nothing when the
/// connection fails (3 s at most).
fn probe(host: &str, port: u16) -> String {
    format!("timeout 3 bash -c 'exec 3<>/dev/tcp/{host}/{port} && head -n1 <&3' 2>/dev/null; true")
}

/// A probe as `user` and the same through `sudo` (root in the sandbox), outputs joined.
fn as_user_and_root(host: &str, port: u16) -> String {
    let p = probe(host, port);
    format!(
        "{p}; echo '|'; sudo -n bash -c \"{}\"",
        p.replace('"', "\\\"")
    )
}

/// Accept on `listener` forever (a detached thread), answering `reply` and a newline.
fn serve(listener: std::net::TcpListener, reply: &'static str) {
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let _ = c.write_all(format!("{reply}\n").as_bytes());
        }
    });
}

/// A network namespace this test made, held by a `sleep` it started (killed on drop).
struct TestNs {
    holder: Child,
}

impl TestNs {
    fn new() -> TestNs {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare (util-linux) starts");
        let ns = TestNs { holder };
        let ours = std::fs::metadata("/proc/self/ns/net").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        use std::os::unix::fs::MetadataExt;
        while std::fs::metadata(ns.path()).map(|m| m.ino()).ok() == Some(ours.ino()) {
            assert!(Instant::now() < deadline, "unshare --net made no namespace");
            std::thread::sleep(Duration::from_millis(5));
        }
        ns.ip("link set lo up");
        ns
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.pid())
    }

    /// `ip <args>` inside the namespace; panics with its stderr on failure.
    fn ip(&self, args: &str) {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.path()))
            .arg("ip")
            .args(args.split_whitespace())
            .output()
            .expect("nsenter and ip (iproute2) run");
        assert!(
            out.status.success(),
            "ip {args}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A listener on `addr` inside the namespace answering `reply`.
    fn listen(&self, addr: &str, reply: &'static str) {
        let ns = std::fs::File::open(self.path()).unwrap();
        let addr = addr.to_owned();
        let listener = std::thread::spawn(move || {
            // SAFETY: setns on an fd we hold; it moves only this short-lived thread.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0,
                "setns"
            );
            std::net::TcpListener::bind(&addr).unwrap()
        })
        .join()
        .unwrap();
        serve(listener, reply);
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// An `e2b-local` this test started: SIGTERMed and awaited on drop (a failed assertion
/// included), its stderr returned by [`Local::stop`].
struct Local(Option<Child>);

impl Local {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    fn stop(mut self) -> String {
        self.0.take().map(stop).unwrap_or_default()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            stop(child);
        }
    }
}

/// Host pids of the `pasta` processes whose parent is `parent`.
fn pasta_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        // pasta runs as `passt.avx2` (or `passt`) where the CPU has AVX2.
        let named = head.ends_with("(pasta") || head.contains("(passt");
        if named && ppid == Some(parent) && !rest.starts_with('Z') {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn a_sandbox_with_internet_reaches_no_host_listener_on_loopback() {
    let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let v4_port = v4.local_addr().unwrap().port();
    serve(v4, "HOST-LOOPBACK");
    let v6 = std::net::TcpListener::bind("[::1]:0").unwrap();
    let v6_port = v6.local_addr().unwrap().port();
    serve(v6, "HOST-LOOPBACK6");
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    // It has an uplink: pasta's eth0 and a default route.
    let (frames, _) = env
        .run_frames(
            &sbx,
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; awk '$2 == \"00000000\" {print $1}' /proc/net/route",
        )
        .await;
    assert_eq!(stdout_of(&frames), "eth0 lo eth0\n", "{frames:?}");
    for (host, port) in [
        ("127.0.0.1", v4_port),
        ("localhost", v4_port),
        ("127.0.0.2", v4_port),
        ("::1", v6_port),
    ] {
        let (frames, _) = env.run_frames(&sbx, &as_user_and_root(host, port)).await;
        assert_eq!(
            stdout_of(&frames),
            "|\n",
            "{host}:{port} reached from the sandbox: {frames:?}"
        );
    }
    // The probe itself works: the sandbox's own listener answers it.
    let (frames, _) = env
        .run_frames(
            &sbx,
            &format!(
                "python3 -c 'import socket,sys; s=socket.socket(); s.bind((\"127.0.0.1\", {v4_port})); s.listen(); c=s.accept()[0]; c.sendall(b\"SANDBOX\\n\")' & sleep 0.5; {}",
                probe("127.0.0.1", v4_port)
            ),
        )
        .await;
    assert_eq!(stdout_of(&frames), "SANDBOX\n", "{frames:?}");
    env.emu.shutdown().await;
}

#[tokio::test]
async fn root_in_a_sandbox_has_no_raw_socket_nor_network_admin() {
    let env = Env::start().await;
    for net in [json!({}), json!({"allow_internet_access": false})] {
        let sbx = env.create(net.clone()).await;
        let script = "sudo -n python3 -c '
import socket
for fam, kind, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP), (socket.AF_PACKET, socket.SOCK_RAW, 0x0300)]:
    try:
        socket.socket(fam, kind, proto); print(\"raw socket OPENED\")
    except PermissionError:
        print(\"raw denied\")
'; sudo -n ip link set lo down 2>/dev/null && echo 'lo DOWN'; sudo -n ip addr add 10.99.0.1/32 dev lo 2>/dev/null && echo 'address ADDED'; sudo -n unshare --net true 2>/dev/null && echo 'new netns MADE'; true";
        let (frames, _) = env.run_frames(&sbx, script).await;
        assert_eq!(
            stdout_of(&frames),
            "raw denied\nraw denied\nraw denied\n",
            "{net}: {frames:?}"
        );
    }
    env.emu.shutdown().await;
}

#[tokio::test]
async fn internet_goes_through_pasta_and_the_uplink_host_is_not_reachable() {
    // "host": the uplink pasta runs in; "internet": behind its default route.
    let host = TestNs::new();
    let internet = TestNs::new();
    host.ip(&format!(
        "link add up0 type veth peer name gw0 netns {}",
        internet.pid()
    ));
    host.ip("addr add 10.231.0.1/24 dev up0");
    host.ip("link set up0 up");
    host.ip("route add default via 10.231.0.2");
    internet.ip("addr add 10.231.0.2/24 dev gw0");
    internet.ip("link set gw0 up");
    // Another interface of the host, with an address of its own.
    host.ip("link add side0 type veth peer name side1");
    host.ip("addr add 10.232.0.1/24 dev side0");
    host.ip("link set side0 up");
    host.ip("link set side1 up");
    internet.listen("10.231.0.2:8080", "INTERNET");
    host.listen("127.0.0.1:8081", "UPLINK-LOOPBACK");
    host.listen("0.0.0.0:8082", "UPLINK-ANY");

    let root = tempfile::tempdir().unwrap();
    // No uplink and no spare sandbox made ahead (E2B_LOCAL_UPLINK_POOL=0,
    // E2B_LOCAL_SPARES=0): the pasta processes counted below are the sandbox's (a pooled
    // one is made by the same code, see `uplink_pool` and `spare`).
    let (child, api, sandbox_url, key) = start_local(
        root.path(),
        &[],
        &[
            ("E2B_LOCAL_UPLINK_NETNS", host.path().as_str()),
            ("E2B_LOCAL_UPLINK_POOL", "0"),
            ("E2B_LOCAL_SPARES", "0"),
        ],
    );
    let local = Local(Some(child));
    let emulator = local.id();
    let (status, body) = create_with(&api, &key, json!({"templateID": "base"})).await;
    assert_eq!(status, 201, "{body}");
    let sbx: Value = serde_json::from_str(&body).unwrap();
    let http = reqwest::Client::new();
    let run = |cmd: String| {
        let (http, sandbox_url, sbx) = (http.clone(), sandbox_url.clone(), sbx.clone());
        async move { stdout_of(&run_frames_at(&http, &sandbox_url, &sbx, &cmd).await.0) }
    };
    assert_eq!(pasta_children(emulator).len(), 1, "one pasta per sandbox");
    // The sandbox's eth0 has the uplink's address (pasta copies it).
    let addr = run("python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((\"10.231.0.2\", 9)); print(s.getsockname()[0])'".into()).await;
    assert_eq!(addr, "10.231.0.1\n");
    // The internet answers, to the user and to root.
    assert_eq!(
        run(as_user_and_root("10.231.0.2", 8080)).await,
        "INTERNET\n|\nINTERNET\n"
    );
    for (host_addr, port, what) in [
        ("127.0.0.1", 8081, "the uplink's loopback"),
        ("10.231.0.2", 8081, "the uplink's loopback as the gateway"),
        ("10.232.0.1", 8082, "another address of the uplink"),
        ("10.231.0.1", 8082, "the uplink's own address"),
    ] {
        assert_eq!(
            run(as_user_and_root(host_addr, port)).await,
            "|\n",
            "{what} ({host_addr}:{port}) reached from the sandbox"
        );
    }
    // Killed: its pasta ends with it.
    let killed = reqwest::Client::new()
        .delete(format!(
            "{api}/sandboxes/{}",
            sbx["sandboxID"].as_str().unwrap()
        ))
        .header("X-API-KEY", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status().as_u16(), 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pasta_children(emulator).is_empty() {
        assert!(Instant::now() < deadline, "pasta outlived its sandbox");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    local.stop();
}

#[tokio::test]
async fn without_pasta_a_sandbox_with_internet_is_refused_one_without_is_created() {
    let root = tempfile::tempdir().unwrap();
    let (child, api, _, key) = start_local(
        root.path(),
        &[],
        &[("E2B_LOCAL_PASTA", "/nonexistent/pasta")],
    );
    let local = Local(Some(child));
    let (status, body) = create_with(&api, &key, json!({"templateID": "base"})).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("cannot build the sandbox boundary (user-mode-network)"),
        "{body}"
    );
    assert!(body.contains("/nonexistent/pasta"), "the cause: {body}");
    assert!(
        body.contains("apt-get install passt"),
        "how to get it: {body}"
    );
    let (status, body) = create_with(
        &api,
        &key,
        json!({"templateID": "base", "allow_internet_access": false}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    local.stop();
}
