//! `exec_world::Fs` implemented over an E2B sandbox handle from `e2b-core`.
