//! The emulator is a boundary: a sandbox (root included) sees its own processes, files,
//! clocks and network, never the host's. Needs root (namespaces); without it isolation is
//! off and these tests say so and fail.
#![allow(clippy::unwrap_used)]

use crate::envd_support;

use std::time::Instant;

use envd_support::{Fake, boot, boot_with, run};

fn exit_code(end: &serde_json::Value) -> i64 {
    end.get("exitCode").and_then(|c| c.as_i64()).unwrap_or(0)
}

async fn root_sh(fake: &Fake, cmd: &str) -> (String, String, i64) {
    let (o, e, end) = run(fake, cmd, Some("root")).await;
    (
        String::from_utf8_lossy(&o).into_owned(),
        String::from_utf8_lossy(&e).into_owned(),
        exit_code(&end),
    )
}

async fn download(fake: &Fake, path: &str, user: &str) -> (u16, Vec<u8>) {
    let r = fake
        .req(reqwest::Method::GET, "/files")
        .query(&[("path", path), ("username", user)])
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.bytes().await.unwrap().to_vec())
}

async fn upload(fake: &Fake, path: &str, user: &str, data: &[u8]) -> u16 {
    fake.req(reqwest::Method::POST, "/files")
        .query(&[("path", path), ("username", user)])
        .header("Content-Type", "application/octet-stream")
        .body(data.to_vec())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn require_isolation(fake: &Fake) {
    assert!(
        fake.envd.is_isolated(),
        "these tests need root and kernel namespaces (isolation is off)"
    );
}

/// True (and says so) when this host applies no cgroup limits to sandboxes: a test of
/// the limits then checks nothing else.
fn without_limits(fake: &Fake) -> bool {
    let missing = fake.envd.missing_limits();
    if !missing.is_empty() {
        eprintln!("SKIPPED: this host applies no {missing:?} limits to sandboxes");
    }
    !missing.is_empty()
}

#[tokio::test]
async fn sandbox_root_cannot_see_signal_or_read_host_processes() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let me = std::process::id();
    // The holder is init of the sandbox's PID namespace; /proc is the sandbox's own.
    let (out, err, code) = root_sh(&fake, "tr '\\0' ' ' < /proc/1/cmdline").await;
    assert_eq!((out.trim(), code), ("/bin/sleep infinity", 0), "{err}");
    // Pids are reported as the sandbox numbers them (as E2B reports the VM's pids).
    let body =
        serde_json::json!({"process":{"cmd":"/bin/bash","args":["-c","echo $$"]},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, _) = s.collect().await;
    let reported = msgs[0]["event"]["start"]["pid"].as_u64().unwrap();
    let (out, _, _, _) = envd_support::outputs(&msgs);
    assert_eq!(String::from_utf8(out).unwrap(), format!("{reported}\n"));
    // This test process (the host) cannot be listed, signalled or read.
    let (_, _, code) = root_sh(&fake, &format!("test -e /proc/{me}")).await;
    assert_ne!(code, 0, "host pid {me} is visible in the sandbox's /proc");
    let (_, _, code) = root_sh(&fake, &format!("kill -0 {me}")).await;
    assert_ne!(code, 0, "sandbox root could signal host pid {me}");
    // No process the sandbox can see carries the host's (cargo's) environment.
    let (out, err, code) = root_sh(
        &fake,
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c CARGO_MANIFEST_DIR",
    )
    .await;
    assert_eq!(
        out.trim(),
        "0",
        "host environment readable: {err} (exit {code})"
    );
}

#[tokio::test]
async fn files_resolve_inside_the_sandbox_not_on_the_host() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    // The emulator's own environment is not reachable through /proc/self.
    let (st, body) = download(&fake, "/proc/self/environ", "root").await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(
        st, 404,
        "envd's file workers are no process of the sandbox: {text}"
    );
    assert!(
        !text.contains("CARGO_MANIFEST_DIR"),
        "GET /files /proc/self/environ returned the emulator's environment ({st})"
    );
    // /etc/shadow is the template's, not the host's.
    let (st, body) = download(&fake, "/etc/shadow", "root").await;
    assert_eq!(st, 200);
    let shadow = String::from_utf8(body).unwrap();
    assert!(shadow.starts_with("root:*:"), "{shadow}");
    assert!(shadow.contains("\nuser:*:"), "{shadow}");
    if let Ok(host) = std::fs::read_to_string("/etc/shadow") {
        assert_ne!(shadow, host, "the host's /etc/shadow");
    }
    // An absolute symlink made in the sandbox resolves in the sandbox, for /files and the
    // filesystem RPCs alike.
    let (_, err, code) = root_sh(
        &fake,
        "ln -s /etc/shadow /home/user/link && ln -s ../../proc/1 /home/user/init",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (st, body) = download(&fake, "/home/user/link", "root").await;
    assert_eq!((st, String::from_utf8(body).unwrap()), (200, shadow));
    let (st, body) = download(&fake, "/home/user/init/cmdline", "root").await;
    assert_eq!((st, body), (200, b"/bin/sleep\0infinity\0".to_vec()));
    let (st, v) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &serde_json::json!({"path": "/home/user/link"}),
            Some("root"),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["entry"]["symlinkTarget"], "/etc/shadow", "{v}");
}

#[tokio::test]
async fn host_devices_and_kernel_knobs_are_out_of_reach() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    // A private /dev: no block device of the host, the harmless nodes work.
    let (out, err, code) = root_sh(
        &fake,
        "find /dev -type b | wc -l; head -c 4 /dev/zero | wc -c; ls /dev/pts >/dev/null && echo pts",
    )
    .await;
    assert_eq!((out.as_str(), code), ("0\n4\npts\n", 0), "{err}");
    // Host-wide knobs (those this kernel has) are /dev/null (char 1:3); /proc/sys is
    // read-only.
    let knobs: Vec<&str> = [
        "/proc/sysrq-trigger",
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/kmsg",
    ]
    .into_iter()
    .filter(|p| std::path::Path::new(p).exists())
    .collect();
    assert!(
        !knobs.is_empty(),
        "no host-wide /proc knob to check on this kernel"
    );
    let (out, err, _) = root_sh(
        &fake,
        &format!(
            "stat -c '%t:%T' {}; echo 1 > /proc/sys/vm/drop_caches && echo wrote",
            knobs.join(" ")
        ),
    )
    .await;
    assert_eq!(out, "1:3\n".repeat(knobs.len()), "{knobs:?}: {err}");
    // Root cannot get around that: no mount, no device node, no module, even via sudo.
    for cmd in [
        "mount -t tmpfs none /mnt",
        "mknod /tmp/disk b 1 0",
        "sudo -n mknod /tmp/disk2 b 1 0",
    ] {
        let (_, err, code) = root_sh(&fake, cmd).await;
        assert_ne!(code, 0, "{cmd} succeeded as root in the sandbox: {err}");
    }
    let (out, _, _) = root_sh(&fake, "grep CapBnd /proc/self/status").await;
    let bound = u64::from_str_radix(out.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(
        bound & (1 << 21),
        0,
        "CAP_SYS_ADMIN in the bounding set: {out}"
    );
}

#[tokio::test]
async fn terminals_are_the_sandboxs_own() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    // No host terminal is reachable: the sandbox's devpts has none of them.
    let (out, err, code) = root_sh(&fake, "ls /dev/pts").await;
    assert_eq!((out.as_str(), code), ("ptmx\n", 0), "{err}");
    // A PTY process gets a terminal of the sandbox's own devpts, which it can name.
    let body = serde_json::json!({"process":{"cmd":"/bin/bash","args":["-c","tty; ls /dev/pts"]},"pty":{"size":{"cols":80,"rows":24}}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, end) = s.collect().await;
    assert_eq!(end, serde_json::json!({}));
    let (_, _, pty, _) = envd_support::outputs(&msgs);
    let text = String::from_utf8_lossy(&pty);
    assert_eq!(text, "/dev/pts/0\r\n0  ptmx\r\n", "{text:?}");
}

#[tokio::test]
async fn root_writes_anywhere_and_only_in_its_own_sandbox() {
    let a = boot("base", None).await;
    let b = boot("base", None).await;
    require_isolation(&a);
    assert!(
        a.envd.has_writable_root(),
        "the overlay root could not be mounted"
    );
    // Real envd creates /0/x as root.
    assert_eq!(upload(&a, "/0/x", "root", b"in a").await, 200);
    let (out, err, code) = root_sh(
        &a,
        "cat /0/x && echo usr > /usr/local/e2b-iso-test && cat /usr/local/e2b-iso-test",
    )
    .await;
    assert_eq!((out.as_str(), code), ("in ausr\n", 0), "{err}");
    // Not on the host, not in the other sandbox.
    assert!(!std::path::Path::new("/0/x").exists());
    assert!(!std::path::Path::new("/usr/local/e2b-iso-test").exists());
    let (st, _) = download(&b, "/0/x", "root").await;
    assert_eq!(st, 404);
    let (_, _, code) = root_sh(&b, "test -e /usr/local/e2b-iso-test").await;
    assert_ne!(code, 0);
    // The package manager can lock and read its database (a write to /var/lib/dpkg).
    if std::path::Path::new("/usr/bin/apt-get").exists() {
        let (out, err, code) = root_sh(&a, "apt-get check 2>&1").await;
        assert_eq!(code, 0, "apt-get check: {out}{err}");
    }
    // `user` has passwordless sudo (the base template's sudoers).
    let (o, e, end) = run(&a, "sudo -n id -u", Some("user")).await;
    let out = String::from_utf8_lossy(&o);
    assert_eq!(
        (out.trim(), exit_code(&end)),
        ("0", 0),
        "sudo: {}",
        String::from_utf8_lossy(&e)
    );
}

#[tokio::test]
async fn the_sandbox_has_its_own_host_name_and_hosts_file() {
    let a = boot("base", None).await;
    require_isolation(&a);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    let (o, e, end) = run(
        &a,
        "hostname; uname -n; cat /etc/hostname; cat /etc/hosts; sudo -n true",
        Some("user"),
    )
    .await;
    let (out, err) = (String::from_utf8_lossy(&o), String::from_utf8_lossy(&e));
    assert_eq!(exit_code(&end), 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("e2b.local"));
    assert_eq!(lines.next(), Some("e2b.local"));
    assert_eq!(lines.next(), Some("e2b.local"));
    assert!(out.contains("127.0.1.1\te2b.local"), "{out}");
    assert!(
        !out.contains(host) || host == "e2b.local",
        "the host's name shows: {out}"
    );
    // sudo resolves the name (it warned with the host's /etc/hosts).
    assert!(!err.contains("unable to resolve host"), "{err}");
    // The sandbox's root cannot rename it (the namespace is the host root's), nor the host.
    let (_, err, code) = root_sh(&a, "hostname renamed-by-the-sandbox").await;
    assert_ne!(code, 0, "root renamed the sandbox: {err}");
    let after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(after.trim(), host, "the host's name changed");
}

#[tokio::test]
async fn each_boot_has_its_own_boot_id_and_uptime() {
    let before = Instant::now();
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let (out, err, code) = root_sh(
        &fake,
        "cat /proc/sys/kernel/random/boot_id; cut -d' ' -f1 /proc/uptime",
    )
    .await;
    let elapsed = before.elapsed().as_secs_f64();
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let boot_id = lines.next().unwrap().to_owned();
    let uptime: f64 = lines.next().unwrap().parse().unwrap();
    let host_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_ne!(boot_id, host_id.trim(), "the host's boot id");
    assert_eq!(boot_id.len(), 36, "{boot_id}");
    // The sandbox's clock started after `before`: its uptime cannot exceed what elapsed.
    assert!(
        uptime <= elapsed,
        "uptime {uptime} > {elapsed} since the boot began"
    );
    // A second sandbox boots with another id.
    let other = boot("base", None).await;
    let (out, _, _) = root_sh(&other, "cat /proc/sys/kernel/random/boot_id").await;
    assert_ne!(out.trim(), boot_id);
}

#[tokio::test]
async fn offline_sandbox_cannot_reach_a_host_listener() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");

    // A default sandbox (internet through pasta) has a loopback of its own too.
    let online = boot("base", None).await;
    require_isolation(&online);
    let (_, err, code) = root_sh(&online, &connect).await;
    assert_ne!(
        code, 0,
        "a sandbox with internet reached the host's 127.0.0.1:{port}"
    );
    assert!(
        err.contains("Connection refused"),
        "its own loopback: {err}"
    );

    let offline = boot_with("base", None, false).await;
    let (_, err, code) = root_sh(&offline, &connect).await;
    assert_ne!(
        code, 0,
        "an offline sandbox reached the host's 127.0.0.1:{port}"
    );
    assert!(
        err.contains("Connection refused"),
        "loopback is up but empty: {err}"
    );
    // Only loopback exists in its network namespace.
    let (out, err, code) = root_sh(
        &offline,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!((out.as_str(), code), ("lo\n", 0), "{err}");
}

#[tokio::test]
async fn names_with_control_bytes_download_with_an_encoded_disposition() {
    let fake = boot("base", None).await;
    for (name, encoded) in [
        ("a\nb", "a%0Ab"),
        ("c\rd", "c%0Dd"),
        ("e\u{1b}[31mf", "e%1B%5B31mf"),
    ] {
        let path = format!("/home/user/{name}");
        assert_eq!(
            upload(&fake, &path, "user", b"payload").await,
            200,
            "{name:?}"
        );
        let r = fake
            .req(reqwest::Method::GET, "/files")
            .query(&[("path", path.as_str()), ("username", "user")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{name:?}");
        assert_eq!(
            r.headers()["content-disposition"],
            format!("inline; filename*=utf-8''{encoded}").as_str()
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), b"payload");
    }
}

#[tokio::test]
async fn without_the_overlay_no_sandbox_is_created() {
    // overlayfs options cannot name a directory with a ',': the writable root cannot be
    // built, so the sandbox is not created (no read-only or host-backed fallback).
    let dir = std::env::temp_dir().join(format!("envd-test-{}-,no-overlay", std::process::id()));
    let cfg = testing_fake::envd::EnvdConfig {
        sandbox_id: "itestnooverlay".into(),
        template: testing_fake::template::Template::lookup("base").unwrap(),
        root: dir.clone(),
        access_token: None,
        env_vars: Default::default(),
        allow_internet: true,
        volumes: Vec::new(),
        hidden: Vec::new(),
    };
    let err = testing_fake::envd::Envd::boot(cfg).await.unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    let text = err.to_string();
    assert!(
        text.contains("cannot build the sandbox boundary (overlay)"),
        "{text}"
    );
    assert!(text.contains("overlayfs"), "names how to get it: {text}");
}

/// The holder reaps like a real init: a process orphaned inside the sandbox (its parent
/// exited) is reparented to it and, once it ends, leaves no zombie behind.
#[tokio::test]
async fn orphans_that_end_leave_no_zombie() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let zombies =
        "for f in /proc/[0-9]*/stat; do awk '{print $3}' \"$f\" 2>/dev/null; done | grep -c Z";
    let script = format!("sh -c 'sleep 0.2 & sleep 0.2 & exit 0'; sleep 1.5; {zombies}");
    let (out, err, _) = root_sh(&fake, &script).await;
    assert_eq!(out.trim(), "0", "zombies left in the sandbox: {err}");
}

/// Root in the sandbox is an unprivileged uid on the host: its user namespace maps 0 to
/// the sandbox range, what it writes is owned there on the host and by root inside.
#[tokio::test]
async fn root_in_the_sandbox_is_nobody_on_the_host() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let (out, err, code) = root_sh(
        &fake,
        "cat /proc/self/uid_map /proc/self/gid_map; echo x > /etc/e2b-owner-test; stat -c '%u %U' /etc/e2b-owner-test /usr/bin/sudo",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "0",
            "2000000000",
            "65536",
            "0",
            "2000000000",
            "65536",
            "0",
            "root",
            "0",
            "root"
        ],
        "{out}"
    );
    // The host process behind the sandbox's root runs as the shifted uid.
    let (out, _, _) = root_sh(&fake, "sleep 30 >/dev/null 2>&1 & echo $!").await;
    let inner: u32 = out.trim().parse().unwrap();
    let host = (0..100)
        .find_map(|_| {
            let h = fake.envd.host_pid(inner);
            if h.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            h
        })
        .expect("the sandbox's sleep has a host pid");
    let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid_line.contains("2000000000"), "{uid_line}");
    // No capability of the host's root: the host's clock, modules, raw sockets.
    let (_, _, code) = root_sh(&fake, "exec 3<>/proc/sysrq-trigger").await;
    assert_ne!(code, 0);
}

/// The root filesystem is an allowlist: a file planted on the host outside it (the
/// checkout, `/var/lib`) is absent for `user` and for root via sudo.
#[tokio::test]
async fn host_files_outside_the_allowlist_are_unreachable_even_via_sudo() {
    // Planted before the boot: the allowlist mask is computed at boot (see the README).
    let planted = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("boundary-secret-{}", std::process::id()));
    std::fs::write(&planted, "host secret\n").unwrap();
    let var_lib =
        std::path::PathBuf::from(format!("/var/lib/e2b-boundary-test-{}", std::process::id()));
    std::fs::create_dir_all(&var_lib).unwrap();
    std::fs::write(var_lib.join("secret"), "host secret\n").unwrap();
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let script = format!(
        "cat {p}; sudo -n cat {p}; cat {v}/secret; sudo -n cat {v}/secret; sudo -n ls /home /root /srv /mnt /opt; sudo -n cat /proc/1/root{p}; ls /",
        p = planted.display(),
        v = var_lib.display()
    );
    let (o, e, _) = run(&fake, &script, Some("user")).await;
    let _ = std::fs::remove_file(&planted);
    let _ = std::fs::remove_dir_all(&var_lib);
    let out = String::from_utf8_lossy(&o);
    let err = String::from_utf8_lossy(&e);
    assert!(!out.contains("host secret"), "{out}");
    assert!(err.contains("No such file or directory"), "{err}");
    // `ls /`: the system's directories, none of the host's own.
    let top: Vec<&str> = out.split_whitespace().collect();
    for must in ["bin", "etc", "usr", "home", "tmp", "proc"] {
        assert!(top.contains(&must), "{must} missing from / : {out}");
    }
    let first = planted
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let system = [
        "bin", "etc", "usr", "home", "tmp", "proc", "root", "var", "opt", "srv", "mnt",
    ];
    if !system.contains(&first.as_str()) {
        assert!(!top.contains(&first.as_str()), "/{first} is visible: {out}");
    }
    // `/home` holds only the template's home; `/root`, `/srv`, `/mnt`, `/opt` are empty.
    assert!(out.contains("user"), "{out}");
}

/// A memory hog (twice the template's memory) and a fork bomb end inside their sandbox;
/// another sandbox's command keeps working. Where the host offers no cgroup controllers
/// the sandbox says which limits are missing, and this test says so and checks nothing else.
#[tokio::test]
async fn a_memory_hog_and_a_fork_bomb_end_inside_their_sandbox() {
    let a = boot("base", None).await;
    let b = boot("base", None).await;
    require_isolation(&a);
    if without_limits(&a) {
        return;
    }
    // base: 512 MiB; the hog touches 1 GiB.
    let (out, _, code) = root_sh(
        &a,
        "python3 -c \"b = b'a' * (1 << 30); print('survived', len(b))\"",
    )
    .await;
    assert!(!out.contains("survived"), "{out}");
    assert_ne!(code, 0);
    // The bomb: forks stop at the sandbox's process limit (its children end by themselves).
    let (out, err, code) = root_sh(
        &a,
        "python3 -c \"
import os, time
n = 0
try:
    while n < 3000:
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        n += 1
    print('unbounded', n)
except OSError:
    print('bounded', n)
\"",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let n: u32 = out
        .trim()
        .strip_prefix("bounded ")
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    assert!(n < 1024, "{n} forks");
    // Another sandbox and the emulator are fine meanwhile.
    let (out, err, code) = root_sh(&b, "echo alive").await;
    assert_eq!((out.as_str(), code), ("alive\n", 0), "{err}");
}

/// A sandbox whose memory group is full of files keeps its init. Memory held in a file of
/// the sandbox's own `/dev/shm` belongs to no process: the writer is killed, envd's own
/// write of more goes wherever the kernel charges it, and init (in the memory group, so
/// that commands start in a cgroup set it keeps) is not the out-of-memory killer's pick
/// (`oom_score_adj` -1000 where the host lets root lower it, else the emulator's own,
/// below the 100 of every command). Once the files are removed through envd's file call,
/// a new command runs beside the same init.
#[tokio::test]
async fn a_sandbox_whose_memory_is_held_in_files_keeps_its_init() {
    let a = boot("base", None).await;
    require_isolation(&a);
    if without_limits(&a) {
        return;
    }
    // base: 512 MiB; the writer is killed with its file at the limit.
    let (_, _, code) = root_sh(&a, "head -c 700M /dev/zero > /dev/shm/fill").await;
    assert_ne!(code, 0, "700 MiB fit in a 512 MiB sandbox");
    let more = vec![7u8; 96 << 20];
    let _ = upload(&a, "/dev/shm/more", "root", &more).await;
    for path in ["/dev/shm/fill", "/dev/shm/more"] {
        let (status, body) = a
            .unary(
                "/filesystem.Filesystem/Remove",
                &serde_json::json!({ "path": path }),
                Some("root"),
            )
            .await;
        assert!(status == 200 || path.ends_with("more"), "{status} {body}");
    }
    let (out, err, code) = root_sh(&a, "tr '\\0' ' ' < /proc/1/cmdline").await;
    assert_eq!((out.as_str(), code), ("/bin/sleep infinity ", 0), "{err}");
}

/// A command starts in the very cgroups of the sandbox's init (limit groups and subtree
/// alike), so the kernel finds their set instead of building one at every start.
#[tokio::test]
async fn commands_start_in_the_cgroups_of_init() {
    let a = boot("base", None).await;
    require_isolation(&a);
    let (out, err, code) = root_sh(&a, "cat /proc/1/cgroup; echo ==; cat /proc/self/cgroup").await;
    assert_eq!(code, 0, "{err}");
    let (init, cmd) = out.split_once("==\n").unwrap();
    assert_eq!(init, cmd);
    if a.envd.missing_limits().is_empty() {
        for ctrl in ["memory", "pids"] {
            let line = init
                .lines()
                .find(|l| {
                    l.split(':')
                        .nth(1)
                        .is_some_and(|c| c.split(',').any(|c| c == ctrl))
                })
                .unwrap_or_else(|| panic!("no {ctrl} line in {init}"));
            assert!(
                line.contains("e2b-local-"),
                "init is not in its sandbox's {ctrl} group: {line}"
            );
        }
    }
}

/// Between its fork and its `execve` a command is a copy of the emulator's memory (the
/// host's environment, every sandbox's buffers). Sandbox root races for each new pid,
/// reading its `/proc/N/environ` the moment the kernel lets it: it never gets the copy.
#[tokio::test]
async fn a_command_being_started_never_shows_the_emulators_memory() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    // For each new pid: its `stat` (which shows where its environment lies only to a
    // process allowed to ptrace it), then `process_vm_readv` of that range while the
    // process is still the emulator's fork (named after the emulator's thread). Prints
    // the execs seen, the environments read that were the emulator's, and the forks the
    // racer was allowed to ptrace. With the fork dumpable: "602 90 299".
    let racer = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def top():
    return max(int(p) for p in os.listdir("/proc") if p.isdigit())
n, seen, forks, leaks, tries = top() + 1, 0, 0, 0, 0
end = time.time() + 60
while time.time() < end and not os.path.exists("/tmp/stop-racer"):
    try:
        with open("/proc/%d/stat" % n, "rb") as f:
            st = f.read()
        comm = st[st.index(b"(") + 1:st.rindex(b")")]
        fields = st[st.rindex(b")") + 2:].split()
        env_start, env_end = int(fields[47]), int(fields[48])
    except (OSError, ValueError, IndexError):
        env_start = 0
    if env_start == 0:
        tries += 1
        if tries % 256 == 0 and top() > n:
            n, tries = n + 1, 0
        continue
    if not comm.startswith(b"envd"):
        seen, n, tries = seen + 1, n + 1, 0
        continue
    forks += 1
    size = min(env_end - env_start, 1 << 20)
    buf = ctypes.create_string_buffer(size)
    local = Iov(ctypes.cast(buf, ctypes.c_void_p), size)
    remote = Iov(env_start, size)
    got = libc.process_vm_readv(n, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got > 0 and b"CARGO_MANIFEST_DIR" in buf.raw[:got]:
        leaks += 1
print(seen, leaks, forks)
"#;
    let racer_cmd = format!("python3 -c '{racer}'");
    let race = root_sh(&fake, &racer_cmd);
    let starts = async {
        // Let the racer find its first pid.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        for _ in 0..300 {
            let (_, _, end) = run(&fake, "true", Some("user")).await;
            assert_eq!(exit_code(&end), 0);
        }
        let (_, _, end) = run(&fake, "touch /tmp/stop-racer", Some("root")).await;
        assert_eq!(exit_code(&end), 0);
    };
    let ((out, err, code), ()) = tokio::join!(race, starts);
    assert_eq!(code, 0, "{err}");
    let counts: Vec<u64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(
        counts[0] >= 100,
        "the racer saw only {} starts: {out}",
        counts[0]
    );
    assert_eq!(
        counts[1], 0,
        "sandbox root read the emulator's environment: {out}"
    );
    assert_eq!(
        counts[2], 0,
        "sandbox root could ptrace the emulator's fork: {out}"
    );
}

/// The number `key` names in `/proc/<pid>/status` (a size in kB, without its unit).
fn status_num(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {s}"))
}

/// Commands start through the sandbox's starter: a process in every namespace and group
/// of the sandbox, not dumpable, invisible from inside, holding no copy of the
/// emulator's heap. Killed, commands still start (by forking the emulator).
#[tokio::test]
async fn commands_start_through_a_starter_that_holds_nothing_of_the_emulator() {
    // 64 MiB of the emulator's heap, written (resident) before the sandbox is made.
    let ballast = std::hint::black_box(vec![7u8; 64 << 20]);
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let (pid, before) = fake
        .envd
        .starter()
        .expect("an isolated sandbox has a starter");
    let (out, err, code) = root_sh(
        &fake,
        "readlink /proc/self/ns/pid /proc/self/ns/user /proc/self/ns/mnt /proc/self/ns/net \
         /proc/self/ns/time; cat /proc/self/cgroup; ls /proc | grep -c '^[0-9]'",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (_, after) = fake.envd.starter().unwrap();
    assert_eq!(
        after,
        before + 1,
        "the command did not go through the starter"
    );
    // The starter is in the sandbox's namespaces (its PID namespace for its children)
    // and cgroups.
    let ns = |kind: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
            .unwrap()
            .display()
            .to_string()
    };
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(ns("pid_for_children").as_str()));
    for kind in ["user", "mnt", "net", "time"] {
        assert_eq!(lines.next(), Some(ns(kind).as_str()), "{kind}: {out}");
    }
    // Seen from the host, its cgroups are the sandbox's (a command's own, seen from
    // inside, are init's: `commands_start_in_the_cgroups_of_init`).
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let rest: Vec<&str> = lines.collect();
    let (count, cgroups) = rest.split_last().unwrap();
    assert_eq!(cgroups.len(), theirs.lines().count(), "{out}");
    let sandbox_group = |ctrl: &str| {
        theirs.lines().any(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
            ctrls.split(',').any(|c| c == ctrl) && path.contains("e2b-local-")
        })
    };
    if fake.envd.missing_limits().is_empty() {
        assert!(sandbox_group("memory") && sandbox_group("pids"), "{theirs}");
    }
    // From inside, only init and the command itself (`ls`, `grep` and the shell): the
    // starter has no pid there.
    assert!(count.parse::<u32>().unwrap() <= 4, "{out}");
    // Not dumpable: its /proc files belong to the host's root, whatever its credentials.
    let dumpable = std::fs::metadata(format!("/proc/{pid}/environ")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&dumpable), 0);
    // Made by the starters' maker, yet the emulator's child (as are the commands).
    assert_eq!(status_num(pid, "PPid:") as u32, std::process::id());
    // It holds no copy of the emulator's heap nor of its other threads' memory.
    let own = status_num(pid, "RssAnon:");
    let emulator = status_num(std::process::id(), "RssAnon:");
    eprintln!("starter RssAnon {own} kB, emulator {emulator} kB");
    assert!(
        own < 8 * 1024 && emulator > 64 * 1024,
        "the starter holds {own} kB of anonymous memory (the emulator {emulator} kB)"
    );
    drop(ballast);
    // Nor the emulator's environment (the host's): the main thread's stack is unmapped.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&environ).contains("CARGO_MANIFEST_DIR"),
        "the starter holds the emulator's environment"
    );
    // Its null stdin is /dev/null, by that name.
    let (out, err, code) = root_sh(&fake, "readlink /proc/self/fd/0").await;
    assert_eq!((out.as_str(), code), ("/dev/null\n", 0), "{err}");
    // Gone, the next command forks the emulator and runs all the same.
    // SAFETY: kill on the starter, a child of this process that the sandbox owns.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let (out, err, code) = root_sh(&fake, "readlink /proc/self/fd/0").await;
    assert_eq!((out.as_str(), code), ("/dev/null\n", 0), "{err}");
    assert_eq!(fake.envd.starter(), None);
}

/// A template whose mount points nest (`/home` and `/home/user/data`): root in the sandbox
/// swaps `/home/user` (its own files) for a link to a host directory, then the sandbox
/// boots cold. The boot walks the sandbox's tree to lay out the mount points: it never
/// follows the link (the host directory stays empty) and fails, naming the path.
#[tokio::test]
async fn a_cold_boot_never_follows_a_link_the_sandbox_planted_in_its_tree() {
    let target = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut template = testing_fake::template::Template::base();
    template.mounts.push("/home/user/data".into());
    let cfg = testing_fake::envd::EnvdConfig {
        sandbox_id: "nestedmounts".into(),
        template,
        root: root.path().join("sbx"),
        access_token: None,
        env_vars: Default::default(),
        allow_internet: false,
        volumes: Vec::new(),
        hidden: Vec::new(),
    };
    let envd = testing_fake::envd::Envd::boot(cfg.clone()).await.unwrap();
    let scratch = envd_support::TempDir(root.path().join("unused"));
    let fake = envd_support::serve(envd, scratch, None).await;
    require_isolation(&fake);
    let plant = format!(
        "mv /home/user /home/user.old && ln -s {} /home/user && echo planted",
        target.path().display()
    );
    let (out, err, code) = root_sh(&fake, &plant).await;
    assert_eq!((out.as_str(), code), ("planted\n", 0), "{err}");
    // As the control plane's cold resume: the old processes end, the tree stays.
    fake.envd.stop_all().await;
    let again = testing_fake::envd::Envd::boot(cfg).await;
    let left = crate::support::names_in(target.path());
    assert!(left.is_empty(), "the cold boot wrote {left:?} on the host");
    let err = again.err().map(|e| e.to_string()).unwrap_or_default();
    // Named as the sandbox names it, never by the emulator's state directory.
    assert!(err.contains("/home/user "), "{err}");
    let state = root.path().display().to_string();
    assert!(!err.contains(&state), "{err}");
    drop(fake);
}

/// A request larger than the starter takes (strings over 256 KiB: here three variables
/// of 100 KiB) is forked the old way and runs all the same, with every byte.
#[tokio::test]
async fn a_command_too_large_for_the_starter_is_forked_and_runs() {
    let fake = boot("base", None).await;
    require_isolation(&fake);
    let (_, before) = fake.envd.starter().expect("a starter");
    let big = "x".repeat(100 * 1024);
    let body = serde_json::json!({
        "process": {
            "cmd": "/bin/sh",
            "args": ["-c", "printf %s \"$A$B$C\" | wc -c"],
            "envs": {"A": big, "B": big, "C": big},
        },
        "stdin": false,
    });
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, end) = s.collect().await;
    assert_eq!(end, serde_json::json!({}), "{end}");
    let (out, err, _, _) = envd_support::outputs(&msgs);
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        (3 * 100 * 1024).to_string(),
        "{}",
        String::from_utf8_lossy(&err)
    );
    // Forked, not started by the starter, which is still there for the next one.
    assert_eq!(
        fake.envd.starter(),
        Some((fake.envd.starter().unwrap().0, before))
    );
    let (out, _, code) = root_sh(&fake, "echo small").await;
    assert_eq!((out.as_str(), code), ("small\n", 0));
    assert_eq!(fake.envd.starter().unwrap().1, before + 1);
}
