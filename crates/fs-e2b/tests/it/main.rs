//! fs-e2b's behaviour tests: the exec-world Fs conformance suite, the adapter's own behaviour and Rooted over it.
//! One binary for the crate's integration tests (one link instead of one per file); each module
//! runs against the in-process emulator (`emulator-fixture`).

mod fs_e2b_support;

mod fs_e2b_behaviour;
mod fs_e2b_conformance;
mod fs_e2b_given_envd;
mod rooted_e2b;
