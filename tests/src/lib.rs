//! Cross-crate integration tests live in `tests/tests/`; this library holds what they and
//! world-bench share beyond the emulator fixture (`emulator-fixture`): the official SDK
//! installer.

pub mod sdk_install;

/// The root README's "local or E2B" example, compiled as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
