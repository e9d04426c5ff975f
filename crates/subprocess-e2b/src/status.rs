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
            .or_else(|| name.strip_prefix("signal ").and_then(|n| n.parse().ok()))
            .filter(|n| (1..=64).contains(n));
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

    mod props {
        //! Property tests (bounded: 256 cases each, so CI stays fast).
        use super::super::*;
        use proptest::prelude::*;

        /// How Go's `ProcessState.String()` prints an ending (what envd puts in `status`).
        #[derive(Clone, Debug)]
        enum Ending {
            Exit(i32),
            Signal { sig: i32, core: bool },
        }

        fn go_status(e: &Ending) -> EndEvent {
            match e {
                Ending::Exit(code) => EndEvent {
                    exit_code: *code,
                    exited: true,
                    status: format!("exit status {code}"),
                    error: None,
                },
                Ending::Signal { sig, core } => {
                    let name = SIGNALS
                        .iter()
                        .find(|(_, n)| n == sig)
                        .map(|(name, _)| (*name).to_owned())
                        .unwrap_or_else(|| format!("signal {sig}"));
                    EndEvent {
                        exit_code: -1,
                        exited: false,
                        status: format!(
                            "signal: {name}{}",
                            if *core { " (core dumped)" } else { "" }
                        ),
                        error: None,
                    }
                }
            }
        }

        fn ending() -> impl Strategy<Value = Ending> {
            prop_oneof![
                (0..=255i32).prop_map(Ending::Exit),
                (1..=64i32, any::<bool>()).prop_map(|(sig, core)| Ending::Signal { sig, core }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Every ending envd can report parses back to exactly that ending.
            #[test]
            fn go_statuses_round_trip(e in ending()) {
                let st = exit_status(&go_status(&e));
                match e {
                    Ending::Exit(code) => prop_assert_eq!((st.code, st.signal), (Some(code), None)),
                    Ending::Signal { sig, .. } => {
                        prop_assert_eq!((st.code, st.signal), (None, Some(sig)))
                    }
                }
            }

            /// Any end event (hostile or garbled text included) gives exactly one of a
            /// code or a signal, never a panic; an observed exit always keeps its code.
            #[test]
            fn any_end_event_is_one_status(
                code in any::<i32>(),
                exited in any::<bool>(),
                status in prop_oneof![
                    proptest::collection::vec(any::<char>(), 0..40)
                        .prop_map(|v| v.into_iter().collect::<String>()),
                    any::<i64>().prop_map(|n| format!("signal: signal {n}")),
                ],
            ) {
                let st = exit_status(&EndEvent { exit_code: code, exited, status, error: None });
                prop_assert!(st.code.is_some() != st.signal.is_some(), "{st:?}");
                prop_assert!(st.signal.is_none_or(|n| (1..=64).contains(&n)), "{st:?}");
                if exited {
                    prop_assert_eq!(st.code, Some(code));
                }
            }
        }
    }
}
