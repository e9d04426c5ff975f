//! A local spawn does not outlive its host: a host process (this test binary run again
//! as a child, running only [`host_child`]) starts commands through `LocalSubprocess`,
//! one of them from a thread that ends at once, reports their processes' pids and is
//! SIGKILLed; every one of those processes ends (the host-death keeper,
//! `exec_world_sys::keeper`). Before the kill, the command started from the ended
//! thread still runs (a parent-death signal would have ended it with the thread).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use exec_world::{LocalSubprocess, SpawnSpec, Subprocess};
use futures::StreamExt;

/// Set in the host child's environment: [`host_child`] runs only there.
const HOST_VAR: &str = "EXEC_WORLD_TEST_HOST_CHILD";

/// A group leader, a background job of its group and (cgroup only) a `setsid`'d
/// process; prints `PIDS leader bg setsid` and `ready`, then waits.
const TREE: &str = r#"sleep 1000 &
bg=$!
setsid sleep 1001 &
ss=$!
echo "PIDS $$ $bg $ss"
echo ready
exec sleep 1002"#;

/// Reads `child`'s stdout up to `ready`; returns the `PIDS` line's numbers.
async fn pids_of(child: &mut exec_world::Child) -> Vec<u32> {
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = String::new();
    while !seen.contains("ready") {
        match tokio::time::timeout(Duration::from_secs(30), out.next()).await {
            Ok(Some(Ok(c))) => seen.push_str(&String::from_utf8_lossy(&c)),
            other => panic!("no ready: {other:?} after {seen:?}"),
        }
    }
    seen.lines()
        .find_map(|l| l.strip_prefix("PIDS "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The host: only in the child process (else a no-op test).
#[test]
fn host_child() {
    if std::env::var_os(HOST_VAR).is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let p = LocalSubprocess::new().expect("adapter");
        let spec = || SpawnSpec::new("sh").arg("-c").arg(TREE);
        let mut a = p.spawn(spec()).expect("spawn");
        // The second command from a thread that ends right after the spawn.
        let handle = tokio::runtime::Handle::current();
        let p2 = p.clone();
        let mut b = std::thread::spawn(move || {
            let _rt = handle.enter();
            p2.spawn(spec()).expect("spawn from a thread")
        })
        .join()
        .expect("the spawning thread");
        let mut all = pids_of(&mut a).await;
        all.extend(pids_of(&mut b).await);
        let contained = p.capabilities().contained_escapes;
        println!(
            "HOST {contained} {}",
            all.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        );
        // Hold the children (dropping them would kill them) until killed.
        tokio::time::sleep(Duration::from_secs(120)).await;
        drop((a, b));
    });
}

/// Kills and reaps the host child when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Live (non-zombie) ones of `pids`.
fn alive(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                !st.rsplit(')')
                    .next()
                    .is_some_and(|r| matches!(r.trim_start().chars().next(), Some('Z' | 'X')))
            })
        })
        .collect()
}

#[test]
fn local_spawns_end_when_their_host_is_killed() {
    let exe = std::env::current_exe().expect("test binary");
    let mut host = Command::new(exe)
        .args([
            "--exact",
            "local_host_death::host_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOST_VAR, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("host child");
    let mut lines = BufReader::new(host.stdout.take().expect("stdout")).lines();
    // Whatever happens below, the host does not outlive the test.
    let host = KillOnDrop(host);
    let report = loop {
        match lines.next() {
            // libtest's `test … ` may precede it on the line.
            Some(Ok(l)) if l.contains("HOST ") => {
                break l[l.find("HOST ").unwrap_or_default()..].to_owned();
            }
            Some(Ok(_)) => continue,
            other => {
                panic!("the host ended without a report: {other:?}");
            }
        }
    };
    let mut words = report.split_whitespace().skip(1);
    let contained = words.next() == Some("true");
    let pids: Vec<u32> = words.filter_map(|w| w.parse().ok()).collect();
    assert_eq!(pids.len(), 6, "{report}");
    // Without a cgroup per spawn the `setsid`'d ones (every third) are out of reach.
    let reachable: Vec<u32> = pids
        .iter()
        .enumerate()
        .filter(|(i, _)| contained || i % 3 != 2)
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(
        alive(&pids),
        pids,
        "all run while the host lives, the thread's too"
    );

    let mut host = host;
    host.0.kill().expect("SIGKILL the host");
    let _ = host.0.wait();
    let until = Instant::now() + Duration::from_secs(30);
    let mut left = alive(&reachable);
    while !left.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        left = alive(&reachable);
    }
    // What the host left and nothing ended (outside a cgroup): ours to end.
    for p in alive(&pids) {
        // SAFETY: kill(2) on a pid this test's host started and reported.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "survivors of the host: {left:?} of {pids:?}"
    );
}
