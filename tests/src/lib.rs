//! Cross-crate integration tests live in `tests/tests/`; what they share (the emulator, the
//! official SDK installer) is the fixture crate `emulator-fixture`. This library holds the
//! root README's example as a doctest.

/// The root README's "local or E2B" example, compiled as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
