//! Durable commands on E2B (the emulator): a fresh client (a new adapter, as after a host
//! restart) attaches to a running and to an ended command, output kept while nobody
//! listened, the request cost, the record's protection from the sandbox user, `Unknown`
//! after a cold boot and after the watcher is killed, and stdin through envd.

use std::time::Duration;

use e2b_core::StartProcess;
use exec_world::{
    DurableId, DurableSpec, DurableState, ErrorKind, OutputOffsets, SpawnSpec, StdinMode,
    Subprocess,
};
use futures::StreamExt;
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};
use testing_fake::Plane;
use tokio::io::AsyncWriteExt;

use crate::subprocess_e2b_support::{Env, env, proc_of, within};

/// Everything a stream gives (an error item fails the test).
async fn drain(s: Option<exec_world::OutputStream>) -> Vec<u8> {
    let mut s = s.expect("stream");
    let mut buf = Vec::new();
    while let Some(c) = within("output", 120, s.next()).await {
        buf.extend_from_slice(&c.expect("chunk"));
    }
    buf
}

/// The lines `1` to `n`, as `seq n` prints them.
fn numbered(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

fn durable(script: &str, id: &DurableId) -> SpawnSpec {
    SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .durable(DurableSpec::new(id.clone()))
}

/// A second adapter on the same sandbox (a fresh client, as after a host restart).
async fn fresh(env: &Env) -> E2bSubprocess {
    proc_of(env).await
}

/// Runs `script` as root in the sandbox; stdout and exit code.
async fn root_sh(env: &Env, script: &str) -> (String, i32) {
    let out = env
        .api
        .run(
            StartProcess::new("/bin/sh")
                .args(["-c", script])
                .user("root"),
        )
        .await
        .expect("run");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.end.exit_code,
    )
}

/// Runs `script` as the sandbox user; stdout+stderr and exit code.
async fn user_sh(env: &Env, script: &str) -> (String, i32) {
    let out = env
        .api
        .run(
            StartProcess::new("/bin/sh")
                .args(["-c", script])
                .user("user"),
        )
        .await
        .expect("run");
    (
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        out.end.exit_code,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_client_attaches_to_an_ended_and_a_running_command() {
    let env = env().await;
    let p = proc_of(&env).await;
    assert!(p.capabilities().durable);
    let ended = DurableId::random();
    let mut child = p
        .spawn(durable("echo out-1; echo err-1 >&2; exit 3", &ended))
        .expect("spawn");
    assert_eq!(drain(child.take_stdout()).await, b"out-1\n");
    assert_eq!(
        within("wait", 60, child.wait()).await.expect("wait").code,
        Some(3)
    );
    drop(child);

    let running = DurableId::random();
    let child = p
        .spawn(durable(
            "echo early; read x < /tmp/go-$0 2>/dev/null || sleep 2; echo late; exit 5",
            &running,
        ))
        .expect("spawn");
    within("started", 60, child.started())
        .await
        .expect("started");
    drop(child); // dropping a durable child leaves it running
    drop(p);

    let q = fresh(&env).await;
    let list = within("list", 60, q.durable_list()).await.expect("list");
    let e = list.iter().find(|i| i.id == ended).expect("ended listed");
    assert_eq!(
        e.state,
        DurableState::Exited(exec_world::ExitStatus {
            code: Some(3),
            signal: None
        })
    );
    assert_eq!((e.program.as_str(), e.args[0].as_str()), ("sh", "-c"));
    let r = list
        .iter()
        .find(|i| i.id == running)
        .expect("running listed");
    assert_eq!(r.state, DurableState::Running);

    let mut a = within(
        "attach",
        60,
        q.durable_attach(&ended, OutputOffsets::default()),
    )
    .await
    .expect("attach ended");
    assert_eq!(a.dropped, OutputOffsets::default());
    assert_eq!(drain(a.child.take_stdout()).await, b"out-1\n");
    assert_eq!(drain(a.child.take_stderr()).await, b"err-1\n");
    assert_eq!(
        within("wait", 60, a.child.wait()).await.expect("wait").code,
        Some(3)
    );
    // From an offset: the rest only.
    let mut a = q
        .durable_attach(
            &ended,
            OutputOffsets {
                stdout: 4,
                stderr: 6,
            },
        )
        .await
        .expect("attach at offsets");
    assert_eq!(
        a.start,
        OutputOffsets {
            stdout: 4,
            stderr: 6
        }
    );
    assert_eq!(drain(a.child.take_stdout()).await, b"1\n");
    assert_eq!(drain(a.child.take_stderr()).await, b"");

    let mut a = within(
        "attach",
        60,
        q.durable_attach(&running, OutputOffsets::default()),
    )
    .await
    .expect("attach running");
    assert_eq!(a.info.state, DurableState::Running);
    assert!(a.info.pid.is_some());
    assert_eq!(drain(a.child.take_stdout()).await, b"early\nlate\n");
    assert_eq!(
        within("wait", 60, a.child.wait()).await.expect("wait").code,
        Some(5)
    );

    // The same id again: refused, nothing runs; collected, it can be used again.
    let again = q
        .spawn(durable("echo ran >> /tmp/ran-twice", &ended))
        .expect("spawn");
    let e = within("wait", 60, again.wait()).await.expect_err("exists");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    let (ran, _) = root_sh(&env, "cat /tmp/ran-twice 2>/dev/null; echo .").await;
    assert_eq!(ran, ".\n", "nothing ran");
    let e = q.durable_collect(&running).await;
    assert!(e.is_ok(), "an ended command is collected: {e:?}");
    q.durable_collect(&ended).await.expect("collect");
    let e = q.durable_collect(&ended).await.expect_err("gone");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = q
        .durable_attach(&ended, OutputOffsets::default())
        .await
        .expect_err("gone");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let mut c = q.spawn(durable("echo again", &ended)).expect("spawn");
    assert_eq!(drain(c.take_stdout()).await, b"again\n");
    assert!(c.wait().await.expect("wait").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn output_beyond_the_cap_is_dropped_oldest_first_and_counted() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let cap = 1 << 20;
    // 4 MiB of numbered lines while nobody listens.
    let child = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("seq 1 600000")
                .durable(DurableSpec::new(id.clone()).output_cap(cap)),
        )
        .expect("spawn");
    let mut child = child;
    drop(child.take_stdout());
    assert!(
        within("wait", 120, child.wait())
            .await
            .expect("wait")
            .success()
    );
    let expected = numbered(600000);
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let total = expected.len() as u64;
    assert_eq!(a.dropped.stdout, total - cap);
    assert_eq!(a.start.stdout, total - cap);
    let got = drain(a.child.take_stdout()).await;
    assert_eq!(got.len() as u64, cap);
    assert!(
        got == expected[(total - cap) as usize..],
        "the last cap bytes, exactly"
    );
    assert!(a.child.wait().await.expect("wait").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_cost_of_a_durable_start_and_attach() {
    let env = env().await;
    let p = proc_of(&env).await;
    p.prepare().await.expect("prepare");
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    let id = DurableId::random();
    env.emu.counters().reset();
    let mut c = p
        .spawn(SpawnSpec::new("true").durable(DurableSpec::new(id.clone())))
        .expect("spawn");
    drop(c.take_stdout());
    assert!(within("wait", 60, c.wait()).await.expect("wait").success());
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    assert!(
        within("wait", 60, a.child.wait())
            .await
            .expect("wait")
            .success()
    );
    drop(a.child.take_stdout());
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let snap = env.emu.counters().snapshot();
    eprintln!("durable start + attach of true: {snap:?}");
    assert_eq!(starts(), 2, "{snap:?}");
    assert_eq!(snap.plane_total(Plane::Envd), 2, "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stdin_through_envd_on_an_attached_child_and_null_by_default() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let child = p
        .spawn(durable("cat; echo done", &id).stdin(StdinMode::Piped))
        .expect("spawn");
    within("started", 60, child.started())
        .await
        .expect("started");
    drop(child);
    let mut a = fresh(&env)
        .await
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let mut stdin = a.child.take_stdin().expect("stdin");
    stdin.write_all(b"typed\n").await.expect("write");
    stdin.shutdown().await.expect("close");
    drop(stdin);
    assert_eq!(drain(a.child.take_stdout()).await, b"typed\ndone\n");
    assert!(
        within("wait", 60, a.child.wait())
            .await
            .expect("wait")
            .success()
    );

    // Without stdin: `cat` sees EOF at once.
    let id = DurableId::random();
    let mut c = p.spawn(durable("cat; echo eof", &id)).expect("spawn");
    assert_eq!(drain(c.take_stdout()).await, b"eof\n");
    assert!(within("wait", 30, c.wait()).await.expect("wait").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminate_and_signal_an_attached_command() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let child = p.spawn(durable("sleep 1001 & wait", &id)).expect("spawn");
    within("started", 60, child.started())
        .await
        .expect("started");
    drop(child);
    let a = fresh(&env)
        .await
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let st = within(
        "terminate",
        60,
        a.child.terminate(Duration::from_millis(200)),
    )
    .await
    .expect("terminate");
    assert!(st.signal.is_some(), "{st:?}");
    let (left, _) = root_sh(&env, "ps -eo args | grep -c '^sleep 1001$'").await;
    assert_eq!(left, "0\n", "the tree is gone");
    let list = p.durable_list().await.expect("list");
    let i = list.iter().find(|i| i.id == id).expect("listed");
    assert!(matches!(i.state, DurableState::Exited(_)), "{:?}", i.state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sandbox_user_cannot_read_forge_or_swap_a_record() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let mut c = p.spawn(durable("echo secret-output", &id)).expect("spawn");
    drop(c.take_stdout());
    assert!(within("wait", 60, c.wait()).await.expect("wait").success());
    let dir = format!("{}/{id}", subprocess_e2b::DEFAULT_DURABLE_DIR);
    let (ls, code) = root_sh(
        &env,
        &format!("stat -c '%U %a' {dir} {dir}/out {dir}/status"),
    )
    .await;
    assert_eq!(code, 0, "{ls}");
    assert_eq!(ls, "root 700\nroot 600\nroot 600\n");
    // As the user: no read, no write, no link planted, no swap of the directory.
    for attempt in [
        format!("cat {dir}/out"),
        format!("ls {dir}"),
        format!("echo 'exit 0' > {dir}/status"),
        format!("ln -s /etc/passwd {dir}/out2"),
        format!("mv {dir} {dir}.x"),
        format!("mkdir {}/forged", subprocess_e2b::DEFAULT_DURABLE_DIR),
        format!(
            "ln -s /home/user {}/forged",
            subprocess_e2b::DEFAULT_DURABLE_DIR
        ),
    ] {
        let (out, code) = user_sh(&env, &attempt).await;
        assert_ne!(code, 0, "{attempt} as the user succeeded: {out}");
        assert!(!out.contains("secret-output"), "{attempt}: {out}");
    }
    // The record is intact: the attach still reads it.
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    assert_eq!(drain(a.child.take_stdout()).await, b"secret-output\n");
    assert!(a.child.wait().await.expect("wait").success());

    // A state directory the user controls (made first in /tmp) is refused; nothing runs.
    let (_, code) = user_sh(&env, "mkdir -p /tmp/userstate && chmod 777 /tmp/userstate").await;
    assert_eq!(code, 0);
    let home = p.cwd().clone();
    let q = E2bSubprocess::new(
        env.api.clone(),
        E2bSubprocessOptions::new(home.as_str()).durable_dir("/tmp/userstate/d"),
    )
    .expect("adapter");
    let c = q
        .spawn(durable(
            "echo ran > /tmp/ran-in-user-state",
            &DurableId::random(),
        ))
        .expect("spawn");
    let e = within("wait", 60, c.wait()).await.expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let (ran, _) = root_sh(
        &env,
        "cat /tmp/ran-in-user-state 2>/dev/null; ls /tmp/userstate",
    )
    .await;
    assert_eq!(
        ran, "",
        "nothing ran, nothing was made in the user's directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_after_the_watcher_is_killed_and_after_a_cold_boot() {
    let env = env().await;
    let p = proc_of(&env).await;
    // The watcher (root) killed without recording a status.
    let id = DurableId::random();
    let c = p.spawn(durable("sleep 1000", &id)).expect("spawn");
    within("started", 60, c.started()).await.expect("started");
    drop(c);
    let dir = format!("{}/{id}", subprocess_e2b::DEFAULT_DURABLE_DIR);
    let (_, code) = root_sh(&env, &format!("read w _ < {dir}/proc && kill -9 $w")).await;
    assert_eq!(code, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let e = within("wait", 60, a.child.wait())
        .await
        .expect_err("unknown");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    let list = p.durable_list().await.expect("list");
    assert_eq!(
        list.iter().find(|i| i.id == id).map(|i| i.state),
        Some(DurableState::Unknown)
    );
    let _ = root_sh(&env, "pkill -x sleep").await;

    // A cold boot (pause without memory, connect again): every process ended, the record
    // stays without a status.
    let id = DurableId::random();
    let c = p
        .spawn(durable("echo before; sleep 1000", &id))
        .expect("spawn");
    within("started", 60, c.started()).await.expect("started");
    drop(c);
    drop(p);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sid = env.sandbox.id().to_owned();
    env.client
        .pause(&sid, e2b_core::PauseOptions { memory: false })
        .await
        .expect("pause");
    let back = env
        .client
        .connect(
            &sid,
            e2b_core::ConnectOptions {
                timeout: Duration::from_secs(60),
                memory: Some(false),
            },
        )
        .await
        .expect("cold connect");
    let q = E2bSubprocess::at_home(back.clone().into_api(), None)
        .await
        .expect("adapter");
    let list = q.durable_list().await.expect("list");
    assert_eq!(
        list.iter().find(|i| i.id == id).map(|i| i.state),
        Some(DurableState::Unknown),
        "{list:?}"
    );
    let mut a = q
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    assert_eq!(
        drain(a.child.take_stdout()).await,
        b"before\n",
        "the output kept"
    );
    let e = within("wait", 60, a.child.wait())
        .await
        .expect_err("unknown");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    q.durable_collect(&id)
        .await
        .expect("an unknown one can be collected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_attach_stream_resumes_from_the_exact_offsets() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    // Below the size an ended record's stream is fetched from its ring (1 MiB): all of
    // it comes through the reader's process stream.
    let mut c = p
        .spawn(durable("seq 1 150000; seq 1 1000 >&2", &id))
        .expect("spawn");
    drop(c.take_stdout());
    assert!(within("wait", 60, c.wait()).await.expect("wait").success());
    let gets_before = env.emu.counters().get_on(Plane::Envd, "GET /files");
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    // The reader's stream is cut after a few frames, once.
    env.emu.faults().add(
        testing_fake::FaultRule::new(testing_fake::FaultAction::CutStream { after_frames: 6 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let before = starts();
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let (out, err) = (a.child.take_stdout(), a.child.take_stderr());
    let (out, err) = futures::future::join(drain(out), drain(err)).await;
    let expected = numbered(150000);
    assert!(
        out == expected,
        "every stdout byte once, in order ({} bytes)",
        out.len()
    );
    let expected = numbered(1000);
    assert_eq!(err, expected);
    assert!(
        within("wait", 60, a.child.wait())
            .await
            .expect("wait")
            .success()
    );
    assert_eq!(starts() - before, 2, "one resume after the cut");
    assert_eq!(
        env.emu.counters().get_on(Plane::Envd, "GET /files"),
        gets_before,
        "nothing fetched from the ring"
    );
}

/// A reader stream cut before the record's description came: `durable_attach` starts a
/// new reader from the same offsets (nothing was handed out yet) and the attach is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attach_cut_before_the_description_starts_a_new_reader() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let mut c = p
        .spawn(durable("seq 1 1000; seq 1 10 >&2", &id))
        .expect("spawn");
    drop(c.take_stdout());
    assert!(within("wait", 60, c.wait()).await.expect("wait").success());
    let starts = || {
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start")
    };
    // Cut right after the start event: before any of the reader's frames.
    env.emu.faults().add(
        testing_fake::FaultRule::new(testing_fake::FaultAction::CutStream { after_frames: 1 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let before = starts();
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach after a cut");
    let (out, err) = (a.child.take_stdout(), a.child.take_stderr());
    let (out, err) = futures::future::join(drain(out), drain(err)).await;
    assert_eq!(out, numbered(1000));
    assert_eq!(err, numbered(10));
    assert!(
        within("wait", 60, a.child.wait())
            .await
            .expect("wait")
            .success()
    );
    assert_eq!(starts() - before, 2, "one new reader after the cut");

    // A running record: the cut reader would tail it until the command ends; it is
    // ended, and only the new one reads.
    let id = DurableId::random();
    let c = p.spawn(durable("echo up; sleep 60", &id)).expect("spawn");
    c.detach();
    // The spawn's own start answered first (the fault is for the reader's).
    p.durable_list().await.expect("durable_list");
    env.emu.faults().add(
        testing_fake::FaultRule::new(testing_fake::FaultAction::CutStream { after_frames: 1 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let before = starts();
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach after a cut");
    assert_eq!(starts() - before, 2, "one new reader after the cut");
    let mut out = a.child.take_stdout().expect("stdout");
    assert_eq!(
        &within("output", 30, out.next())
            .await
            .expect("a chunk")
            .expect("bytes")[..],
        b"up\n"
    );
    let mut readers = String::new();
    for _ in 0..100 {
        readers = root_sh(&env, "pgrep -f -- '[-]-tail' | wc -l").await.0;
        if readers.trim() == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(readers.trim(), "1", "one reader left after the cut");
    within("terminate", 60, a.child.terminate(Duration::from_secs(2)))
        .await
        .expect("terminate");
}

/// An ended record's stream of at least 1 MiB is fetched from its ring file with a
/// ranged root `GET /files` (not through the reader's base64 process stream), across
/// the ring's wrap; a fetch that fails is resumed from the exact offset reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_ended_record_is_fetched_from_its_ring_and_a_failed_fetch_resumes() {
    let env = env().await;
    // A 1 MiB cap the 2 MB of stdout wraps around; stderr stays below the bulk size.
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let spec = SpawnSpec::new("sh")
        .arg("-c")
        .arg("seq 1 300000; seq 1 1000 >&2")
        .durable(DurableSpec::new(id.clone()).output_cap(1 << 20));
    let mut c = p.spawn(spec).expect("spawn");
    drop(c.take_stdout());
    assert!(within("wait", 60, c.wait()).await.expect("wait").success());
    let all = numbered(300000);
    let kept = &all[all.len() - (1 << 20)..];
    let count = |k: &str| env.emu.counters().get_on(Plane::Envd, k);
    for failing in [false, true] {
        if failing {
            // The first ranged read fails for good (500): the attach starts a new reader
            // from where it was (nothing yet) and fetches again.
            env.emu.faults().add(
                testing_fake::FaultRule::new(testing_fake::FaultAction::Status {
                    status: 500,
                    body: "boom".into(),
                    content_type: "text/plain".into(),
                })
                .surface(Plane::Envd)
                .path_prefix("/files")
                .times(1),
            );
        }
        let (gets, starts) = (count("GET /files"), count("POST /process.Process/Start"));
        let mut a = p
            .durable_attach(&id, OutputOffsets::default())
            .await
            .expect("attach");
        assert_eq!(a.dropped.stdout, (all.len() - (1 << 20)) as u64);
        let (out, err) = (a.child.take_stdout(), a.child.take_stderr());
        let (out, err) = futures::future::join(drain(out), drain(err)).await;
        assert!(
            out == kept,
            "the kept MiB once, in order ({} bytes)",
            out.len()
        );
        let expected = numbered(1000);
        assert_eq!(err, expected);
        assert!(
            within("wait", 60, a.child.wait())
                .await
                .expect("wait")
                .success()
        );
        let (gets, starts) = (
            count("GET /files") - gets,
            count("POST /process.Process/Start") - starts,
        );
        if failing {
            assert_eq!(starts, 2, "one new reader after the failed fetch");
            assert!(gets >= 3, "the failed fetch, then both pieces: {gets}");
        } else {
            // The reader, and the ring in two pieces (it wrapped).
            assert_eq!((starts, gets), (1, 2));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_backstop_holds_for_a_durable_command_and_its_end_is_recorded() {
    let env = env().await;
    let p = proc_of(&env).await.kill_after(Some(Duration::from_secs(1)));
    let id = DurableId::random();
    let c = p.spawn(durable("echo up; sleep 100", &id)).expect("spawn");
    within("started", 60, c.started()).await.expect("started");
    drop(c);
    let mut a = fresh(&env)
        .await
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    assert_eq!(drain(a.child.take_stdout()).await, b"up\n");
    let st = within("wait", 60, a.child.wait()).await.expect("wait");
    assert_eq!(st.signal, Some(9), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_more_than_the_cap_behind_is_interrupted_with_the_offset() {
    let env = env().await;
    let p = proc_of(&env).await;
    let id = DurableId::random();
    let c = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("while [ ! -e /tmp/go-slow ]; do sleep 0.02; done; seq 1 400000")
                .durable(DurableSpec::new(id.clone()).output_cap(64 << 10)),
        )
        .expect("spawn");
    within("started", 60, c.started()).await.expect("started");
    drop(c);
    let mut a = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect("attach");
    let mut out = a.child.take_stdout().expect("stdout");
    let (_, code) = root_sh(&env, "touch /tmp/go-slow").await;
    assert_eq!(code, 0);
    // Nobody reads while the command writes 2.7 MB through a 64 KiB cap.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut got = 0usize;
    let mut interrupted = None;
    while let Some(item) = within("output", 60, out.next()).await {
        match item {
            Ok(b) => got += b.len(),
            Err(e) => {
                interrupted = Some(e);
                break;
            }
        }
    }
    let e = interrupted.expect("an Interrupted item, not a silently shortened stream");
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert!(e.to_string().contains("attach again from offset"), "{e}");
    assert!(
        within("end", 30, out.next()).await.is_none(),
        "the stream ends there"
    );
    assert!(got < 2_000_000, "{got}");
    assert!(
        within("wait", 60, a.child.wait())
            .await
            .expect("wait")
            .success()
    );
}
