//! Durable commands of LocalSubprocess beyond the shared suite: the host process restarts,
//! the supervisor's isolation from the host, an unknown outcome when the supervisor is
//! killed, a reused pid never signalled, the disk bound, the state directory.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;

use exec_world::{
    DurableId, DurableSpec, DurableState, ErrorKind, LocalSubprocess, OutputOffsets, Signal,
    SpawnSpec, Subprocess,
};

/// A scratch directory removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "exec-world-durable-{name}-{}-{}",
            std::process::id(),
            DurableId::random()
        ));
        std::fs::create_dir_all(&dir).expect("scratch");
        Scratch(dir)
    }

    fn state(&self) -> PathBuf {
        self.0.join("state")
    }

    fn proc(&self) -> LocalSubprocess {
        LocalSubprocess::new()
            .expect("LocalSubprocess")
            .with_state_dir(self.state())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sh(script: &str, args: &[&str], id: &DurableId) -> SpawnSpec {
    SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args.iter().map(|a| a.to_string()))
        .durable(DurableSpec::new(id.clone()))
}

/// `(supervisor pid, command pid)` from the record's `pid` file.
fn pids(state: &Path, id: &DurableId) -> (u32, u32) {
    let text = std::fs::read_to_string(state.join("durable").join(id.as_str()).join("pid"))
        .expect("pid file");
    let mut sup = 0;
    let mut cmd = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "supervisor" => sup = f[1].parse().expect("pid"),
            "command" => cmd = f[1].parse().expect("pid"),
            _ => {}
        }
    }
    (sup, cmd)
}

/// True while `pid` runs (a zombie counts as dead).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn ppid(pid: u32) -> u32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = s.rsplit(')').next().expect("stat fields");
    rest.split_whitespace()
        .nth(1)
        .expect("ppid")
        .parse()
        .expect("ppid")
}

async fn read_until(out: &mut exec_world::OutputStream, seen: &mut Vec<u8>, needle: &str) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !String::from_utf8_lossy(seen).contains(needle) {
            match out.next().await {
                Some(Ok(c)) => seen.extend_from_slice(&c),
                other => panic!("stream ended before {needle:?}: {other:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{needle:?} not seen; seen {:?}",
            String::from_utf8_lossy(seen)
        )
    });
}

/// The variable that makes `host_helper` act (it names the state directory).
const HELPER_VAR: &str = "EXEC_WORLD_DURABLE_HELPER_STATE";

/// Run only as a separate process by `durable_host_restart`: starts two durable commands
/// and exits at once, destructors skipped, like a host that dies.
#[test]
#[ignore = "a helper process of durable_host_restart, not a test of its own"]
fn host_helper() {
    let Some(state) = std::env::var_os(HELPER_VAR) else {
        return;
    };
    let go = std::env::var("EXEC_WORLD_DURABLE_HELPER_GO").expect("go path");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let proc = LocalSubprocess::new()
            .expect("proc")
            .with_state_dir(PathBuf::from(&state));
        let running = DurableId::new("restart-running").expect("id");
        let ended = DurableId::new("restart-ended").expect("id");
        let script = r#"echo from-old-host; while [ ! -e "$1" ]; do sleep 0.02; done; echo after-restart; exit 4"#;
        let a = proc.spawn(sh(script, &[&go], &running)).expect("spawn");
        let b = proc.spawn(sh("echo ended-out; exit 9", &[], &ended)).expect("spawn");
        b.wait().await.expect("wait ended");
        println!("helper-started {}", a.pid().unwrap_or(0));
        std::process::exit(0);
    });
}

/// The host process that started durable commands exits; a new process attaches to the
/// running one and to the ended one and gets all their output and statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_host_restart() {
    let s = Scratch::new("restart");
    let go = s.0.join("go");
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "--ignored",
        "--exact",
        "durable_local::host_helper",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER_VAR, s.state())
    .env("EXEC_WORLD_DURABLE_HELPER_GO", &go)
    .kill_on_drop(true);
    // If a supervisor kept the helper's stdout open, this would never return.
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the helper process and its pipes ended")
        .expect("helper ran");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helper: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started: u32 = text
        .split("helper-started ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("helper output: {text}"));
    assert!(running(started), "the durable command died with its host");

    let proc = s.proc();
    let list = proc.durable_list().await.expect("list");
    let running_id = DurableId::new("restart-running").expect("id");
    let ended_id = DurableId::new("restart-ended").expect("id");
    let state = |id: &DurableId| list.iter().find(|i| &i.id == id).map(|i| i.state);
    assert_eq!(state(&running_id), Some(DurableState::Running));
    assert!(matches!(state(&ended_id), Some(DurableState::Exited(s)) if s.code == Some(9)));

    let mut a = proc
        .durable_attach(&running_id, OutputOffsets::default())
        .await
        .expect("attach running");
    assert_eq!(a.child.pid(), Some(started));
    let mut o = a.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut o, &mut seen, "from-old-host").await;
    std::fs::write(&go, b"go").expect("go");
    read_until(&mut o, &mut seen, "after-restart").await;
    let st = tokio::time::timeout(Duration::from_secs(30), a.child.wait())
        .await
        .expect("end")
        .expect("wait");
    assert_eq!(st.code, Some(4));

    let mut b = proc
        .durable_attach(&ended_id, OutputOffsets::default())
        .await
        .expect("attach ended");
    let mut o = b.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    while let Some(c) = o.next().await {
        seen.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(seen, b"ended-out\n");
    assert_eq!(b.child.wait().await.expect("wait").code, Some(9));
    proc.durable_collect(&running_id).await.expect("collect");
    proc.durable_collect(&ended_id).await.expect("collect");
}

/// The supervisor is not this process's child, holds none of this process's descriptors
/// (only /dev/null, its record and its pipes), and the record is private (0700 / 0600).
#[tokio::test]
async fn durable_supervisor_is_detached_from_the_host() {
    let s = Scratch::new("isolation");
    let proc = s.proc();
    let id = DurableId::random();
    let child = proc
        .spawn(sh("exec sleep 600", &[], &id).stdin(exec_world::StdinMode::Piped))
        .expect("spawn");
    let (sup, cmd) = pids(&s.state(), &id);
    assert_eq!(child.pid(), Some(cmd));
    assert_ne!(
        ppid(sup),
        std::process::id(),
        "the supervisor is the host's child"
    );
    assert_eq!(ppid(cmd), sup, "the command is the supervisor's child");
    let record = s.state().join("durable").join(id.as_str());
    for entry in std::fs::read_dir(format!("/proc/{sup}/fd"))
        .expect("fds")
        .flatten()
    {
        let target = std::fs::read_link(entry.path()).expect("fd target");
        let t = target.to_string_lossy();
        assert!(
            t == "/dev/null"
                || t.starts_with(record.to_str().expect("utf-8"))
                || t.starts_with("pipe:")
                || t.starts_with("anon_inode:"),
            "the supervisor holds {t}"
        );
    }
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&record), 0o700);
    assert_eq!(mode(&s.state().join("durable")), 0o700);
    for f in ["stdout", "stderr", "stdin", "pid", "meta"] {
        assert_eq!(mode(&record.join(f)) & 0o077, 0, "{f} is open to others");
    }
    child
        .terminate(Duration::from_secs(2))
        .await
        .expect("terminate");
    proc.durable_collect(&id).await.expect("collect");
}

/// A supervisor killed before the command ended: the outcome is unknown (never a guess),
/// `terminate` still ends the orphaned command.
#[tokio::test]
async fn durable_unknown_when_the_supervisor_is_killed() {
    let s = Scratch::new("unknown");
    let proc = s.proc();
    let id = DurableId::random();
    drop(proc.spawn(sh("exec sleep 600", &[], &id)).expect("spawn"));
    let (sup, cmd) = pids(&s.state(), &id);
    // SAFETY: kill(2) on the supervisor this test started.
    assert_eq!(unsafe { libc::kill(sup as i32, libc::SIGKILL) }, 0);
    for _ in 0..500 {
        if !running(sup) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fresh = s.proc();
    let info = fresh
        .durable_list()
        .await
        .expect("list")
        .into_iter()
        .find(|i| i.id == id)
        .expect("listed");
    assert_eq!(info.state, DurableState::Unknown);
    let a = fresh
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let e = a.child.wait().await.expect_err("no status to give");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert!(running(cmd));
    let e = a
        .child
        .terminate(Duration::from_secs(2))
        .await
        .expect_err("still unknown");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown);
    for _ in 0..500 {
        if !running(cmd) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!running(cmd), "terminate left the orphaned command running");
    fresh
        .durable_collect(&id)
        .await
        .expect("collect an unknown one");
}

/// A record whose command pid now names another process (reused pid: a different start
/// time) never gets that process signalled, by `signal` or by `terminate`.
#[tokio::test]
async fn durable_reused_pid_is_never_signalled() {
    let s = Scratch::new("reused");
    let proc = s.proc();
    let id = DurableId::random();
    let child = proc.spawn(sh("exit 0", &[], &id)).expect("spawn");
    child.wait().await.expect("wait");
    // A stranger: a plain (non-durable) process leading its own group.
    let stranger = LocalSubprocess::new()
        .expect("proc")
        .spawn(SpawnSpec::new("sleep").arg("600"))
        .expect("stranger");
    let spid = stranger.pid().expect("pid");
    let record = s.state().join("durable").join(id.as_str());
    // The record now says its command was `spid`, started at another time.
    std::fs::write(
        record.join("pid"),
        format!("supervisor 999999 1\ncommand {spid} 1\n"),
    )
    .expect("forge pid");
    std::fs::remove_file(record.join("status")).expect("drop status");
    let a = proc
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    a.child.signal(Signal::Kill).await.expect("signal");
    let e = a
        .child
        .terminate(Duration::from_millis(200))
        .await
        .expect_err("unknown");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(running(spid), "a reused pid was signalled");
    drop(stranger);
    proc.durable_collect(&id).await.expect("collect");
}

/// The record's disk use stays near the cap (dropped bytes are punched out).
#[tokio::test]
async fn durable_disk_use_is_bounded_by_the_cap() {
    let s = Scratch::new("disk");
    let proc = s.proc();
    let id = DurableId::random();
    let cap = 2u64 << 20;
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg("head -c 30000000 /dev/zero | tr '\\0' x")
        .durable(DurableSpec::new(id.clone()).output_cap(cap));
    let child = proc.spawn(spec).expect("spawn");
    assert!(child.wait().await.expect("wait").success());
    let a = proc
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    assert_eq!(a.dropped.stdout, 30_000_000 - cap);
    let f = s.state().join("durable").join(id.as_str()).join("stdout");
    // The supervisor punches after it drained the pipes, then removes the cgroup and
    // writes `closed`; give it up to 60 s on a loaded machine (a bound, not a timing).
    let mut used = u64::MAX;
    for _ in 0..6000 {
        let m = std::fs::metadata(&f).expect("stat");
        assert_eq!(m.len(), 30_000_000);
        used = m.blocks() * 512;
        if s.state()
            .join("durable")
            .join(id.as_str())
            .join("closed")
            .exists()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        used <= cap + (1 << 20) + (64 << 10),
        "{used} bytes on disk for a cap of {cap}"
    );
    // The command's cgroup (where this process can make them) is removed at its end.
    let meta = std::fs::read_to_string(s.state().join("durable").join(id.as_str()).join("meta"))
        .expect("meta");
    if let Some(cg) = meta.lines().find_map(|l| l.strip_prefix("cgroup ")) {
        let cg = percent_encoding::percent_decode_str(cg)
            .decode_utf8_lossy()
            .into_owned();
        assert!(cg.contains("exec-world-"), "{cg}");
        let left = Path::new(&cg).exists();
        let members = std::fs::read_to_string(Path::new(&cg).join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .map(|p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                format!("{p}: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
            })
            .collect::<Vec<_>>();
        assert!(
            !left,
            "the ended command's cgroup {cg} is left (closed: {}; members: {members:?})",
            s.state()
                .join("durable")
                .join(id.as_str())
                .join("closed")
                .exists()
        );
    } else {
        println!("no cgroup here: the cgroup removal is not checked");
    }
    proc.durable_collect(&id).await.expect("collect");
}

/// The state directory: a default under the user's state home, a builder option, and a
/// records directory others can write is refused before anything runs.
#[tokio::test]
async fn durable_state_dir_default_and_checks() {
    let default = LocalSubprocess::new().expect("proc");
    assert!(default.state_dir().ends_with("exec-world") || default.state_dir().starts_with("/tmp"));
    let s = Scratch::new("statedir");
    let proc = s.proc();
    assert_eq!(proc.state_dir(), s.state());
    std::fs::create_dir_all(s.state().join("durable")).expect("mkdir");
    std::fs::set_permissions(
        s.state().join("durable"),
        std::fs::Permissions::from_mode(0o777),
    )
    .expect("chmod");
    let ran = s.0.join("ran");
    let e = proc
        .spawn(sh(
            r#"echo x > "$1""#,
            &[ran.to_str().expect("utf-8")],
            &DurableId::random(),
        ))
        .expect_err("an open records directory");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!ran.exists());
    // A missing program: NotFound, and the id stays free.
    std::fs::set_permissions(
        s.state().join("durable"),
        std::fs::Permissions::from_mode(0o700),
    )
    .expect("chmod");
    let id = DurableId::random();
    let e = proc
        .spawn(SpawnSpec::new("no-such-program-xyz").durable(DurableSpec::new(id.clone())))
        .expect_err("missing program");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(proc.durable_list().await.expect("list").is_empty());
    let c = proc.spawn(sh("exit 0", &[], &id)).expect("the id is free");
    assert!(c.wait().await.expect("wait").success());
    proc.durable_collect(&id).await.expect("collect");
}

/// The supervisor, a fork of this process, keeps none of this process's memory: 96 MiB
/// touched here before the start are not in its resident set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_supervisor_keeps_none_of_the_host_memory() {
    let s = Scratch::new("memory");
    let proc = s.proc();
    let mut big = vec![1u8; 96 << 20];
    let id = DurableId::random();
    let child = proc
        .spawn(sh("echo up; exec sleep 600", &[], &id))
        .expect("spawn");
    let (sup, _) = pids(&s.state(), &id);
    // The host changes its pages afterwards (each one copied for the host, not kept by
    // the supervisor).
    for b in big.iter_mut().step_by(4096) {
        *b = 2;
    }
    let status = std::fs::read_to_string(format!("/proc/{sup}/status")).expect("status");
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("RssAnon");
    assert!(
        rss_kib < 16 * 1024,
        "the supervisor holds {rss_kib} KiB of anonymous memory"
    );
    // And it still does its job after shedding: output, status.
    let mut a = proc
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let mut o = a.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut o, &mut seen, "up").await;
    let st = child
        .terminate(Duration::from_secs(2))
        .await
        .expect("terminate");
    assert_eq!(st.signal, Some(15));
    assert_eq!(big[4096], 2);
    proc.durable_collect(&id).await.expect("collect");
}

/// A reader that falls more than the cap behind gets an `Interrupted` item naming the
/// offset to attach again from (never zeros or a silently shifted stream), and an attach
/// from there gets exactly the kept bytes.
#[tokio::test]
async fn durable_reader_behind_the_cap_is_told_where_to_resume() {
    let s = Scratch::new("lag");
    let proc = s.proc();
    let id = DurableId::random();
    let go = s.0.join("go");
    let cap = 64u64 << 10;
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg(r#"while [ ! -e "$1" ]; do sleep 0.02; done; head -c 1000000 /dev/zero | tr '\0' y"#)
        .arg("sh")
        .arg(go.to_str().expect("utf-8"))
        .durable(DurableSpec::new(id.clone()).output_cap(cap));
    let mut child = proc.spawn(spec).expect("spawn");
    // Attached from 0 before anything was written; reads only once all was written.
    let mut out = child.take_stdout().expect("stdout");
    std::fs::write(&go, b"go").expect("go");
    assert!(child.wait().await.expect("wait").success());
    let e = match out.next().await {
        Some(Err(e)) => e,
        other => panic!("expected an error item, got {other:?}"),
    };
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    let resume = 1_000_000 - cap;
    assert!(
        e.to_string().contains(&format!("from offset {resume}")),
        "{e}"
    );
    assert!(
        out.next().await.is_none(),
        "the stream goes on after the error"
    );
    let mut a = proc
        .durable_attach(
            &id,
            OutputOffsets {
                stdout: resume,
                stderr: 0,
            },
        )
        .await
        .expect("attach");
    assert_eq!(a.dropped.stdout, 0);
    let mut o = a.child.take_stdout().expect("stdout");
    let mut got = Vec::new();
    while let Some(c) = o.next().await {
        got.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(got.len() as u64, cap);
    assert!(got.iter().all(|&b| b == b'y'));
    proc.durable_collect(&id).await.expect("collect");
}

/// A durable command starts with the same signal dispositions and mask as any local
/// spawn (handled ones at default, ignored ones ignored, SIGPIPE default, none blocked).
#[tokio::test]
async fn durable_command_signals_match_a_plain_spawn() {
    let s = Scratch::new("signals");
    let proc = s.proc();
    let probe = || {
        SpawnSpec::new("grep")
            .arg("-E")
            .arg("^Sig(Blk|Ign|Cgt)")
            .arg("/proc/self/status")
    };
    let mut plain = proc.spawn(probe()).expect("plain");
    let mut o = plain.take_stdout().expect("stdout");
    let mut want = Vec::new();
    while let Some(c) = o.next().await {
        want.extend_from_slice(&c.expect("chunk"));
    }
    assert!(plain.wait().await.expect("wait").success());
    let id = DurableId::random();
    let mut d = proc
        .spawn(probe().durable(DurableSpec::new(id.clone())))
        .expect("durable");
    let mut o = d.take_stdout().expect("stdout");
    let mut got = Vec::new();
    while let Some(c) = o.next().await {
        got.extend_from_slice(&c.expect("chunk"));
    }
    assert!(d.wait().await.expect("wait").success());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    proc.durable_collect(&id).await.expect("collect");
}
