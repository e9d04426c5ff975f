//! The escapes only a cgroup per spawn catches, on the emulator: a process that calls
//! `setsid` (new session and group), clears its environment with `env -i` (the marker
//! is gone) and loses its parent by a double fork leaves nothing the marker scan or the
//! group/session/parent walk could find. The emulator gives each sandbox a writable
//! cgroup v2 subtree, as root in an E2B VM has, so the adapter runs every spawn in a
//! cgroup of its own and claims `contained_escapes`; then no such process survives
//! `terminate`, a cut stream, envd's process deadline or a terminal's end. Survivors are
//! counted by pid in the sandbox.

use crate::subprocess_e2b_support;

use std::time::Duration;

use exec_world::{SpawnSpec, Subprocess, TerminalSpec};
use futures::StreamExt;
use subprocess_e2b::E2bSubprocess;
use subprocess_e2b_support::{Env, env, output_of, proc_of, stdout_of, within};
use testing_fake::{FaultAction, FaultRule, Plane};

/// The shell and three escapes that carry no marker: `env -i setsid` direct, double
/// forked with a TERM/HUP-ignoring loop and the parent gone, and double forked with its
/// output closed. Each appends its pid to `$1`; then the shell prints `ready` and ticks.
const ESCAPES: &str = r#"f=$1
echo $$ >> "$f"
env -i setsid sh -c 'echo $$ >> "$1"; exec sleep 1000' sh "$f" &
sh -c 'env -i setsid sh -c "trap \"\" TERM HUP; echo \$\$ >> \"\$1\"; while :; do sleep 1; done" sh "$1" & exit 0' sh "$f"
sh -c 'env -i setsid sh -c "echo \$\$ >> \"\$1\"; exec sleep 1000" sh "$1" </dev/null >/dev/null 2>&1 &' sh "$f"
while [ "$(wc -l < "$f")" -lt 4 ]; do sleep 0.05; done
echo ready
while :; do echo tick; sleep 0.2; done
"#;

/// The live (non-zombie) pids among those listed in `file`; panics unless all 4
/// members of [`ESCAPES`] had started.
async fn survivors(p: &E2bSubprocess, file: &str) -> Vec<u32> {
    let text = stdout_of(p, r#"cat -- "$1" 2>/dev/null"#, &[file]).await;
    let pids: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    assert_eq!(pids.len(), 4, "all escapes started: {pids:?}");
    let args: Vec<&str> = pids.iter().map(String::as_str).collect();
    stdout_of(
        p,
        r#"for p; do
  st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
  case ${st##*) } in Z*|X*) continue ;; esac
  echo "$p"
done"#,
        &args,
    )
    .await
    .split_whitespace()
    .filter_map(|w| w.parse().ok())
    .collect()
}

/// [`ESCAPES`] through `p`, its pids listed in `file`.
fn spawn_escapes(p: &E2bSubprocess, file: &str) -> exec_world::Child {
    p.spawn(
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(ESCAPES)
            .arg("sh")
            .arg(file),
    )
    .expect("spawn")
}

/// Waits for `ready` on `out`.
async fn until_ready(out: &mut exec_world::OutputStream) {
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
}

/// The adapter, or `None` (noted) when the host gives sandboxes no cgroups. Checks that
/// `contained_escapes` is claimed exactly when root in the sandbox has a writable cgroup
/// v2 with `cgroup.kill` (what the emulator gives a sandbox on a host with a usable
/// cgroup2). The root adapter is returned too: dropping it would remove its helper in
/// the background, a `Start` a fault rule meant for the test's spawn could catch.
async fn contained(env: &Env) -> Option<(E2bSubprocess, E2bSubprocess)> {
    let p = proc_of(env).await;
    let root = E2bSubprocess::at_home(env.api.clone(), Some("root".into()))
        .await
        .expect("root adapter");
    let has = stdout_of(
        &root,
        "test -w /sys/fs/cgroup/cgroup.procs && test -e /sys/fs/cgroup/cgroup.kill && echo yes",
        &[],
    )
    .await
        == "yes\n";
    let claimed = p.capabilities().contained_escapes;
    assert_eq!(
        claimed, has,
        "contained_escapes is claimed exactly when the sandbox has a writable cgroup v2"
    );
    if !claimed {
        println!("skipped: this host gives sandboxes no writable cgroup v2");
        return None;
    }
    Some((p, root))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_spawn_runs_in_a_cgroup_of_its_own_as_the_user_without_privileges() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let script = r#"id -un; grep '^0::' /proc/self/cgroup
grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapAmb):' /proc/self/status | tr -s '\t ' ' '
id -G"#;
    let (a, b) = tokio::join!(stdout_of(&p, script, &[]), stdout_of(&p, script, &[]));
    let ids = stdout_of(&p, "getent passwd user | cut -d: -f3,4", &[]).await;
    let (uid, gid) = ids.trim().split_once(':').expect("uid:gid");
    let groups = stdout_of(&p, "id -G user", &[]).await;
    for out in [&a, &b] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.first(), Some(&"user"), "{out}");
        assert!(
            lines
                .get(1)
                .is_some_and(|l| l.starts_with("0::/exec-world-")),
            "own cgroup: {out}"
        );
        for want in [
            format!("Uid: {uid} {uid} {uid} {uid}"),
            format!("Gid: {gid} {gid} {gid} {gid}"),
            "CapInh: 0000000000000000".to_owned(),
            "CapPrm: 0000000000000000".to_owned(),
            "CapEff: 0000000000000000".to_owned(),
            "CapAmb: 0000000000000000".to_owned(),
        ] {
            assert!(lines.contains(&want.as_str()), "{want:?} in {out}");
        }
        assert_eq!(lines.last().copied(), Some(groups.trim()), "groups: {out}");
    }
    let cg = |s: &str| s.lines().nth(1).map(str::to_owned);
    assert_ne!(cg(&a), cg(&b), "two running spawns share no cgroup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminate_kills_env_cleared_double_forks() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let file = format!("{}/pids-terminate", p.cwd());
    let mut child = spawn_escapes(&p, &file);
    let mut out = child.take_stdout().expect("stdout");
    until_ready(&mut out).await;
    within("terminate", 120, child.terminate(Duration::ZERO))
        .await
        .expect("terminate");
    assert_eq!(survivors(&p, &file).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_stream_kills_env_cleared_double_forks() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let file = format!("{}/pids-cut", p.cwd());
    // start event, helper header, `ready`, then ticks: cut after a few ticks.
    env.emu.faults().add(
        FaultRule::new(FaultAction::CutStream { after_frames: 8 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let child = spawn_escapes(&p, &file);
    let r = within("wait after a cut", 120, child.wait()).await;
    assert!(r.is_err(), "a cut stream is an error: {r:?}");
    assert_eq!(survivors(&p, &file).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_backstop_kills_env_cleared_double_forks_after_the_host_let_go() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let file = format!("{}/pids-backstop", p.cwd());
    let bounded = p.clone().kill_after(Some(Duration::from_secs(3)));
    let mut child = spawn_escapes(&bounded, &file);
    let mut out = child.take_stdout().expect("stdout");
    until_ready(&mut out).await;
    // The host lets go: nothing on this side kills the tree from now on.
    child.detach();
    drop(out);
    let mut left = survivors(&p, &file).await;
    for _ in 0..600 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = survivors(&p, &file).await;
    }
    assert_eq!(
        left,
        Vec::<u32>::new(),
        "the backstop killed the whole cgroup"
    );
}

/// Without the native helper the backstop is `timeout -s KILL` in front of the program:
/// its process group dies (not what left it) and `wait` sees the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sh_helpers_backstop_kills_the_process_group() {
    let env = env().await;
    let home = proc_of(&env).await.cwd().clone();
    let sh = E2bSubprocess::new(
        env.api.clone(),
        subprocess_e2b::E2bSubprocessOptions::new(home.as_str())
            .native_helper(false)
            .kill_after(Some(Duration::from_secs(2))),
    )
    .expect("adapter");
    let (text, st) = output_of(
        &sh,
        SpawnSpec::new("sh")
            .arg("-c")
            .arg("sleep 1000 & echo $!; wait"),
    )
    .await;
    assert_eq!(st.signal, Some(9), "{st:?}");
    let sleeper = text.trim().to_owned();
    let alive = stdout_of(
        &sh,
        r#"st=$(cat "/proc/$1/stat" 2>/dev/null) || exit 0; case ${st##*) } in Z*|X*) ;; *) echo alive ;; esac"#,
        &[&sleeper],
    )
    .await;
    assert_eq!(alive, "", "the group's sleep {sleeper} died with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_deadline_kills_env_cleared_double_forks() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let file = format!("{}/pids-deadline", p.cwd());
    let timed = p.clone().process_timeout(Some(Duration::from_secs(3)));
    let mut child = spawn_escapes(&timed, &file);
    let mut out = child.take_stdout().expect("stdout");
    until_ready(&mut out).await;
    let r = within("wait past the deadline", 120, child.wait()).await;
    assert!(r.is_err(), "no end event, so no exit status: {r:?}");
    assert_eq!(survivors(&p, &file).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_terminal_kills_env_cleared_double_forks() {
    let env = env().await;
    let Some((p, _root)) = contained(&env).await else {
        return;
    };
    let file = format!("{}/pids-terminal", p.cwd());
    let mut t = p
        .spawn_terminal(
            TerminalSpec::new("sh")
                .arg("-c")
                .arg(ESCAPES)
                .arg("sh")
                .arg(&file),
        )
        .expect("terminal");
    let mut out = t.take_output().expect("output");
    until_ready(&mut out).await;
    drop(out);
    drop(t);
    // The kill on drop runs in the background: give it a bounded while.
    let mut alive = Vec::new();
    for _ in 0..100 {
        alive = survivors(&p, &file).await;
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(alive, Vec::<u32>::new());
}
