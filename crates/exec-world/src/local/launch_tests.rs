//! Tests of `launch.rs` through `LocalSubprocess`: what the clone3 child does before
//! `exec` (session, cgroup, stdio, the execvp rules) and the cgroup that the kernel
//! poisons with `cgroup.kill`. Real processes only.

use std::os::unix::fs::PermissionsExt;

use futures::StreamExt;

use super::proc::LocalSubprocess;
use crate::error::ErrorKind;
use crate::path::WorldPath;
use crate::proc::{SpawnSpec, Subprocess};

/// Runs `spec`; its exit code and stdout.
async fn run(p: &LocalSubprocess, spec: SpawnSpec) -> (Option<i32>, String) {
    let mut child = p.spawn(spec).expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut bytes = Vec::new();
    while let Some(b) = out.next().await {
        bytes.extend_from_slice(&b.expect("read"));
    }
    let status = child.wait().await.expect("wait");
    (status.code, String::from_utf8_lossy(&bytes).into_owned())
}

/// The error of a spawn that must fail.
fn spawn_error(p: &LocalSubprocess, spec: SpawnSpec) -> crate::error::Error {
    match p.spawn(spec) {
        Ok(_) => panic!("spawn succeeded"),
        Err(e) => e,
    }
}

fn scratch() -> (tempfile::TempDir, LocalSubprocess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = WorldPath::new(dir.path().to_str().expect("utf-8")).expect("path");
    (dir, LocalSubprocess::at(at))
}

/// The program runs in a session of its own (sid = pgid = pid), in the cwd, with stdin
/// at EOF, and (where this process can make cgroups) inside its own spawn cgroup.
#[tokio::test]
async fn the_child_leads_its_session_in_its_cgroup_and_cwd() {
    let (dir, p) = scratch();
    let script = "cat /proc/self/stat /proc/$$/cgroup; \
                  echo \"pid $$\"; pwd; cat; echo eof";
    let (code, out) = run(&p, SpawnSpec::new("sh").arg("-c").arg(script)).await;
    assert_eq!(code, Some(0), "{out}");
    let mut lines = out.lines();
    // The `cat` of /proc/self/stat is the shell's child: its pgrp and session fields
    // (5th and 6th after the command) are the shell's pid.
    let stat = lines.next().expect("stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect(")") + 2..].split(' ').collect();
    let pid_line = out.lines().find(|l| l.starts_with("pid ")).expect("pid");
    let pid = pid_line.trim_start_matches("pid ");
    assert_eq!((fields[2], fields[3]), (pid, pid), "{out}");
    let cgroup = out
        .lines()
        .find(|l| l.starts_with("0::"))
        .expect("cgroup line");
    if exec_world_sys::cgroup::available() {
        assert!(
            cgroup.contains(&format!("/exec-world-{}/", std::process::id())),
            "{cgroup}"
        );
    }
    let dir_name = dir.path().to_str().expect("utf-8");
    assert!(out.lines().any(|l| l == dir_name), "{out}");
    assert!(out.ends_with("eof\n"), "{out}");
}

/// glibc execvp's rules: a file without `#!` runs under /bin/sh; a file that cannot be
/// executed is PermissionDenied; a name on no PATH entry is NotFound.
#[tokio::test]
async fn exec_errors_and_scripts_without_shebang() {
    let (dir, p) = scratch();
    let script = dir.path().join("plain");
    std::fs::write(&script, "echo plain \"$1\"\n").expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (code, out) = run(&p, SpawnSpec::new("./plain").arg("x")).await;
    assert_eq!((code, out.as_str()), (Some(0), "plain x\n"));

    let data = dir.path().join("data");
    std::fs::write(&data, "not a program").expect("write");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = spawn_error(&p, SpawnSpec::new("./data"));
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");

    let e = spawn_error(&p, SpawnSpec::new("no-such-program-exec-world-launch"));
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = spawn_error(&p, SpawnSpec::new("./missing"));
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

/// A spawn whose tree was ended with `cgroup.kill` does not spoil later spawns (the
/// kernel kills any child later born into a killed cgroup, so it must not be reused).
#[tokio::test]
async fn spawns_after_a_cgroup_kill_still_run() {
    let (_dir, p) = scratch();
    for _ in 0..4 {
        let child = p
            .spawn(SpawnSpec::new("sh").arg("-c").arg("sleep 1000 & wait"))
            .expect("spawn");
        child.started().await.expect("started");
        // Drop ends the tree (cgroup.kill where it has a cgroup).
        drop(child);
        for _ in 0..4 {
            let (code, out) = run(&p, SpawnSpec::new("echo").arg("alive")).await;
            assert_eq!((code, out.as_str()), (Some(0), "alive\n"));
        }
    }
}

/// A spare cgroup killed behind our back (as a program may `cgroup.kill` its own cgroup)
/// still gives a working spawn: a child the kernel kills at birth is respawned another
/// way, in a new cgroup.
#[tokio::test]
async fn a_spare_killed_behind_our_back_still_gives_a_working_spawn() {
    let (_dir, p) = scratch();
    for i in 0..3 {
        if let Some(cg) = exec_world_sys::cgroup::SpawnCgroup::create_new(&format!(
            "{}-poisoned-{i}",
            exec_world_sys::tree_script::new_marker()
        )) {
            exec_world_sys::cgroup::kill(&cg.dir);
            // Empty, so it becomes a spare: the next spawn takes it.
            exec_world_sys::cgroup::remove(&cg.dir);
        }
        let (code, out) = run(&p, SpawnSpec::new("echo").arg("alive")).await;
        assert_eq!((code, out.as_str()), (Some(0), "alive\n"));
    }
}
