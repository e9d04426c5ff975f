//! What every example starts from: E2B when `E2B_API_KEY` is set (with `E2B_DOMAIN` /
//! `E2B_API_URL` as usual), else an E2B emulator embedded in the example's process, so the
//! examples run anywhere without an account.

use testing_fake::{Emulator, EmulatorConfig};

/// A control-plane client, and the embedded emulator when one was started (keep it alive
/// as long as the client is used; dropping it ends every sandbox it holds).
pub struct Backend {
    /// The client for E2B or for the emulator.
    pub client: e2b_core::Client,
    /// The emulator, when there is no `E2B_API_KEY`.
    pub emulator: Option<Emulator>,
}

impl Backend {
    /// E2B when `E2B_API_KEY` is set, else a fresh embedded emulator.
    pub async fn open() -> Result<Backend, Box<dyn std::error::Error>> {
        let cfg = e2b_core::Config::from_env();
        if cfg.api_key().is_some() {
            return Ok(Backend {
                client: e2b_core::Client::new(cfg)?,
                emulator: None,
            });
        }
        let emu = Emulator::start(EmulatorConfig::default()).await?;
        let client = e2b_core::Client::new(
            cfg.with_api_key(emu.api_key())
                .with_api_url(emu.api_url())
                .with_sandbox_url(emu.sandbox_url()),
        )?;
        Ok(Backend {
            client,
            emulator: Some(emu),
        })
    }

    /// The `sandbox@1` provider's config for this backend: the emulator's `conversation`
    /// template, or `E2B_TEMPLATE` on E2B.
    pub fn sandbox_config(&self) -> sandbox_e2b::SandboxConfig {
        let template = match &self.emulator {
            Some(_) => "conversation".to_owned(),
            None => std::env::var("E2B_TEMPLATE").unwrap_or_else(|_| "base".to_owned()),
        };
        let key = self
            .client
            .config()
            .api_key()
            .cloned()
            .unwrap_or_else(|| "".into());
        let mut out = sandbox_e2b::SandboxConfig::new(key, template);
        out.api_url = Some(self.client.api_url().to_owned());
        if let Some(emu) = &self.emulator {
            out.sandbox_url = Some(emu.sandbox_url());
        }
        out
    }
}
