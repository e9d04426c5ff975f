//! The shared emulator fixture of the adapter crates' tests: an in-process E2B emulator
//! (`testing-fake`), a client configured for it and a fresh sandbox, on 127.0.0.1 only.
//! A dev-dependency of e2b-core, fs-e2b, subprocess-e2b, sandbox-e2b, e2bx and the
//! cross-crate tests. [`sdk_install`] installs the official clients those tests drive, at
//! the versions pinned in one place.
//!
//! ```no_run
//! # async fn demo() {
//! let sb = emulator_fixture::EmulatedSandbox::start(std::time::Duration::from_secs(30)).await;
//! let _envd = sb.api.clone(); // what the adapters take
//! # }
//! ```

pub mod child;
pub mod sdk_install;
pub mod system_tree;

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{Client, Config, CreateOptions, EnvdApi, Sandbox};
use testing_fake::{Emulator, EmulatorConfig};

/// A fresh emulator (in-process, 127.0.0.1 only, the default templates); panics when it
/// cannot start (test helper).
pub async fn emulator() -> Emulator {
    Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts")
}

/// A control-plane client for `emu` (30 s per request); panics on a bad configuration.
pub fn client(emu: &Emulator) -> Client {
    Client::new(emulator_config(emu, Duration::from_secs(30))).expect("client")
}

/// A client configuration pointed at `emu`, with `request_timeout` on every call.
pub fn emulator_config(emu: &Emulator, request_timeout: Duration) -> Config {
    Config::new()
        .with_api_key(emu.api_key())
        .with_api_url(emu.api_url())
        .with_sandbox_url(emu.sandbox_url())
        .with_request_timeout(request_timeout)
        .with_connect_timeout(Duration::from_secs(5))
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

/// An envd given from outside instead of the emulator: a self-hosted E2B deployment's, or
/// a real sandbox's, so the adapter suites can check it in one command. Read from
/// `E2B_TEST_ENVD_URL` (required), `E2B_TEST_ENVD_TOKEN` (the sandbox's envd access token,
/// if it is secured) and `E2B_TEST_ENVD_SANDBOX_ID` (sent as `E2b-Sandbox-Id`, which a
/// proxy in front of several sandboxes routes on; default `external`). The token never
/// appears in `Debug`.
#[derive(Clone)]
pub struct GivenEnvd {
    /// The envd base URL (`https://49983-<id>.<domain>` on E2B).
    pub url: String,
    /// The envd access token, if the sandbox is secured.
    pub token: Option<e2b_core::Secret>,
    /// The sandbox id routed on.
    pub sandbox_id: String,
}

impl std::fmt::Debug for GivenEnvd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GivenEnvd")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("sandbox_id", &self.sandbox_id)
            .finish()
    }
}

impl GivenEnvd {
    /// The envd the environment names, or `None` when `E2B_TEST_ENVD_URL` is unset or
    /// empty (the tests that use it then skip with a message).
    pub fn from_env() -> Option<GivenEnvd> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Some(GivenEnvd {
            url: var("E2B_TEST_ENVD_URL")?,
            token: var("E2B_TEST_ENVD_TOKEN").map(e2b_core::Secret::new),
            sandbox_id: var("E2B_TEST_ENVD_SANDBOX_ID").unwrap_or_else(|| "external".into()),
        })
    }

    /// The envd of a sandbox on `emu` (the same path as an outside envd: every request to
    /// `emu`'s sandbox URL, routed by the sandbox id), so CI exercises it.
    pub fn of_emulated(emu: &Emulator, sandbox: &Sandbox) -> GivenEnvd {
        GivenEnvd {
            url: emu.sandbox_url().to_owned(),
            token: sandbox.access_token().cloned(),
            sandbox_id: sandbox.id().to_owned(),
        }
    }

    /// The envd API on it (60 s per request); panics on a malformed URL (test helper).
    pub fn api(&self) -> Arc<dyn EnvdApi> {
        let cfg = Config::new()
            .with_sandbox_url(self.url.clone())
            .with_request_timeout(Duration::from_secs(60))
            .with_connect_timeout(Duration::from_secs(10));
        let parts = e2b_core::SandboxParts {
            sandbox_id: self.sandbox_id.clone(),
            envd_version: String::new(),
            access_token: self.token.clone(),
            domain: None,
            template_id: None,
        };
        Sandbox::attach(&cfg, parts)
            .expect("attach to the given envd")
            .into_api()
    }
}
