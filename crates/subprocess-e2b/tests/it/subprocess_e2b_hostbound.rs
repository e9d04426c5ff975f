//! A lost host, bounded both ways, on an emulator run as a separate process
//! (`emulator_fixture::child`): a non-durable command ends by itself, through the host
//! lease its spawn helper watches, within the lease bound after envd froze (`SIGSTOP`) or
//! died (`SIGKILL`) mid-command; the same command without a lease runs on (the control
//! that shows the lease is what ends it); and a `wait` with no timeout on the frozen envd
//! errors instead of blocking.
//!
//! Processes are found on this host by a token in their command line (the sandbox's
//! processes are this host's processes, whatever their PID namespace), so nothing needs
//! the frozen or dead emulator to answer. Bounds are upper bounds with ample slack.

use crate::subprocess_e2b_support::within;

use std::time::{Duration, Instant};

use e2b_core::{Client, CreateOptions};
use emulator_fixture::child::ChildEmulator;
use exec_world::{SpawnSpec, Subprocess};
use futures::StreamExt;
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};

/// The lease bound of the leased adapter in these tests.
const LEASE: Duration = Duration::from_secs(6);

/// A command whose processes all carry `token` in their command line: a background
/// loop in its group, a `setsid`'d loop (left the group and the session: only a cgroup
/// reaches it), and the shell itself, which prints `ready` and then ticks.
fn tree(token: &str) -> SpawnSpec {
    let script = format!(
        r#"sh -c 'while :; do sleep 0.2; done' {token}-bg &
setsid sh -c 'while :; do sleep 0.2; done' {token}-setsid &
echo ready
while :; do echo tick; sleep 0.2; done"#
    );
    SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .arg(format!("{token}-main"))
}

/// This host's live (non-zombie) processes whose command line holds `token`, by pid,
/// with whether the `setsid`'d member is among them.
fn carrying(token: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.contains(token) {
            continue;
        }
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| matches!(r.trim_start().chars().next(), Some('Z' | 'X')))
        });
        if !zombie {
            found.push((pid, cmd));
        }
    }
    found
}

/// Polls until the tree's three members (`-bg`, `-setsid`, `-main`) all show, at most
/// 30 s: `ready` is printed before the background members finished their `execve`, and a
/// process in the middle of one shows an empty command line for a moment.
async fn all_started(token: &str) -> Vec<(u32, String)> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let found = carrying(token);
        let has = |m: &str| {
            let tail = format!("{token}-{m}");
            found.iter().any(|(_, c)| c.trim_end().ends_with(&tail))
        };
        if (has("bg") && has("setsid") && has("main")) || Instant::now() >= until {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until no process carries `token`, at most `secs`; returns the survivors.
async fn gone_within(token: &str, secs: u64) -> Vec<(u32, String)> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = carrying(token);
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGKILLs the processes in `procs` (the control's, which nothing else ends).
fn kill_all(procs: &[(u32, String)]) {
    for (pid, _) in procs {
        // SAFETY: kill(2) on pids this test's command started (checked by token just now).
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// Waits for `ready` on the child's stdout (and keeps the stream).
async fn until_ready(child: &mut exec_world::Child) -> exec_world::OutputStream {
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        match within("ready", 60, out.next()).await {
            Some(Ok(c)) => seen.extend_from_slice(&c),
            _ => panic!(
                "output ended before ready: {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
    out
}

/// A sandbox on `emu` and two adapters on it: one with the short lease, one without
/// (the control). Streams go silent-bounded at 3 s so a frozen envd is noticed quickly.
async fn adapters(emu: &ChildEmulator) -> (Client, E2bSubprocess, E2bSubprocess) {
    let cfg = emu
        .config(Duration::from_secs(5))
        .with_stream_idle_timeout(Some(Duration::from_secs(3)));
    let client = Client::new(cfg).expect("client");
    let sb = client
        .create(&CreateOptions::new("base"))
        .await
        .expect("create a sandbox");
    let api = sb.into_api();
    let home = E2bSubprocess::at_home(api.clone(), None)
        .await
        .expect("adapter")
        .cwd()
        .to_string();
    let leased = E2bSubprocess::new(
        api.clone(),
        E2bSubprocessOptions::new(home.clone()).host_lease(Some(LEASE)),
    )
    .expect("leased adapter");
    let unleased = E2bSubprocess::new(api, E2bSubprocessOptions::new(home).host_lease(None))
        .expect("control adapter");
    leased.prepare().await.expect("leased setup");
    unleased.prepare().await.expect("control setup");
    (client, leased, unleased)
}

/// Whether `p` gives every spawn a cgroup (then the `setsid`'d member is reached too).
fn contained(p: &E2bSubprocess) -> bool {
    p.capabilities().contained_escapes
}

/// The members that must end: all, or (without a cgroup per spawn) the process group's.
fn must_end(left: Vec<(u32, String)>, contained: bool) -> Vec<(u32, String)> {
    left.into_iter()
        .filter(|(_, cmd)| contained || !cmd.contains("-setsid"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_envd_ends_leased_commands_within_the_bound_and_wait_errors() {
    let emu = ChildEmulator::start(false);
    let (_client, leased, control) = adapters(&emu).await;
    let token = format!("hostbound-{}", std::process::id());
    let (lt, ct) = (
        format!("{token}-frozen-leased"),
        format!("{token}-frozen-control"),
    );
    let mut child = leased.spawn(tree(&lt)).expect("spawn leased");
    let mut ctl = control.spawn(tree(&ct)).expect("spawn control");
    let _out = until_ready(&mut child).await;
    let _ctl_out = until_ready(&mut ctl).await;
    let started = all_started(&lt).await;
    assert!(started.len() >= 3, "{started:?}");
    let started = all_started(&ct).await;
    assert!(started.len() >= 3, "{started:?}");

    emu.freeze();
    let frozen = Instant::now();
    // A `wait` with no timeout (idle bound 3 s here) errors: never a hang.
    let waiting = tokio::spawn(async move {
        let r = child.wait().await;
        (r, frozen.elapsed(), child)
    });
    // The leased command ends by itself within its bound (slack for a loaded machine).
    let left = must_end(
        gone_within(&lt, LEASE.as_secs() + 30).await,
        contained(&leased),
    );
    let ended = frozen.elapsed();
    assert!(left.is_empty(), "survivors of the lease: {left:?}");
    let (r, waited, child) = within("wait on a frozen envd", 60, waiting)
        .await
        .expect("the wait task");
    assert!(r.is_err(), "{r:?}");
    eprintln!(
        "frozen envd: wait errored after {waited:?}, the leased command ended after {ended:?} (lease {LEASE:?}, cgroup per spawn: {})",
        contained(&leased)
    );
    // The control, started without a lease, is still running: the lease ended the other.
    let ctl_left = carrying(&ct);
    assert!(
        !must_end(ctl_left.clone(), contained(&control)).is_empty(),
        "the unleased command's tree runs on: {ctl_left:?}"
    );
    kill_all(&ctl_left);
    emu.thaw();
    drop(ctl);
    drop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_envd_ends_leased_commands_within_the_bound() {
    // Without isolation the sandbox's processes are plain host processes: they outlive
    // the emulator's SIGKILL (with isolation they would die with its PID namespace), so
    // only the lease can end them.
    let mut emu = ChildEmulator::start(true);
    let (_client, leased, control) = adapters(&emu).await;
    let token = format!("hostbound-{}", std::process::id());
    let (lt, ct) = (
        format!("{token}-killed-leased"),
        format!("{token}-killed-control"),
    );
    let mut child = leased.spawn(tree(&lt)).expect("spawn leased");
    let mut ctl = control.spawn(tree(&ct)).expect("spawn control");
    let _out = until_ready(&mut child).await;
    let _ctl_out = until_ready(&mut ctl).await;
    let started = all_started(&lt).await;
    assert!(started.len() >= 3, "{started:?}");

    emu.kill();
    let killed = Instant::now();
    let left = must_end(
        gone_within(&lt, LEASE.as_secs() + 30).await,
        contained(&leased),
    );
    assert!(left.is_empty(), "survivors of the lease: {left:?}");
    eprintln!(
        "killed envd: the leased command ended after {:?} (lease {LEASE:?}, cgroup per spawn: {})",
        killed.elapsed(),
        contained(&leased)
    );
    let ctl_left = carrying(&ct);
    assert!(
        !must_end(ctl_left.clone(), contained(&control)).is_empty(),
        "the unleased command's tree runs on: {ctl_left:?}"
    );
    kill_all(&ctl_left);
    let r = within("wait on a dead envd", 60, child.wait()).await;
    assert!(r.is_err(), "{r:?}");
    drop(ctl);
}
