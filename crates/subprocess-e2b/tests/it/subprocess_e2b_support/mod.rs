//! Shared helpers of the subprocess-e2b tests: an emulator with one sandbox, the
//! adapter over it, and a conformance `World`.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{Client, EnvdApi, Sandbox};
use exec_world::{Fs, SpawnSpec, Subprocess, WorldPath};
use exec_world_conformance::World;
use fs_e2b::{E2bFs, E2bFsOptions};
use futures::StreamExt;
use subprocess_e2b::E2bSubprocess;
use testing_fake::Emulator;

/// An emulator, a client and a fresh `base` sandbox.
pub struct Env {
    pub emu: Emulator,
    pub client: Client,
    pub sandbox: Sandbox,
    pub api: Arc<dyn EnvdApi>,
}

pub async fn env() -> Env {
    let emulator_fixture::EmulatedSandbox {
        api,
        sandbox,
        client,
        emu,
    } = emulator_fixture::EmulatedSandbox::start(Duration::from_secs(30)).await;
    Env {
        emu,
        client,
        sandbox,
        api,
    }
}

/// The adapter at the user's home.
pub async fn proc_of(env: &Env) -> E2bSubprocess {
    E2bSubprocess::at_home(env.api.clone(), None)
        .await
        .expect("adapter")
}

/// A conformance world: emulator, sandbox, adapter, `fs_e2b::E2bFs` on the same sandbox
/// and an empty scratch directory under the user's home.
pub async fn world() -> World {
    let env = env().await;
    let proc = proc_of(&env).await;
    world_of(env, proc).await
}

/// The same world with the adapter's native spawn helper turned off: every spawn goes
/// through the `sh` helper (what a build or a sandbox without the native one uses).
pub async fn world_sh() -> World {
    let env = env().await;
    let opts = subprocess_e2b::E2bSubprocessOptions::new("/").native_helper(false);
    let home = proc_of(&env).await.cwd().clone();
    let proc = E2bSubprocess::new(env.api.clone(), opts)
        .expect("adapter")
        .with_cwd(&home);
    world_of(env, proc).await
}

/// A conformance world for the durable suite: as [`world`], and its fresh instances are
/// new adapters on the same sandbox (a new client, as after a host restart).
pub async fn durable_world() -> World {
    let env = env().await;
    let proc = proc_of(&env).await;
    let api = env.api.clone();
    world_of(env, proc).await.with_fresh_proc(move || {
        let api = api.clone();
        Box::pin(async move {
            let p: Arc<dyn Subprocess> = Arc::new(
                E2bSubprocess::at_home(api, None)
                    .await
                    .expect("fresh adapter"),
            );
            p
        })
    })
}

async fn world_of(env: Env, proc: E2bSubprocess) -> World {
    let api = env.api.clone();
    world_with(api, proc, env).await
}

/// A conformance world on any envd (the emulator's, or one given by URL): the adapter at
/// the user's home, `fs_e2b::E2bFs` beside it, a fresh scratch directory, `guard` kept
/// alive with the world.
pub async fn world_on(api: Arc<dyn EnvdApi>, guard: impl std::any::Any + Send + Sync) -> World {
    let proc = E2bSubprocess::at_home(api.clone(), None)
        .await
        .expect("adapter");
    world_with(api, proc, guard).await
}

async fn world_with(
    api: Arc<dyn EnvdApi>,
    proc: E2bSubprocess,
    guard: impl std::any::Any + Send + Sync,
) -> World {
    let scratch: WorldPath = format!(
        "{}/scratch-{}",
        proc.cwd(),
        e2b_core::trusted_shell::random_suffix()
    )
    .parse()
    .expect("scratch path");
    api.make_dir(scratch.as_str(), None)
        .await
        .expect("scratch dir");
    let fs: Arc<dyn Fs> =
        Arc::new(E2bFs::new(api.clone(), E2bFsOptions::new(proc.cwd().as_str())).expect("E2bFs"));
    World::new(fs, Arc::new(proc), scratch).with_guard(guard)
}

/// `fut`, or a panic naming `what` after `secs` seconds (a hang is a failure, not a wait).
pub async fn within<T>(what: &str, secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish (hang)"))
}

/// stdout (lossy UTF-8, `\r` dropped) of `/bin/sh -c script` run by envd as root, beside
/// any adapter (what the sandbox holds, as root sees it).
pub async fn root_sh(api: &Arc<dyn EnvdApi>, script: &str) -> String {
    let out = api
        .run(
            e2b_core::StartProcess::new("/bin/sh")
                .args(["-c", script])
                .user("root"),
        )
        .await
        .unwrap_or_else(|e| panic!("root sh {script:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// stdout of `sh -c script sh args…` through `p`.
pub async fn stdout_of(p: &E2bSubprocess, script: &str, args: &[&str]) -> String {
    let mut spec = SpawnSpec::new("sh").arg("-c").arg(script).arg("sh");
    for a in args {
        spec = spec.arg(*a);
    }
    output_of(p, spec).await.0
}

/// stdout (lossy UTF-8) and exit status of `spec` run through `p`.
pub async fn output_of(p: &E2bSubprocess, spec: SpawnSpec) -> (String, exec_world::ExitStatus) {
    let mut child = p.spawn(spec).expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut buf = Vec::new();
    while let Some(c) = within("output", 60, out.next()).await {
        buf.extend_from_slice(&c.expect("chunk"));
    }
    let st = within("wait", 60, child.wait()).await.expect("wait");
    (String::from_utf8_lossy(&buf).into_owned(), st)
}
