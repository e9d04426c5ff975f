//! The in-sandbox spawn helper every spawn runs under, its positional arguments, the
//! quoted spec file of terminals, and the parsing of the one header line it prints.
//!
//! The helper is a POSIX `sh` file placed once per adapter ([`helper_sh`], in a root-owned
//! directory, see `world.rs`) and run by path, so no script text travels with a spawn.
//!
//! Contained mode (root in the sandbox and a writable cgroup v2, the usual case): envd
//! starts `setsid -w /bin/sh HELPER --root MOUNT NAME SETPRIV UID GID USERARGS…` as root.
//! The root part joins the cgroup `MOUNT<its own cgroup>/NAME` (created on first use of
//! NAME, reused while empty, `NAME.<pid>` when a leftover of an earlier spawn still lives
//! in it), then drops to the acting user with `setpriv` (`--reset-env` unless the
//! environment is inherited) and runs the user part: `/bin/sh HELPER --user RESET CGDIR
//! USERARGS…`. Plain mode (no cgroup): envd starts `setsid -w /bin/sh HELPER --user 0 ''
//! USERARGS…` as the acting user. Terminals: the same without `setsid` (envd's PTY
//! process already leads its session), USERARGS replaced by `--file PATH`, a file holding
//! them as one `set -- 'a' 'b' …` line that the helper sources and deletes.
//!
//! The user part (always as the acting user)
//! 1. checks in `/proc/$$/stat` that its process group and session are its own pid,
//! 2. looks the program up in the `PATH` of the environment it is about to build,
//! 3. prints `EXEC-WORLD-PGID <pid> <cgroup dir>` (or `EXEC-WORLD-FAIL <why>`) as its first
//!    line on stdout,
//! 4. execs the program (same pid: `pid == pgid`): directly with the exact environment
//!    exported by the shell when `setpriv --reset-env` left it a known one and every
//!    explicit name is a plain identifier, else through `env [-i | -u NAME…] -- VARS…`.
//!
//! USERARGS: `MODE TERM HOME SHELL USER PATH FAST NENV K=V… PROGRAM ARGS…` with MODE
//! `clean`, `base` or `inherit`, TERM `1` for terminals, HOME and SHELL from `getent
//! passwd` (trusted), USER the acting user, PATH envd's `PATH`, FAST `1` when the explicit
//! names allow the direct exec, NENV the number of `K=V` (the explicit variables, the
//! marker last).

use std::collections::BTreeMap;

use exec_world::{EnvBase, Error};

/// The helper file's text (POSIX sh): `HELPER_BODY` (below) after exec-world's credential scrub
/// function (`exec_world_sys::env_scrub::SH_SCRUB_FN`, the list every backend shares).
pub fn helper_sh() -> &'static str {
    static SCRIPT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{}{HELPER_BODY}", exec_world_sys::env_scrub::SH_SCRUB_FN)
    });
    SCRIPT.as_str()
}

/// The helper's own part (it calls `exec_world_scrubbed NAME VALUE`, defined before it).
const HELPER_BODY: &str = r#"_ew_fail() { printf 'EXEC-WORLD-FAIL %s\n' "$1"; exit "${2:-125}"; }
if [ "$1" = --root ]; then
  _ew_mnt=$2; _ew_name=$3; _ew_sp=$4; _ew_uid=$5; _ew_gid=$6; shift 6
  if [ "$1" = --file ]; then
    _ew_f=$2
    . "$_ew_f" || _ew_fail spec
    rm -f -- "$_ew_f"
  fi
  _ew_base=
  while read -r _ew_l; do case $_ew_l in 0::*) _ew_base=${_ew_l#0::} ;; esac; done < /proc/self/cgroup
  _ew_cg=$_ew_mnt${_ew_base%/}/$_ew_name
  if [ -d "$_ew_cg" ]; then
    if read -r _ew_l < "$_ew_cg/cgroup.procs"; then
      _ew_cg=$_ew_cg.$$; mkdir -- "$_ew_cg" || _ew_fail cgroup
    fi
  else
    mkdir -- "$_ew_cg" || _ew_fail cgroup
  fi
  echo $$ > "$_ew_cg/cgroup.procs" || _ew_fail cgroup
  if [ -n "$_ew_uid" ]; then
    if [ "$1" = inherit ]; then
      exec "$_ew_sp" --reuid="$_ew_uid" --regid="$_ew_gid" --init-groups -- /bin/sh "$0" --user 0 "$_ew_cg" "$@"
    fi
    exec "$_ew_sp" --reuid="$_ew_uid" --regid="$_ew_gid" --init-groups --reset-env -- /bin/sh "$0" --user 1 "$_ew_cg" "$@"
  fi
  set -- --user 0 "$_ew_cg" "$@"
fi
[ "$1" = --user ] || _ew_fail usage
_ew_reset=$2; _ew_cg=$3; shift 3
if [ "$1" = --file ]; then
  _ew_f=$2
  . "$_ew_f" || _ew_fail spec
  rm -f -- "$_ew_f"
fi
_ew_stat() { _ew_pgid=$3; _ew_sid=$4; }
read -r _ew_st < "/proc/$$/stat" || _ew_fail proc
_ew_stat ${_ew_st##*) }
if [ "$_ew_pgid" != "$$" ] || [ "$_ew_sid" != "$$" ]; then
  _ew_fail "session $$ $_ew_pgid $_ew_sid"
fi
_ew_mode=$1; _ew_term=$2; _ew_home=$3; _ew_shell=$4; _ew_user=$5; _ew_epath=$6; _ew_fast=$7; _ew_n=$8
shift 8
set -f
_ew_path=; _ew_havepath=0
case $_ew_mode in
  base) _ew_path=$_ew_epath; _ew_havepath=1 ;;
  inherit) [ -n "${PATH+x}" ] && { _ew_path=$PATH; _ew_havepath=1; } ;;
esac
_ew_i=0
for _ew_a in "$@"; do
  [ "$_ew_i" -ge "$_ew_n" ] && break
  case $_ew_a in PATH=*) _ew_path=${_ew_a#PATH=}; _ew_havepath=1 ;; esac
  _ew_i=$((_ew_i + 1))
done
eval "_ew_prog=\${$((_ew_n + 1))}"
_ew_found=; _ew_seen=0
case $_ew_prog in
  */*) [ -e "$_ew_prog" ] && _ew_seen=1
       [ -f "$_ew_prog" ] && [ -x "$_ew_prog" ] && _ew_found=$_ew_prog ;;
  *) [ "$_ew_havepath" = 1 ] || _ew_path=/bin:/usr/bin
     IFS=:
     for _ew_d in $_ew_path; do
       [ -n "$_ew_d" ] || _ew_d=.
       if [ -e "$_ew_d/$_ew_prog" ]; then
         _ew_seen=1
         if [ -f "$_ew_d/$_ew_prog" ] && [ -x "$_ew_d/$_ew_prog" ]; then _ew_found=1; break; fi
       fi
     done
     unset IFS ;;
esac
if [ -z "$_ew_found" ]; then
  if [ "$_ew_seen" = 1 ]; then _ew_fail eacces 126; fi
  _ew_fail enoent 127
fi
_ew_direct=0
if [ "$_ew_reset$_ew_fast" = 11 ] && [ "$_ew_mode" != inherit ]; then
  _ew_direct=1
  # dash keeps PATH exported once imported: a bare name without PATH needs `env -i`.
  case $_ew_mode$_ew_havepath$_ew_prog in clean0*/*) ;; clean0*) _ew_direct=0 ;; esac
fi
if [ "$_ew_direct" = 1 ]; then
  # The environment is setpriv's --reset-env one (known names) plus dash's PWD.
  unset HOME SHELL USER LOGNAME PATH TERM PWD
  if [ "$_ew_mode" = base ]; then
    export "PATH=$_ew_epath" "HOME=$_ew_home" "USER=$_ew_user" "LOGNAME=$_ew_user" "SHELL=$_ew_shell" LANG=C.UTF-8
    [ "$_ew_term" = 1 ] && export TERM=xterm-256color
  fi
  while [ "$_ew_n" -gt 0 ]; do
    export "$1"; shift; _ew_n=$((_ew_n - 1))
  done
  printf 'EXEC-WORLD-PGID %s %s\n' "$$" "$_ew_cg"
  exec "$@"
fi
case $_ew_mode in
  clean) set -- -i -- "$@" ;;
  base)
    set -- "PATH=$_ew_epath" "HOME=$_ew_home" "USER=$_ew_user" "LOGNAME=$_ew_user" "SHELL=$_ew_shell" "LANG=${LANG:-C.UTF-8}" "$@"
    [ "$_ew_term" = 1 ] && set -- "TERM=xterm-256color" "$@"
    set -- -i -- "$@" ;;
  *)
    set -- "HOME=$_ew_home" "USER=$_ew_user" "LOGNAME=$_ew_user" "$@"
    [ "$_ew_term" = 1 ] && set -- "TERM=${TERM:-xterm-256color}" "$@"
    set -- -- "$@"
    _ew_names=$(env | sed -n 's/^\([^=]*\)=.*/\1/p')
    IFS='
'
    for _ew_v in $_ew_names; do
      case $_ew_v in
        ''|[0-9]*|*[!A-Za-z0-9_]*) _ew_val= ;;
        *) eval "_ew_val=\${$_ew_v-}" ;;
      esac
      exec_world_scrubbed "$_ew_v" "$_ew_val" && set -- -u "$_ew_v" "$@"
    done
    unset IFS ;;
esac
printf 'EXEC-WORLD-PGID %s %s\n' "$$" "$_ew_cg"
exec env "$@"
"#;

/// Name of the helper file in its directory.
pub const HELPER_FILE: &str = "spawn.sh";

/// Prefix of the header line that carries the verified pid and the cgroup.
const HEADER_PGID: &str = "EXEC-WORLD-PGID ";
/// Prefix of the header line of a refused spawn.
const HEADER_FAIL: &str = "EXEC-WORLD-FAIL ";

/// What the wrapper builds the environment from.
#[derive(Clone, Debug)]
pub(crate) struct WrapArgs {
    pub(crate) base: EnvBase,
    pub(crate) terminal: bool,
    pub(crate) home: String,
    pub(crate) shell: String,
    /// The acting user's name.
    pub(crate) user: String,
    /// envd's `PATH` (the base environment's).
    pub(crate) path: String,
    /// Explicit variables (the caller's choice, passed as given).
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) marker: String,
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
}

fn mode(base: EnvBase) -> &'static str {
    match base {
        EnvBase::Clean => "clean",
        EnvBase::Inherit => "inherit",
        _ => "base",
    }
}

/// The longest single argument or `K=V` the Linux kernel passes to a program
/// (`MAX_ARG_STRLEN`, 32 pages, minus the terminating NUL).
pub(crate) const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Refuses what cannot reach a process intact (NUL), env names `env` would misread, and
/// program names `env` would take for an assignment.
pub(crate) fn validate(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let bad = |reason: String| Err(Error::invalid_spec(reason).with_op("spawn"));
    if program.is_empty() {
        return bad("empty program".into());
    }
    if program.contains('=') {
        return bad(format!(
            "program {program:?} contains '=' (use a path without it)"
        ));
    }
    if program.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return bad("NUL in the program or an argument".into());
    }
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return bad(format!("environment variable {k:?} cannot be passed"));
        }
        if k.len() + 1 + v.len() > MAX_ARG_BYTES {
            return bad(format!(
                "environment variable {k}: {} bytes; Linux passes at most {MAX_ARG_BYTES} bytes \
                 per argument or variable (E2BIG, argument list too long)",
                k.len() + 1 + v.len()
            ));
        }
    }
    for (i, a) in std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .enumerate()
    {
        if a.len() > MAX_ARG_BYTES {
            let which = if i == 0 {
                format!("program {:?}…", a.chars().take(32).collect::<String>())
            } else {
                format!("argument {i}")
            };
            return bad(format!(
                "{which}: {} bytes; Linux passes at most {MAX_ARG_BYTES} bytes per argument \
                 (E2BIG, argument list too long)",
                a.len()
            ));
        }
    }
    Ok(())
}

/// True for a name the shell can `export` and that cannot clobber the helper's own
/// variables (`_ew_*`).
fn plain_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with("_ew_")
}

impl WrapArgs {
    /// True when the helper may export the explicit variables itself and exec the
    /// program directly (no `env`): every name is a plain one and the program is not
    /// taken for an option by the shell's `exec`.
    fn direct_exec(&self) -> bool {
        !matches!(self.base, EnvBase::Inherit)
            && !self.program.starts_with('-')
            && self.env.keys().all(|k| plain_name(k))
    }

    /// The positional arguments of the user part (`USERARGS`).
    pub(crate) fn positional(&self) -> Vec<String> {
        let mut env: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| k.as_str() != exec_world_sys::tree_script::MARKER_VAR)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        env.push(format!(
            "{}={}",
            exec_world_sys::tree_script::MARKER_VAR,
            self.marker
        ));
        let mut out = vec![
            mode(self.base).to_owned(),
            if self.terminal { "1" } else { "0" }.to_owned(),
            self.home.clone(),
            self.shell.clone(),
            self.user.clone(),
            self.path.clone(),
            if self.direct_exec() { "1" } else { "0" }.to_owned(),
            env.len().to_string(),
        ];
        out.extend(env);
        out.push(self.program.clone());
        out.extend(self.args.iter().cloned());
        out
    }

    /// The terminal spec file: one `set -- …` line, every word single-quoted.
    pub(crate) fn spec_file(&self) -> String {
        let mut s = String::from("set --");
        for a in self.positional() {
            s.push(' ');
            s.push_str(&quote(&a));
        }
        s.push('\n');
        s
    }
}

/// Single-quotes `s` for sh (`'` becomes `'\''`).
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('\'');
    for c in s.chars() {
        if c == '\'' {
            q.push_str("'\\''");
        } else {
            q.push(c);
        }
    }
    q.push('\'');
    q
}

/// What the first output line said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Header {
    /// The verified process group id (== the program's pid) and the cgroup the spawn
    /// runs in (empty without one).
    Pgid(u32, String),
    /// The program is missing.
    NotFound,
    /// The program exists but cannot be executed.
    NotExecutable,
    /// Anything else the helper refused (text after `EXEC-WORLD-FAIL`).
    Failed(String),
}

/// Parses one header line (without its `\n`; a trailing `\r` from a PTY is ignored).
pub(crate) fn parse_header(line: &[u8]) -> Option<Header> {
    let text = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    if let Some(rest) = text.strip_prefix(HEADER_PGID) {
        let (pid, cgroup) = rest.split_once(' ').unwrap_or((rest, ""));
        return pid
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 1)
            .map(|p| Header::Pgid(p, cgroup.to_owned()));
    }
    let why = text.strip_prefix(HEADER_FAIL)?;
    Some(match why {
        "enoent" => Header::NotFound,
        "eacces" => Header::NotExecutable,
        other => Header::Failed(other.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_headers() {
        assert_eq!(quote("a'b $x"), r#"'a'\''b $x'"#);
        assert_eq!(
            parse_header(b"EXEC-WORLD-PGID 42 \r"),
            Some(Header::Pgid(42, String::new()))
        );
        assert_eq!(
            parse_header(b"EXEC-WORLD-PGID 42 /sys/fs/cgroup/x"),
            Some(Header::Pgid(42, "/sys/fs/cgroup/x".into()))
        );
        assert_eq!(
            parse_header(b"EXEC-WORLD-FAIL enoent"),
            Some(Header::NotFound)
        );
        assert_eq!(parse_header(b"hello"), None);
        let w = WrapArgs {
            base: EnvBase::Clean,
            terminal: false,
            home: "/home/user".into(),
            shell: "/bin/sh".into(),
            user: "user".into(),
            path: "/bin".into(),
            env: [
                ("A".to_string(), "1".to_string()),
                ("EXEC_WORLD_SPAWN".into(), "x".into()),
            ]
            .into(),
            marker: "m".into(),
            program: "prog".into(),
            args: vec!["x y".into()],
        };
        assert_eq!(
            w.positional(),
            [
                "clean",
                "0",
                "/home/user",
                "/bin/sh",
                "user",
                "/bin",
                "1",
                "2",
                "A=1",
                "EXEC_WORLD_SPAWN=m",
                "prog",
                "x y"
            ]
        );
        assert!(validate("a=b", &[], &BTreeMap::new()).is_err());
        // One argument over the kernel's per-argument limit: a typed error naming it and
        // the cause, before anything is sent.
        let big = "x".repeat(MAX_ARG_BYTES + 1);
        let e = validate("echo", &["ok".into(), big], &BTreeMap::new())
            .expect_err("too long")
            .to_string();
        assert!(e.contains("argument 2") && e.contains("E2BIG"), "{e}");
        assert!(validate("echo", &["x".repeat(MAX_ARG_BYTES)], &BTreeMap::new()).is_ok());
    }

    mod props {
        //! Property tests of the shell quoting (bounded: 48 cases each, one `sh` per case).
        use super::super::*;
        use proptest::prelude::*;

        /// Any text without NUL: quotes, `$`, backslashes, newlines, globs, non-ASCII.
        fn word() -> impl Strategy<Value = String> {
            let tricky = prop_oneof![
                Just('\''),
                Just('"'),
                Just('$'),
                Just('\\'),
                Just('`'),
                Just('\n'),
                Just('*'),
                Just(' '),
                Just('-'),
                Just('é'),
                any::<char>().prop_filter("no NUL", |c| *c != '\0'),
            ];
            proptest::collection::vec(tricky, 0..24).prop_map(|v| v.into_iter().collect())
        }

        /// What `sh` makes of `script` with `args`: its stdout.
        fn sh(script: &str, args: &[&str]) -> Vec<u8> {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg("sh")
                .args(args)
                .output()
                .expect("sh runs")
                .stdout
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            /// A quoted word is exactly one word with exactly the original bytes.
            #[test]
            fn quote_is_one_exact_word(w in word()) {
                let script = format!("set -- {}; printf '%s\\0' \"$#\" \"$1\"", quote(&w));
                prop_assert_eq!(sh(&script, &[]), format!("1\0{w}\0").into_bytes());
            }

            /// The terminal spec file restores exactly the positional arguments.
            #[test]
            fn spec_file_restores_the_arguments(
                program in word().prop_filter("non-empty", |w| !w.is_empty()),
                args in proptest::collection::vec(word(), 0..4),
                value in word(),
            ) {
                let w = WrapArgs {
                    base: EnvBase::Inherit,
                    terminal: true,
                    home: "/home/user".into(),
                    shell: "/bin/sh".into(),
                    user: "user".into(),
                    path: "/bin".into(),
                    env: [("V".to_string(), value)].into(),
                    marker: "m-1".into(),
                    program,
                    args,
                };
                let want: Vec<u8> = w
                    .positional()
                    .iter()
                    .flat_map(|a| a.bytes().chain([0]))
                    .collect();
                let got = sh(r#"eval "$1"; printf '%s\0' "$@""#, &[&w.spec_file()]);
                prop_assert_eq!(got, want);
            }
        }
    }
}
