//! Shared helpers of the sandbox-e2b tests: an emulator, `E2bSandboxes` instances on it
//! (the `conversation` template), and the conformance world.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2b_core::Client;
use exec_world_conformance::sandbox::SandboxWorld;
use sandbox_e2b::{E2bSandboxes, SandboxConfig};
use testing_fake::{Emulator, EmulatorConfig};

/// An emulator and a control-plane client for it.
pub struct Env {
    pub emu: Emulator,
    pub client: Client,
}

pub async fn env() -> Env {
    let emu = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let client = Client::new(emulator_fixture::emulator_config(
        &emu,
        Duration::from_secs(30),
    ))
    .expect("client");
    Env { emu, client }
}

/// The provider config for the emulator's conversation template.
pub fn config(emu: &Emulator) -> SandboxConfig {
    let mut cfg = SandboxConfig::new(emu.api_key(), "conversation");
    cfg.api_url = Some(emu.api_url());
    cfg.sandbox_url = Some(emu.sandbox_url());
    cfg
}

/// A fresh provider instance (its own leases) on the emulator.
pub fn provider(emu: &Emulator) -> E2bSandboxes {
    E2bSandboxes::new(config(emu)).expect("provider")
}

/// The conformance world: two provider instances on one emulator.
pub async fn world() -> SandboxWorld {
    let env = env().await;
    let a = provider(&env.emu);
    let b = provider(&env.emu);
    SandboxWorld::new(Arc::new(a), Arc::new(b), "e2b").with_guard(env)
}

/// An emulator, one provider on it, and a fresh sandbox named `name`.
pub struct One {
    pub env: Env,
    pub p: E2bSandboxes,
    pub h: exec_world::sandbox::SandboxHandle,
}

pub async fn one(name: &str) -> One {
    use exec_world::sandbox::{CreateSpec, SandboxProvider as _};
    let env = env().await;
    let p = provider(&env.emu);
    let h = p.create(CreateSpec::new(name)).await.expect("create");
    One { env, p, h }
}

/// The sandbox's envd API as root (the test's own view, not the provider's).
pub async fn root_api(env: &Env, id: &str) -> Arc<dyn e2b_core::EnvdApi> {
    env.client
        .connect(id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect")
        .into_api()
}

/// Runs `script` as root in the sandbox; stdout as text.
pub async fn root_sh(env: &Env, id: &str, script: &str) -> String {
    root_sh_args(env, id, script, &[]).await
}

/// Runs `script` with positional `args` as root in the sandbox; stdout as text.
pub async fn root_sh_args(env: &Env, id: &str, script: &str, args: &[&str]) -> String {
    let api = root_api(env, id).await;
    let out = e2b_core::trusted_shell::TrustedShell::new(api)
        .run(script, args)
        .await
        .expect("root command");
    assert_eq!(
        out.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout_text()
}

/// Host processes whose environment carries `SANDBOX_EXEC_ID=<id>` (every command the
/// provider started in that sandbox), zombies excluded: the emulator's process table.
pub fn host_processes_of(id: &str) -> Vec<u32> {
    let want = format!("SANDBOX_EXEC_ID={id}");
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
        {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            found.push(pid);
        }
    }
    found
}
