//! envd's `end` event → `ExitStatus`: a normal exit keeps its code; a death by signal is
//! read from Go's `ProcessState.String()` (`signal: killed`, `signal: terminated`, …).

use e2b_core::proto::process::EndEvent;
use exec_world::ExitStatus;

/// Go's signal names (`syscall.Signal.String()` on Linux) and their numbers.
const SIGNALS: &[(&str, i32)] = &[
    ("hangup", 1),
    ("interrupt", 2),
    ("quit", 3),
    ("illegal instruction", 4),
    ("trace/breakpoint trap", 5),
    ("aborted", 6),
    ("bus error", 7),
    ("floating point exception", 8),
    ("killed", 9),
    ("user defined signal 1", 10),
    ("segmentation fault", 11),
    ("user defined signal 2", 12),
    ("broken pipe", 13),
    ("alarm clock", 14),
    ("terminated", 15),
    ("stack fault", 16),
    ("child exited", 17),
    ("continued", 18),
    ("stopped (signal)", 19),
    ("stopped", 20),
    ("stopped (tty input)", 21),
    ("stopped (tty output)", 22),
    ("urgent I/O condition", 23),
    ("CPU time limit exceeded", 24),
    ("file size limit exceeded", 25),
    ("virtual timer expired", 26),
    ("profiling timer expired", 27),
    ("window changed", 28),
    ("I/O possible", 29),
    ("power failure", 30),
    ("bad system call", 31),
];

/// The exit status an `end` event reports.
pub(crate) fn exit_status(end: &EndEvent) -> ExitStatus {
    if end.exited {
        return ExitStatus {
            code: Some(end.exit_code),
            signal: None,
        };
    }
    let text = end.status.trim();
    if let Some(name) = text.strip_prefix("signal: ") {
        let name = name.trim_end_matches(" (core dumped)");
        let num = SIGNALS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .or_else(|| name.strip_prefix("signal ").and_then(|n| n.parse().ok()));
        if let Some(sig) = num {
            return ExitStatus {
                code: None,
                signal: Some(sig),
            };
        }
    }
    if end.exit_code == -1 {
        // envd's kill path without a status text: SIGKILL is the only way there.
        return ExitStatus {
            code: None,
            signal: Some(9),
        };
    }
    ExitStatus {
        code: Some(end.exit_code),
        signal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        let e = |code, exited, status: &str| EndEvent {
            exit_code: code,
            exited,
            status: status.into(),
            error: None,
        };
        assert_eq!(exit_status(&e(3, true, "exit status 3")).code, Some(3));
        assert_eq!(exit_status(&e(-1, false, "signal: killed")).signal, Some(9));
        assert_eq!(
            exit_status(&e(-1, false, "signal: terminated")).signal,
            Some(15)
        );
        assert_eq!(
            exit_status(&e(-1, false, "signal: aborted (core dumped)")).signal,
            Some(6)
        );
        assert_eq!(exit_status(&e(-1, false, "")).signal, Some(9));
    }
}
