//! Local adapters: the seams over this machine's file system and processes.

mod beneath;
mod durable;
mod durable_child;
mod fs;
#[cfg(test)]
mod launch_tests;
mod owners;
mod proc;
mod pty;
mod tree;
mod watch;

pub use fs::LocalFs;
pub use proc::LocalSubprocess;
