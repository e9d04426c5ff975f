//! The Linux plumbing that exec-world's local backends and the E2B emulator share, kept out
//! of the contract crate (`exec-world`), which holds only the seams a consumer or a backend
//! author needs:
//!
//! - [`pty`]: open, resize and attach pseudo-terminals;
//! - [`cgroup`]: a cgroup v2 per spawn, spares, `cgroup.kill`;
//! - [`launch`]: the `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)` spawn, and
//!   [`reap`] for its pidfd waits;
//! - [`supervise`]: the double-forked supervisor of a durable command and its record;
//! - [`mounts`]: this process's cgroup directory and mountinfo unescaping;
//! - [`tree_script`]: the descendant-tracking kill as a POSIX `sh` script (run inside a
//!   sandbox) and the spawn markers it finds processes by;
//! - [`env_scrub`]: the one list of inherited variables that never reach a spawn;
//! - [`keeper`]: the host-death keeper that ends this process's spawns when it is gone.
//!
//! ```
//! let argv = exec_world_sys::tree_script::kill_tree_argv(1234, "m-1", std::time::Duration::from_secs(2), false);
//! assert_eq!(argv[0], "sh");
//! assert!(exec_world_sys::env_scrub::is_scrubbed("GITHUB_TOKEN", "x"));
//! ```

pub mod cgroup;
pub mod env_scrub;
pub mod keeper;
pub mod launch;
pub mod mounts;
pub mod pty;
pub mod reap;
pub mod supervise;
pub mod tree_script;
