//! sandbox-e2b security rules on the emulator's conversation template: writes cannot be
//! redirected by links or swapped directories the sandbox user controls, `/skills` is
//! root's, reads and stats resolve as the sandbox user, staging never stays behind, no
//! process survives a timeout in the emulator's process table, and the API key never
//! reaches the sandbox.

use crate::sandbox_support;

use std::time::Duration;

use exec_world::sandbox::{ExecSpec, SandboxError, SandboxProvider as _};

/// The contract's "denied": kind `PermissionDenied` of operation `op`.
fn denied(e: &SandboxError, op: &str) -> bool {
    e.kind() == exec_world::ErrorKind::PermissionDenied && e.op() == Some(op)
}
use sandbox_e2b::UPLOAD_DIR;
use sandbox_support::{host_processes_of, one, root_sh, root_sh_args};

async fn sh(o: &sandbox_support::One, cmd: &str) -> exec_world::sandbox::ExecOutput {
    o.p.exec(&o.h, ExecSpec::new(cmd)).await.expect("exec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_through_links_and_swapped_parents_are_refused() {
    let o = one("links").await;
    let id = o.h.id.clone();
    // a root-owned file the user may read but not write
    o.p.write_file(&o.h, "/skills/root-file", b"orig")
        .await
        .expect("root write under /skills");
    let unique = format!("sandbox-e2b-probe-{}", std::process::id());
    let r = sh(
        &o,
        "ln -s /skills/root-file /workspace/lnk && ln -s /skills /workspace/dir && ln -s /etc /workspace/etc && echo ok",
    )
    .await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    // the link target
    let e =
        o.p.write_file(&o.h, "/workspace/lnk", b"evil")
            .await
            .expect_err("write through a link to a root file");
    assert!(denied(&e, "write_file"), "{e}");
    assert!(e.to_string().contains("/workspace/lnk"), "{e}");
    // a swapped parent directory
    let e =
        o.p.write_file(&o.h, "/workspace/dir/planted", b"evil")
            .await
            .expect_err("write through a linked parent");
    assert!(denied(&e, "write_file"), "{e}");
    let e =
        o.p.write_file(&o.h, &format!("/workspace/etc/{unique}"), b"evil")
            .await
            .expect_err("write into /etc through a link");
    assert!(e.to_string().contains("/workspace/etc/"), "{e}");
    // nothing written outside
    assert_eq!(
        root_sh(&o.env, &id, "cat /skills/root-file; echo; ls /skills").await,
        "orig\nroot-file"
    );
    assert_eq!(
        root_sh(&o.env, &id, &format!("ls /etc/{unique} 2>/dev/null; true")).await,
        ""
    );
    assert!(!std::path::Path::new(&format!("/etc/{unique}")).exists());
    // a write past what travels inline goes through the root staging area: the user
    // cannot see or swap it, and nothing stays behind
    let big = vec![b'b'; (1 << 20) + 1];
    o.p.write_file(&o.h, "/workspace/big", &big)
        .await
        .expect("a write through the staging area");
    let r = sh(&o, &format!("ls {UPLOAD_DIR} || touch {UPLOAD_DIR}/x")).await;
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(
        root_sh(
            &o.env,
            &id,
            &format!(
                "ls -A {UPLOAD_DIR}; stat -c '%U %a' /opt/capybara; stat -c '%U %s' /workspace/big"
            )
        )
        .await,
        "root 700\nsandbox 1048577"
    );
    // a normal write still works and is the user's
    o.p.write_file(&o.h, "/workspace/new/dir/f.txt", b"mine")
        .await
        .expect("write");
    assert_eq!(
        root_sh(
            &o.env,
            &id,
            "stat -c '%U %a' /workspace/new/dir /workspace/new/dir/f.txt"
        )
        .await,
        "sandbox 755\nsandbox 644"
    );
    assert_eq!(
        root_sh(&o.env, &id, &format!("ls -A {UPLOAD_DIR}")).await,
        ""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skills_are_written_by_root_and_read_only_for_the_user() {
    let o = one("skills").await;
    let id = o.h.id.clone();
    o.p.write_file(&o.h, "/skills/tool/SKILL.md", b"# tool\n")
        .await
        .expect("write skill");
    assert_eq!(
        root_sh(
            &o.env,
            &id,
            "stat -c '%U %a' /skills /skills/tool /skills/tool/SKILL.md"
        )
        .await,
        "root 755\nroot 755\nroot 644"
    );
    let r = sh(
        &o,
        "cat /skills/tool/SKILL.md; echo x > /skills/tool/SKILL.md; ln -s /etc /skills/l",
    )
    .await;
    assert!(r.stdout.starts_with("# tool\n"), "{r:?}");
    assert_ne!(r.exit_code, Some(0));
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    let c =
        o.p.read_file(&o.h, "/skills/tool/SKILL.md", 100)
            .await
            .expect("read");
    assert_eq!(c.map(|c| c.data), Some(b"# tool\n".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_stats_resolve_as_the_sandbox_user() {
    let o = one("reads").await;
    let id = o.h.id.clone();
    root_sh(
        &o.env,
        &id,
        "printf secret > /workspace/root-only && chmod 600 /workspace/root-only && printf s > /opt/capybara/key",
    )
    .await;
    let e =
        o.p.read_file(&o.h, "/workspace/root-only", 100)
            .await
            .expect_err("a root-only file");
    assert!(denied(&e, "read_file"), "{e}");
    assert!(!e.to_string().contains("secret"));
    // inside a directory the user cannot search: invisible to the user
    assert_eq!(
        o.p.stat(&o.h, "/opt/capybara/key").await.expect("stat"),
        None
    );
    assert_eq!(
        o.p.read_file(&o.h, "/opt/capybara/key", 10)
            .await
            .expect("read"),
        None
    );
    // a link the user made to it changes nothing
    sh(&o, "ln -s /opt/capybara/key /workspace/k").await;
    assert_eq!(
        o.p.read_file(&o.h, "/workspace/k", 10).await.expect("read"),
        None
    );
    assert_eq!(sh(&o, "id -un; id -u").await.stdout, "sandbox\n1000\n");
    let st = o.p.stat(&o.h, "/workspace/root-only").await.expect("stat");
    assert_eq!(st.map(|s| (s.size, s.is_dir)), Some((6, false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeout_leaves_nothing_in_the_emulators_process_table() {
    let o = one("survivors").await;
    let cmd = "nohup sleep 300 >/dev/null 2>&1 & setsid sleep 300 >/dev/null 2>&1 & \
               (trap '' TERM HUP; exec sleep 300) >/dev/null 2>&1 & echo up; wait";
    let r =
        o.p.exec(&o.h, ExecSpec::new(cmd).timeout(Duration::from_secs(2)))
            .await
            .expect("exec");
    assert!(r.timed_out && r.exit_code.is_none(), "{r:?}");
    assert_eq!(r.stdout, "up\n");
    assert_eq!(host_processes_of(&o.h.id), Vec::<u32>::new());
    // and the sandbox still works
    assert_eq!(sh(&o, "echo fine").await.stdout, "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_api_key_never_reaches_the_sandbox() {
    let o = one("creds").await;
    let key = o.env.emu.api_key().to_owned();
    let r = sh(&o, "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").await;
    assert!(!r.stdout.contains(&key) && !r.stderr.contains(&key));
    let all = root_sh_args(
        &o.env,
        &o.h.id,
        "grep -rl -- \"$1\" /workspace /tmp /opt/capybara /skills 2>/dev/null; true",
        &[&key],
    )
    .await;
    assert_eq!(all, "");
    let token = o
        .env
        .client
        .get(&o.h.id)
        .await
        .expect("detail")
        .envd_access_token
        .expect("secure sandbox");
    let debug = format!("{:?}", o.p);
    assert!(debug.contains(&o.h.id), "the lease is in Debug");
    assert!(!debug.contains(&key) && !debug.contains(&token), "{debug}");
}

/// A holder the sandbox user stops or kills mid-read fails that read with `Interrupted`
/// (never NotFound for a file that exists, never a wait for the shell's whole timeout):
/// a user loop stops and kills every perl process of the user while reads of a large
/// file run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_stopped_or_killed_by_the_user_is_interrupted() {
    let o = one("interrupt").await;
    let r = sh(&o, "head -c 8000000 /dev/urandom > big && echo ok").await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    for sig in ["STOP", "KILL"] {
        let tag = format!("stopper-{sig}");
        let stopper = o.p.exec(
            &o.h,
            ExecSpec::new(format!(
                "for i in $(seq 1 20000); do pkill -{sig} -u sandbox -x perl; done"
            ))
            .tag(tag.clone())
            .timeout(Duration::from_secs(120)),
        );
        let reads = async {
            let mut interrupted = 0;
            for _ in 0..10 {
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    o.p.read_file(&o.h, "/workspace/big", 16 << 20),
                )
                .await
                .expect("a read must end long before the shell's timeout");
                match r {
                    Ok(Some(c)) => assert_eq!(c.data.len(), 8_000_000),
                    Err(e) if e.kind() == exec_world::ErrorKind::Interrupted => {
                        assert!(e.to_string().contains("/workspace/big"), "{e}");
                        interrupted += 1;
                    }
                    other => panic!("{sig}: expected the file or Interrupted, got {other:?}"),
                }
            }
            o.p.kill_tagged(&o.h, std::slice::from_ref(&tag))
                .await
                .expect("kill_tagged");
            interrupted
        };
        let (r, interrupted) = tokio::join!(stopper, reads);
        r.expect("stopper");
        assert!(interrupted > 0, "{sig}: no read was interrupted");
    }
}

/// `kill_reaches_escapes` is not a blind claim: a provider whose spawns find no cgroup
/// of their own (root took away `setpriv`, which a spawn needs to drop to the user in its
/// cgroup, as on a template without it) says from its first exec on that
/// kills cannot reach an env-cleared escapee, while one that saw contained spawns keeps
/// saying it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_reaches_escapes_follows_what_the_spawns_found() {
    let o = one("nocgroup").await;
    assert!(
        o.p.capabilities().kill_reaches_escapes,
        "assumed before any spawn"
    );
    let r = sh(&o, "true").await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert!(
        o.p.capabilities().kill_reaches_escapes,
        "the emulator's template gives each spawn a cgroup"
    );
    // A template without setpriv, simulated: root hides it and removes the spawn helper's
    // placement (found once per sandbox and host process). The old provider's next exec
    // finds its helper gone (an error, nothing runs), which makes providers created later
    // set up afresh.
    root_sh(
        &o.env,
        &o.h.id,
        "p=$(command -v setpriv) && mv -- \"$p\" \"$p.hidden\" && rm -rf /run/.exec-world-spawn-*",
    )
    .await;
    let gone = o.p.exec(&o.h, ExecSpec::new("true")).await;
    assert!(gone.is_err(), "{gone:?}");
    let fresh = sandbox_support::provider(&o.env.emu);
    assert!(fresh.capabilities().kill_reaches_escapes);
    let r = fresh
        .exec(&o.h, ExecSpec::new("echo $$"))
        .await
        .expect("exec without cgroups");
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert!(
        !fresh.capabilities().kill_reaches_escapes,
        "a provider whose spawn found no cgroup says so"
    );
    assert!(o.p.capabilities().kill_reaches_escapes);
}
