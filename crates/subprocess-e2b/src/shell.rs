//! Trusted commands through e2b-core's trusted shell (root, positional arguments, a
//! random root-level `HOME`, no login profile): the user lookup, `which`, the spawn
//! helper's placement and the cgroup probe, the private state directory, signals to a
//! pid or a terminal's foreground group, and the exec-world tree kill.

use std::time::Duration;

use e2b_core::trusted_shell::TrustedShell;
use e2b_core::{EnvdApi, StartProcess};
use exec_world::{Error, Signal};

/// The world's user as the trusted shell found it (`getent passwd`, never the profile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// Login name.
    pub name: String,
    /// Login home from the password database.
    pub home: String,
    /// Login shell (`/bin/sh` when the entry has none).
    pub shell: String,
    /// envd's `PATH` (the base `PATH` of spawned programs).
    pub path: String,
}

const LOOKUP_SH: &str = r#"getent passwd "$1" || exit 3
printf '%s\n' "$PATH"
id -G -- "$1" 2>/dev/null | tr ' ' ,"#;

const WHICH_SH: &str = r#"PATH=$1; p=$2; set -f
case $p in
  */*) [ -f "$p" ] && [ -x "$p" ] && printf '%s\n' "$p"; exit 0 ;;
esac
IFS=:
for d in $PATH; do
  [ -n "$d" ] || d=.
  if [ -f "$d/$p" ] && [ -x "$d/$p" ]; then printf '%s\n' "$d/$p"; exit 0; fi
done
exit 0"#;

/// Creates `$1` empty with mode 0600, refusing anything already there (noclobber).
const PRIVATE_FILE_SH: &str = r#"umask 077; set -C; : > "$1""#;

/// The placement step as an `sh` function, `place NAME HELPER USER PROBE NATIVE [KEEP]`, shared
/// by [`SETUP_SH`] and the first spawn's boot (`boot.rs`). `NAME` is the helper
/// directory's name (made, root-owned and 0755, in `/run` when that is a real directory
/// of root's that no one else may write, else in `/tmp`; it must not exist), `HELPER` the
/// `sh` helper's text, `USER` the acting user (empty: not known yet, no ids printed),
/// `PROBE` a probe cgroup name, `NATIVE` the native helper as base64 (may be empty),
/// `KEEP` non-empty to leave a probe cgroup that worked in place, for a spawn to reuse
/// (empty: it is removed).
/// Prints `dir PATH`, then `native` when the native helper was placed and runs here,
/// then `cgroup MOUNT SETPRIV UID GID GROUPS` when root can create a cgroup below its own
/// in the cgroup2 mount, move a process into it and `cgroup.kill` it, and `setpriv` is
/// there to drop to a user (`UID GID GROUPS`: the acting user's ids and groups, empty for
/// root); nothing more otherwise. Leaves `d` (the directory), `native_ok` and `cg_ok`
/// (`1` or empty), `mnt`, `uid`, `gid` and `groups` set; returns 3 when the directory
/// could not be made.
macro_rules! place_fn {
    () => {
        r#"place() {
umask 022
native_ok=; cg_ok=; mnt=; uid=; gid=; groups=
d=/tmp/$1
if [ -d /run ] && [ ! -L /run ]; then
  st=$(stat -c '%u %a' /run 2>/dev/null) || st=
  m=${st#0 }
  case $st in
    "0 "*) case $m in *[2367]?|*[2367]) ;; *) d=/run/$1 ;; esac ;;
  esac
fi
mkdir -m 0755 -- "$d" || return 3
printf 'dir %s\n' "$d"
printf '%s' "$2" > "$d/spawn.sh" || return 3
if [ -n "$5" ]; then
  if printf '%s' "$5" | base64 -d > "$d/spawn" 2>/dev/null && chmod 0755 "$d/spawn" &&
    [ "$("$d/spawn" --probe 2>/dev/null)" = "exec-world-spawn 1" ]; then
    echo native
    native_ok=1
  else
    rm -f -- "$d/spawn"
  fi
fi
while read -r _ _ _ root point rest; do
  case " $rest " in *" - cgroup2 "*) [ "$root" = / ] && { mnt=$point; break; } ;; esac
done < /proc/self/mountinfo
case $mnt in ''|*\\*) mnt=; return 0 ;; esac
base=
while read -r l; do case $l in 0::*) base=${l#0::} ;; esac; done < /proc/self/cgroup
sp=$(command -v setpriv) || return 0
if [ -n "$3" ] && [ "$3" != root ]; then
  e=$(getent passwd "$3") || return 0
  IFS=: read -r _ _ uid gid _ <<PASSWD
$e
PASSWD
  groups=$(id -G -- "$3" 2>/dev/null | tr ' ' ,)
  [ -n "$groups" ] || groups=$gid
fi
t=$mnt${base%/}/$4
mkdir -- "$t" 2>/dev/null || return 0
ok=0
# Move this shell in and back: the move a spawn makes, allowed here.
if [ -e "$t/cgroup.kill" ] && { echo $$ > "$t/cgroup.procs"; } 2>/dev/null; then
  { echo $$ > "$mnt${base%/}/cgroup.procs"; } 2>/dev/null && ok=1
fi
[ "$ok" = 1 ] && [ -n "$6" ] || rmdir -- "$t" 2>/dev/null
if [ "$ok" = 1 ]; then
  printf 'cgroup %s %s %s %s %s\n' "$mnt" "$sp" "$uid" "$gid" "$groups"
  cg_ok=1
fi
return 0
}
"#
    };
}
pub(crate) use place_fn;

/// Places the spawn helpers and probes for a cgroup per spawn: `place "$1" … "$5"` (see
/// [`place_fn`]), after the user database when `$6` = `1`, for the user lookup in the
/// same round trip (`path PATH`, then `pw ENTRY` per `getent passwd` entry and
/// `gr ENTRY` per `getent group` entry).
const SETUP_SH: &str = concat!(
    place_fn!(),
    r#"if [ "$6" = 1 ]; then
  printf 'path %s\n' "$PATH"
  getent passwd | while IFS= read -r l; do printf 'pw %s\n' "$l"; done
  getent group | while IFS= read -r l; do printf 'gr %s\n' "$l"; done
fi
place "$1" "$2" "$3" "$4" "$5""#
);

/// Most bytes the setup may print (with the user database).
const SETUP_OUTPUT: usize = 4 << 20;

/// Removes what an adapter placed: the empty cgroups named `$2*` below the cgroup2
/// mount `$1` (one level below the root part's own cgroup, so also `$1/*/`) and the
/// helper directory `$3`. Populated cgroups stay (`rmdir` refuses them).
const CLEANUP_SH: &str = r#"if [ -n "$1" ] && [ -n "$2" ]; then
  for d in "$1"/"$2"* "$1"/*/"$2"*; do [ -d "$d" ] && rmdir -- "$d" 2>/dev/null; done
fi
[ -n "$3" ] && rm -rf -- "$3"
exit 0"#;

const STATE_DIR_SH: &str = r#"umask 077; mkdir -m 0700 -- "$1" && chown -- "$2" "$1""#;

/// `$1` pid, `$2` signal name, `$3` 1 = the foreground group of `$1`'s terminal.
const SIGNAL_SH: &str = r#"read -r st < "/proc/$1/stat" 2>/dev/null || exit 0
f() { state=$1; tpgid=$6; }
f ${st##*) }
case $state in Z|X) exit 0 ;; esac
if [ "$3" = 1 ] && [ "$tpgid" -gt 0 ] 2>/dev/null; then
  kill -s "$2" -- "-$tpgid" 2>/dev/null || kill -s "$2" -- "$1" 2>/dev/null
else
  kill -s "$2" -- "$1" 2>/dev/null
fi
exit 0"#;

/// Who a contained spawn drops to: uid, gid and the supplementary groups (what `setpriv
/// --init-groups` sets; comma-separated gids for the native helper).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) uid: String,
    pub(crate) gid: String,
    pub(crate) groups: String,
}

/// The ids a spawn drops to (`None`: uid 0, no drop).
pub(crate) type DropIds = Option<Ids>;

/// What the setup placed and found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    /// The helper directory the setup made.
    pub(crate) dir: String,
    /// The native helper is in the helper directory and runs in this sandbox.
    pub(crate) native: bool,
    /// How spawns get a cgroup of their own, if they can.
    pub(crate) cgroup: Option<CgroupSetup>,
}

/// Reads [`SETUP_SH`]'s output (`None` without its `dir` line).
pub(crate) fn parse_setup(text: &str) -> Option<Placed> {
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("dir "))?
        .to_owned();
    let native = text.lines().any(|l| l == "native");
    let cgroup = text
        .lines()
        .find_map(|l| l.strip_prefix("cgroup "))
        .and_then(|rest| {
            let f: Vec<&str> = rest.split(' ').collect();
            let mount = f.first().filter(|m| !m.is_empty())?;
            let field = |i: usize| f.get(i).copied().unwrap_or_default().to_owned();
            let ids = (!field(2).is_empty()).then(|| Ids {
                uid: field(2),
                gid: field(3),
                groups: field(4),
            });
            Some(CgroupSetup {
                mount: (*mount).to_owned(),
                setpriv: field(1),
                ids,
            })
        });
    Some(Placed {
        dir,
        native,
        cgroup,
    })
}

/// The user `name` from its passwd `entry`, envd's `PATH` and its groups (`id -G`,
/// comma-separated; `None`: the primary group only).
pub(crate) fn user_from(
    name: &str,
    entry: &str,
    path: &str,
    groups: Option<&str>,
) -> Result<(UserInfo, DropIds), Error> {
    let path = path.to_owned();
    let fields: Vec<&str> = entry.split(':').collect();
    if fields.len() < 7 || fields[5].is_empty() {
        return Err(Error::other(format!("unusable passwd entry for {name:?}")));
    }
    let shell = if fields[6].is_empty() {
        "/bin/sh"
    } else {
        fields[6]
    };
    let numeric = |f: &str| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit());
    if !numeric(fields[2]) || !numeric(fields[3]) {
        return Err(Error::other(format!("unusable passwd entry for {name:?}")));
    }
    let groups = groups
        .map(str::trim)
        .filter(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit() || b == b','))
        .unwrap_or(fields[3]);
    let ids = (fields[2] != "0").then(|| Ids {
        uid: fields[2].to_owned(),
        gid: fields[3].to_owned(),
        groups: groups.to_owned(),
    });
    let info = UserInfo {
        name: name.to_owned(),
        home: fields[5].to_owned(),
        shell: shell.to_owned(),
        path: if path.is_empty() {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()
        } else {
            path
        },
    };
    Ok((info, ids))
}

/// The user `name` from a [`SETUP_SH`] output with the user database: its passwd
/// entry, envd's `PATH`, and its groups as `id -G` finds them (the primary group, then
/// every group that lists the name). `None` when the output has no entry for it.
pub(crate) fn lookup_in(text: &str, name: &str) -> Option<Result<(UserInfo, DropIds), Error>> {
    let mut path = "";
    let mut entry = None;
    let mut extra: Vec<&str> = Vec::new();
    for l in text.lines() {
        if let Some(p) = l.strip_prefix("path ") {
            path = p;
        } else if let Some(e) = l.strip_prefix("pw ") {
            if entry.is_none() && e.split(':').next() == Some(name) {
                entry = Some(e);
            }
        } else if let Some(g) = l.strip_prefix("gr ") {
            let f: Vec<&str> = g.split(':').collect();
            if f.len() == 4 && f[3].split(',').any(|m| m == name) {
                extra.push(f[2]);
            }
        }
    }
    let entry = entry?;
    let primary = entry.split(':').nth(3).unwrap_or_default();
    let mut groups = vec![primary];
    for g in extra {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    Some(user_from(name, entry, path, Some(&groups.join(","))))
}

/// How spawns get a cgroup of their own (what [`SETUP_SH`] found).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupSetup {
    /// The cgroup2 mount point in the sandbox.
    pub(crate) mount: String,
    /// `setpriv`'s absolute path.
    pub(crate) setpriv: String,
    /// The uid and gid of the user the setup ran for (`None` for root: no drop).
    pub(crate) ids: DropIds,
}

/// Trusted commands for one adapter.
#[derive(Clone, Debug)]
pub(crate) struct Shell {
    pub(crate) shell: TrustedShell,
}

impl Shell {
    pub(crate) fn new(api: std::sync::Arc<dyn EnvdApi>) -> Shell {
        Shell {
            shell: TrustedShell::new(api).max_output(64 << 10),
        }
    }

    /// The default user's name, asked of a process run as that user without a profile
    /// (only when the adapter was not told a user).
    pub(crate) async fn default_user_name(&self) -> Result<String, Error> {
        let spec = StartProcess::new("/bin/sh")
            .args(["-c", "id -un"])
            .cwd("/")
            .timeout(Duration::from_secs(60));
        let out = self
            .shell
            .api()
            .run(spec)
            .await
            .map_err(|e| e.into_world("finding the sandbox's default user"))?;
        let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.end.exit_code != 0 || name.is_empty() {
            return Err(Error::other("`id -un` as the default user failed"));
        }
        Ok(name)
    }

    /// Looks `name` up in the password database, as root.
    pub(crate) async fn lookup(&self, name: &str) -> Result<(UserInfo, DropIds), Error> {
        let out = self
            .shell
            .run(LOOKUP_SH, &[name])
            .await
            .map_err(|e| e.into_world("looking up the sandbox user"))?;
        if out.exit_code != 0 {
            return Err(Error::other(format!(
                "user {name:?} is not in the sandbox's password database"
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let entry = lines.next().unwrap_or_default();
        let path = lines.next().unwrap_or_default();
        user_from(name, entry, path, lines.next())
    }

    /// `program` on `path`, as `command -v` would find an executable file.
    pub(crate) async fn which(&self, path: &str, program: &str) -> Result<Option<String>, Error> {
        let out = self
            .shell
            .run(WHICH_SH, &[path, program])
            .await
            .map_err(|e| e.into_world("which").with_path(program))?;
        let found = out.stdout_text();
        Ok((!found.is_empty()).then_some(found))
    }

    /// Places the spawn helper in a new directory called `name` and probes for a cgroup
    /// per spawn (see [`SETUP_SH`]), with the user database first when `db`: what was
    /// placed and found, and the whole output (for [`lookup_in`]).
    pub(crate) async fn setup(
        &self,
        name: &str,
        helper: &str,
        user: &str,
        probe: &str,
        native: &str,
        db: bool,
    ) -> Result<(Placed, String), Error> {
        let out = self
            .shell
            .clone()
            .max_output(SETUP_OUTPUT)
            .run_ok(
                SETUP_SH,
                &[
                    name,
                    helper,
                    user,
                    probe,
                    native,
                    if db { "1" } else { "0" },
                ],
            )
            .await
            .map_err(|e| e.into_world("placing the spawn helper").with_path(name))?;
        if out.truncated {
            return Err(Error::other(format!(
                "the setup's user database exceeds {SETUP_OUTPUT} bytes"
            ))
            .with_path(name));
        }
        let text = out.stdout_text();
        let placed = parse_setup(&text).ok_or_else(|| {
            Error::other("the setup did not say where it placed the spawn helper").with_path(name)
        })?;
        Ok((placed, text))
    }

    /// Removes an adapter's empty cgroups (names starting with `prefix`) and its helper
    /// directory; best effort.
    pub(crate) async fn cleanup(&self, mount: &str, prefix: &str, dir: &str) {
        if let Err(e) = self.shell.run(CLEANUP_SH, &[mount, prefix, dir]).await {
            tracing::debug!(error = %e, "removing the adapter's cgroups");
        }
    }

    /// Creates `dir` (must not exist) with mode 0700, owned by `user`.
    pub(crate) async fn make_state_dir(&self, dir: &str, user: &str) -> Result<(), Error> {
        self.shell
            .run_ok(STATE_DIR_SH, &[dir, user])
            .await
            .map(|_| ())
            .map_err(|e| e.into_world("creating the adapter's state directory"))
    }

    /// Creates the empty private file `path` (0600) as `user` (no profile), so the
    /// upload that follows keeps that mode.
    pub(crate) async fn make_private_file(&self, path: &str, user: &str) -> Result<(), Error> {
        let shell = if user == "root" {
            self.shell.clone()
        } else {
            self.shell.clone().user(user)
        };
        shell
            .run_ok(PRIVATE_FILE_SH, &[path])
            .await
            .map(|_| ())
            .map_err(|e| e.into_world("creating the terminal spec file"))
    }

    /// `kill -s NAME` to `pid`, or to the foreground group of its terminal. A process
    /// that already ended is success.
    pub(crate) async fn signal(
        &self,
        pid: u32,
        sig: Signal,
        foreground: bool,
    ) -> Result<(), Error> {
        let pid = pid.to_string();
        self.shell
            .run_ok(
                SIGNAL_SH,
                &[&pid, sig.name(), if foreground { "1" } else { "0" }],
            )
            .await
            .map(|_| ())
            .map_err(|e| e.into_world("sending a signal"))
    }

    /// Runs exec-world's tree kill for `leader` / `marker` (and the members of the
    /// spawn's `cgroup` directory, if any) and waits for it; `Ok(true)` when it reports
    /// that no member survives.
    pub(crate) async fn kill_tree(
        &self,
        leader: u32,
        marker: &str,
        grace: Duration,
        hangup: bool,
        cgroup: &str,
    ) -> Result<bool, Error> {
        let mut argv = exec_world_sys::tree_script::kill_tree_argv(leader, marker, grace, hangup);
        argv.push(cgroup.to_owned());
        // argv = sh -c SCRIPT NAME ARGS…: run SCRIPT through the trusted shell with ARGS.
        let script = argv.get(2).cloned().unwrap_or_default();
        let args: Vec<&str> = argv.iter().skip(4).map(String::as_str).collect();
        let shell = self
            .shell
            .clone()
            .timeout(Some(grace + Duration::from_secs(120)));
        let out = shell
            .run(&script, &args)
            .await
            .map_err(|e| e.into_world("terminating the process tree"))?;
        Ok(out.exit_code == 0)
    }
}
