//! The exec-world proc and terminal conformance suites, unchanged, against `E2bSubprocess`
//! on the emulator (127.0.0.1): one emulator and sandbox per test.
//!
//! The suite's `World` also needs an `Fs` on the same sandbox; until `fs-e2b`'s `E2bFs`
//! lands, `stopgap_fs::EnvdFs` (envd upload/download/mkdir, modes via `chmod`) covers the
//! few calls the process tests make.

mod subprocess_e2b_support;

exec_world::proc_conformance_tests!(subprocess_e2b_support::world);
exec_world::terminal_conformance_tests!(subprocess_e2b_support::world);
