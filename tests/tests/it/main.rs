//! The tests that truly cross crates, in one binary: the official SDKs against the emulator,
//! world-bench's tiny run, agent-tools over the E2B adapters, the lifecycle owner with both
//! adapters. Each adapter crate's own behaviour tests are in that crate (`crates/*/tests/it`).

mod sdk_support;

mod agent_tools_e2b;
mod durable_sdk;
mod lifecycle_adapters;
mod official_sdk;
mod official_sdk_snapshots;
mod sdk_isolation;
mod world_bench;
mod world_bench_trees;
