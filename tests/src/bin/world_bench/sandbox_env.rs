//! The emulator as a contender process sees it: `E2B_*` variables from the parent, one
//! e2b-core client and one fresh sandbox per contender.

use std::sync::Arc;

use e2b_core::{Client, Config, CreateOptions, EnvdApi, Sandbox};

use super::child::AnyError;

/// An `E2B_*` variable the parent set.
pub fn env(key: &str) -> Result<String, AnyError> {
    std::env::var(key).map_err(|_| format!("{key} is not set").into())
}

/// A client of the emulator and a fresh `base` sandbox.
pub async fn sandbox() -> Result<(Client, Sandbox, Arc<dyn EnvdApi>), AnyError> {
    let cfg = Config::new()
        .with_api_key(env("E2B_API_KEY")?)
        .with_api_url(env("E2B_API_URL")?)
        .with_sandbox_url(env("E2B_SANDBOX_URL")?);
    let client = Client::new(cfg)?;
    let sandbox = client.create(&CreateOptions::new("base")).await?;
    let api: Arc<dyn EnvdApi> = sandbox.clone().into_api();
    Ok((client, sandbox, api))
}
