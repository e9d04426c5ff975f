//! The durable-exec tests of the sandbox conformance suite (re-exported from
//! [`super::sandbox`]): `exec_start` returns at once, `exec_attach` streams output from
//! any offset and the end, from the other provider instance too (another replica),
//! `exec_list` and `exec_kill` work on an exec the instance did not start, a cut attach
//! resumed from its last offsets loses and doubles nothing, a used id never runs twice
//! (a counter file the command appends to), the time limit holds with no host attached,
//! and a suspend/resume keeps a running exec and its record.

use std::time::Duration;

use futures::StreamExt as _;

use exec_world::sandbox::{
    ExecEnd, ExecEvent, ExecId, ExecSpec, ExecState, ExecStream, SandboxHandle, SandboxProvider,
};
use exec_world::{ErrorKind, ExitStatus, OutputOffsets};

use super::sandbox::SandboxWorld;

/// Longest any wait of these tests may take before it fails (never a pass by waiting).
const BOUND: Duration = Duration::from_secs(120);

/// What an attach gave.
#[derive(Debug, Default)]
struct Seen {
    out: Vec<u8>,
    err: Vec<u8>,
    dropped: OutputOffsets,
    end: Option<ExecEnd>,
    /// The offsets just past the last bytes received.
    next: OutputOffsets,
}

impl Seen {
    /// Takes one event; checks its offset continues the bytes seen (nothing lost or
    /// doubled within one attach).
    fn take(&mut self, ev: ExecEvent) {
        match ev {
            ExecEvent::Stdout { offset, data } => {
                assert_eq!(offset, self.next.stdout, "stdout offset");
                self.next.stdout += data.len() as u64;
                self.out.extend_from_slice(&data);
            }
            ExecEvent::Stderr { offset, data } => {
                assert_eq!(offset, self.next.stderr, "stderr offset");
                self.next.stderr += data.len() as u64;
                self.err.extend_from_slice(&data);
            }
            ExecEvent::Dropped { stdout, stderr } => {
                assert!(
                    self.out.is_empty() && self.err.is_empty(),
                    "Dropped comes first"
                );
                self.dropped = OutputOffsets { stdout, stderr };
                self.next.stdout += stdout;
                self.next.stderr += stderr;
            }
            ExecEvent::End(end) => {
                assert!(self.end.is_none(), "one End");
                self.end = Some(end);
            }
        }
    }
}

/// Attaches to `id` from `from` and reads to the end (bounded).
async fn attach_all(
    p: &dyn SandboxProvider,
    h: &SandboxHandle,
    id: &ExecId,
    from: OutputOffsets,
) -> Seen {
    let mut s = p.exec_attach(h, id, from).await.expect("exec_attach");
    let mut seen = Seen {
        next: from,
        ..Seen::default()
    };
    tokio::time::timeout(BOUND, async {
        while let Some(ev) = s.next().await {
            seen.take(ev.expect("attach event"));
        }
    })
    .await
    .expect("the attach ended in time");
    assert!(seen.end.is_some(), "the stream ended without End: {seen:?}");
    seen
}

async fn out(p: &dyn SandboxProvider, h: &SandboxHandle, cmd: &str) -> String {
    p.exec(h, ExecSpec::new(cmd).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"))
        .stdout
}

/// Waits (bounded) until `path` exists.
async fn wait_for(p: &dyn SandboxProvider, h: &SandboxHandle, path: &str) {
    for _ in 0..2400 {
        if p.stat(h, path).await.expect("stat").is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never appeared");
}

/// The pids in `file` (workspace-relative) still alive (not zombies).
async fn alive(p: &dyn SandboxProvider, h: &SandboxHandle, file: &str) -> String {
    out(
        p,
        h,
        &format!(
            "for p in $(cat {file}); do if [ -e /proc/$p ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null; then echo $p; fi; done"
        ),
    )
    .await
}

fn exited(code: i32) -> Option<ExecEnd> {
    Some(ExecEnd::Exited(ExitStatus {
        code: Some(code),
        signal: None,
    }))
}

fn id(s: &str) -> ExecId {
    s.parse().expect("exec id")
}

/// exec_start returns while the command still runs; list shows it (command, tag, cwd,
/// time limit); attach gives both streams and the end; an attach after the end gets it
/// all again; forget removes the record; a running exec cannot be forgotten; no id or a
/// bad one is refused before anything runs.
pub async fn sb_exec_start_attach(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("dur-basic").await;
    out(p, &h, "mkdir -p sub").await;
    let cmd = "echo out; echo err >&2; while [ ! -e ../go ]; do sleep 0.05; done; basename \"$PWD\"; exit 3";
    let spec = ExecSpec::new(cmd)
        .id("basic-1")
        .tag("holder-a")
        .cwd("/workspace/sub")
        .timeout(Duration::from_secs(90));
    let started = p.exec_start(&h, spec).await.expect("exec_start");
    assert_eq!(started.as_str(), "basic-1");
    let listed = p.exec_list(&h).await.expect("exec_list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let info = &listed[0];
    assert_eq!(
        (
            info.id.as_str(),
            info.command.as_str(),
            info.tag.as_deref(),
            info.cwd.as_str(),
            info.timeout,
            info.state
        ),
        (
            "basic-1",
            cmd,
            Some("holder-a"),
            "/workspace/sub",
            Duration::from_secs(90),
            ExecState::Running
        )
    );
    let e = p
        .exec_forget(&h, &started)
        .await
        .expect_err("forget a running exec");
    assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    p.write_file(&h, "/workspace/go", b"").await.expect("go");
    let seen = attach_all(p, &h, &started, OutputOffsets::default()).await;
    assert_eq!(
        (seen.out.as_slice(), seen.err.as_slice(), seen.end),
        (&b"out\nsub\n"[..], &b"err\n"[..], exited(3)),
        "{seen:?}"
    );
    assert_eq!(seen.dropped, OutputOffsets::default());
    // After the end, from the other instance: everything again, and the end.
    let again = attach_all(&*w.second, &h, &started, OutputOffsets::default()).await;
    assert_eq!(
        (again.out, again.err, again.end),
        (seen.out, seen.err, seen.end)
    );
    // From an offset: only what follows.
    let tail = attach_all(
        p,
        &h,
        &started,
        OutputOffsets {
            stdout: 4,
            stderr: 4,
        },
    )
    .await;
    assert_eq!(
        (tail.out.as_slice(), tail.err.as_slice()),
        (&b"sub\n"[..], &b""[..])
    );
    let listed = w.second.exec_list(&h).await.expect("exec_list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, ExecState::Ended(exited(3).expect("end")));
    p.exec_forget(&h, &started).await.expect("forget");
    assert!(p.exec_list(&h).await.expect("exec_list").is_empty());
    let e = match p.exec_attach(&h, &started, OutputOffsets::default()).await {
        Ok(_) => panic!("attach after forget"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = p.exec_forget(&h, &started).await.expect_err("forget twice");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    for bad in [
        ExecSpec::new("touch ran"),
        ExecSpec::new("touch ran").id("../x"),
    ] {
        let e = p.exec_start(&h, bad).await.expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    }
    assert_eq!(p.stat(&h, "/workspace/sub/ran").await.expect("stat"), None);
    p.destroy(&h).await.expect("destroy");
}

/// The other instance (another replica) lists, attaches to and kills an exec it did not
/// start, while the first is attached too (two attaches at once get the same bytes and
/// end); the kill reaches the command's tree and is not a timeout; killing an ended exec
/// is fine, a missing one NotFound.
pub async fn sb_exec_other_replica(w: &SandboxWorld) {
    let (p, q) = (&*w.provider, &*w.second);
    let h = w.create("dur-replica").await;
    let cmd = "echo $$ > pids; sleep 300 & echo $! >> pids; echo ready; touch started; wait";
    let started = p
        .exec_start(&h, ExecSpec::new(cmd).id("long-1"))
        .await
        .expect("exec_start");
    wait_for(p, &h, "/workspace/started").await;
    let listed = q.exec_list(&h).await.expect("list from the other instance");
    assert_eq!(
        listed
            .iter()
            .map(|i| (i.id.as_str(), i.state))
            .collect::<Vec<_>>(),
        [("long-1", ExecState::Running)]
    );
    let first = p.exec_attach(&h, &started, OutputOffsets::default());
    let second = q.exec_attach(&h, &started, OutputOffsets::default());
    let (first, second) = (first.await.expect("attach"), second.await.expect("attach"));
    let read = |s: ExecStream| async move {
        let mut s = s;
        let mut seen = Seen::default();
        tokio::time::timeout(BOUND, async {
            while let Some(ev) = s.next().await {
                seen.take(ev.expect("event"));
            }
        })
        .await
        .expect("attach ended in time");
        seen
    };
    let kill = async {
        q.exec_kill(&h, &started).await.expect("exec_kill");
    };
    let (a, b, ()) = tokio::join!(read(first), read(second), kill);
    assert_eq!(a.out, b"ready\n", "{a:?}");
    assert_eq!((&a.out, &a.err, a.end), (&b.out, &b.err, b.end));
    match a.end {
        Some(ExecEnd::Exited(s)) => assert!(
            s.signal.is_some() || s.code.is_some_and(|c| c != 0),
            "{s:?}"
        ),
        other => panic!("a killed exec ends Exited with its signal, not {other:?}"),
    }
    assert_eq!(alive(p, &h, "pids").await, "", "survivors after exec_kill");
    q.exec_kill(&h, &started).await.expect("kill an ended exec");
    let e = q.exec_kill(&h, &id("no-such")).await.expect_err("missing");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    p.destroy(&h).await.expect("destroy");
}

/// An attach cut after part of the output (the stream dropped) and resumed from the last
/// offsets on the other instance gives every byte once: together they equal the output.
pub async fn sb_exec_attach_resumes(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("dur-resume").await;
    // 40000 numbered lines on stdout, 2000 on stderr, paced so the cut comes mid-way.
    let cmd = "for i in $(seq 1 40); do seq $(( (i-1)*1000+1 )) $(( i*1000 )); seq $(( (i-1)*50+1 )) $(( i*50 )) >&2; sleep 0.02; done";
    let started = p
        .exec_start(&h, ExecSpec::new(cmd).id("resume-1"))
        .await
        .expect("exec_start");
    let mut s = p
        .exec_attach(&h, &started, OutputOffsets::default())
        .await
        .expect("attach");
    let mut first = Seen::default();
    tokio::time::timeout(BOUND, async {
        while first.out.len() < 20_000 {
            match s.next().await {
                Some(ev) => first.take(ev.expect("event")),
                None => break,
            }
        }
    })
    .await
    .expect("first part in time");
    drop(s); // the cut
    let rest = attach_all(&*w.second, &h, &started, first.next).await;
    let mut all_out = first.out.clone();
    all_out.extend_from_slice(&rest.out);
    let mut all_err = first.err.clone();
    all_err.extend_from_slice(&rest.err);
    let want = |n: u32| -> Vec<u8> {
        (1..=n)
            .map(|i| format!("{i}\n"))
            .collect::<String>()
            .into_bytes()
    };
    assert!(
        all_out == want(40_000),
        "stdout lost or doubled bytes ({} bytes)",
        all_out.len()
    );
    assert!(
        all_err == want(2_000),
        "stderr lost or doubled bytes ({} bytes)",
        all_err.len()
    );
    assert_eq!(rest.end, exited(0));
    p.destroy(&h).await.expect("destroy");
}

/// A used id never runs twice: a second start (either instance), while it runs and after
/// it ended, and an `exec` with that id are AlreadyExists and run nothing (the command
/// appends to a counter file); only a forgotten id starts again. `exec` with a fresh id
/// returns the output as `exec` does and leaves the record.
pub async fn sb_exec_id_never_twice(w: &SandboxWorld) {
    let (p, q) = (&*w.provider, &*w.second);
    let h = w.create("dur-once").await;
    let cmd = "echo run >> counter; while [ ! -e go ]; do sleep 0.05; done";
    let spec = || ExecSpec::new(cmd).id("once-1");
    let started = p.exec_start(&h, spec()).await.expect("exec_start");
    for (who, r) in [
        ("same instance", p.exec_start(&h, spec()).await),
        ("other instance", q.exec_start(&h, spec()).await),
    ] {
        let e = r.expect_err(who);
        assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{who}: {e}");
    }
    p.write_file(&h, "/workspace/go", b"").await.expect("go");
    let seen = attach_all(q, &h, &started, OutputOffsets::default()).await;
    assert_eq!(seen.end, exited(0));
    let e = q.exec_start(&h, spec()).await.expect_err("after the end");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    let e = p.exec(&h, spec()).await.expect_err("exec with a used id");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(
        out(p, &h, "cat counter").await,
        "run\n",
        "ran more than once"
    );
    p.exec_forget(&h, &started).await.expect("forget");
    p.exec_start(&h, spec())
        .await
        .expect("a forgotten id starts again");
    let seen = attach_all(p, &h, &started, OutputOffsets::default()).await;
    assert_eq!(seen.end, exited(0));
    assert_eq!(out(p, &h, "cat counter").await, "run\nrun\n");

    let r = p
        .exec(&h, ExecSpec::new("echo hi; exit 4").id("fused-1"))
        .await
        .expect("exec with an id");
    assert_eq!((r.exit_code, r.stdout.as_str()), (Some(4), "hi\n"));
    let listed = q.exec_list(&h).await.expect("list");
    assert!(
        listed
            .iter()
            .any(|i| i.id.as_str() == "fused-1"
                && i.state == ExecState::Ended(exited(4).expect("end"))),
        "{listed:?}"
    );
    p.destroy(&h).await.expect("destroy");
}

/// The time limit holds in the sandbox with nobody attached: the exec and its group are
/// killed at the deadline, and an attach afterwards says TimedOut with the output so far.
pub async fn sb_exec_timeout_unattached(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("dur-timeout").await;
    let cmd = "echo $$ > pids; sleep 300 & echo $! >> pids; echo started; touch started; wait";
    let started = p
        .exec_start(
            &h,
            ExecSpec::new(cmd)
                .id("slow-1")
                .timeout(Duration::from_secs(2)),
        )
        .await
        .expect("exec_start");
    wait_for(p, &h, "/workspace/started").await;
    let seen = attach_all(&*w.second, &h, &started, OutputOffsets::default()).await;
    assert_eq!(
        (seen.out.as_slice(), seen.end),
        (&b"started\n"[..], Some(ExecEnd::TimedOut))
    );
    assert_eq!(
        alive(p, &h, "pids").await,
        "",
        "survivors after the timeout"
    );
    p.destroy(&h).await.expect("destroy");
}

/// A suspend and resume between start and attach keep the exec running and its record
/// (where the provider keeps processes over suspend); an ended exec's record survives one
/// too.
pub async fn sb_exec_survives_suspend(w: &SandboxWorld) {
    let p = &*w.provider;
    if !p.capabilities().suspend_keeps_processes {
        return;
    }
    let h = w.create("dur-suspend").await;
    let cmd = "echo before; while [ ! -e go ]; do sleep 0.05; done; echo after";
    let started = p
        .exec_start(&h, ExecSpec::new(cmd).id("nap-1"))
        .await
        .expect("exec_start");
    let done = p
        .exec_start(&h, ExecSpec::new("echo done-out").id("done-1"))
        .await
        .expect("exec_start");
    assert_eq!(
        attach_all(p, &h, &done, OutputOffsets::default()).await.end,
        exited(0)
    );
    p.suspend(&h).await.expect("suspend");
    assert_eq!(
        w.second.resume(&h).await.expect("resume"),
        exec_world::sandbox::ResumeOutcome::Resumed
    );
    let mut states: Vec<_> = w
        .second
        .exec_list(&h)
        .await
        .expect("list")
        .into_iter()
        .map(|i| (i.id.to_string(), i.state))
        .collect();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        states,
        [
            (
                "done-1".to_owned(),
                ExecState::Ended(exited(0).expect("end"))
            ),
            ("nap-1".to_owned(), ExecState::Running)
        ]
    );
    p.write_file(&h, "/workspace/go", b"").await.expect("go");
    let seen = attach_all(&*w.second, &h, &started, OutputOffsets::default()).await;
    assert_eq!(
        (seen.out.as_slice(), seen.end),
        (&b"before\nafter\n"[..], exited(0))
    );
    let seen = attach_all(&*w.second, &h, &done, OutputOffsets::default()).await;
    assert_eq!(seen.out, b"done-out\n");
    p.destroy(&h).await.expect("destroy");
}
