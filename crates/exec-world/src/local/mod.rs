//! Local adapters: the seams over this machine's file system and processes.

mod cgroup;
mod fs;
mod launch;
#[cfg(test)]
mod launch_tests;
mod owners;
mod proc;
mod pty;
mod reap;
mod tree;
mod watch;

pub use fs::LocalFs;
pub use proc::LocalSubprocess;
pub use tree::MARKER_VAR;
pub(crate) use tree::new_marker;
