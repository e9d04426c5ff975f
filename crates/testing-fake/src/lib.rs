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
//! Every request is counted ([`Counters`]) and can be made to fail ([`Faults`]).
//!
//! # Out-of-process control (`e2b-local`)
//!
//! The same listener serves the emulator's own endpoints; each requires `X-API-KEY` and is
//! neither counted nor faulted:
//!
//! | request | answer |
//! |---|---|
//! | `GET /_emulator/counters` | `{"total":N,"control":{"POST /v2/sandboxes":1,…},"envd":{"POST /process.Process/Start":2,…}}` |
//! | `DELETE /_emulator/counters` | 204; every counter back to zero |
//! | `GET /_emulator/faults` | `[{"id":1,"rule":{…},"remaining":1}]` (`remaining: null` = forever) |
//! | `POST /_emulator/faults` | 201 `{"id":1}`; body: a rule, see below |
//! | `DELETE /_emulator/faults` | 204; every rule removed |
//! | `DELETE /_emulator/faults/{id}` | 204, or 404 |
//!
//! A rule (every key but `action` optional):
//!
//! ```json
//! {"surface": "envd", "method": "POST", "pathPrefix": "/process.Process/Start",
//!  "sandboxId": "i…", "times": 1, "action": {"kind": "cutStream", "afterFrames": 1}}
//! ```
//!
//! Actions: `{"kind":"status","status":503,"body":"…","contentType":"application/json"}`,
//! `{"kind":"delay","ms":500}` (then the request proceeds), `{"kind":"reset"}` (the
//! connection is dropped without a response), `{"kind":"cutStream","afterFrames":N}` (a
//! streaming response passes N envelopes and ends without its end-of-stream frame),
//! `{"kind":"dropAccessToken"}` (envd sees no `X-Access-Token`).
//!
//! Counter keys are `"METHOD /path"` with ids templated: `GET /sandboxes/{sandboxID}`,
//! `POST /v2/sandboxes/{sandboxID}/connect`; envd keys are the plain path
//! (`POST /filesystem.Filesystem/ListDir`, `GET /files`).
//!
//! Layout: `envd/` and `template.rs` hold envd (processes, files, isolation, templates);
//! everything else is the control plane, the shared listener, routing, counters and fault
//! injection.

mod admin;
pub(crate) mod control;
pub mod counters;
pub mod envd;
pub mod faults;
mod ports;
mod proxy;
mod server;
pub mod template;
pub mod template_root;

pub use counters::{CounterSnapshot, Counters, Plane};
pub use faults::{FaultAction, FaultId, FaultRule, Faults};
pub use server::{Emulator, EmulatorConfig, EmulatorError};
pub use template_root::{TemplateRoot, TemplateRootError};
