//! Shared helpers of the e2b-core integration tests: an emulator per test and a client
//! configured for it (127.0.0.1 only).

#![allow(dead_code)]

use std::time::Duration;

use e2b_core::{Client, Config, CreateOptions, Sandbox};
pub use emulator_fixture::{client, emulator};
use testing_fake::Emulator;

/// A client configuration pointed at the emulator.
pub fn config(emu: &Emulator) -> Config {
    emulator_fixture::emulator_config(emu, Duration::from_secs(30))
}

/// A fresh secured sandbox of the `base` template.
pub async fn sandbox(client: &Client) -> Sandbox {
    client
        .create(&CreateOptions::new("base"))
        .await
        .expect("create sandbox")
}

/// Guard against a hang: fail the test instead of waiting forever.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
}
