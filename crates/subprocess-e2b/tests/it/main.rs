//! subprocess-e2b's behaviour tests: the Subprocess and Terminal conformance suites, escapes, faults, output routing and the adapter's own behaviour.
//! One binary for the crate's integration tests (one link instead of one per file); each module
//! runs against the in-process emulator (`emulator-fixture`).

mod subprocess_e2b_support;

mod subprocess_e2b_conformance;
mod subprocess_e2b_durable;
mod subprocess_e2b_escapes;
mod subprocess_e2b_faults;
mod subprocess_e2b_given_envd;
mod subprocess_e2b_hostbound;
mod subprocess_e2b_output;
mod subprocess_e2b_specific;
