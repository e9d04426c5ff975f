// The scrub list itself, in a file of its own with no dependencies: exec-world includes it
// (`env_scrub.rs`) and so does subprocess-e2b's native spawn helper, a `no_std` program
// (`crates/subprocess-e2b/helper/spawn_helper.rs`), so every backend scrubs one list.

/// Name fragments (compared case-insensitively) that mark a credential.
pub const NAME_FRAGMENTS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "_AUTH",
];

/// Name suffixes (case-insensitive) that mark a credential (`GITHUB_PAT`).
pub const NAME_SUFFIXES: &[&str] = &["_PAT"];

/// Prefixes (exact case) of the backends' internal variables.
pub const INTERNAL_PREFIXES: &[&str] = &["EXEC_WORLD_"];
