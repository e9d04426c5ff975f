//! Remote processes shared by `run` and `shell`: the `setsid` wrapper that gives a command
//! its own process group, the group kill through the control shell (envd's SIGKILL of the
//! direct child as last resort), and the mapping of envd's end event to an exit code.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::EnvdApi;
use e2b_core::control_shell::ControlShell;
use e2b_core::proto::process::{EndEvent, ProcessSelector, Signal};

/// `sh -c WRAPPER sh CMD ARGS…`: the argv arrives as positional parameters (never
/// re-quoted) and runs in a new session and process group via `setsid` when the sandbox has
/// it (without a fork when envd's child is not a group leader, so pid = pgid). `-w` makes a
/// forking setsid wait and pass the exit status on.
pub const SETSID_WRAPPER: &str =
    r#"if command -v setsid >/dev/null 2>&1; then exec setsid -w -- "$@"; fi; exec "$@""#;

/// Kills the groups of `$1` and of its direct children (the group a forking `setsid` made,
/// job-control jobs of a shell): SIGTERM, up to 2 s of grace, then SIGKILL. Children are
/// listed before anything is killed (they are reparented afterwards). No `--` before the
/// negative pid: dash's `kill` rejects it, and `kill -SIG -PGID` is portable.
const KILL_GROUPS: &str = r#"p=$1
groups="$p $(cat /proc/"$p"/task/*/children 2>/dev/null)"
for g in $groups; do kill -TERM "-$g" 2>/dev/null; done
i=0
while [ "$i" -lt 20 ]; do
  alive=
  for g in $groups; do kill -0 "-$g" 2>/dev/null && alive=1; done
  [ -z "$alive" ] && exit 0
  sleep 0.1
  i=$((i+1))
done
for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
exit 0"#;

/// Kill the process group of `pid` (and its children's groups) in the sandbox; if the
/// control shell cannot run, SIGKILL the process itself through envd.
pub async fn kill_group(api: Arc<dyn EnvdApi>, pid: u32) {
    let shell = ControlShell::new(api.clone()).timeout(Some(Duration::from_secs(30)));
    let ok = matches!(
        shell.run(KILL_GROUPS, &[&pid.to_string()]).await,
        Ok(out) if out.exit_code == 0
    );
    if !ok {
        let _ = api
            .send_signal(ProcessSelector::Pid(pid), Signal::Sigkill)
            .await;
    }
}

/// The exit code of a finished process: its code, or 128+N when signal N killed it.
pub fn exit_code(end: &EndEvent) -> i32 {
    if end.exit_code >= 0 {
        return end.exit_code.min(255);
    }
    // envd reports -1 for a signal death; an unnamed one counts as SIGKILL.
    128 + signal_number(&end.status).unwrap_or(9)
}

/// The signal named in Go's `ProcessState.String()` (`signal: killed`).
pub fn signal_number(status: &str) -> Option<i32> {
    let name = status.strip_prefix("signal: ")?;
    let name = name.strip_suffix(" (core dumped)").unwrap_or(name);
    let n = match name {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "illegal instruction" => 4,
        "trace/breakpoint trap" => 5,
        "aborted" => 6,
        "bus error" => 7,
        "floating point exception" => 8,
        "killed" => 9,
        "user defined signal 1" => 10,
        "segmentation fault" => 11,
        "user defined signal 2" => 12,
        "broken pipe" => 13,
        "alarm clock" => 14,
        "terminated" => 15,
        "stack fault" => 16,
        "CPU time limit exceeded" => 24,
        "file size limit exceeded" => 25,
        "virtual timer expired" => 26,
        "profiling timer expired" => 27,
        "bad system call" => 31,
        other => other.strip_prefix("signal ")?.parse().ok()?,
    };
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(code: i32, exited: bool, status: &str) -> EndEvent {
        EndEvent {
            exit_code: code,
            exited,
            status: status.into(),
            error: None,
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&end(0, true, "exit status 0")), 0);
        assert_eq!(exit_code(&end(7, true, "exit status 7")), 7);
        assert_eq!(exit_code(&end(-1, false, "signal: killed")), 137);
        assert_eq!(exit_code(&end(-1, false, "signal: terminated")), 143);
        assert_eq!(
            exit_code(&end(-1, false, "signal: segmentation fault (core dumped)")),
            139
        );
        assert_eq!(exit_code(&end(-1, false, "signal: signal 40")), 168);
        assert_eq!(exit_code(&end(-1, false, "weird")), 137);
    }
}
