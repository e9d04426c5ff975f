//! Shared helpers of the subprocess-e2b tests: an emulator with one sandbox, the
//! adapter over it, and a conformance `World`.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{Client, EnvdApi, Sandbox};
use exec_world::conformance::World;
use exec_world::{Fs, Subprocess, WorldPath};
use fs_e2b::{E2bFs, E2bFsOptions};
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
    let integration_tests::EmulatedSandbox {
        api,
        sandbox,
        client,
        emu,
    } = integration_tests::EmulatedSandbox::start(Duration::from_secs(30)).await;
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
    let scratch: WorldPath = format!("{}/scratch-{}", proc.cwd(), std::process::id())
        .parse()
        .expect("scratch path");
    env.api
        .make_dir(scratch.as_str(), None)
        .await
        .expect("scratch dir");
    let fs: Arc<dyn Fs> = Arc::new(
        E2bFs::new(env.api.clone(), E2bFsOptions::new(proc.cwd().as_str())).expect("E2bFs"),
    );
    World::new(fs, Arc::new(proc), scratch).with_guard(env)
}
