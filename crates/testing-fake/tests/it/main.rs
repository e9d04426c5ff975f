//! Every integration test of this crate in one binary (one link instead of one per file);
//! each module is what was once its own `tests/<name>.rs`. Tests that change the
//! process environment keep a binary of their own beside this one.

mod envd_support;
mod support;

mod control_api;
mod control_bin;
mod control_boundary;
mod control_drop;
mod control_faults;
mod control_isolation;
mod control_lifecycle;
mod control_list;
mod control_network;
mod control_template_root;
mod envd_bench;
mod envd_files;
mod envd_filesystem;
mod envd_isolation;
mod envd_process;
mod proxy_ports;
