//! Every integration test of this crate in one binary (one link instead of one per file);
//! each module is what was once its own `tests/<name>.rs`. Tests that change the
//! process environment keep a binary of their own beside this one.

mod durable_local;
mod kill_tree_script;
mod local_conformance;
mod local_host_death;
mod local_sandbox;
mod local_specific;
mod rooted_local;
