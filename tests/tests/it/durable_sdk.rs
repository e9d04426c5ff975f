//! Durable commands (issue 20) and the official JS SDK on one emulated sandbox
//! (`tests/sdk/durable.cjs`): a command the SDK started with an envd tag is listed by
//! `E2bSubprocess::durable_list` and attached live (stdin in, output and exit out); a
//! durable command exec-world started is in the SDK's `commands.list()` under its id
//! and answers the SDK's `connect(pid)` and `sendStdin`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2b_core::CreateOptions;
use exec_world::{
    DurableId, DurableSpec, DurableState, OutputOffsets, SpawnSpec, StdinMode, Subprocess,
};
use futures::StreamExt;
use subprocess_e2b::E2bSubprocess;
use tokio::io::AsyncWriteExt;

use crate::sdk_support::{install_js, run_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_and_durable_commands_see_each_other() {
    let node_path = install_js().await;
    let emu = emulator_fixture::emulator().await;
    let client = emulator_fixture::client(&emu);
    let sandbox = client
        .create(&CreateOptions::new("base"))
        .await
        .expect("sandbox");
    let id = sandbox.id().to_owned();
    let p = E2bSubprocess::at_home(sandbox.clone().into_api(), None)
        .await
        .expect("adapter");

    // The SDK's tagged command: listed, attached live, fed and awaited.
    let out = run_on(
        &emu,
        ("node", "durable.cjs"),
        ("NODE_PATH", &node_path),
        &["start", &id, "sdk-job-1"],
        "SDK STARTED",
    )
    .await;
    let pid: u32 = out
        .split_whitespace()
        .last()
        .and_then(|p| p.parse().ok())
        .expect("pid");
    let sdk_id: DurableId = "sdk-job-1".parse().unwrap();
    let list = p.durable_list().await.expect("list");
    let listed = list
        .iter()
        .find(|i| i.id == sdk_id)
        .expect("the SDK's command is listed");
    assert_eq!(listed.state, DurableState::Running);
    assert_eq!(listed.pid, Some(pid));
    assert_eq!(listed.program, "/bin/bash");
    let mut a = p
        .durable_attach(&sdk_id, OutputOffsets::default())
        .await
        .expect("attach live");
    let mut stdin = a.child.take_stdin().expect("stdin");
    stdin.write_all(b"hi\n").await.expect("write");
    stdin.shutdown().await.expect("close");
    let mut stdout = a.child.take_stdout().expect("stdout");
    let mut got = Vec::new();
    while let Some(c) = tokio::time::timeout(Duration::from_secs(60), stdout.next())
        .await
        .expect("output in time")
    {
        got.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(got, b"sdk-got-hi\n");
    assert!(a.child.wait().await.expect("wait").success());

    // exec-world's durable command, seen and driven by the SDK.
    let mine = DurableId::random();
    let child = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("read l; echo got-$l")
                .stdin(StdinMode::Piped)
                .durable(DurableSpec::new(mine.clone())),
        )
        .expect("spawn");
    child.started().await.expect("started");
    drop(child);
    run_on(
        &emu,
        ("node", "durable.cjs"),
        ("NODE_PATH", &node_path),
        &["check", &id, mine.as_str()],
        "SDK DURABLE OK",
    )
    .await;
    // Its record has the output the SDK saw and the status.
    let mut a = p
        .durable_attach(&mine, OutputOffsets::default())
        .await
        .expect("attach");
    let mut stdout = a.child.take_stdout().expect("stdout");
    let mut got = Vec::new();
    while let Some(c) = stdout.next().await {
        got.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(got, b"got-ping\n");
    assert!(a.child.wait().await.expect("wait").success());
    emu.shutdown().await;
}
