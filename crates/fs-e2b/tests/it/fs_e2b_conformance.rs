//! The exec-world fs conformance suite, unchanged, against `E2bFs` on the emulator: one
//! emulator and `base` sandbox per test.

use crate::fs_e2b_support;

use fs_e2b_support::world;

exec_world_conformance::fs_conformance_tests!(world);

mod watch {
    use super::world;
    exec_world_conformance::watch_conformance_tests!(world);
}

mod tree {
    use super::world;
    exec_world_conformance::tree_conformance_tests!(world);
}
