//! `e2b-local`: serve the emulator on loopback.

fn main() {}
