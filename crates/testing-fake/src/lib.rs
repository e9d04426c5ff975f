//! An E2B emulator: the control plane and envd, running real processes locally.
//!
//! Module ownership while the emulator is being built: `envd/` and `template.rs` hold envd
//! (processes, files, isolation, templates); everything else is the control plane, the
//! shared listener, routing, counters and fault injection.

pub mod envd;
pub mod template;
