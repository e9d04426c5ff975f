//! envd's `end` event → `ExitStatus`: a normal exit keeps its code; a death by signal is
//! read from Go's `ProcessState.String()` (`signal: killed`, `signal: terminated`, …).

use e2b_core::proto::process::EndEvent;
use e2b_core::proto::signal;
use exec_world::ExitStatus;

/// The exit status an `end` event reports.
pub(crate) fn exit_status(end: &EndEvent) -> ExitStatus {
    if end.exited {
        return ExitStatus {
            code: Some(end.exit_code),
            signal: None,
        };
    }
    // Go's signal names, read back with the workspace's one table (e2b-proto).
    if let Some(sig) = signal::from_status(&end.status).filter(|n| (1..=64).contains(n)) {
        return ExitStatus {
            code: None,
            signal: Some(sig),
        };
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
                    let name = signal::go_name(*sig);
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
