//! Every integration test of this crate in one binary (one link instead of one per file);
//! each module is what was once its own `tests/<name>.rs`. Tests that change the
//! process environment keep a binary of their own beside this one.

mod e2b_core_support;
mod fs_e2b_support;
mod sandbox_support;
mod sdk_support;
mod subprocess_e2b_support;

mod agent_tools_e2b;
mod e2b_core_control;
mod e2b_core_envd;
mod e2b_core_retry;
mod e2b_core_snapshots;
mod e2b_core_unroutable;
mod e2b_world;
mod fs_e2b_behaviour;
mod fs_e2b_conformance;
mod lifecycle_adapters;
mod lifecycle_keepalive;
mod lifecycle_owner;
mod lifecycle_reconnect;
mod official_sdk;
mod official_sdk_snapshots;
mod rooted_e2b;
mod sandbox_e2b_conformance;
mod sandbox_e2b_lifecycle;
mod sandbox_e2b_live;
mod sandbox_e2b_security;
mod sdk_isolation;
mod subprocess_e2b_conformance;
mod subprocess_e2b_escapes;
mod subprocess_e2b_faults;
mod subprocess_e2b_output;
mod subprocess_e2b_specific;
mod world_bench;
