//! The descendant-tracking kill as a POSIX `sh` script, for backends that can only run
//! commands in the world (e.g. E2B through envd): the same algorithm as the local adapter
//! (`local/tree.rs`), run *inside* the sandbox.
//!
//! A backend gives each spawn a marker (`EXEC_WORLD_SPAWN=<new_marker()>`) and starts it in
//! its own session (e.g. wrap the argv in `setsid -w`), then terminates it by running
//! [`kill_tree_argv`] as a separate process and waiting for it: exit 0 means no member
//! survives, exit 1 lists survivors on stderr.
//!
//! ```
//! let argv = exec_world_sys::tree_script::kill_tree_argv(1234, "m-1", std::time::Duration::from_secs(2), false);
//! assert_eq!(argv[0], "sh");
//! ```

use std::time::Duration;

/// The name of the marker variable given to every local spawn.
pub const MARKER_VAR: &str = "EXEC_WORLD_SPAWN";

/// The script. Arguments: leader pid, marker value, grace in milliseconds, hang-up (0/1),
/// and optionally the spawn's cgroup v2 directory (empty: none).
///
/// Members (never the script itself nor the process that ran it): the processes of the
/// cgroup, live (non-zombie) processes in the leader's
/// process group or session, their descendants by parent chain, and processes whose
/// environment has `EXEC_WORLD_SPAWN=<marker>`. Each KILL round also writes the cgroup's
/// `cgroup.kill` (every member at once, forks included). Sends SIGSTOP to all of them first (so none can react to
/// another's death before its own signal: the member list is in `/proc` order, not by
/// age), then SIGHUP (if asked), SIGTERM and SIGCONT; rescans every 50 ms up to the
/// grace, then SIGKILL rounds until a scan finds nobody.
pub const KILL_TREE_SH: &str = r#"leader=$1; marker=$2; grace_ms=$3; hup=$4; cg=${5-}; self=$$; caller=$PPID
[ -n "$cg" ] && [ ! -f "$cg/cgroup.procs" ] && cg=
members() {
  found=" "; others=""
  if [ -n "$cg" ]; then
    while read -r p; do
      case "$p" in "$self"|"$caller") ;; *) found="$found$p " ;; esac
    done < "$cg/cgroup.procs"
  fi
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$p" in "$self"|"$caller") continue ;; esac
    case "$found" in *" $p "*) continue ;; esac
    read -r st 2>/dev/null < "$d/stat" || continue
    rest=${st##*) }
    set -- $rest
    case $1 in Z|X) continue ;; esac
    if [ "$3" = "$leader" ] || [ "$4" = "$leader" ]; then found="$found$p "; continue; fi
    if [ -n "$marker" ] && { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -qx "EXEC_WORLD_SPAWN=$marker"; then
      found="$found$p "; continue
    fi
    others="$others $p:$2"
  done
  changed=1
  while [ $changed = 1 ]; do
    changed=0; left=""
    for pp in $others; do
      p=${pp%%:*}; pa=${pp#*:}
      case "$found" in *" $pa "*) found="$found$p "; changed=1 ;; *) left="$left $pp" ;; esac
    done
    others=$left
  done
  echo $found
}
m=$(members)
[ -z "$m" ] && exit 0
# Freeze every member first: the list is in /proc order (lexicographic: pid 11 before 8),
# and a shell that saw its child die before its own TERM arrived would exit normally.
kill -STOP $m 2>/dev/null
[ "$hup" = 1 ] && kill -HUP $m 2>/dev/null
kill -TERM $m 2>/dev/null
kill -CONT $m 2>/dev/null
waited=0
while [ "$waited" -lt "$grace_ms" ]; do
  m=$(members); [ -z "$m" ] && exit 0
  sleep 0.05; waited=$((waited + 50))
done
i=0
while [ $i -lt 300 ]; do
  m=$(members); [ -z "$m" ] && exit 0
  [ -n "$cg" ] && { echo 1 > "$cg/cgroup.kill"; } 2>/dev/null
  kill -KILL $m 2>/dev/null
  sleep 0.02; i=$((i + 1))
done
echo "survivors: $m" >&2
exit 1
"#;

/// The argv that runs [`KILL_TREE_SH`] for one spawn.
pub fn kill_tree_argv(leader: u32, marker: &str, grace: Duration, hangup: bool) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        KILL_TREE_SH.into(),
        "exec-world-kill-tree".into(),
        leader.to_string(),
        marker.into(),
        grace.as_millis().to_string(),
        if hangup { "1" } else { "0" }.into(),
    ]
}

/// A marker value unique to one spawn (process id, counter and time of this process).
pub fn new_marker() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}
