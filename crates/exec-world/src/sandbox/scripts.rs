//! The in-world script that finds the processes `exec` started, by the variables every
//! exec carries ([`TAG_VAR`], [`SANDBOX_ID_VAR`]), and kills, stops or continues them.
//! Both providers run it (locally with `sh`, in E2B as the sandbox user through envd),
//! so `kill_tagged` / `kill_all` from another provider instance find the commands.

/// Every exec carries `SANDBOX_EXEC_TAG=<tag>` ([`UNTAGGED`] without a tag).
pub const TAG_VAR: &str = "SANDBOX_EXEC_TAG";

/// The value of [`TAG_VAR`] for an exec without a tag.
pub const UNTAGGED: &str = "-";

/// Every exec also carries `SANDBOX_EXEC_ID=<sandbox id>`, so the script never touches
/// another sandbox's commands where several share one process table (local, the
/// emulator).
pub const SANDBOX_ID_VAR: &str = "SANDBOX_EXEC_ID";

/// The group label ([`SpawnSpec::group`](crate::SpawnSpec::group)) of the sandbox's
/// spawns: `sbx<16 hex digits>`, a stable hash of the sandbox id (ids may hold characters
/// a cgroup name must not, and every replica must compute the same label).
///
/// ```
/// use exec_world::sandbox::{exec_group, sandbox_group};
/// assert!(exec_group("dev@1-2-3", Some("web")).starts_with(&sandbox_group("dev@1-2-3")));
/// assert_ne!(sandbox_group("a"), sandbox_group("b"));
/// ```
pub fn sandbox_group(sandbox_id: &str) -> String {
    // FNV-1a, 64 bits: stable across processes and versions, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sandbox_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("sbx{h:016x}")
}

/// The group label of an exec of the sandbox: `<sandbox_group>.<tag>` (tag [`UNTAGGED`]
/// without one). Tags have no `.`, so the label names one tag of one sandbox.
pub fn exec_group(sandbox_id: &str, tag: Option<&str>) -> String {
    format!("{}.{}", sandbox_group(sandbox_id), tag.unwrap_or(UNTAGGED))
}

/// The script. Arguments: `MODE TREE_SCRIPT SANDBOX_ID GROUP ALL TAG…`.
///
/// A process matches when its environment has [`TAG_VAR`] (and, with a non-empty
/// SANDBOX_ID, `SANDBOX_EXEC_ID=SANDBOX_ID`) and, unless ALL is `1`, its tag is one of
/// TAG…. MODE `kill`: for each distinct spawn marker (`EXEC_WORLD_SPAWN`) among the
/// matches, run exec-world's tree kill (`TREE_SCRIPT`, [`exec_world_sys::tree_script`]) with that
/// process as the leader: its group, session, descendants and every marker holder die,
/// and, when the match is in a spawn's own cgroup (a v2 cgroup with a path component
/// `exec-world-…`, which local and E2B spawns get where the kernel allows), every
/// process of that cgroup: the ground truth that also holds an `env -i` + `setsid`
/// double fork, which lost both its parent chain and the variables. In MODE `kill` it
/// also ends the spawn cgroups labeled `--GROUP.<tag>` (GROUP is [`sandbox_group`]; the
/// tag one of TAG…, any with ALL `1`; a `.<n>` suffix allowed) that no match pointed to:
/// what a command left in its cgroup after it ended (an `env -i` + `setsid` escapee
/// whose command is over has neither a tagged process nor a parent to find it by).
/// MODE `stop` / `cont`: SIGSTOP / SIGCONT every match. Exit 0 when done, 1 when a tree
/// kill reported survivors.
pub const SIGNAL_EXECS_SH: &str = r#"mode=$1; tree=$2; sid=$3; grp=$4; all=$5; shift 5
want=" $* "; self=$$; rc=0; seen=" "; todo=""; cgmount=""
case "$grp" in ""|*[!A-Za-z0-9_-]*) grp= ;; esac
while read -r l; do
  case "$l" in *" - cgroup2 "*) set -- $l; [ "$4" = / ] && { cgmount=$5; break; } ;; esac
done < /proc/self/mountinfo 2>/dev/null
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$self" ] && continue
  env=$( { tr '\0' '\n' < "$d/environ"; } 2>/dev/null) || continue
  t=$(printf '%s\n' "$env" | sed -n 's/^SANDBOX_EXEC_TAG=//p' | head -n 1)
  [ -n "$t" ] || continue
  if [ -n "$sid" ]; then
    s=$(printf '%s\n' "$env" | sed -n 's/^SANDBOX_EXEC_ID=//p' | head -n 1)
    [ "$s" = "$sid" ] || continue
  fi
  if [ "$all" != 1 ]; then
    case "$want" in *" $t "*) ;; *) continue ;; esac
  fi
  case $mode in
    stop) kill -STOP "$p" 2>/dev/null; continue ;;
    cont) kill -CONT "$p" 2>/dev/null; continue ;;
  esac
  m=$(printf '%s\n' "$env" | sed -n 's/^EXEC_WORLD_SPAWN=//p' | head -n 1)
  case "$seen" in *" $m "*) continue ;; esac
  [ -n "$m" ] && seen="$seen$m "
  cg=$(sed -n 's/^0:://p' "$d/cgroup" 2>/dev/null)
  case "$cg" in
    */exec-world-*) case "$cg" in *[!A-Za-z0-9_./-]*|*/../*|*/..) cg= ;; *) cg=$cgmount$cg ;; esac ;;
    *) cg= ;;
  esac
  [ -n "$cgmount" ] || cg=
  todo="$todo $p:$m:$cg"
done
if [ "$mode" = kill ] && [ -n "$cgmount" ] && [ -n "$grp" ]; then
  for cg in $(find "$cgmount" -xdev -maxdepth 16 -type d -name "*--$grp.*" 2>/dev/null); do
    case "$cg" in *[!A-Za-z0-9_./-]*|*/../*|*/..) continue ;; esac
    rest=${cg##*/}; rest=${rest#*--}; t=${rest#"$grp".}; t=${t%%.*}
    if [ "$all" != 1 ]; then
      case "$want" in *" $t "*) ;; *) continue ;; esac
    fi
    case "$todo " in *":$cg "*) continue ;; esac
    todo="$todo -::$cg"
  done
fi
for pm in $todo; do
  p=${pm%%:*}; rest=${pm#*:}; m=${rest%%:*}; cg=${rest#*:}
  sh -c "$tree" exec-world-kill-tree "$p" "$m" 0 0 "$cg" || rc=1
done
exit $rc
"#;

/// The argv (`sh -c SCRIPT …`) of [`SIGNAL_EXECS_SH`].
pub fn signal_execs_args(mode: &str, sandbox_id: &str, tags: Option<&[String]>) -> Vec<String> {
    let mut v = vec![
        "-c".to_owned(),
        SIGNAL_EXECS_SH.to_owned(),
        "sandbox-signal-execs".to_owned(),
        mode.to_owned(),
        exec_world_sys::tree_script::KILL_TREE_SH.to_owned(),
        sandbox_id.to_owned(),
        sandbox_group(sandbox_id),
        if tags.is_none() { "1" } else { "0" }.to_owned(),
    ];
    if let Some(t) = tags {
        v.extend(t.iter().cloned());
    }
    v
}
