//! Process conformance tests (`proc_*`), for any [`Subprocess`](exec_world::Subprocess).

use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{
    Output, World, collect, pids_in, read_until, run, sh, skip, survivors, survivors_eventually,
    within,
};
use exec_world::output::{CaptureLimit, Spill, capture};
use exec_world::{EnvBase, ErrorKind, Signal, SpawnSpec, WriteOptions};

/// argv is passed without a shell (spaces, quotes, empty args), env and cwd apply.
pub async fn proc_spawn_args_env_cwd(w: &World) {
    let p = w.proc.as_ref();
    let w_dir = w.path("work dir");
    w.fs.mkdir(&w_dir, false).await.expect("mkdir");
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg(r#"printf '[%s]' "$@"; printf '\n%s\n' "$GREETING"; pwd"#)
        .arg("sh")
        .args(["a b", "", "'q'", "$HOME", "é"])
        .env("GREETING", "hi there")
        .cwd(w_dir.clone());
    let out = run(p, spec, None).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        out.stdout_text(),
        format!("[a b][]['q'][$HOME][é]\nhi there\n{w_dir}\n")
    );
    // Relative cwd resolves against the Subprocess's cwd; the base env has PATH and HOME.
    let rel = SpawnSpec::new("sh")
        .arg("-c")
        .arg(r#"pwd; [ -n "$PATH" ] && [ -n "$HOME" ] && echo base-ok"#);
    let rel = match w_dir.as_str().strip_prefix(&format!("{}/", p.cwd())) {
        Some(r) => rel.cwd(r.parse().expect("relative path")),
        None => rel.cwd(w_dir.clone()),
    };
    let out = run(p, rel, None).await;
    assert_eq!(out.stdout_text(), format!("{w_dir}\nbase-ok\n"));
    // A cwd that does not exist is refused (at spawn, or when the start fails).
    let bad = SpawnSpec::new("true").cwd(w.path("no such dir"));
    match p.spawn(bad) {
        Err(_) => {}
        Ok(child) => assert!(child.wait().await.is_err(), "spawn in a missing cwd"),
    }
}

/// EnvBase::Clean gives exactly the explicit variables (plus the backend's marker).
pub async fn proc_clean_env(w: &World) {
    if !w.proc.capabilities().clean_env {
        return skip("proc_clean_env", "clean_env");
    }
    let spec = SpawnSpec::new("/usr/bin/env")
        .env_base(EnvBase::Clean)
        .env("ONLY", "this");
    let out = run(w.proc.as_ref(), spec, None).await;
    let vars: Vec<String> = out
        .stdout_text()
        .lines()
        .filter(|l| !l.starts_with("EXEC_WORLD_SPAWN="))
        .map(str::to_string)
        .collect();
    assert_eq!(vars, vec!["ONLY=this".to_string()]);
}

/// stdin, stdout and stderr carry arbitrary bytes; dropping stdin is EOF.
pub async fn proc_stdio_bytes(w: &World) {
    if !w.proc.capabilities().stdin {
        return skip("proc_stdio_bytes", "stdin");
    }
    let p = w.proc.as_ref();
    let mut data: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    data.extend_from_slice(b"\xff\xfe\x00\xc3\x28 not utf-8");
    let data = Bytes::from(data);
    let out = run(p, SpawnSpec::new("cat"), Some(data.clone())).await;
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "stdout differs from stdin");
    let out = run(
        p,
        SpawnSpec::new("sh")
            .arg("-c")
            .arg("cat >&2; printf 'out\\377'"),
        Some(data.clone()),
    )
    .await;
    assert!(out.stderr == data, "stderr differs from stdin");
    assert_eq!(&out.stdout[..], b"out\xff");
    // Null stdin reads EOF at once.
    let out = run(p, SpawnSpec::new("cat"), None).await;
    assert!(out.status.success() && out.stdout.is_empty());
}

/// Exit codes are data; deaths by signal report the signal.
pub async fn proc_exit_codes_and_signals(w: &World) {
    let p = w.proc.as_ref();
    let out: Output = sh(p, "exit 3", &[]).await;
    assert_eq!((out.status.code, out.status.signal), (Some(3), None));
    assert!(!out.status.success());
    assert!(sh(p, "exit 0", &[]).await.status.success());
    let out = sh(p, "kill -TERM $$; sleep 5", &[]).await;
    assert_eq!((out.status.code, out.status.signal), (None, Some(15)));
    if !w.proc.capabilities().signals {
        return skip("proc_exit_codes_and_signals (signal)", "signals");
    }
    let child = p
        .spawn(SpawnSpec::new("sleep").arg("1000"))
        .expect("spawn sleep");
    let pid = child.started().await.expect("started");
    assert_eq!(child.pid(), Some(pid), "pid known once started");
    child.signal(Signal::Kill).await.expect("signal");
    let st = within(60, "killed sleep", child.wait())
        .await
        .expect("wait");
    assert_eq!((st.code, st.signal), (None, Some(9)));
    // wait again: same status; signalling an ended process is fine.
    assert_eq!(child.wait().await.expect("wait again"), st);
    child.signal(Signal::Term).await.expect("signal after exit");
}

/// which finds programs on the base PATH and reports missing ones as None.
pub async fn proc_which(w: &World) {
    let p = w.proc.as_ref();
    let sh_path = p.which("sh").await.expect("which sh").expect("sh on PATH");
    assert!(
        sh_path.starts_with('/') && sh_path.ends_with("/sh"),
        "{sh_path}"
    );
    assert_eq!(
        p.which("no-such-program-exec-world").await.expect("which"),
        None
    );
}

/// A missing program is `ErrorKind::NotFound`, at spawn or from started/wait.
pub async fn proc_missing_program(w: &World) {
    match w.proc.spawn(SpawnSpec::new("no-such-program-exec-world")) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => panic!("expected NotFound, got {e:?}"),
        Ok(child) => {
            assert!(matches!(
                child.wait().await,
                Err(e) if e.kind() == ErrorKind::NotFound
            ));
        }
    }
}

/// A process tree with children, grandchildren, a nohup'd process, setsid'd descendants
/// (one orphaned, so only the spawn's own tracking can find it) and a TERM-ignoring one:
/// terminate leaves no survivor.
pub async fn proc_terminate_reaches_every_descendant(w: &World) {
    let caps = w.proc.capabilities();
    if !caps.process_groups {
        return skip("proc_terminate_reaches_every_descendant", "process_groups");
    }
    let mut script = String::from(
        r#"echo "pid $$"
sleep 1000 & echo "pid $!"
sh -c 'sleep 1000 & echo "pid $!"; echo "pid $$"; wait' &
nohup sleep 1000 >/dev/null 2>&1 & echo "pid $!"
sh -c 'trap "" TERM HUP; echo "pid $$"; exec sleep 1000' &
"#,
    );
    let mut expected = 6;
    if caps.escaped_descendants {
        script.push_str(
            r#"setsid sh -c 'echo "pid $$"; exec sleep 1000' &
sh -c 'setsid sh -c "echo \"pid \$\$\"; exec sleep 1000" & ' &
"#,
        );
        expected += 2;
    } else {
        skip(
            "proc_terminate (setsid'd descendants)",
            "escaped_descendants",
        );
    }
    script.push_str("wait\n");
    let mut child = w
        .proc
        .spawn(SpawnSpec::new("sh").arg("-c").arg(script))
        .expect("spawn tree");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 60, "tree pids", |s| {
        pids_in(s).len() >= expected
    })
    .await;
    let pids = pids_in(&String::from_utf8_lossy(&seen));
    assert_eq!(
        survivors(w.proc.as_ref(), &pids).await.len(),
        pids.len(),
        "all started"
    );
    let status = within(
        120,
        "terminate",
        child.terminate(Duration::from_millis(500)),
    )
    .await
    .expect("terminate");
    assert!(!status.success(), "terminated leader reports {status:?}");
    let alive = survivors(w.proc.as_ref(), &pids).await;
    assert!(
        alive.is_empty(),
        "survivors of terminate: {alive:?} of {pids:?}"
    );
}

/// The escape suite: processes that try hard to outlive their spawn. Each case runs a
/// tree, then ends it through `terminate` and through `Drop`; no member may survive.
/// Cases: a background job, a nohup'd one, one ignoring TERM and HUP, `setsid` children
/// (direct and orphaned by a double fork) and, where the backend claims
/// `contained_escapes`, `setsid` + `env -i` (no marker) direct, double-forked with the
/// parent gone, and a double fork that also closed its output.
pub async fn proc_escape_suite(w: &World) {
    let caps = w.proc.capabilities();
    if !(caps.process_groups && caps.escaped_descendants) {
        return skip("proc_escape_suite", "escaped_descendants");
    }
    let dir = w.path("escapes");
    w.fs.mkdir(&dir, false).await.expect("mkdir");
    let mut script = String::from(
        r#"f=$1
echo $$ >> "$f"
sleep 1000 & echo $! >> "$f"
nohup sh -c 'echo $$ >> "$1"; exec sleep 1000' sh "$f" >/dev/null 2>&1 &
sh -c 'trap "" TERM HUP; echo $$ >> "$1"; while :; do sleep 1; done' sh "$f" &
setsid sh -c 'echo $$ >> "$1"; exec sleep 1000' sh "$f" &
sh -c 'setsid sh -c "echo \$\$ >> "\$1"; exec sleep 1000" sh "$1" &' sh "$f"
"#,
    );
    let mut expected = 6;
    if caps.contained_escapes {
        script.push_str(
            r#"env -i setsid sh -c 'echo $$ >> "$1"; exec sleep 1000' sh "$f" &
sh -c 'env -i setsid sh -c "trap "" TERM HUP; echo \$\$ >> "\$1"; while :; do sleep 1; done" sh "$1" & exit 0' sh "$f"
sh -c 'env -i setsid sh -c "echo \$\$ >> "\$1"; exec sleep 1000" sh "$1" </dev/null >/dev/null 2>&1 &' sh "$f"
"#,
        );
        expected += 3;
    } else {
        skip("proc_escape_suite (env -i setsid)", "contained_escapes");
    }
    script.push_str(&format!(
        "while [ \"$(wc -l < \"$f\")\" -lt {expected} ]; do sleep 0.05; done\necho ready\nwait\n"
    ));
    for (round, by_drop) in [(0, false), (1, true)] {
        let file = w.path(&format!("escapes/pids-{round}"));
        let mut child = w
            .proc
            .spawn(
                SpawnSpec::new("sh")
                    .arg("-c")
                    .arg(script.clone())
                    .arg("sh")
                    .arg(file.as_str()),
            )
            .expect("spawn escapes");
        let mut out = child.take_stdout().expect("stdout");
        let mut seen = Vec::new();
        read_until(&mut out, &mut seen, 60, "escapes ready", |s| {
            s.contains("ready")
        })
        .await;
        let text = w.fs.read(&file, 1 << 16).await.expect("pid file");
        let pids: Vec<u32> = String::from_utf8_lossy(&text)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(pids.len(), expected, "{pids:?}");
        assert_eq!(
            survivors(w.proc.as_ref(), &pids).await.len(),
            pids.len(),
            "all started"
        );
        let alive = if by_drop {
            drop(out);
            drop(child);
            survivors_eventually(w.proc.as_ref(), &pids).await
        } else {
            within(120, "terminate escapes", child.terminate(Duration::ZERO))
                .await
                .expect("terminate");
            survivors(w.proc.as_ref(), &pids).await
        };
        assert!(
            alive.is_empty(),
            "survivors of {}: {alive:?} of {pids:?}",
            if by_drop { "drop" } else { "terminate" }
        );
    }
}

/// terminate sends SIGTERM first and honours the grace (a handler gets to run and exit
/// cleanly); what ignores SIGTERM is killed after it (previous test).
pub async fn proc_terminate_grace_then_kill(w: &World) {
    if !w.proc.capabilities().process_groups {
        return skip("proc_terminate_grace_then_kill", "process_groups");
    }
    let mut child =
        w.proc
            .spawn(SpawnSpec::new("sh").arg("-c").arg(
                r#"trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"#,
            ))
            .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 60, "ready", |s| s.contains("ready")).await;
    let status = within(120, "terminate", child.terminate(Duration::from_secs(60)))
        .await
        .expect("terminate");
    assert_eq!(
        status.code,
        Some(7),
        "the TERM handler ran and chose the exit code"
    );
    let rest = within(60, "output end", collect(Some(out))).await;
    seen.extend_from_slice(&rest);
    assert!(String::from_utf8_lossy(&seen).contains("got-term"));
}

/// Many processes at once keep their outputs apart.
pub async fn proc_concurrent_spawns(w: &World) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let p = w.proc.clone();
        tasks.push(tokio::spawn(async move {
            let out = sh(
                p.as_ref(),
                "sleep 0.2; echo \"n=$1\"; exit $1",
                &[i.to_string()],
            )
            .await;
            (i, out)
        }));
    }
    for t in tasks {
        let (i, out) = within(120, "concurrent spawn", t).await.expect("task");
        assert_eq!(out.stdout_text(), format!("n={i}\n"));
        assert_eq!(out.status.code, Some(i));
    }
}

/// Dropping a Child (not detached) ends its process group.
pub async fn proc_drop_kills_group(w: &World) {
    if !w.proc.capabilities().process_groups {
        return skip("proc_drop_kills_group", "process_groups");
    }
    let mut child = w
        .proc
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"sleep 1000 & echo "pid $!"; echo "pid $$"; wait"#),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 60, "pids", |s| pids_in(s).len() >= 2).await;
    let pids = pids_in(&String::from_utf8_lossy(&seen));
    drop(child);
    // Remote backends kill from a background task: allow it to land.
    let alive = survivors_eventually(w.proc.as_ref(), &pids).await;
    assert!(alive.is_empty(), "survivors of drop: {alive:?}");
}

/// `wait` reports the exit of a program whose background job still holds its stdout: the
/// job is provably still alive when `wait` returns (no timing involved), then terminated.
pub async fn proc_exit_before_output_eof(w: &World) {
    if !w.proc.capabilities().exit_before_output_eof {
        return skip("proc_exit_before_output_eof", "exit_before_output_eof");
    }
    let mut child = w
        .proc
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"sleep 1000 & echo "pid $!"; exit 5"#),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 60, "pid", |s| !pids_in(s).is_empty()).await;
    let pids = pids_in(&String::from_utf8_lossy(&seen));
    let status = within(60, "wait with the output still open", child.wait())
        .await
        .expect("wait");
    assert_eq!(status.code, Some(5), "{status:?}");
    let alive = survivors(w.proc.as_ref(), &pids).await;
    assert_eq!(
        alive, pids,
        "the background job should still hold the output"
    );
    child
        .terminate(Duration::from_millis(200))
        .await
        .expect("terminate");
    let alive = survivors_eventually(w.proc.as_ref(), &pids).await;
    assert!(alive.is_empty(), "survivors of terminate: {alive:?}");
}

/// wait_or_cancel: cancelling runs terminate to completion, then reports Cancelled.
pub async fn proc_cancel_terminates(w: &World) {
    if !w.proc.capabilities().process_groups {
        return skip("proc_cancel_terminates", "process_groups");
    }
    let mut child = w
        .proc
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"sleep 1000 & echo "pid $!"; echo "pid $$"; wait"#),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 60, "pids", |s| pids_in(s).len() >= 2).await;
    let pids = pids_in(&String::from_utf8_lossy(&seen));
    let cancel = CancellationToken::new();
    cancel.cancel();
    let r = within(
        120,
        "wait_or_cancel",
        child.wait_or_cancel(&cancel, Duration::from_millis(200)),
    )
    .await;
    assert!(
        matches!(r, Err(ref e) if e.kind() == ErrorKind::Cancelled),
        "{r:?}"
    );
    let alive = survivors(w.proc.as_ref(), &pids).await;
    assert!(alive.is_empty(), "survivors of cancel: {alive:?}");
}

/// Output capture keeps head and tail, counts everything, and spills the whole stream to
/// a file in the world.
pub async fn proc_capture_with_spill(w: &World) {
    let mut child = w
        .proc
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg(r#"i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done"#),
        )
        .expect("spawn");
    let out = child.take_stdout().expect("stdout");
    let spill_path = w.path("spill/out.txt");
    let spill = Spill {
        fs: w.fs.as_ref(),
        path: spill_path.clone(),
        options: WriteOptions::default().create_parents(true),
    };
    let c = within(
        120,
        "capture",
        capture(out, CaptureLimit { head: 7, tail: 11 }, Some(spill)),
    )
    .await
    .expect("capture");
    assert!(
        within(60, "exit", child.wait())
            .await
            .expect("wait")
            .success()
    );
    let full: String = (0..20000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(c.total, full.len() as u64);
    assert_eq!(&c.head[..], b"line 0\n");
    assert_eq!(&c.tail[..], b"line 19999\n");
    assert!(c.truncated());
    assert!(c.text().contains("bytes omitted"));
    c.spill.expect("spill asked").expect("spill written");
    let spilled = w.fs.read(&spill_path, 1 << 24).await.expect("read spill");
    assert!(
        spilled == full.as_bytes(),
        "spill file differs from the output"
    );
}

/// A script written through the world's Fs runs by relative path from its directory:
/// Fs and Subprocess see the same files, and modes apply.
pub async fn proc_runs_script_written_through_fs(w: &World) {
    if !w.fs.capabilities().posix_modes {
        return skip("proc_runs_script_written_through_fs", "posix_modes");
    }
    let dir = w.path("bin");
    w.fs.mkdir(&dir, false).await.expect("mkdir");
    w.fs.write(
        &w.path("bin/run.sh"),
        exec_world::bytes_stream(&b"#!/bin/sh\necho \"ran in $(pwd) with $1\"\n"[..]),
        WriteOptions::default().mode(0o755),
    )
    .await
    .expect("write script");
    let spec = SpawnSpec::new("./run.sh").arg("arg1").cwd(dir.clone());
    let out = run(w.proc.as_ref(), spec, None).await;
    assert_eq!(
        out.stdout_text(),
        format!("ran in {dir} with arg1\n"),
        "{out:?}"
    );
}
