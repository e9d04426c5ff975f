//! sandbox-e2b's behaviour tests: the sandbox@1 conformance suite, lifecycle, security, a live E2B run when credentials are set, and E2bWorld.
//! One binary for the crate's integration tests (one link instead of one per file); each module
//! runs against the in-process emulator (`emulator-fixture`).

mod sandbox_support;

mod e2b_world;
mod sandbox_e2b_conformance;
mod sandbox_e2b_durable;
mod sandbox_e2b_lifecycle;
mod sandbox_e2b_live;
mod sandbox_e2b_security;
