//! Shared helpers of the fs-e2b tests: an emulator with one `base` sandbox, an `E2bFs`
//! on it, and conformance worlds pairing it with `subprocess_e2b::E2bSubprocess` (the
//! suite makes its symlinks with `ln -s`).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{Client, EnvdApi, Sandbox};
use exec_world::{Fs, Subprocess, WorldPath};
use exec_world_conformance::World;
use fs_e2b::{E2bFs, E2bFsOptions};
use testing_fake::Emulator;

/// An emulator, a sandbox on it and an `E2bFs` acting as the default user.
pub struct Env {
    /// The file system, cwd `/home/user`.
    pub fs: E2bFs,
    /// The envd API of the sandbox.
    pub api: Arc<dyn EnvdApi>,
    /// The sandbox handle.
    pub sandbox: Sandbox,
    /// A control-plane client of the emulator.
    pub client: Client,
    /// The emulator (declared last: dropped after the handles on it).
    pub emu: Emulator,
}

/// Start an emulator and create a `base` sandbox on it.
pub async fn env() -> Env {
    let emulator_fixture::EmulatedSandbox {
        api,
        sandbox,
        client,
        emu,
    } = emulator_fixture::EmulatedSandbox::start(Duration::from_secs(60)).await;
    let fs = E2bFs::new(api.clone(), E2bFsOptions::new("/home/user")).expect("E2bFs");
    Env {
        emu,
        client,
        sandbox,
        api,
        fs,
    }
}

/// A fresh empty directory under `/home/user`.
pub async fn scratch(fs: &E2bFs) -> WorldPath {
    let p = WorldPath::new(format!(
        "/home/user/scratch-{}",
        e2b_core::trusted_shell::random_suffix()
    ))
    .expect("path");
    fs.mkdir(&p, false).await.expect("mkdir scratch");
    p
}

/// A conformance world: its own emulator and sandbox (kept alive by the world).
pub async fn world() -> World {
    let env = env().await;
    world_on(env.api.clone(), env).await
}

/// A conformance world on any envd (the emulator's, or one given by URL): `E2bFs` and
/// `E2bSubprocess` at `/home/user` (the `base` template's user), a fresh scratch
/// directory, `guard` kept alive with the world.
pub async fn world_on(api: Arc<dyn EnvdApi>, guard: impl std::any::Any + Send + Sync) -> World {
    let fs = E2bFs::new(api.clone(), E2bFsOptions::new("/home/user")).expect("E2bFs");
    let scratch = scratch(&fs).await;
    let proc: Arc<dyn Subprocess> = Arc::new(
        subprocess_e2b::E2bSubprocess::new(
            api,
            subprocess_e2b::E2bSubprocessOptions::new("/home/user"),
        )
        .expect("E2bSubprocess"),
    );
    World::new(Arc::new(fs), proc, scratch).with_guard(guard)
}
