//! E2B-only durable-exec cases on the emulator: a cold boot (the sandbox rebooted) between
//! start and attach gives `ExecEnd::Unknown` from a fresh provider instance, never a
//! guess and never a second run; the sandbox user can neither read, forge nor add an
//! exec record (they are root's, in `subprocess_e2b::DEFAULT_DURABLE_DIR`).

use std::time::Duration;

use exec_world::sandbox::{ExecEnd, ExecEvent, ExecSpec, ExecState, SandboxProvider as _};
use exec_world::{ErrorKind, OutputOffsets};
use futures::StreamExt as _;

use crate::sandbox_support::{one, provider};

/// stdout and the end of an attach from byte 0 (bounded).
async fn read_all(
    p: &sandbox_e2b::E2bSandboxes,
    h: &exec_world::sandbox::SandboxHandle,
    id: &exec_world::sandbox::ExecId,
) -> (Vec<u8>, Option<ExecEnd>) {
    let mut s = p
        .exec_attach(h, id, OutputOffsets::default())
        .await
        .expect("attach");
    let mut out = Vec::new();
    let mut end = None;
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = s.next().await {
            match ev.expect("event") {
                ExecEvent::Stdout { data, .. } => out.extend_from_slice(&data),
                ExecEvent::End(e) => end = Some(e),
                _ => {}
            }
        }
    })
    .await
    .expect("attach ended in time");
    (out, end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_across_a_cold_boot_is_unknown_and_never_rerun() {
    let o = one("dur-reboot").await;
    let id =
        o.p.exec_start(
            &o.h,
            ExecSpec::new("echo run >> counter; echo before; sleep 1000").id("job-1"),
        )
        .await
        .expect("exec_start");
    // Pause once "before" is in the record (an attach reads the record): bytes still in
    // the pipe between the command and its watcher are lost by a cold boot.
    let mut s =
        o.p.exec_attach(&o.h, &id, OutputOffsets::default())
            .await
            .expect("attach");
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !seen.ends_with(b"before\n") {
            match s.next().await {
                Some(Ok(ExecEvent::Stdout { data, .. })) => seen.extend_from_slice(&data),
                Some(Ok(_)) => {}
                other => panic!("attach before the pause: {other:?}"),
            }
        }
    })
    .await
    .expect("\"before\" recorded in time");
    drop(s);
    o.env
        .client
        .pause(&o.h.id, e2b_core::PauseOptions { memory: false })
        .await
        .expect("pause without memory");
    o.env
        .client
        .connect(
            &o.h.id,
            e2b_core::ConnectOptions {
                timeout: Duration::from_secs(120),
                memory: Some(false),
            },
        )
        .await
        .expect("cold boot");
    // Another host process's provider: nothing in memory about the exec.
    let q = provider(&o.env.emu);
    let listed = q.exec_list(&o.h).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|i| (i.id.as_str(), i.state))
            .collect::<Vec<_>>(),
        [("job-1", ExecState::Ended(ExecEnd::Unknown))]
    );
    let (out, end) = read_all(&q, &o.h, &id).await;
    assert_eq!(
        (out.as_slice(), end),
        (&b"before\n"[..], Some(ExecEnd::Unknown))
    );
    let e = q
        .exec_start(&o.h, ExecSpec::new("echo run >> counter").id("job-1"))
        .await
        .expect_err("a retried start after the reboot");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    let counter = q
        .read_file(&o.h, "/workspace/counter", 100)
        .await
        .expect("read")
        .map(|c| c.data);
    assert_eq!(counter.as_deref(), Some(&b"run\n"[..]), "ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_user_cannot_read_or_forge_an_exec_record() {
    let o = one("dur-forge").await;
    let id =
        o.p.exec_start(
            &o.h,
            ExecSpec::new("echo secret-output; exit 3").id("real-1"),
        )
        .await
        .expect("exec_start");
    let (out, end) = read_all(&o.p, &o.h, &id).await;
    assert_eq!(out, b"secret-output\n");
    let dir = subprocess_e2b::DEFAULT_DURABLE_DIR;
    let attempts = [
        format!("ls {dir}"),
        format!("cat {dir}/real-1/*"),
        format!("grep -r secret-output {dir}"),
        format!("echo 'exit 0' > {dir}/real-1/status"),
        format!("mkdir {dir}/forged-1"),
        format!("rm -rf {dir}/real-1"),
        format!("mv {dir} /tmp/moved"),
    ];
    for cmd in &attempts {
        let r =
            o.p.exec(&o.h, ExecSpec::new(cmd.as_str()))
                .await
                .expect("exec");
        assert_ne!(r.exit_code, Some(0), "the sandbox user could: {cmd}: {r:?}");
        assert!(!r.stdout.contains("secret-output"), "{cmd}: {r:?}");
    }
    let listed = o.p.exec_list(&o.h).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|i| (i.id.as_str(), i.state))
            .collect::<Vec<_>>(),
        [("real-1", ExecState::Ended(end.expect("end")))]
    );
    assert_eq!(end.and_then(|e| e.exit_code()), Some(3));
    let (again, _) = read_all(&o.p, &o.h, &id).await;
    assert_eq!(again, b"secret-output\n");
}
