//! What the conformance suite does not prove about `E2bSubprocess` on the emulator: the
//! pid is the verified group id (never envd's start event alone), credential-shaped
//! variables are scrubbed, terminal argv/env stay off envd's command lines, a chatty
//! command keeps host memory bounded, the spill file holds the output, the request
//! cost of one spawn, and construction (options, builder methods that keep the caches).

use crate::subprocess_e2b_support;

use std::time::Duration;

use e2b_core::CreateOptions;
use exec_world::{EnvBase, ErrorKind, SpawnSpec, Subprocess, TerminalSpec, WorldPath};
use fs_e2b::{E2bFs, E2bFsOptions};
use futures::StreamExt;
use subprocess_e2b::spill::{SpillTarget, tee};
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};
use subprocess_e2b_support::{env, output_of, proc_of, root_sh};
use testing_fake::{FaultAction, FaultRule, Plane};

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pid_is_none_until_the_wrapper_verified_the_group() {
    let env = env().await;
    let p = proc_of(&env).await; // the user lookup is done and cached
    // The start event arrives, then the stream is cut before the wrapper's header:
    // envd's pid alone never becomes the child's pid.
    env.emu.faults().add(
        FaultRule::new(FaultAction::CutStream { after_frames: 1 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let child = p.spawn(SpawnSpec::new("sleep").arg("30")).expect("spawn");
    assert_eq!(child.pid(), None);
    let r = within("started", child.started()).await;
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::Transport),
        "{r:?}"
    );
    assert_eq!(child.pid(), None, "no pid without the verified header");
    drop(child);

    // A slow start: None right after spawn, then the pid of a real group and session
    // leader.
    env.emu.faults().add(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(500)))
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let child = p.spawn(SpawnSpec::new("sleep").arg("30")).expect("spawn");
    assert_eq!(child.pid(), None, "spawn returns before the remote start");
    let pid = within("started", child.started()).await.expect("started");
    assert_eq!(child.pid(), Some(pid));
    // The header comes just before the wrapper's exec: give the exec a moment.
    let mut ids = String::new();
    for _ in 0..100 {
        ids = output_of(
            &p,
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"read -r st < "/proc/$1/stat"; f() { echo "$3 $4"; }; f ${st##*) }; tr '\0' ' ' < "/proc/$1/cmdline""#)
                .arg("sh")
                .arg(pid.to_string()),
        )
        .await
        .0;
        if ids.ends_with("sleep 30 ") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        ids,
        format!("{pid} {pid}\nsleep 30 "),
        "pgid and sid are the pid, the program runs"
    );
    within("terminate", child.terminate(Duration::from_millis(100)))
        .await
        .expect("terminate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credential_shaped_variables_are_scrubbed() {
    let env = env().await;
    let sb = env
        .client
        .create(
            &CreateOptions::new("base")
                .env_var("MY_API_KEY", "k1")
                .env_var("github_token", "t1")
                .env_var("DB_Password", "p1")
                .env_var("AWS_SECRET_ACCESS_KEY", "s1")
                .env_var("EXEC_WORLD_INTERNAL", "i1")
                .env_var("MYSQL_PASSWD", "p2")
                .env_var("GITHUB_PAT", "ghp1")
                .env_var("NPM_AUTH", "a1")
                .env_var("GOOGLE_APPLICATION_CREDENTIALS", "c1")
                .env_var("DATABASE_URL", "postgres://app:pw1@db:5432/app")
                .env_var("PUBLIC_URL", "https://app@example.com:8080/x")
                .env_var("PLAIN_SETTING", "plain"),
        )
        .await
        .expect("sandbox with env vars");
    let p = E2bSubprocess::at_home(sb.into_api(), None)
        .await
        .expect("adapter");
    let spec = |base| {
        SpawnSpec::new("env")
            .env_base(base)
            .env("EXPLICIT_TOKEN", "caller-choice")
    };
    let (inherit, st) = output_of(&p, spec(EnvBase::Inherit)).await;
    assert!(st.success(), "{inherit}");
    for gone in [
        "MY_API_KEY",
        "github_token",
        "DB_Password",
        "AWS_SECRET",
        "EXEC_WORLD_INTERNAL",
        "MYSQL_PASSWD",
        "GITHUB_PAT",
        "NPM_AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "DATABASE_URL",
        "pw1",
    ] {
        assert!(!inherit.contains(gone), "{gone} leaked: {inherit}");
    }
    for kept in [
        "PLAIN_SETTING=plain",
        "PUBLIC_URL=https://app@example.com:8080/x",
        "EXPLICIT_TOKEN=caller-choice",
        "PATH=",
        "HOME=/home/user",
        "USER=user",
    ] {
        assert!(inherit.contains(kept), "{kept} missing: {inherit}");
    }
    assert_eq!(inherit.matches("EXEC_WORLD_SPAWN=").count(), 1);

    let (base, _) = output_of(&p, spec(EnvBase::Base)).await;
    let mut names: Vec<&str> = base.lines().filter_map(|l| l.split('=').next()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "EXEC_WORLD_SPAWN",
            "EXPLICIT_TOKEN",
            "HOME",
            "LANG",
            "LOGNAME",
            "PATH",
            "SHELL",
            "USER"
        ],
        "{base}"
    );
    assert!(
        base.contains("HOME=/home/user\n") && base.contains("SHELL=/bin/"),
        "{base}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminal_argv_and_env_are_not_on_envd_command_lines() {
    let env = env().await;
    let p = proc_of(&env).await;
    let mut t = p
        .spawn_terminal(
            TerminalSpec::new("sh")
                .arg("-c")
                .arg("echo ready-$((1+1)); sleep 300 # argv-marker-q7")
                .env("CALLER_VALUE", "env-marker-z9"),
        )
        .expect("terminal");
    let mut out = t.take_output().expect("output");
    within("started", t.started()).await.expect("started");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready-2") {
        let c = within("ready", out.next())
            .await
            .expect("output")
            .expect("chunk");
        seen.extend_from_slice(&c);
    }
    let list = env.api.list_processes().await.expect("list");
    assert!(!list.is_empty());
    let text = format!("{list:?}");
    assert!(
        !text.contains("argv-marker-q7"),
        "argv on a command line: {text}"
    );
    assert!(
        !text.contains("env-marker-z9"),
        "env on a command line: {text}"
    );
    // The spec file is gone once read. With a cgroup per spawn (the emulator as root) it
    // lives in the root-owned helper directory (in `/run`, root's alone), which the root
    // part reads; else in the user's private state directory.
    let contained = p.capabilities().contained_escapes;
    let dir = if contained {
        "/run/.exec-world-spawn-*"
    } else {
        "/tmp/.exec-world-proc-*"
    };
    let (left, _) = output_of(
        &p,
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(format!("ls -A {dir}/ 2>/dev/null | grep -c '^term-'")),
    )
    .await;
    assert_eq!(left.trim(), "0", "spec file left behind");
    let (mode, _) = output_of(
        &p,
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(format!("stat -c '%a %U' {dir}")),
    )
    .await;
    let want = if contained { "755 root" } else { "700 user" };
    assert_eq!(mode.trim(), want, "private state directory");
    within("terminate", t.terminate(Duration::from_millis(100)))
        .await
        .expect("terminate");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chatty_command_keeps_host_memory_bounded() {
    let env = env().await;
    let p = proc_of(&env).await.output_buffer(256 << 10);
    const MIB: u64 = 200;
    // Writes 200 MiB in 1 MiB steps and records how far it got in a file.
    let progress = format!("{}/progress", p.cwd());
    let mut child = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"i=0; while [ $i -lt "$2" ]; do head -c 1048576 /dev/zero; i=$((i+1)); echo $i > "$1"; done"#)
                .arg("sh")
                .arg(progress.as_str())
                .arg(MIB.to_string()),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let before = rss_kib();
    // Nobody reads for a while: the command must be held back, not buffered on the host.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (done, _) = output_of(&p, SpawnSpec::new("cat").arg(progress.as_str())).await;
    let done: u64 = done.trim().parse().unwrap_or(0);
    assert!(
        done < 32,
        "{done} MiB written while the consumer stalled: no back-pressure"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(10), child.wait())
            .await
            .is_err(),
        "the command finished although nobody read its output"
    );
    let mut total = 0u64;
    let mut peak = rss_kib();
    while let Some(c) = tokio::time::timeout(Duration::from_secs(120), out.next())
        .await
        .expect("output")
    {
        let c = c.expect("chunk");
        assert!(c.iter().all(|b| *b == 0));
        total += c.len() as u64;
        if total % (16 << 20) < c.len() as u64 {
            peak = peak.max(rss_kib());
        }
    }
    assert_eq!(total, MIB << 20);
    assert!(within("wait", child.wait()).await.expect("wait").success());
    // Whole-process RSS (other tests run in this process too): a loose upper bound that
    // buffering the output (200 MiB) would break.
    assert!(
        peak.saturating_sub(before) < 128 << 10,
        "RSS grew by {} KiB for {MIB} MiB of output",
        peak.saturating_sub(before)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spill_file_keeps_the_output_in_the_sandbox() {
    let env = env().await;
    let p = proc_of(&env).await;
    let fs = std::sync::Arc::new(
        E2bFs::new(env.api.clone(), E2bFsOptions::new(p.cwd().as_str())).expect("E2bFs"),
    );
    let script = r#"i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done"#;
    let expected: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    for (max, name) in [(1u64 << 20, "full.txt"), (1000, "cut.txt")] {
        let mut child = p
            .spawn(SpawnSpec::new("sh").arg("-c").arg(script))
            .expect("spawn");
        let path: WorldPath = format!("{}/spill/{name}", p.cwd()).parse().expect("path");
        let (mut out, spilled) = tee(
            child.take_stdout().expect("stdout"),
            SpillTarget {
                fs: fs.clone(),
                path: path.clone(),
                max_bytes: max,
                options: exec_world::WriteOptions::default().create_parents(true),
            },
        );
        let mut got = Vec::new();
        while let Some(c) = within("output", out.next()).await {
            got.extend_from_slice(&c.expect("chunk"));
        }
        drop(out);
        assert_eq!(got, expected.as_bytes(), "the consumer sees everything");
        assert!(within("wait", child.wait()).await.expect("wait").success());
        let s = within("spill", spilled)
            .await
            .expect("join")
            .expect("spill");
        s.file.expect("spill written");
        assert_eq!(s.total, expected.len() as u64);
        assert_eq!(s.truncated, max < expected.len() as u64);
        let file = exec_world::Fs::read(fs.as_ref(), &path, 1 << 20)
            .await
            .expect("read spill");
        let want = &expected.as_bytes()[..(max as usize).min(expected.len())];
        assert_eq!(&file[..], want, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_cost_of_one_spawn() {
    let env = env().await;
    env.emu.counters().reset();
    let p = proc_of(&env).await;
    let snap = env.emu.counters().snapshot();
    eprintln!("first use (user lookup, helper placement): {snap:?}");
    // The default user's name, and the setup with the user database, at once.
    assert_eq!(snap.get("POST /process.Process/Start"), 2, "{snap:?}");
    env.emu.counters().reset();
    let (out, st) = output_of(&p, SpawnSpec::new("echo").arg("hi")).await;
    assert_eq!((out.as_str(), st.success()), ("hi\n", true));
    tokio::time::sleep(Duration::from_millis(200)).await; // a drop-kill would land here
    let snap = env.emu.counters().snapshot();
    eprintln!("one spawn: {snap:?}");
    assert_eq!(snap.plane_total(Plane::Control), 0, "{snap:?}");
    assert_eq!(snap.get("POST /process.Process/Start"), 1, "{snap:?}");
    assert_eq!(snap.plane_total(Plane::Envd), 1, "{snap:?}");

    env.emu.counters().reset();
    let child = p.spawn(SpawnSpec::new("sleep").arg("100")).expect("spawn");
    within("started", child.started()).await.expect("started");
    within("terminate", child.terminate(Duration::from_millis(100)))
        .await
        .expect("terminate");
    let snap = env.emu.counters().snapshot();
    eprintln!("spawn + terminate: {snap:?}");
    assert_eq!(snap.get("POST /process.Process/Start"), 2, "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_spawn_looks_the_user_up_with_the_setup() {
    let env = env().await;
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    // A named user: one root `Start` places the helper, looks the user up and becomes
    // the spawn (the boot).
    let mut opts = E2bSubprocessOptions::new("/home/user");
    opts.user = Some("user".into());
    let p = E2bSubprocess::new(env.api.clone(), opts).expect("adapter");
    // A supplementary group the boot must find (it reads /etc/group itself).
    root_sh(&env.api, "echo 'bootgrp:x:4242:nobody,user' >> /etc/group").await;
    let before = starts();
    let (out, st) = output_of(&p, SpawnSpec::new("sh").args(["-c", "id -un; id -G"])).await;
    assert_eq!(starts() - before, 1, "the boot alone");
    assert!(st.success());
    let want = root_sh(&env.api, "id -un user; id -G user").await;
    let sorted = |t: &str| {
        t.lines()
            .map(|l| {
                let mut w: Vec<&str> = l.split_whitespace().collect();
                w.sort_unstable();
                w.join(" ")
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(sorted(&out), sorted(&want), "name and groups");
    assert!(out.contains("4242"), "{out}");
    let info = p.user_info().await.expect("user info");
    assert_eq!(
        (info.name.as_str(), info.home.as_str()),
        ("user", "/home/user")
    );
    // envd's default user, on the same sandbox: the placement is the first adapter's
    // (shared by sandbox within this process); the default user's name and its lookup
    // are asked, then the spawn.
    let p = E2bSubprocess::new(env.api.clone(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let before = starts();
    let (out, st) = output_of(&p, SpawnSpec::new("id").arg("-G")).await;
    assert!(st.success());
    assert_eq!(starts() - before, 3, "the name, the lookup and the spawn");
    // The groups the spawn runs with are the user's, as `id -G` as root finds them.
    let want = root_sh(&env.api, "id -G user").await;
    let mut got: Vec<&str> = out.split_whitespace().collect();
    let mut want: Vec<&str> = want.split_whitespace().collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "groups");
    // Later spawns are one request each.
    let before = starts();
    let (_, st) = output_of(&p, SpawnSpec::new("true")).await;
    assert!(st.success());
    assert_eq!(starts() - before, 1);
}

/// A harness that connects again for every turn: the second connection's adapter finds
/// the sandbox's placement (helper, cgroup probe, user lookup) that the first one made,
/// in a directory of `/run` that only root may write, and its first spawn is its only
/// request. An adapter of another sandbox does its own setup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_connection_reuses_the_sandboxes_placement() {
    let env = env().await;
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    let first = E2bSubprocess::new(env.api.clone(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let before = starts();
    let (out, st) = output_of(&first, SpawnSpec::new("id").arg("-un")).await;
    assert_eq!((out.as_str(), st.success()), ("user\n", true));
    assert_eq!(
        starts() - before,
        2,
        "the boot and, beside it, the default user's probe"
    );
    // The first adapter removes its empty cgroups as it goes (one background `Start`):
    // let that land before counting.
    let at_drop = starts();
    drop(first);
    for _ in 0..100 {
        if starts() > at_drop {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let again = env
        .client
        .connect(env.sandbox.id(), e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    let second = E2bSubprocess::new(again.into_api(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let before = starts();
    let (out, st) = output_of(&second, SpawnSpec::new("id").arg("-un")).await;
    assert_eq!((out.as_str(), st.success()), ("user\n", true));
    assert_eq!(starts() - before, 1, "the spawn alone");

    // One helper directory, root's, in root's `/run`.
    let (placed, _) = output_of(
        &second,
        SpawnSpec::new("sh").arg("-c").arg(
            "stat -c '%a %U %n' /run/.exec-world-spawn-* /tmp/.exec-world-spawn-* 2>/dev/null",
        ),
    )
    .await;
    let lines: Vec<&str> = placed.lines().collect();
    assert_eq!(lines.len(), 1, "{placed}");
    assert!(
        lines[0].starts_with("755 root /run/.exec-world-spawn-"),
        "{placed}"
    );

    // Root removes the directory: that adapter's spawns fail (nothing of the user's runs
    // in its place), and an adapter made after the failure sets up afresh.
    root_sh(&env.api, "rm -rf /run/.exec-world-spawn-*").await;
    let child = second.spawn(SpawnSpec::new("true")).expect("spawn");
    let r = subprocess_e2b_support::within("wait", 60, child.wait()).await;
    assert!(r.as_ref().is_err(), "{r:?}");
    let fresh = E2bSubprocess::new(env.api.clone(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let (out, st) = output_of(&fresh, SpawnSpec::new("echo").arg("back")).await;
    assert_eq!((out.as_str(), st.success()), ("back\n", true));

    // Another sandbox: its own setup.
    let other = env
        .client
        .create(&CreateOptions::new("base"))
        .await
        .expect("create");
    let third = E2bSubprocess::new(other.into_api(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let before = starts();
    let (_, st) = output_of(&third, SpawnSpec::new("true")).await;
    assert!(st.success());
    assert_eq!(starts() - before, 2, "another sandbox boots (and probes)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn builder_methods_keep_the_cached_lookups() {
    let env = env().await;
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    // The cwd must be absolute; nothing is sent to refuse it.
    let before = starts();
    let e = E2bSubprocess::new(env.api.clone(), E2bSubprocessOptions::new("home/user"))
        .expect_err("relative cwd");
    assert_eq!(e.kind(), ErrorKind::InvalidPath, "{e}");
    assert_eq!(starts(), before);
    // The default user, looked up once by the first handle.
    let p = proc_of(&env).await;
    let q = p
        .clone()
        .output_buffer(64 << 10)
        .process_timeout(Some(Duration::from_secs(60)));
    let before = starts();
    let (out, st) = output_of(&q, SpawnSpec::new("echo").arg("hi")).await;
    assert_eq!((out.as_str(), st.success()), ("hi\n", true));
    // One Start: the spawn (before, a builder call dropped the lookup: 3).
    assert_eq!(starts() - before, 1, "settings changed, lookup kept");
    // Another user gets its own lookup, once; switching back costs nothing.
    let u = E2bSubprocess::new(
        env.api.clone(),
        E2bSubprocessOptions::new("/tmp").user("user"),
    )
    .expect("adapter");
    output_of(&u, SpawnSpec::new("true")).await;
    let r = u.clone().user("root");
    let before = starts();
    let (out, _) = output_of(&r, SpawnSpec::new("id").arg("-un")).await;
    assert_eq!(out, "root\n");
    assert_eq!(starts() - before, 2, "root: its lookup, then the spawn");
    let back = r.user("user").process_timeout(None);
    let before = starts();
    let (out, _) = output_of(&back, SpawnSpec::new("id").arg("-un")).await;
    assert_eq!(out, "user\n");
    assert_eq!(starts() - before, 1, "user's lookup kept across the switch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_cost_of_a_terminal() {
    let env = env().await;
    let p = proc_of(&env).await;
    env.emu.counters().reset();
    let mut t = p
        .spawn_terminal(TerminalSpec::new("sh").arg("-i"))
        .expect("terminal");
    let mut out = t.take_output().expect("output");
    within("started", t.started()).await.expect("started");
    t.write(b"echo o''k\n").await.expect("write");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ok") {
        let c = within("ok", out.next())
            .await
            .expect("output")
            .expect("chunk");
        seen.extend_from_slice(&c);
    }
    within("terminate", t.terminate(Duration::from_millis(100)))
        .await
        .expect("terminate");
    let snap = env.emu.counters().snapshot();
    eprintln!("first terminal + write + terminate: {snap:?}");
    assert_eq!(snap.plane_total(Plane::Control), 0, "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_sandbox_is_gone() {
    let env = env().await;
    let p = proc_of(&env).await;
    env.client
        .kill(env.sandbox.id())
        .await
        .expect("kill sandbox");
    let child = p
        .spawn(SpawnSpec::new("true"))
        .expect("spawn returns at once");
    let r = within("started", child.started()).await;
    assert!(matches!(&r, Err(e) if e.kind() == ErrorKind::Gone), "{r:?}");
    assert!(matches!(
        within("wait", child.wait()).await,
        Err(e) if e.kind() == ErrorKind::Gone
    ));
    let w = within("which", p.which("sh")).await;
    assert!(matches!(&w, Err(e) if e.kind() == ErrorKind::Gone), "{w:?}");
}

/// The envd commands of the processes running now.
async fn running_commands(env: &subprocess_e2b_support::Env) -> Vec<String> {
    let procs = env.api.list_processes().await.expect("list processes");
    procs.into_iter().map(|p| p.config.cmd).collect()
}

/// A piped spawn is one envd process: the native spawn helper, run by path from a
/// root-owned file in a root-owned directory that the acting user can neither rewrite nor
/// move; with the option off, the `sh` helper under `setsid`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn piped_spawns_start_the_native_helper_from_a_root_owned_file() {
    if !subprocess_e2b::native_helper_built() {
        eprintln!("this build has no native spawn helper (not an x86_64 Linux build)");
        return;
    }
    let env = env().await;
    let p = proc_of(&env).await;
    let child = p.spawn(SpawnSpec::new("sleep").arg("30")).expect("spawn");
    within("started", child.started()).await.expect("started");
    let cmds = running_commands(&env).await;
    let native = cmds
        .iter()
        .find(|c| c.ends_with("/spawn"))
        .unwrap_or_else(|| panic!("no native helper among {cmds:?}"))
        .clone();
    assert!(!cmds.iter().any(|c| c == "setsid"), "{cmds:?}");
    let probe = "stat -c '%U %a' \"$1\" \"${1%/*}\"
: > \"$1\" 2>/dev/null && echo WROTE
mv \"$1\" \"$HOME/x\" 2>/dev/null && echo MOVED
rm -f \"$1\" 2>/dev/null && echo REMOVED
true";
    let (out, st) = output_of(
        &p,
        SpawnSpec::new("sh")
            .arg("-c")
            .arg(probe)
            .arg("sh")
            .arg(&native),
    )
    .await;
    assert_eq!(out, "root 755\nroot 755\n", "{st:?}");
    within("terminate", child.terminate(Duration::from_secs(2)))
        .await
        .expect("terminate");

    let sh = E2bSubprocess::new(
        env.api.clone(),
        E2bSubprocessOptions::new("/").native_helper(false),
    )
    .expect("adapter");
    let child = sh.spawn(SpawnSpec::new("sleep").arg("30")).expect("spawn");
    within("started", child.started()).await.expect("started");
    let cmds = running_commands(&env).await;
    assert!(cmds.iter().any(|c| c == "setsid"), "{cmds:?}");
    within("terminate", child.terminate(Duration::from_secs(2)))
        .await
        .expect("terminate");
}

/// An adapter not told its user finds envd's default user on its first spawn through a
/// probe that carries a random nonce (`boot.rs`). A hostile process, started by envd as
/// root like the probe, that copies every nonce it sees into its own environment and
/// stays, does not make the spawn root's: the boot sees two candidates and declines (the
/// usual lookup follows), or took the probe before the copy existed. No probe outlives
/// the spawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_of_the_default_user_probes_nonce_do_not_change_whose_the_spawn_is() {
    let env = env().await;
    let copier = env
        .api
        .start_process(
            e2b_core::StartProcess::new("/bin/sh")
                .args([
                    "-c",
                    "while :; do n=$(grep -ahozm1 'EXEC_WORLD_WHO=[a-z0-9]*' /proc/[0-9]*/environ \
                     2>/dev/null | tr '\\0' '\\n' | head -n1); \
                     [ -z \"$n\" ] || exec env \"$n\" sleep 60; done",
                ])
                .user("root")
                .timeout(Duration::from_secs(90)),
        )
        .await
        .expect("copier");
    let copier_pid = copier.pid();
    let p = E2bSubprocess::new(env.api.clone(), E2bSubprocessOptions::new("/home/user"))
        .expect("adapter");
    let (out, st) = output_of(&p, SpawnSpec::new("id").arg("-un")).await;
    assert_eq!((out.as_str(), st.success()), ("user\n", true));
    let info = p.user_info().await.expect("user info");
    assert_eq!(info.name, "user");
    // The probe (the user's process carrying a nonce) is gone soon after.
    let mut left = String::new();
    for _ in 0..100 {
        left = root_sh(
            &env.api,
            "for f in $(grep -lz '^EXEC_WORLD_WHO=' /proc/[0-9]*/environ 2>/dev/null); do \
             p=${f#/proc/}; p=${p%/environ}; \
             [ \"$(stat -c %u /proc/$p)\" = 1000 ] && echo $p; done; true",
        )
        .await
        .trim()
        .to_owned();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, "", "a probe outlived the spawn");
    let _ = env
        .api
        .send_signal(
            e2b_core::proto::process::ProcessSelector::Pid(copier_pid),
            e2b_core::proto::process::Signal::Sigkill,
        )
        .await;
    drop(copier);
}

/// The boot hands the native helper the same backstop and host lease as the usual path:
/// the first spawn's helper (envd's process, root, outside the spawn's cgroup) runs with
/// `--kill-after` and `--lease <helper dir>/lease SECS`, and the backstop ends the
/// command in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_boot_passes_the_backstop_and_the_host_lease_to_the_helper() {
    let env = env().await;
    let opts = E2bSubprocessOptions::new("/home/user")
        .user("user")
        .host_lease(Some(Duration::from_secs(7)))
        .kill_after(Some(Duration::from_secs(3)));
    let p = E2bSubprocess::new(env.api.clone(), opts).expect("adapter");
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    let before = starts();
    let child = p.spawn(SpawnSpec::new("sleep").arg("60")).expect("spawn");
    within("started", child.started()).await.expect("started");
    assert_eq!(starts() - before, 1, "the boot alone");
    let line = root_sh(
        &env.api,
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null | grep -- '--leas[e] ' && break; done; true",
    )
    .await;
    assert!(line.contains("--kill-after 3 "), "{line}");
    assert!(line.contains("/.exec-world-spawn-"), "{line}");
    assert!(line.contains("/lease 7 --root "), "{line}");
    // The backstop: 3 s, then the command's tree is killed in the sandbox.
    let st = within("backstop", child.wait()).await.expect("wait");
    assert!(!st.success(), "{st:?}");
}
