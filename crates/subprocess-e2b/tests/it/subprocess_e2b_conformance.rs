//! The exec-world proc and terminal conformance suites, unchanged, against `E2bSubprocess`
//! on the emulator (127.0.0.1): one emulator and sandbox per test.
//! The suite's `Fs` is `fs_e2b::E2bFs` on the same sandbox.

use crate::subprocess_e2b_support;

exec_world_conformance::proc_conformance_tests!(subprocess_e2b_support::world);
exec_world_conformance::terminal_conformance_tests!(subprocess_e2b_support::world);

/// The durable-command suite; its fresh instances are new adapters on the same sandbox.
mod durable {
    use super::subprocess_e2b_support;
    exec_world_conformance::durable_conformance_tests!(subprocess_e2b_support::durable_world);
}

/// The proc suite again with the native spawn helper off (the `sh` helper's path).
mod sh_helper {
    use super::subprocess_e2b_support;
    exec_world_conformance::proc_conformance_tests!(subprocess_e2b_support::world_sh);
}
