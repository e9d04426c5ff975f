//! An E2B emulator: the control plane and envd, running real processes locally.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testing_fake::EmulatorError> {
//! let emu = testing_fake::Emulator::start(Default::default()).await?;
//! // Point any E2B client (official SDKs included) at it:
//! print!("{}", emu.env_lines()); // E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=…
//! emu.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! One loopback listener serves the control-plane REST API (`X-API-KEY`) and every
//! sandbox's envd (requests carrying `E2b-Sandbox-Id`, as on E2B's shared sandbox host).
//! Every request is counted ([`Counters`]) and can be made to fail ([`Faults`]); the same is
//! available over HTTP at `/_emulator/counters` and `/_emulator/faults` (see `admin`).
//!
//! Module ownership while the emulator is being built: `envd/` and `template.rs` hold envd
//! (processes, files, isolation, templates); everything else is the control plane, the
//! shared listener, routing, counters and fault injection.

mod admin;
pub(crate) mod control;
pub mod counters;
pub mod envd;
pub mod faults;
mod proxy;
mod server;
pub mod template;

pub use counters::{CounterSnapshot, Counters, Surface};
pub use faults::{FaultAction, FaultId, FaultRule, Faults};
pub use server::{Emulator, EmulatorConfig, EmulatorError};
