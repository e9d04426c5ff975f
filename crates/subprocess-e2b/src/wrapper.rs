//! The in-sandbox wrapper every spawn runs under, its positional arguments, the quoted
//! spec file of terminals, and the parsing of the one header line it prints.
//!
//! Pipes: envd starts `setsid -w /bin/sh -c WRAPPER e2bx-wrap ARGS…` (envd execs it in
//! place; `setsid` makes it a session and group leader without forking unless it already
//! led a group). Terminals: envd starts `/bin/sh -c WRAPPER e2bx-wrap --file PATH` on its
//! PTY (already a session leader); the file holds the same arguments as one
//! `set -- 'a' 'b' …` line. The wrapper then
//! 1. checks in `/proc/$$/stat` that its process group and session are its own pid,
//! 2. looks the program up in the `PATH` of the environment it is about to build,
//! 3. prints `E2BX-PGID <pid>` (or `E2BX-FAIL <why>`) as its first line on stdout,
//! 4. `exec env [-i | -u NAME…] -- VARS… PROGRAM ARGS…` (same pid: `pid == pgid`).
//!
//! Arguments: `MODE TERM HOME SHELL NENV K=V… PROGRAM ARGS…` with MODE `clean`, `base`
//! or `inherit`, TERM `1` for terminals, HOME and SHELL from `getent passwd` (trusted),
//! NENV the number of `K=V` (the explicit variables, the marker last).

use std::collections::BTreeMap;

use exec_world::{EnvBase, Error};

/// The wrapper script (POSIX sh): `WRAPPER_BODY` after exec-world's credential scrub
/// function (`exec_world::env_scrub::SH_SCRUB_FN`, the list every backend shares).
pub fn wrapper_sh() -> &'static str {
    static SCRIPT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{}{WRAPPER_BODY}", exec_world::env_scrub::SH_SCRUB_FN)
    });
    SCRIPT.as_str()
}

/// The wrapper's own part (it calls `exec_world_scrubbed NAME VALUE`, defined before it).
const WRAPPER_BODY: &str = r#"if [ "$1" = --file ]; then
  _e2bx_f=$2
  . "$_e2bx_f" || { printf 'E2BX-FAIL spec\n'; exit 125; }
  rm -f -- "$_e2bx_f"
fi
_e2bx_stat() { _e2bx_pgid=$3; _e2bx_sid=$4; }
read -r _e2bx_st < "/proc/$$/stat" || { printf 'E2BX-FAIL proc\n'; exit 125; }
_e2bx_stat ${_e2bx_st##*) }
if [ "$_e2bx_pgid" != "$$" ] || [ "$_e2bx_sid" != "$$" ]; then
  printf 'E2BX-FAIL session %s %s %s\n' "$$" "$_e2bx_pgid" "$_e2bx_sid"; exit 125
fi
_e2bx_mode=$1; _e2bx_term=$2; _e2bx_home=$3; _e2bx_shell=$4; _e2bx_n=$5
shift 5
set -f
_e2bx_path=; _e2bx_havepath=0
[ "$_e2bx_mode" != clean ] && [ -n "${PATH+x}" ] && { _e2bx_path=$PATH; _e2bx_havepath=1; }
_e2bx_i=0
for _e2bx_a in "$@"; do
  [ "$_e2bx_i" -ge "$_e2bx_n" ] && break
  case $_e2bx_a in PATH=*) _e2bx_path=${_e2bx_a#PATH=}; _e2bx_havepath=1 ;; esac
  _e2bx_i=$((_e2bx_i + 1))
done
eval "_e2bx_prog=\${$((_e2bx_n + 1))}"
_e2bx_found=; _e2bx_seen=0
case $_e2bx_prog in
  */*) [ -e "$_e2bx_prog" ] && _e2bx_seen=1
       [ -f "$_e2bx_prog" ] && [ -x "$_e2bx_prog" ] && _e2bx_found=$_e2bx_prog ;;
  *) [ "$_e2bx_havepath" = 1 ] || _e2bx_path=/bin:/usr/bin
     IFS=:
     for _e2bx_d in $_e2bx_path; do
       [ -n "$_e2bx_d" ] || _e2bx_d=.
       if [ -e "$_e2bx_d/$_e2bx_prog" ]; then
         _e2bx_seen=1
         if [ -f "$_e2bx_d/$_e2bx_prog" ] && [ -x "$_e2bx_d/$_e2bx_prog" ]; then _e2bx_found=1; break; fi
       fi
     done
     unset IFS ;;
esac
if [ -z "$_e2bx_found" ]; then
  if [ "$_e2bx_seen" = 1 ]; then printf 'E2BX-FAIL eacces\n'; exit 126; fi
  printf 'E2BX-FAIL enoent\n'; exit 127
fi
case $_e2bx_mode in
  clean) set -- -i -- "$@" ;;
  base)
    set -- "PATH=$PATH" "HOME=$_e2bx_home" "USER=$USER" "LOGNAME=$LOGNAME" "SHELL=$_e2bx_shell" "LANG=${LANG:-C.UTF-8}" "$@"
    [ "$_e2bx_term" = 1 ] && set -- "TERM=xterm-256color" "$@"
    set -- -i -- "$@" ;;
  *)
    [ "$_e2bx_term" = 1 ] && set -- "TERM=${TERM:-xterm-256color}" "$@"
    set -- -- "$@"
    _e2bx_names=$(env | sed -n 's/^\([^=]*\)=.*/\1/p')
    IFS='
'
    for _e2bx_v in $_e2bx_names; do
      case $_e2bx_v in
        ''|[0-9]*|*[!A-Za-z0-9_]*) _e2bx_val= ;;
        *) eval "_e2bx_val=\${$_e2bx_v-}" ;;
      esac
      exec_world_scrubbed "$_e2bx_v" "$_e2bx_val" && set -- -u "$_e2bx_v" "$@"
    done
    unset IFS ;;
esac
printf 'E2BX-PGID %s\n' "$$"
exec env "$@"
"#;

/// Name of `$0` of the wrapper.
pub const WRAPPER_NAME: &str = "e2bx-wrap";

/// What the wrapper builds the environment from.
#[derive(Clone, Debug)]
pub(crate) struct WrapArgs {
    pub(crate) base: EnvBase,
    pub(crate) terminal: bool,
    pub(crate) home: String,
    pub(crate) shell: String,
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

impl WrapArgs {
    /// The positional arguments after `$0`.
    pub(crate) fn positional(&self) -> Vec<String> {
        let mut env: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| k.as_str() != exec_world::tree_script::MARKER_VAR)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        env.push(format!(
            "{}={}",
            exec_world::tree_script::MARKER_VAR,
            self.marker
        ));
        let mut out = vec![
            mode(self.base).to_owned(),
            if self.terminal { "1" } else { "0" }.to_owned(),
            self.home.clone(),
            self.shell.clone(),
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
    /// The verified process group id (== the program's pid).
    Pgid(u32),
    /// The program is missing.
    NotFound,
    /// The program exists but cannot be executed.
    NotExecutable,
    /// Anything else the wrapper refused (text after `E2BX-FAIL`).
    Failed(String),
}

/// Parses one header line (without its `\n`; a trailing `\r` from a PTY is ignored).
pub(crate) fn parse_header(line: &[u8]) -> Option<Header> {
    let text = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    if let Some(rest) = text.strip_prefix("E2BX-PGID ") {
        return rest
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 1)
            .map(Header::Pgid);
    }
    let why = text.strip_prefix("E2BX-FAIL ")?;
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
        assert_eq!(parse_header(b"E2BX-PGID 42\r"), Some(Header::Pgid(42)));
        assert_eq!(parse_header(b"E2BX-FAIL enoent"), Some(Header::NotFound));
        assert_eq!(parse_header(b"hello"), None);
        let w = WrapArgs {
            base: EnvBase::Clean,
            terminal: false,
            home: "/home/user".into(),
            shell: "/bin/sh".into(),
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
