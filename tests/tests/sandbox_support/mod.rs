//! Shared helpers of the sandbox-e2b tests: an emulator, `E2bSandboxes` instances on it
//! (the `conversation` template), and the conformance world.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2b_core::Client;
use exec_world::conformance::sandbox::SandboxWorld;
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
    let client = Client::new(integration_tests::emulator_config(
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
