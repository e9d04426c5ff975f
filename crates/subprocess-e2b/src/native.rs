//! The native spawn helper this build embeds (`helper/spawn_helper.rs`, built by
//! `build.rs`), if any: its bytes, base64 for the setup command, and its file name.

/// Name of the native helper in the helper directory.
pub(crate) const NATIVE_FILE: &str = "spawn";

/// The helper program, when `build.rs` could build it (Linux x86_64 `core` and a linker).
#[cfg(native_spawn_helper)]
const BYTES: Option<&[u8]> = Some(include_bytes!(concat!(env!("OUT_DIR"), "/spawn-helper")));
#[cfg(not(native_spawn_helper))]
const BYTES: Option<&[u8]> = None;

/// The helper as base64 (what the setup command decodes into place), or `""` when this
/// build has none.
pub(crate) fn helper_base64() -> &'static str {
    use base64::Engine as _;
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        BYTES
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .unwrap_or_default()
    });
    TEXT.as_str()
}

/// True when this build embeds the native helper.
pub(crate) fn available() -> bool {
    BYTES.is_some()
}

#[cfg(all(test, native_spawn_helper, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    //! The built helper run on this host in `--user` mode (no root needed): its header,
    //! its failures, and its environment against exec-world's scrub decision.
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Output};

    use crate::wrapper::{Header, parse_header};

    /// The helper written to a fresh file, runnable.
    fn placed() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(super::NATIVE_FILE);
        std::fs::write(&path, super::BYTES.expect("built")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        (dir, path)
    }

    /// `helper --user MODE 0 /home/u /bin/sh u /usr/bin:/bin 1 N VARS… PROGRAM ARGS…`
    /// with exactly `inherited` as its own environment.
    fn run(mode: &str, vars: &[&str], program: &[&str], inherited: &[(&str, &str)]) -> Output {
        let (_dir, mut cmd) = helper_command(&[], mode, vars, program, inherited);
        output(&mut cmd)
    }

    /// `f` again while the just-written helper is busy (`ETXTBSY`: another test thread
    /// forked while the file was open for writing, and its child has not exec'd yet).
    fn unbusy<T>(mut f: impl FnMut() -> std::io::Result<T>) -> T {
        for _ in 0..200 {
            match f() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r.expect("helper runs"),
            }
        }
        f().expect("helper runs (still busy after 2 s)")
    }

    /// `cmd.output()`, past a busy helper file.
    fn output(cmd: &mut Command) -> Output {
        unbusy(|| cmd.output())
    }

    /// The command of [`run`], with `leading` arguments before `--user`, and the
    /// directory holding the helper (keep it while the command runs).
    fn helper_command(
        leading: &[&str],
        mode: &str,
        vars: &[&str],
        program: &[&str],
        inherited: &[(&str, &str)],
    ) -> (tempfile::TempDir, Command) {
        let (dir, helper) = placed();
        let n = (vars.len() + 1).to_string();
        let mut cmd = Command::new(&helper);
        cmd.args(leading)
            .args([
                "--user",
                mode,
                "0",
                "/home/u",
                "/bin/sh",
                "u",
                "/usr/bin:/bin",
                "1",
            ])
            .arg(&n)
            .args(vars)
            .arg("EXEC_WORLD_SPAWN=m")
            .args(program)
            .env_clear()
            .envs(inherited.iter().copied());
        (dir, cmd)
    }

    /// The header and the rest of stdout.
    fn split(out: &Output) -> (Header, String) {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        (
            parse_header(first.as_bytes()).expect("a header line"),
            rest.to_owned(),
        )
    }

    #[test]
    fn header_then_the_program_in_its_own_session() {
        let out = run(
            "clean",
            &[],
            &["/bin/sh", "-c", "ps -o pid=,pgid=,sid= -p $$"],
            &[],
        );
        let (Header::Pgid(pid, cgroup), rest) = split(&out) else {
            panic!("{out:?}")
        };
        assert_eq!(cgroup, "");
        let ids: Vec<u32> = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(
            ids,
            [pid, pid, pid],
            "pid, group and session are the program's"
        );
    }

    /// `--kill-after`: the helper stays as the watching parent, the program leads a
    /// session of its own, and once the seconds pass its process group (no cgroup in
    /// `--user` mode) is killed and the helper ends killed; a program that ends first
    /// is mirrored (an exit code, a signal), not waited out.
    #[test]
    fn kill_after_kills_the_group_and_mirrors_an_earlier_end() {
        use std::os::unix::process::ExitStatusExt;
        let script = "sleep 1000 & echo $!; ps -o pid=,pgid=,sid= -p $$; wait";
        let (_dir, mut cmd) = helper_command(
            &["--kill-after", "1"],
            "clean",
            &["PATH=/usr/bin:/bin"],
            &["/bin/sh", "-c", script],
            &[],
        );
        cmd.stdout(std::process::Stdio::piped());
        let child = unbusy(|| cmd.spawn());
        let helper = child.id();
        let out = child.wait_with_output().expect("helper ends");
        assert_eq!(out.status.signal(), Some(9), "{out:?}");
        let (Header::Pgid(pid, _), rest) = split(&out) else {
            panic!("{out:?}")
        };
        assert_ne!(pid, helper, "the program runs in the helper's child");
        let nums: Vec<u32> = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(nums.get(1..), Some(&[pid, pid, pid][..]), "{rest}");
        let sleeper = nums[0];
        // Killed with its group; reparented, it may linger as a zombie for a moment.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{sleeper}/stat")).is_ok_and(|st| {
                !st.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        for _ in 0..200 {
            if !alive() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!alive(), "the group's background sleep was killed");

        let ended = |leading: &[&str], script: &str| {
            let (_dir, mut cmd) =
                helper_command(leading, "clean", &[], &["/bin/sh", "-c", script], &[]);
            output(&mut cmd)
        };
        let later = ["--kill-after", "600"];
        assert_eq!(ended(&later, "exit 7").status.code(), Some(7));
        assert_eq!(ended(&later, "kill -TERM $$").status.signal(), Some(15));
        let bad = ended(&["--kill-after", "soon"], "true");
        assert_eq!(bad.status.code(), Some(125));
        assert_eq!(bad.stdout, b"EXEC-WORLD-FAIL usage\n");
    }

    /// Live (non-zombie) process `pid`.
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
            !st.rsplit(')')
                .next()
                .is_some_and(|r| matches!(r.trim_start().chars().next(), Some('Z' | 'X')))
        })
    }

    /// Polls until `pid` is gone, at most `secs`; true when it is.
    fn gone_within(pid: u32, secs: u64) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while alive(pid) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        !alive(pid)
    }

    /// Rewrites `file` every 100 ms until `stop` is set (a host renewing its lease).
    fn renewing(
        file: std::path::PathBuf,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let _ = std::fs::write(&file, n.to_string());
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        })
    }

    /// `--lease FILE SECS`: without renewals the watcher kills the program's group once
    /// the lease expired (not before: the start counts as a renewal); with renewals the
    /// program runs past the bound and ends as it does; a program that ends first
    /// while its background job runs is mirrored at once, and the job is ended at the
    /// lease's expiry unless a renewal comes after the end. Malformed: a usage failure.
    #[test]
    fn lease_ends_the_tree_once_the_host_stops_renewing() {
        use std::os::unix::process::ExitStatusExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("tempdir");
        let lease = dir.path().join("lease");
        let lease_arg = lease.to_str().expect("utf-8 path").to_owned();
        let leased = |secs: &str, script: &str| {
            helper_command(
                &["--lease", &lease_arg, secs],
                "clean",
                &[],
                &["/bin/sh", "-c", script],
                &[],
            )
        };
        let first_pid = |out: &Output| -> u32 {
            split(out)
                .1
                .split_whitespace()
                .next()
                .and_then(|w| w.parse().ok())
                .expect("a pid line")
        };

        // Never renewed: the group is killed after 3/4 of the 2 s bound.
        let (_d, mut cmd) = leased("2", "sleep 1000 & echo $!; exec sleep 1001");
        let t = std::time::Instant::now();
        let out = output(&mut cmd);
        assert!(
            t.elapsed() >= std::time::Duration::from_millis(1400),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(out.status.signal(), Some(9), "{out:?}");
        assert!(
            gone_within(first_pid(&out), 10),
            "the background job was killed too"
        );

        // Renewed all along: runs past the bound and ends as it does.
        let stop = Arc::new(AtomicBool::new(false));
        let host = renewing(lease.clone(), stop.clone());
        let (_d, mut cmd) = leased("2", "sleep 3; exit 5");
        let out = output(&mut cmd);
        stop.store(true, Ordering::SeqCst);
        host.join().expect("renewer");
        assert_eq!(out.status.code(), Some(5), "{out:?}");

        // Ends first, its job running, no renewal after the end: mirrored at once, the
        // job ended by the reaper.
        let (_d, mut cmd) = leased("2", "sleep 1000 >/dev/null 2>&1 & echo $!; exit 3");
        let out = output(&mut cmd);
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        let job = first_pid(&out);
        assert!(alive(job), "the job outlives the program for now");
        assert!(
            gone_within(job, 30),
            "the reaper ended the job at the lease's expiry"
        );

        // The same with a renewal after the end (the host saw it): the job stays.
        let (_d, mut cmd) = leased("4", "sleep 1000 >/dev/null 2>&1 & echo $!; exit 0");
        let out = output(&mut cmd);
        let job = first_pid(&out);
        std::fs::write(&lease, "after the end").expect("renew");
        std::thread::sleep(std::time::Duration::from_secs(5));
        let stayed = alive(job);
        // SAFETY: kill(2) on the job this test's command started.
        unsafe { libc::kill(job as libc::pid_t, libc::SIGKILL) };
        assert!(
            stayed,
            "a renewal after the end lets what the program left run"
        );

        let (_d, mut cmd) = leased("0", "true");
        let out = output(&mut cmd);
        assert_eq!(out.status.code(), Some(125));
        assert_eq!(out.stdout, b"EXEC-WORLD-FAIL usage\n");
    }

    #[test]
    fn missing_and_unrunnable_programs_fail_with_their_codes() {
        let out = run("base", &[], &["no-such-program-here"], &[]);
        assert_eq!(split(&out).0, Header::NotFound);
        assert_eq!(out.status.code(), Some(127));
        let plain = tempfile::NamedTempFile::new().expect("a 0600 file");
        let plain = plain.path().to_str().expect("utf-8 path");
        let out = run("base", &[], &[plain], &[]);
        assert_eq!(split(&out).0, Header::NotExecutable);
        assert_eq!(out.status.code(), Some(126));
    }

    #[test]
    fn environments_match_exec_world_rules() {
        let inherited = [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/root"),
            ("KEEP_ME", "1"),
            ("E2B_API_KEY", "e2b_x"),
            ("github_pat", "ghp"),
            ("MY_Token_2", "t"),
            ("DATABASE_URL", "postgres://app:pw@db/app"),
            ("PLAIN_URL", "postgres://db/app"),
            ("EXEC_WORLD_X", "internal"),
            ("LANG", "de_DE.UTF-8"),
        ];
        let env_of = |mode: &str, vars: &[&str]| -> Vec<String> {
            let out = run(mode, vars, &["/usr/bin/env"], &inherited);
            let mut lines: Vec<String> = split(&out).1.lines().map(str::to_owned).collect();
            lines.sort();
            lines
        };
        let expected_inherited: Vec<String> = {
            let mut v: Vec<String> = inherited
                .iter()
                .filter(|(k, v)| !exec_world_sys::env_scrub::is_scrubbed(k, v) && *k != "HOME")
                .map(|(k, v)| format!("{k}={v}"))
                .chain(
                    [
                        "HOME=/home/u",
                        "USER=u",
                        "LOGNAME=u",
                        "EXEC_WORLD_SPAWN=m",
                        "SECRET=mine",
                    ]
                    .map(str::to_owned),
                )
                .collect();
            v.sort();
            v
        };
        assert_eq!(env_of("inherit", &["SECRET=mine"]), expected_inherited);
        assert_eq!(env_of("clean", &["A=1"]), ["A=1", "EXEC_WORLD_SPAWN=m"]);
        assert_eq!(
            env_of("base", &["PATH=/opt:/bin"]),
            [
                "EXEC_WORLD_SPAWN=m",
                "HOME=/home/u",
                "LANG=de_DE.UTF-8",
                "LOGNAME=u",
                "PATH=/opt:/bin",
                "SHELL=/bin/sh",
                "USER=u",
            ]
        );
    }
}
