//! The one credential scrub list of every backend: which inherited environment variables
//! never reach a spawned process (`EnvBase::Inherit`).
//!
//! A variable is dropped when its **name** (any case) contains `KEY`, `SECRET`, `TOKEN`,
//! `PASSWORD`, `PASSWD`, `CREDENTIAL` or `_AUTH`, ends in `_PAT`, or starts with one of
//! the backends' internal prefix (`EXEC_WORLD_`); or when its
//! **value** is a URL with a password in its userinfo (`scheme://user:pass@host…`).
//! Explicit variables of a spawn are the caller's choice and always pass; only what is
//! inherited is scrubbed.
//!
//! LocalSubprocess applies [`is_scrubbed`] to the host's environment; the E2B adapter
//! runs the same test inside the sandbox with [`SH_SCRUB_FN`] (a POSIX `sh` function
//! built on [`SH_SCRUB_NAME`]), so both backends scrub exactly the same variables (a
//! test runs both forms on the same names and values).
//!
//! ```
//! use exec_world_sys::env_scrub::is_scrubbed;
//! assert!(is_scrubbed("E2B_API_KEY", "e2b_123"));
//! assert!(is_scrubbed("GITHUB_PAT", "ghp_x"));
//! assert!(is_scrubbed("DATABASE_URL", "postgres://app:hunter2@db/app"));
//! assert!(!is_scrubbed("DATABASE_URL", "postgres://db/app"));
//! assert!(!is_scrubbed("PATH", "/usr/bin:/bin"));
//! ```

include!("env_scrub_list.rs");

/// The name test as one POSIX `case` pattern list (`case $name in PATTERN) …`).
pub const SH_SCRUB_NAME: &str = "*[Kk][Ee][Yy]*|*[Ss][Ee][Cc][Rr][Ee][Tt]*|*[Tt][Oo][Kk][Ee][Nn]*|*[Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]*|*[Pp][Aa][Ss][Ss][Ww][Dd]*|*[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll]*|*_[Aa][Uu][Tt][Hh]*|*_[Pp][Aa][Tt]|EXEC_WORLD_*";

/// A POSIX `sh` function `exec_world_scrubbed NAME VALUE`: status 0 when the variable
/// is scrubbed (the name matches [`SH_SCRUB_NAME`], or the value holds a URL whose
/// authority has `user:password@`), the same decision as [`is_scrubbed`].
pub const SH_SCRUB_FN: &str = concat!(
    "exec_world_scrubbed() {\n",
    "  case $1 in ",
    "*[Kk][Ee][Yy]*|*[Ss][Ee][Cc][Rr][Ee][Tt]*|*[Tt][Oo][Kk][Ee][Nn]*|*[Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]*|*[Pp][Aa][Ss][Ss][Ww][Dd]*|*[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll]*|*_[Aa][Uu][Tt][Hh]*|*_[Pp][Aa][Tt]|EXEC_WORLD_*",
    ") return 0 ;; esac\n",
    "  exec_world_r=$2\n",
    "  while :; do\n",
    "    case $exec_world_r in *://*) ;; *) return 1 ;; esac\n",
    "    exec_world_r=${exec_world_r#*://}\n",
    "    case ${exec_world_r%%/*} in *:*@*) return 0 ;; esac\n",
    "  done\n",
    "}\n",
);

/// True when the name marks a credential or an internal variable (see the module docs).
pub fn is_scrubbed_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    NAME_FRAGMENTS.iter().any(|f| upper.contains(f))
        || NAME_SUFFIXES.iter().any(|s| upper.ends_with(s))
        || INTERNAL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// True when `value` is a URL with a password in its userinfo: `scheme://user:pw@host`
/// (the `:` and `@` come before the first `/` of the authority).
pub fn is_url_with_password(value: &str) -> bool {
    value.split("://").skip(1).any(|rest| {
        let authority = rest.split('/').next().unwrap_or_default();
        match authority.rfind('@') {
            Some(at) => authority[..at].contains(':'),
            None => false,
        }
    })
}

/// True when the inherited variable `name=value` must not reach a spawned process.
pub fn is_scrubbed(name: &str, value: &str) -> bool {
    is_scrubbed_name(name) || is_url_with_password(value)
}

/// `vars` without the scrubbed ones.
pub fn scrub(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(k, v)| !is_scrubbed(k, v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for n in [
            "E2B_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "github_token",
            "DB_Password",
            "MYSQL_PASSWD",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "NPM_AUTH",
            "HTTP_AUTHORIZATION",
            "GITHUB_PAT",
            "gitlab_pat",
            "EXEC_WORLD_INTERNAL",
            "EXEC_WORLD_SPAWN",
        ] {
            assert!(is_scrubbed_name(n), "{n}");
        }
        for n in [
            "PATH",
            "HOME",
            "AUTHOR",
            "PATTERN",
            "PATH_EXTRA",
            "LANG",
            "USER",
        ] {
            assert!(!is_scrubbed_name(n), "{n}");
        }
    }

    #[test]
    fn urls() {
        assert!(is_url_with_password("https://u:p@example.com/x"));
        assert!(is_url_with_password("redis://:p@127.0.0.1:6379"));
        assert!(is_url_with_password("a,b postgres://u:p@h/db"));
        assert!(!is_url_with_password("https://u@example.com/x"));
        assert!(!is_url_with_password("https://example.com:8080/a@b:c"));
        assert!(!is_url_with_password("no url: here@there"));
    }

    /// The sh patterns the E2B spawn helper uses decide exactly like the Rust test.
    #[test]
    fn sh_patterns_agree() {
        let names = [
            "E2B_API_KEY",
            "github_token",
            "MYSQL_PASSWD",
            "Credentials",
            "NPM_AUTH",
            "X_AUTHZ",
            "GITHUB_PAT",
            "PATH",
            "AUTHOR",
            "PATTERN",
            "PAT",
            "EXEC_WORLD_SPAWN",
            "EXEC_WORLD_A",
            "exec_world_a",
            "HOME",
        ];
        let values = [
            "https://u:p@example.com/x",
            "redis://:p@127.0.0.1:6379",
            "https://u@example.com/x",
            "https://example.com:8080/a@b:c",
            "plain",
            "x://a:b@",
            "x://a:b://c@d",
            "x://a:b@c://d",
            "a,b postgres://u:p@h/db",
        ];
        assert!(SH_SCRUB_FN.contains(SH_SCRUB_NAME));
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let (sh, rust) = decisions(&names, &values);
        assert_eq!(sh, rust, "sh and Rust disagree on {names:?} {values:?}");
    }

    /// The sh function's and the Rust test's decisions on `names` then `values`.
    fn decisions(names: &[String], values: &[String]) -> (Vec<bool>, Vec<bool>) {
        let script = format!(
            r#"{SH_SCRUB_FN}
n=$1; shift
i=0
for a in "$@"; do
  if [ "$i" -lt "$n" ]; then exec_world_scrubbed "$a" plain && echo 1 || echo 0
  else exec_world_scrubbed PLAIN "$a" && echo 1 || echo 0; fi
  i=$((i + 1))
done"#
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg("sh")
            .arg(names.len().to_string())
            .args(names)
            .args(values)
            .output()
            .expect("sh runs");
        let sh = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l == "1")
            .collect();
        let rust = names
            .iter()
            .map(|n| is_scrubbed_name(n))
            .chain(values.iter().map(|v| is_url_with_password(v)))
            .collect();
        (sh, rust)
    }

    mod props {
        //! The Rust test and the sh function on generated names and values (bounded: 64
        //! cases, one `sh` each).
        use proptest::prelude::*;

        fn piece(parts: &'static [&'static str]) -> impl Strategy<Value = String> {
            proptest::collection::vec(proptest::sample::select(parts), 0..6)
                .prop_map(|v| v.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn rust_and_sh_decide_alike(
                names in proptest::collection::vec(
                    piece(&["A", "b", "_", "1", "KEY", "key", "PAT", "_pat", "AUTH", "_Auth",
                            "PASSWD", "Token", "CREDENTIAL", "SECRET", "EXEC_", "WORLD_"]),
                    1..6,
                ),
                values in proptest::collection::vec(
                    piece(&["x", "://", ":", "@", "/", "u", "p", "h", " ", "?", "#"]),
                    1..6,
                ),
            ) {
                let names: Vec<String> = names.into_iter().filter(|n| !n.is_empty()).collect();
                let (sh, rust) = super::decisions(&names, &values);
                prop_assert_eq!(sh, rust, "names {:?} values {:?}", names, values);
            }
        }
    }
}
