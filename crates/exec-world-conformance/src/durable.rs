//! Durable-command conformance tests (`durable_*`), for any [`Subprocess`] that claims
//! [`ProcCapabilities::durable`](exec_world::ProcCapabilities::durable): start, detach,
//! list, attach from a fresh adapter instance, bounded output, resume, stdin, collect,
//! and no command ever run twice.
//!
//! Every test uses ids of its own (random), so worlds may share a state directory.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{World, collect, read_until, skip, survivors, survivors_eventually, within};
use exec_world::{
    Attached, Child, DurableId, DurableInfo, DurableSpec, DurableState, ErrorKind, ExitStatus,
    OutputOffsets, Signal, SpawnSpec, StdinMode, Subprocess,
};

/// True (and prints why) when the backend does not claim durable commands.
fn unsupported(w: &World, test: &str) -> bool {
    if w.proc.capabilities().durable {
        return false;
    }
    skip(test, "durable");
    true
}

/// A fresh id with a readable prefix.
fn new_id(prefix: &str) -> DurableId {
    DurableId::new(format!("{prefix}-{}", DurableId::random())).expect("valid id")
}

/// `sh -c script sh args…`, durable with `id`.
fn durable_sh(script: &str, args: &[&str], d: DurableSpec) -> SpawnSpec {
    SpawnSpec::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args.iter().map(|a| a.to_string()))
        .durable(d)
}

/// The scratch path `rel` as the world's processes see it.
fn pp(w: &World, rel: &str) -> String {
    w.proc_path(&w.path(rel)).to_string()
}

/// The listed record of `id`, if any.
async fn listed(p: &dyn Subprocess, id: &DurableId) -> Option<DurableInfo> {
    p.durable_list()
        .await
        .expect("durable_list")
        .into_iter()
        .find(|i| &i.id == id)
}

/// A fresh adapter instance (another host process, say), once the durable starts
/// `w.proc` has in flight were answered: `spawn` returns before its start reached the
/// world, and only the spawning instance waits for that.
async fn fresh_after_starts(w: &World) -> Arc<dyn Subprocess> {
    w.proc.durable_list().await.expect("durable_list");
    w.fresh_proc().await
}

/// Attaches from `from` (bounded).
async fn attach(p: &dyn Subprocess, id: &DurableId, from: OutputOffsets) -> Attached {
    within(30, "durable_attach", p.durable_attach(id, from))
        .await
        .unwrap_or_else(|e| panic!("attach {id}: {e}"))
}

/// Waits (bounded) for `id` to end, through an attach; its status.
async fn ended(p: &dyn Subprocess, id: &DurableId) -> ExitStatus {
    let a = attach(p, id, OutputOffsets::default()).await;
    within(120, "durable command end", a.child.wait())
        .await
        .unwrap_or_else(|e| panic!("wait {id}: {e}"))
}

/// Reads both streams of an attached child to their ends.
async fn drain(child: &mut Child) -> (Bytes, Bytes) {
    let (o, e) = (child.take_stdout(), child.take_stderr());
    within(
        120,
        "durable output",
        futures::future::join(collect(o), collect(e)),
    )
    .await
}

fn sha(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

/// Reads the scratch file `rel` through the world's Fs.
async fn file(w: &World, rel: &str) -> Bytes {
    w.fs.read(&w.path(rel), 1 << 30)
        .await
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Creates the scratch file `rel` (a signal to a waiting command).
async fn touch(w: &World, rel: &str) {
    super::put(w.fs.as_ref(), &w.path(rel), b"go").await;
}

/// A command that prints `started`, waits for the scratch file `go`, prints `done`.
const WAIT_FOR_GO: &str =
    r#"echo started; while [ ! -e "$1" ]; do sleep 0.02; done; echo done; exit 3"#;

/// Ids and tags are checked before anything runs.
pub async fn durable_ids_and_tags_validated(w: &World) {
    if unsupported(w, "durable_ids_and_tags_validated") {
        return;
    }
    for bad in ["", "-x", ".x", "a/b", "a b", "..", &"x".repeat(65), "é"] {
        let e = DurableId::new(bad).expect_err(bad);
        assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{bad:?}");
    }
    for good in ["a", "A.b_c-9", &"x".repeat(64)] {
        assert_eq!(DurableId::new(good).expect(good).as_str(), good);
    }
    let id = new_id("badtag");
    let mut d = DurableSpec::new(id.clone());
    d.tag = Some("not a tag".into());
    let marker = w.path("ran");
    let spec = durable_sh(r#"echo x > "$1""#, &[&pp(w, "ran")], d);
    match w.proc.spawn(spec) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}"),
        Ok(c) => {
            let e = c.wait().await.expect_err("a bad tag must not start");
            assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
        }
    }
    assert!(listed(w.proc.as_ref(), &id).await.is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(w.fs.stat(&marker).await.is_err(), "the command ran");
}

/// A command that ended while nobody listened: listed with its fields and exit status,
/// attached from a new adapter instance with all its output and its status.
pub async fn durable_list_and_attach_ended_from_fresh_instance(w: &World) {
    if unsupported(w, "durable_list_and_attach_ended_from_fresh_instance") {
        return;
    }
    let id = new_id("ended");
    let d = DurableSpec::new(id.clone()).tag("conf-tag").expect("tag");
    let child = w
        .proc
        .spawn(durable_sh(
            "printf 'to out'; printf 'to err' >&2; exit 7",
            &[],
            d,
        ))
        .expect("spawn");
    let pid = child.pid();
    drop(child);
    let fresh = fresh_after_starts(w).await;
    let status = ended(fresh.as_ref(), &id).await;
    assert_eq!(status.code, Some(7));
    let info = listed(fresh.as_ref(), &id).await.expect("listed");
    assert_eq!(info.tag.as_deref(), Some("conf-tag"));
    assert_eq!(info.program, "sh");
    assert_eq!(info.args[0], "-c");
    assert_eq!(info.cwd, *w.proc.cwd());
    assert_eq!(info.state, DurableState::Exited(status));
    if let (Some(a), Some(b)) = (pid, info.pid) {
        assert_eq!(a, b);
    }
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert_eq!(a.start, OutputOffsets::default());
    assert_eq!(a.dropped, OutputOffsets::default());
    assert!(a.child.take_stdin().is_none(), "stdin was not piped");
    let (out, err) = drain(&mut a.child).await;
    assert_eq!(&out[..], b"to out");
    assert_eq!(&err[..], b"to err");
    assert_eq!(a.child.wait().await.expect("wait").code, Some(7));
    // From an offset: the rest only.
    let mut a = attach(
        fresh.as_ref(),
        &id,
        OutputOffsets {
            stdout: 3,
            stderr: 6,
        },
    )
    .await;
    let (out, err) = drain(&mut a.child).await;
    assert_eq!(&out[..], b"out");
    assert_eq!(&err[..], b"");
    fresh.durable_collect(&id).await.expect("collect");
}

/// Attach to a running command from a new adapter instance: its output so far, then live,
/// then its status.
pub async fn durable_attach_running_from_fresh_instance(w: &World) {
    if unsupported(w, "durable_attach_running_from_fresh_instance") {
        return;
    }
    let id = new_id("running");
    let child = w
        .proc
        .spawn(durable_sh(
            WAIT_FOR_GO,
            &[&pp(w, "go")],
            DurableSpec::new(id.clone()),
        ))
        .expect("spawn");
    child.detach();
    let fresh = fresh_after_starts(w).await;
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert_eq!(a.info.state, DurableState::Running);
    let mut out = a.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 30, "started", |s| {
        s.contains("started")
    })
    .await;
    assert_eq!(
        listed(w.proc.as_ref(), &id).await.map(|i| i.state),
        Some(DurableState::Running)
    );
    touch(w, "go").await;
    read_until(&mut out, &mut seen, 30, "done", |s| s.contains("done")).await;
    let status = within(30, "wait", a.child.wait()).await.expect("wait");
    assert_eq!(status.code, Some(3));
    let rest = collect(Some(out)).await;
    seen.extend_from_slice(&rest);
    assert_eq!(String::from_utf8_lossy(&seen), "started\ndone\n");
    fresh.durable_collect(&id).await.expect("collect");
}

/// Output written while nobody listened arrives complete (hashed).
pub async fn durable_unheard_output_arrives_complete(w: &World) {
    if unsupported(w, "durable_unheard_output_arrives_complete") {
        return;
    }
    let id = new_id("unheard");
    let data = pp(w, "data");
    let script = r#"head -c 3000000 /dev/urandom > "$1"; cat "$1"; head -c 100000 "$1" >&2"#;
    drop(
        w.proc
            .spawn(durable_sh(script, &[&data], DurableSpec::new(id.clone())))
            .expect("spawn"),
    );
    let fresh = fresh_after_starts(w).await;
    assert!(ended(fresh.as_ref(), &id).await.success());
    let expected = file(w, "data").await;
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert_eq!(a.dropped, OutputOffsets::default());
    let (out, err) = drain(&mut a.child).await;
    assert_eq!(out.len(), expected.len());
    assert_eq!(sha(&out), sha(&expected));
    assert_eq!(sha(&err), sha(&expected[..100_000]));
    fresh.durable_collect(&id).await.expect("collect");
}

/// `total` bytes through a cap of `cap`: exactly `total - cap` dropped (the oldest), the
/// newest `cap` bytes kept intact.
async fn cap_case(w: &World, total: u64, cap: u64) {
    let id = new_id("cap");
    let data = pp(w, "capdata");
    let script = format!(r#"head -c {total} /dev/urandom > "$1"; cat "$1""#);
    drop(
        w.proc
            .spawn(durable_sh(
                &script,
                &[&data],
                DurableSpec::new(id.clone()).output_cap(cap),
            ))
            .expect("spawn"),
    );
    let fresh = fresh_after_starts(w).await;
    assert!(ended(fresh.as_ref(), &id).await.success());
    let expected = file(w, "capdata").await;
    assert_eq!(expected.len() as u64, total);
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert_eq!(a.dropped.stdout, total - cap, "dropped bytes");
    assert_eq!(a.start.stdout, total - cap);
    assert_eq!(a.dropped.stderr, 0);
    let (out, _) = drain(&mut a.child).await;
    assert_eq!(out.len() as u64, cap);
    assert_eq!(sha(&out), sha(&expected[(total - cap) as usize..]));
    // From inside the kept part: no drop, the rest.
    let from = total - cap / 2;
    let mut a = attach(
        fresh.as_ref(),
        &id,
        OutputOffsets {
            stdout: from,
            stderr: 0,
        },
    )
    .await;
    assert_eq!(a.dropped.stdout, 0);
    let (out, _) = drain(&mut a.child).await;
    assert_eq!(sha(&out), sha(&expected[from as usize..]));
    fresh.durable_collect(&id).await.expect("collect");
}

/// A small cap (fast): 5 MiB through 1 MiB.
pub async fn durable_cap_drops_oldest_and_counts(w: &World) {
    if unsupported(w, "durable_cap_drops_oldest_and_counts") {
        return;
    }
    cap_case(w, 5 << 20, 1 << 20).await;
}

/// The issue's case: 64 MiB through the default 16 MiB cap.
pub async fn durable_cap_64_mib_through_16_mib(w: &World) {
    if unsupported(w, "durable_cap_64_mib_through_16_mib") {
        return;
    }
    assert_eq!(exec_world::DEFAULT_OUTPUT_CAP, 16 << 20);
    cap_case(w, 64 << 20, exec_world::DEFAULT_OUTPUT_CAP).await;
}

/// A cut attach stream resumed from the last offset loses and doubles nothing, while the
/// command still writes.
pub async fn durable_cut_attach_resumes_exactly(w: &World) {
    if unsupported(w, "durable_cut_attach_resumes_exactly") {
        return;
    }
    let id = new_id("resume");
    let (data, go) = (pp(w, "resume-data"), pp(w, "go"));
    let script = r#"head -c 2000000 /dev/urandom > "$1"; head -c 1000000 "$1"
while [ ! -e "$2" ]; do sleep 0.02; done; tail -c +1000001 "$1""#;
    drop(
        w.proc
            .spawn(durable_sh(
                script,
                &[&data, &go],
                DurableSpec::new(id.clone()),
            ))
            .expect("spawn"),
    );
    let mut got: Vec<u8> = Vec::new();
    {
        let mut a = attach(w.proc.as_ref(), &id, OutputOffsets::default()).await;
        let mut out = a.child.take_stdout().expect("stdout");
        // Read a part, then cut (drop the stream and the child).
        while got.len() < 300_000 {
            match within(30, "first part", out.next()).await {
                Some(Ok(c)) => got.extend_from_slice(&c),
                other => panic!("stream ended early: {other:?}"),
            }
        }
    }
    touch(w, "go").await;
    let fresh = fresh_after_starts(w).await;
    let mut a = attach(
        fresh.as_ref(),
        &id,
        OutputOffsets {
            stdout: got.len() as u64,
            stderr: 0,
        },
    )
    .await;
    assert_eq!(a.start.stdout, got.len() as u64);
    assert_eq!(a.dropped.stdout, 0);
    let (rest, _) = drain(&mut a.child).await;
    got.extend_from_slice(&rest);
    assert!(a.child.wait().await.expect("wait").success());
    let expected = file(w, "resume-data").await;
    assert_eq!(got.len(), expected.len());
    assert_eq!(sha(&got), sha(&expected));
    fresh.durable_collect(&id).await.expect("collect");
}

/// A start with an id that exists (running or ended, from this or another instance) is
/// `AlreadyExists` and runs nothing; the counter file shows one run.
pub async fn durable_start_never_runs_twice(w: &World) {
    if unsupported(w, "durable_start_never_runs_twice") {
        return;
    }
    let id = new_id("once");
    let (counter, go) = (pp(w, "counter"), pp(w, "go"));
    let script = r#"echo run >> "$1"; while [ ! -e "$2" ]; do sleep 0.02; done"#;
    let spec = || durable_sh(script, &[&counter, &go], DurableSpec::new(id.clone()));
    let first = w.proc.spawn(spec()).expect("first start");
    first.detach();
    let fresh = fresh_after_starts(w).await;
    let expect_exists = |r: Result<Child, exec_world::Error>| async move {
        match r {
            Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}"),
            Ok(c) => {
                let e = c.wait().await.expect_err("a second start must fail");
                assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
            }
        }
    };
    // Retries while it runs, from both instances, several at once.
    let retries: Vec<_> = (0..4)
        .map(|i| {
            let p = if i % 2 == 0 { &w.proc } else { &fresh };
            p.spawn(spec())
        })
        .collect();
    for r in retries {
        expect_exists(r).await;
    }
    touch(w, "go").await;
    assert!(ended(fresh.as_ref(), &id).await.success());
    // And after it ended (not collected).
    expect_exists(fresh.spawn(spec())).await;
    expect_exists(w.proc.spawn(spec())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        &file(w, "counter").await[..],
        b"run\n",
        "the command ran more than once"
    );
    // Collected: the id is free; a new start is a new, deliberate run.
    fresh.durable_collect(&id).await.expect("collect");
    let again = w.proc.spawn(spec()).expect("start after collect");
    drop(again);
    assert!(ended(w.proc.as_ref(), &id).await.success());
    assert_eq!(&file(w, "counter").await[..], b"run\nrun\n");
    w.proc.durable_collect(&id).await.expect("collect");
}

/// Two attaches at once (two instances) both get every byte, while it is written.
pub async fn durable_two_attaches_get_everything(w: &World) {
    if unsupported(w, "durable_two_attaches_get_everything") {
        return;
    }
    let id = new_id("two");
    let (data, go) = (pp(w, "two-data"), pp(w, "go"));
    let script = r#"head -c 1500000 /dev/urandom > "$1"
while [ ! -e "$2" ]; do sleep 0.02; done
i=0; while [ $i -lt 30 ]; do echo "line $i" >&2; i=$((i+1)); done; cat "$1""#;
    drop(
        w.proc
            .spawn(durable_sh(
                script,
                &[&data, &go],
                DurableSpec::new(id.clone()),
            ))
            .expect("spawn"),
    );
    let fresh = fresh_after_starts(w).await;
    let mut a = attach(w.proc.as_ref(), &id, OutputOffsets::default()).await;
    let mut b = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    touch(w, "go").await;
    let ((ao, ae), (bo, be)) =
        futures::future::join(drain(&mut a.child), drain(&mut b.child)).await;
    let expected = file(w, "two-data").await;
    let lines: String = (0..30).map(|i| format!("line {i}\n")).collect();
    for (o, e) in [(ao, ae), (bo, be)] {
        assert_eq!(sha(&o), sha(&expected));
        assert_eq!(String::from_utf8_lossy(&e), lines);
    }
    assert!(a.child.wait().await.expect("wait a").success());
    assert!(b.child.wait().await.expect("wait b").success());
    fresh.durable_collect(&id).await.expect("collect");
}

/// Without piped stdin a durable `cat` gets EOF at once and ends.
pub async fn durable_stdin_closed_by_default(w: &World) {
    if unsupported(w, "durable_stdin_closed_by_default") {
        return;
    }
    let id = new_id("cat");
    let mut child = w
        .proc
        .spawn(SpawnSpec::new("cat").durable(DurableSpec::new(id.clone())))
        .expect("spawn");
    assert!(child.take_stdin().is_none());
    let status = within(30, "cat with no stdin", child.wait())
        .await
        .expect("wait");
    assert!(status.success(), "{status:?}");
    w.proc.durable_collect(&id).await.expect("collect");
}

/// Piped stdin: written by the starter, left open when it drops its handle, written and
/// closed from an attach of another instance; closed stdin is not offered again.
pub async fn durable_stdin_piped_across_attaches(w: &World) {
    if unsupported(w, "durable_stdin_piped_across_attaches") || !w.proc.capabilities().stdin {
        return;
    }
    let id = new_id("stdin");
    let script = r#"while read -r l; do echo "got $l"; done; echo EOF-SEEN"#;
    let mut child = w
        .proc
        .spawn(durable_sh(script, &[], DurableSpec::new(id.clone())).stdin(StdinMode::Piped))
        .expect("spawn");
    let mut input = child.take_stdin().expect("stdin");
    let mut out = child.take_stdout().expect("stdout");
    input.write_all(b"one\n").await.expect("write");
    input.flush().await.expect("flush");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 30, "got one", |s| {
        s.contains("got one")
    })
    .await;
    drop((input, out, child));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = fresh_after_starts(w).await;
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert_eq!(
        a.info.state,
        DurableState::Running,
        "dropping stdin closed it"
    );
    let mut input = a.child.take_stdin().expect("stdin of an attach");
    let big: String = (0..2000).map(|i| format!("{i}\n")).collect();
    input.write_all(b"two\n").await.expect("write");
    input.write_all(big.as_bytes()).await.expect("write many");
    input.shutdown().await.expect("close stdin");
    let (o, _) = drain(&mut a.child).await;
    let text = String::from_utf8_lossy(&o);
    let expected: String = std::iter::once("got one\ngot two\n".to_string())
        .chain((0..2000).map(|i| format!("got {i}\n")))
        .chain(std::iter::once("EOF-SEEN\n".to_string()))
        .collect();
    assert_eq!(text, expected);
    assert!(a.child.wait().await.expect("wait").success());
    let mut again = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    assert!(
        again.child.take_stdin().is_none(),
        "stdin of an ended command"
    );
    fresh.durable_collect(&id).await.expect("collect");
}

/// Dropping or detaching the child of a durable spawn leaves the command running.
pub async fn durable_drop_and_detach_leave_it_running(w: &World) {
    if unsupported(w, "durable_drop_and_detach_leave_it_running") {
        return;
    }
    let mut ids = Vec::new();
    let mut pids = Vec::new();
    for (n, detach) in [(0, true), (1, false)] {
        let id = new_id(&format!("keep{n}"));
        let mut child = w
            .proc
            .spawn(durable_sh(
                "echo up; exec sleep 600",
                &[],
                DurableSpec::new(id.clone()),
            ))
            .expect("spawn");
        let mut out = child.take_stdout().expect("stdout");
        let mut seen = Vec::new();
        read_until(&mut out, &mut seen, 30, "up", |s| s.contains("up")).await;
        pids.push(child.started().await.expect("pid"));
        if detach {
            child.detach();
        } else {
            drop(child);
        }
        drop(out);
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        survivors(w.proc.as_ref(), &pids).await,
        pids,
        "a durable command died"
    );
    let fresh = fresh_after_starts(w).await;
    for id in &ids {
        let a = attach(fresh.as_ref(), id, OutputOffsets::default()).await;
        assert_eq!(a.info.state, DurableState::Running);
        let s = within(60, "terminate", a.child.terminate(Duration::from_secs(2)))
            .await
            .expect("terminate");
        assert_eq!(s.signal, Some(15), "{s:?}");
        fresh.durable_collect(id).await.expect("collect");
    }
    assert!(
        survivors_eventually(w.proc.as_ref(), &pids)
            .await
            .is_empty()
    );
}

/// `signal` reaches an attached command; `terminate` ends it and its descendants.
pub async fn durable_signal_and_terminate_attached(w: &World) {
    if unsupported(w, "durable_signal_and_terminate_attached") {
        return;
    }
    let id = new_id("sig");
    let script = r#"trap 'echo usr1; exit 5' USR1; echo ready; while :; do sleep 0.05; done"#;
    let child = w
        .proc
        .spawn(durable_sh(script, &[], DurableSpec::new(id.clone())))
        .expect("spawn");
    drop(child);
    let fresh = fresh_after_starts(w).await;
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    let mut out = a.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 30, "ready", |s| s.contains("ready")).await;
    a.child.signal(Signal::Usr1).await.expect("signal");
    read_until(&mut out, &mut seen, 30, "usr1", |s| s.contains("usr1")).await;
    assert_eq!(a.child.wait().await.expect("wait").code, Some(5));
    fresh.durable_collect(&id).await.expect("collect");

    // A tree: a background grandchild goes with it.
    let id = new_id("tree");
    let script = r#"sleep 600 & echo "pid $!"; echo "pid $$"; wait"#;
    drop(
        w.proc
            .spawn(durable_sh(script, &[], DurableSpec::new(id.clone())))
            .expect("spawn"),
    );
    // The start reached the world before the other instance looks for it.
    w.proc.durable_list().await.expect("durable_list");
    let mut a = attach(fresh.as_ref(), &id, OutputOffsets::default()).await;
    let mut out = a.child.take_stdout().expect("stdout");
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, 30, "two pids", |s| {
        super::pids_in(s).len() == 2
    })
    .await;
    let pids = super::pids_in(&String::from_utf8_lossy(&seen));
    within(60, "terminate", a.child.terminate(Duration::from_secs(2)))
        .await
        .expect("terminate");
    assert!(
        survivors_eventually(w.proc.as_ref(), &pids)
            .await
            .is_empty()
    );
    fresh.durable_collect(&id).await.expect("collect");
}

/// `durable_collect`: running is InvalidSpec, missing is NotFound, ended is forgotten
/// (not listed, not attachable, its id free).
pub async fn durable_collect_semantics(w: &World) {
    if unsupported(w, "durable_collect_semantics") {
        return;
    }
    let p = w.proc.as_ref();
    let id = new_id("collect");
    let go = pp(w, "go");
    drop(
        p.spawn(durable_sh(
            WAIT_FOR_GO,
            &[&go],
            DurableSpec::new(id.clone()),
        ))
        .expect("spawn"),
    );
    let e = p
        .durable_collect(&id)
        .await
        .expect_err("collect a running one");
    assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    assert!(listed(p, &id).await.is_some());
    touch(w, "go").await;
    assert_eq!(ended(p, &id).await.code, Some(3));
    p.durable_collect(&id).await.expect("collect");
    assert!(listed(p, &id).await.is_none());
    let e = p
        .durable_attach(&id, OutputOffsets::default())
        .await
        .expect_err("attach a collected one");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = p.durable_collect(&id).await.expect_err("collect twice");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let never = new_id("never");
    let e = p
        .durable_collect(&never)
        .await
        .expect_err("collect unknown");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = p
        .durable_attach(&never, OutputOffsets::default())
        .await
        .expect_err("attach unknown");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}
