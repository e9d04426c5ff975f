//! Cross-crate integration tests live in `tests/tests/`; this library holds what they share:
//! an emulator with a client configured for it and a fresh sandbox (127.0.0.1 only).

pub mod sdk_install;

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{Client, Config, CreateOptions, EnvdApi, Sandbox};
use testing_fake::{Emulator, EmulatorConfig};

/// A client configuration pointed at `emu`, with `request_timeout` on every call.
pub fn emulator_config(emu: &Emulator, request_timeout: Duration) -> Config {
    Config::new()
        .api_key(emu.api_key())
        .api_url(emu.api_url())
        .sandbox_url(emu.sandbox_url())
        .request_timeout(request_timeout)
        .connect_timeout(Duration::from_secs(5))
}

/// A fresh emulator, a client for it and a new `base` sandbox on it.
pub struct EmulatedSandbox {
    /// The sandbox's envd API (what the adapters take).
    pub api: Arc<dyn EnvdApi>,
    /// The sandbox handle.
    pub sandbox: Sandbox,
    /// A control-plane client of the emulator.
    pub client: Client,
    /// The emulator (declared last: dropped after the handles on it).
    pub emu: Emulator,
}

impl EmulatedSandbox {
    /// Start an emulator and create a `base` sandbox; panics on failure (test helper).
    pub async fn start(request_timeout: Duration) -> EmulatedSandbox {
        let emu = Emulator::start(EmulatorConfig::default())
            .await
            .expect("emulator starts");
        let client = Client::new(emulator_config(&emu, request_timeout)).expect("client");
        let sandbox = client
            .create(&CreateOptions::new("base"))
            .await
            .expect("create sandbox");
        let api = sandbox.clone().into_api();
        EmulatedSandbox {
            api,
            sandbox,
            client,
            emu,
        }
    }
}

/// The root README's "local or E2B" example, compiled as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
