//! The sandbox conformance suite on `E2bSandboxes` over the emulator (conversation
//! template), two provider instances per test.

use crate::sandbox_support;

exec_world_conformance::sandbox_conformance_tests!(sandbox_support::world);
