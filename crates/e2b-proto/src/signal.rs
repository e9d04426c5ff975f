//! Linux signals as envd names them: Go's `syscall.Signal.String()`, which envd puts in a
//! process's end status (`signal: killed`, `signal: segmentation fault (core dumped)`).
//! One table for the whole workspace: the emulator writes these names, the adapters and the
//! command line read them back.

/// Go's name of each Linux signal 1..=31, by number.
pub const GO_SIGNAL_NAMES: [(i32, &str); 31] = [
    (1, "hangup"),
    (2, "interrupt"),
    (3, "quit"),
    (4, "illegal instruction"),
    (5, "trace/breakpoint trap"),
    (6, "aborted"),
    (7, "bus error"),
    (8, "floating point exception"),
    (9, "killed"),
    (10, "user defined signal 1"),
    (11, "segmentation fault"),
    (12, "user defined signal 2"),
    (13, "broken pipe"),
    (14, "alarm clock"),
    (15, "terminated"),
    (16, "stack fault"),
    (17, "child exited"),
    (18, "continued"),
    (19, "stopped (signal)"),
    (20, "stopped"),
    (21, "stopped (tty input)"),
    (22, "stopped (tty output)"),
    (23, "urgent I/O condition"),
    (24, "CPU time limit exceeded"),
    (25, "file size limit exceeded"),
    (26, "virtual timer expired"),
    (27, "profiling timer expired"),
    (28, "window changed"),
    (29, "I/O possible"),
    (30, "power failure"),
    (31, "bad system call"),
];

/// Go's name of signal `sig`; a number outside the table reads `signal N`, as Go prints it.
///
/// ```
/// assert_eq!(e2b_proto::signal::go_name(9), "killed");
/// assert_eq!(e2b_proto::signal::go_name(40), "signal 40");
/// ```
pub fn go_name(sig: i32) -> String {
    GO_SIGNAL_NAMES
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, name)| (*name).to_owned())
}

/// The number of a signal Go named `name` (`killed` → 9, `signal 40` → 40).
pub fn number(name: &str) -> Option<i32> {
    GO_SIGNAL_NAMES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(num, _)| *num)
        .or_else(|| name.strip_prefix("signal ")?.parse().ok())
}

/// The signal named in a process end status (`signal: killed`, `signal: aborted (core
/// dumped)`); `None` for an exit status or text that names no signal.
///
/// ```
/// use e2b_proto::signal::from_status;
/// assert_eq!(from_status("signal: terminated"), Some(15));
/// assert_eq!(from_status("signal: segmentation fault (core dumped)"), Some(11));
/// assert_eq!(from_status("exit status 1"), None);
/// ```
pub fn from_status(status: &str) -> Option<i32> {
    let name = status.trim().strip_prefix("signal: ")?;
    number(name.strip_suffix(" (core dumped)").unwrap_or(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_number() {
        for sig in 1..=64 {
            assert_eq!(number(&go_name(sig)), Some(sig), "signal {sig}");
            assert_eq!(from_status(&format!("signal: {}", go_name(sig))), Some(sig));
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = GO_SIGNAL_NAMES.iter().map(|(_, n)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), GO_SIGNAL_NAMES.len());
    }

    #[test]
    fn non_signal_statuses() {
        assert_eq!(from_status("exit status 0"), None);
        assert_eq!(from_status("signal: nonsense"), None);
        assert_eq!(from_status(""), None);
    }
}
