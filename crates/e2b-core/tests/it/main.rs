//! e2b-core's behaviour tests: the control plane, envd, retries, unroutable sandboxes, the lifecycle owner, keep-alive and reconnect.
//! One binary for the crate's integration tests (one link instead of one per file); each module
//! runs against the in-process emulator (`emulator-fixture`).

mod e2b_core_support;

mod e2b_core_control;
mod e2b_core_envd;
mod e2b_core_retry;
mod e2b_core_snapshots;
mod e2b_core_unroutable;
mod lifecycle_keepalive;
mod lifecycle_owner;
mod lifecycle_reconnect;
