//! Preparing a sandbox for the adapters: validating the working directory (before any
//! request) and creating it plus a private adapter state directory inside it, through the
//! trusted shell (root, random root-level `HOME`, positional arguments), refusing any
//! reserved path that is a symlink or not a directory.

use crate::lifecycle::error::{LifecycleError, PathKind};
use crate::trusted_shell::TrustedShell;

/// Default working directory.
pub const DEFAULT_WORKDIR: &str = "/home/user/workspace";
/// Default name of the adapter state directory inside the working directory.
pub const DEFAULT_STATE_DIR: &str = ".e2b-state";
/// Default owner of newly created working-directory components (E2B's `base` user).
pub const DEFAULT_WORKDIR_OWNER: &str = "user";

/// Exit codes of [`PREPARE_SCRIPT`].
const EXIT_SYMLINK: i32 = 40;
const EXIT_NOT_DIR: i32 = 41;
const EXIT_MKDIR: i32 = 42;
const EXIT_OWNER: i32 = 43;

/// `$1` workdir (absolute, normalized), `$2` state dir name, `$3` owner of new workdir
/// components (empty: leave root). Each component is checked with `-L` / `-d`, created
/// when absent; the state dir is root-owned 0700. Everything is checked again at the end.
/// The failing path is the first line of stderr.
const PREPARE_SCRIPT: &str = r#"set -u
wd=$1 st=$2 owner=$3
fail() { printf '%s\n' "$2" >&2; exit "$1"; }
ensure_dir() {
  if [ -L "$1" ]; then fail 40 "$1"; fi
  if [ -e "$1" ]; then
    [ -d "$1" ] || fail 41 "$1"
    return 1
  fi
  if mkdir -- "$1" 2>/dev/null; then return 0; fi
  if [ -L "$1" ]; then fail 40 "$1"; fi
  [ -d "$1" ] || fail 42 "$1"
  return 1
}
verify() {
  if [ -L "$1" ]; then fail 40 "$1"; fi
  [ -d "$1" ] || fail 41 "$1"
}
set -f
oldifs=$IFS
IFS=/
set -- $wd
IFS=$oldifs
p=
for c in "$@"; do
  [ -n "$c" ] || continue
  p="$p/$c"
  if ensure_dir "$p" && [ -n "$owner" ]; then
    chown -h -- "$owner:" "$p" || fail 43 "$p"
  fi
done
s="$p/$st"
ensure_dir "$s" || :
chown -h -- 0:0 "$s" || fail 43 "$s"
chmod 0700 -- "$s" || fail 43 "$s"
p=
for c in "$@"; do
  [ -n "$c" ] || continue
  p="$p/$c"
  verify "$p"
done
verify "$s"
"#;

/// Check and normalize a working directory: absolute, no `.`/`..` components, no NUL,
/// not `/` itself; repeated and trailing slashes are dropped.
///
/// ```
/// use e2b_core::lifecycle::normalize_workdir;
/// assert_eq!(normalize_workdir("/home/user//ws/").unwrap(), "/home/user/ws");
/// assert!(normalize_workdir("ws").is_err());
/// assert!(normalize_workdir("/home/../etc").is_err());
/// ```
pub fn normalize_workdir(path: &str) -> Result<String, LifecycleError> {
    let bad = |reason| LifecycleError::InvalidWorkdir {
        path: path.to_owned(),
        reason,
    };
    if !path.starts_with('/') {
        return Err(bad("must be an absolute POSIX path"));
    }
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let mut out = String::with_capacity(path.len());
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if c == "." || c == ".." {
            return Err(bad("must not contain . or .. components"));
        }
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        return Err(bad("must not be the root directory"));
    }
    Ok(out)
}

/// Check a state directory name: one non-empty path component.
pub fn check_state_dir_name(name: &str) -> Result<(), LifecycleError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(LifecycleError::InvalidOption(format!(
            "state dir name {name:?} must be one path component"
        )));
    }
    Ok(())
}

/// Where setup put things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The working directory (absolute, normalized).
    pub workdir: String,
    /// The private adapter state directory (`<workdir>/<name>`, root, 0700).
    pub state_dir: String,
}

/// Create (or verify) `workdir` and `<workdir>/<state_name>` through `shell`. `workdir`
/// must come from [`normalize_workdir`]. New workdir components are given to `owner`
/// (`None`: left to root).
pub async fn prepare(
    shell: &TrustedShell,
    workdir: &str,
    state_name: &str,
    owner: Option<&str>,
) -> Result<Prepared, LifecycleError> {
    let state_dir = format!("{workdir}/{state_name}");
    let out = shell
        .run(PREPARE_SCRIPT, &[workdir, state_name, owner.unwrap_or("")])
        .await?;
    if out.exit_code == 0 {
        return Ok(Prepared {
            workdir: workdir.to_owned(),
            state_dir,
        });
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let path = stderr.lines().next().unwrap_or_default().to_owned();
    let path = if path.is_empty() {
        workdir.to_owned()
    } else {
        path
    };
    Err(match out.exit_code {
        EXIT_SYMLINK => LifecycleError::ReservedPath {
            path,
            kind: PathKind::Symlink,
        },
        EXIT_NOT_DIR => LifecycleError::ReservedPath {
            path,
            kind: PathKind::NotADirectory,
        },
        EXIT_MKDIR => LifecycleError::Prepare {
            path,
            message: "mkdir failed".into(),
        },
        EXIT_OWNER => LifecycleError::Prepare {
            path,
            message: "chown/chmod failed".into(),
        },
        code => LifecycleError::Prepare {
            path: workdir.to_owned(),
            message: format!(
                "exit code {code}: {}",
                crate::error::snippet(stderr.trim_end().as_bytes(), &[])
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workdir_rules() {
        assert_eq!(
            normalize_workdir(DEFAULT_WORKDIR).ok().as_deref(),
            Some(DEFAULT_WORKDIR)
        );
        assert_eq!(normalize_workdir("//a///b//").ok().as_deref(), Some("/a/b"));
        for bad in [
            "", "a/b", "./a", "/", "///", "/a/./b", "/a/../b", "/a\0b", "~/ws",
        ] {
            assert!(
                matches!(
                    normalize_workdir(bad),
                    Err(LifecycleError::InvalidWorkdir { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(check_state_dir_name(".state").is_ok());
        for bad in ["", ".", "..", "a/b"] {
            assert!(check_state_dir_name(bad).is_err(), "{bad:?}");
        }
    }
}
