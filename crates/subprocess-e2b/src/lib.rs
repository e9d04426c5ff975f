//! `exec_world::Subprocess` and `Terminal` implemented over an E2B sandbox handle from `e2b-core`.
