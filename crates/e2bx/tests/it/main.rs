//! Every integration test of this crate in one binary (one link instead of one per file);
//! each module is what was once its own `tests/<name>.rs`. Tests that change the
//! process environment keep a binary of their own beside this one.

mod support;

mod cli_detached;
mod cli_embedded;
mod cli_hostile;
mod cli_remote;
mod cli_shell;
mod cli_snapshots;
mod cli_template_root;
mod cli_tree;
mod mcp_bench;
mod mcp_clients;
mod mcp_lifetime;
mod mcp_support;
