//! sandbox-e2b lifecycle on the emulator: 404-format mapping to `Gone`, 409 retries, a
//! connect without an access token, the egress mapping as the control plane received
//! it, same-name replacement of running and paused sandboxes, the lease (a sandbox
//! suspended by another instance, concurrent resumes, the timeout push and its 24 h
//! cap), the reboot fallback, the request budget (emulator counters), and the reuse of
//! spawn cgroups across commands.

use crate::sandbox_support;

use std::sync::Arc;
use std::time::Duration;

use e2b_core::{CreateOptions, ListQuery, PauseOptions};
use exec_world::sandbox::{
    CreateSpec, Egress, ExecSpec, ResumeOutcome, SandboxLimits, SandboxProvider as _,
};
use sandbox_e2b::{E2bSandboxes, NAME_METADATA_KEY};
use sandbox_support::{config, env, host_processes_of, one, provider};
use serde_json::json;
use testing_fake::{FaultAction, FaultRule, Plane};

fn connect_fault(action: FaultAction, times: u32) -> FaultRule {
    FaultRule::new(action)
        .surface(Plane::Control)
        .method("POST")
        .path_prefix("/v2/sandboxes/")
        .times(times)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gone_only_for_e2b_format_404() {
    let o = one("gone-map").await;
    let faults = o.env.emu.faults();
    // E2B-format 404 -> Gone
    faults.add(connect_fault(
        FaultAction::json(404, json!({"code": 404, "message": "sandbox not found"})),
        1,
    ));
    assert_eq!(o.p.resume(&o.h).await.expect("resume"), ResumeOutcome::Gone);
    // a bare 404 (a proxy, a wrong URL; v2 then the v1 fallback), 401, 500: errors
    let bare = FaultAction::Status {
        status: 404,
        body: "404 page not found".into(),
        content_type: "text/plain".into(),
    };
    let rule = FaultRule::new(bare)
        .surface(Plane::Control)
        .method("POST")
        .times(2);
    faults.add(rule);
    let e = provider(&o.env.emu)
        .resume(&o.h)
        .await
        .expect_err("bare 404");
    assert!(!e.is_gone(), "{e}");
    for status in [401, 500, 503] {
        // e2b-core retries a 503 on connect (idempotent) a capped number of times: a
        // lasting one still ends as an error, never Gone.
        let times = if status == 503 { 50 } else { 1 };
        faults.add(connect_fault(
            FaultAction::json(status, json!({"code": status, "message": "nope"})),
            times,
        ));
        let e = o.p.resume(&o.h).await.expect_err("error status");
        faults.clear();
        assert!(
            !e.is_gone() && e.to_string().contains(&status.to_string()),
            "{e}"
        );
    }
    // a 409 while another resume is in flight is retried
    faults.add(connect_fault(
        FaultAction::json(409, json!({"code": 409, "message": "sandbox is resuming"})),
        3,
    ));
    assert_eq!(
        o.p.resume(&o.h).await.expect("resume"),
        ResumeOutcome::Resumed
    );
    // suspend: 404 and 409 are done, 500 is not
    for (status, ok) in [(404, true), (409, true), (500, false)] {
        faults.add(
            FaultRule::new(FaultAction::json(
                status,
                json!({"code": status, "message": "x"}),
            ))
            .surface(Plane::Control)
            .path_prefix(&format!("/sandboxes/{}/pause", o.h.id))
            .times(1),
        );
        assert_eq!(
            o.p.suspend(&o.h).await.is_ok(),
            ok,
            "suspend answered {status}"
        );
    }
    // destroy: a real 404 is done, a bare one is an error
    faults.add(
        FaultRule::new(FaultAction::Status {
            status: 404,
            body: "not here".into(),
            content_type: "text/plain".into(),
        })
        .surface(Plane::Control)
        .method("DELETE")
        .times(1),
    );
    assert!(o.p.destroy(&o.h).await.is_err());
    o.p.destroy(&o.h).await.expect("destroy");
    o.p.destroy(&o.h).await.expect("destroy of a missing one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connect_without_access_token_is_gone() {
    let o = one("no-token").await;
    o.env.emu.faults().add(connect_fault(
        FaultAction::json(
            200,
            json!({"sandboxID": o.h.id, "templateID": "conversation", "clientID": "c", "envdVersion": "0.6.13"}),
        ),
        1,
    ));
    let before = o.env.emu.counters().snapshot().plane_total(Plane::Envd);
    let p = provider(&o.env.emu);
    let e = p
        .exec(&o.h, ExecSpec::new("true"))
        .await
        .expect_err("no token");
    assert!(e.is_gone(), "{e}");
    let after = o.env.emu.counters().snapshot().plane_total(Plane::Envd);
    assert_eq!(before, after, "no unauthenticated envd request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn egress_mapping_as_received_by_the_control_plane() {
    let env = env().await;
    let p = provider(&env.emu);
    let make = |egress| {
        CreateSpec::new("egress").limits(SandboxLimits {
            egress,
            ..SandboxLimits::default()
        })
    };
    // none
    let h = p.create(make(Egress::None)).await.expect("none");
    let d = env.client.get(&h.id).await.expect("detail");
    assert_eq!(d.allow_internet_access, Some(false));
    assert!(
        d.network
            .as_ref()
            .and_then(|n| n.allow_out.as_ref())
            .is_none()
    );
    // allowlist
    let hosts = vec!["pypi.org".to_owned(), "*.github.com".to_owned()];
    let h = p
        .create(make(Egress::Allowlist(hosts.clone())))
        .await
        .expect("allowlist");
    let d = env.client.get(&h.id).await.expect("detail");
    let net = d.network.expect("network recorded");
    assert_eq!(net.allow_out, Some(hosts.clone()));
    assert_eq!(net.deny_out, Some(vec!["0.0.0.0/0".to_owned()]));
    // an empty allowlist is none
    let h = p
        .create(make(Egress::Allowlist(vec![])))
        .await
        .expect("empty allowlist");
    let d = env.client.get(&h.id).await.expect("detail");
    assert_eq!(d.allow_internet_access, Some(false));
    // open is refused before any request unless allowed
    let before = env.emu.counters().snapshot().total;
    let e = p
        .create(make(Egress::Open))
        .await
        .expect_err("open refused");
    assert!(
        e.kind() == exec_world::ErrorKind::InvalidSpec && e.op() == Some("create"),
        "{e}"
    );
    assert!(e.to_string().contains("allow_open_egress"), "{e}");
    assert_eq!(env.emu.counters().snapshot().total, before);
    let mut cfg = config(&env.emu);
    cfg.allow_open_egress = true;
    let open = E2bSandboxes::new(cfg).expect("provider");
    let h = open.create(make(Egress::Open)).await.expect("open allowed");
    let d = env.client.get(&h.id).await.expect("detail");
    assert_eq!(d.allow_internet_access, Some(true));
    // without domain allowlists, allowlist degrades to none (never opens)
    let mut cfg = config(&env.emu);
    cfg.domain_allowlist = false;
    let degraded = E2bSandboxes::new(cfg).expect("provider");
    let h = degraded
        .create(make(Egress::Allowlist(hosts)))
        .await
        .expect("degraded");
    let d = env.client.get(&h.id).await.expect("detail");
    assert_eq!(d.allow_internet_access, Some(false));
    assert!(
        d.network
            .as_ref()
            .and_then(|n| n.allow_out.as_ref())
            .is_none()
    );
    // metadata, auto-pause and a token
    assert_eq!(
        d.listed
            .metadata
            .as_ref()
            .and_then(|m| m.get(NAME_METADATA_KEY))
            .map(String::as_str),
        Some("egress")
    );
    assert!(d.envd_access_token.is_some_and(|t| !t.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_replaces_running_and_paused_sandboxes_of_the_name() {
    let env = env().await;
    let p = provider(&env.emu);
    let mut old = Vec::new();
    for _ in 0..3 {
        let sb = env
            .client
            .create(&CreateOptions::new("conversation").metadata(NAME_METADATA_KEY, "dup"))
            .await
            .expect("create");
        old.push(sb.id().to_owned());
    }
    env.client
        .pause(&old[0], PauseOptions::default())
        .await
        .expect("pause");
    let other = p.create(CreateSpec::new("other")).await.expect("other");
    let h = p.create(CreateSpec::new("dup")).await.expect("replace");
    for id in &old {
        assert!(
            env.client
                .get(id)
                .await
                .is_err_and(|e| e.is_sandbox_not_found()),
            "{id} deleted"
        );
    }
    assert!(env.client.get(&h.id).await.is_ok());
    assert_eq!(
        p.resume(&other).await.expect("other kept"),
        ResumeOutcome::Resumed
    );
}

/// create looks the old name up beside its own create (one round trip for both): a
/// create the control plane refuses keeps the old sandbox, and a lookup that fails ends
/// the new sandbox (nothing of the name is left half-replaced) and is the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_create_keeps_the_old_sandbox_and_a_failed_lookup_keeps_no_new_one() {
    let env = env().await;
    let p = provider(&env.emu);
    let old = p.create(CreateSpec::new("keep")).await.expect("old");
    let busy = || FaultAction::json(503, json!({"code": 503, "message": "busy"}));
    let refuse = env.emu.faults().add(
        FaultRule::new(FaultAction::json(
            400,
            json!({"code": 400, "message": "template not found"}),
        ))
        .surface(Plane::Control)
        .method("POST")
        .path_prefix("/v2/sandboxes")
        .times(1),
    );
    let e = p
        .create(CreateSpec::new("keep"))
        .await
        .expect_err("refused create");
    env.emu.faults().remove(refuse);
    assert!(e.to_string().contains("create"), "{e}");
    assert!(env.client.get(&old.id).await.is_ok(), "the old one is kept");

    let ids = || async {
        let mut ids: Vec<String> = env
            .client
            .list_all(ListQuery::new())
            .await
            .expect("list")
            .into_iter()
            .map(|s| s.sandbox_id)
            .collect();
        ids.sort();
        ids
    };
    let before = ids().await;
    let lookup = env.emu.faults().add(
        FaultRule::new(busy())
            .surface(Plane::Control)
            .method("GET")
            .path_prefix("/v2/sandboxes"),
    );
    let e = p
        .create(CreateSpec::new("keep"))
        .await
        .expect_err("failed lookup");
    env.emu.faults().remove(lookup);
    assert!(e.to_string().contains("destroy_by_name"), "{e}");
    assert_eq!(ids().await, before, "no new sandbox is left running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn suspended_by_another_instance_then_used_through_a_stale_lease() {
    let o = one("stale").await;
    o.p.write_file(&o.h, "/workspace/f", b"x")
        .await
        .expect("write");
    let other = provider(&o.env.emu);
    other.suspend(&o.h).await.expect("suspend elsewhere");
    // o.p still holds a fresh lease: envd answers "paused", the provider connects once
    let r =
        o.p.exec(&o.h, ExecSpec::new("cat f"))
            .await
            .expect("exec resumes");
    assert_eq!(r.stdout, "x");
    other.suspend(&o.h).await.expect("suspend elsewhere");
    let c =
        o.p.read_file(&o.h, "/workspace/f", 10)
            .await
            .expect("read resumes");
    assert_eq!(c.map(|c| c.data), Some(b"x".to_vec()));
    // concurrent resumes from two instances are idempotent
    other.suspend(&o.h).await.expect("suspend");
    let (p1, p2) = (Arc::new(o.p.clone()), Arc::new(other));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let p = if i % 2 == 0 { p1.clone() } else { p2.clone() };
        let h = o.h.clone();
        tasks.push(tokio::spawn(async move { p.resume(&h).await }));
    }
    for t in tasks {
        assert_eq!(
            t.await.expect("task").expect("resume"),
            ResumeOutcome::Resumed
        );
    }
    // and after destroy elsewhere: Gone
    p2.destroy(&o.h).await.expect("destroy");
    let e =
        o.p.exec(&o.h, ExecSpec::new("true"))
            .await
            .expect_err("gone");
    assert!(e.is_gone(), "{e}");
}

fn seconds_left(end_at: &str) -> i64 {
    let end = time::OffsetDateTime::parse(end_at, &time::format_description::well_known::Rfc3339)
        .expect("endAt is RFC 3339");
    (end - time::OffsetDateTime::now_utc()).whole_seconds()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_pushes_the_timeout_to_command_plus_margin_never_past_a_day() {
    let env = env().await;
    let mut cfg = config(&env.emu);
    cfg.timeout_seconds = 60;
    let p = E2bSandboxes::new(cfg).expect("provider");
    let h = p.create(CreateSpec::new("push")).await.expect("create");
    let left = seconds_left(&env.client.get(&h.id).await.expect("detail").listed.end_at);
    assert!(left <= 60, "{left}");
    p.exec(&h, ExecSpec::new("true").timeout(Duration::from_secs(600)))
        .await
        .expect("exec");
    let left = seconds_left(&env.client.get(&h.id).await.expect("detail").listed.end_at);
    assert!(
        (660..=720).contains(&left),
        "600 s command + 120 s margin: {left}"
    );
    p.exec(
        &h,
        ExecSpec::new("true").timeout(Duration::from_secs(30 * 3600)),
    )
    .await
    .expect("exec");
    let left = seconds_left(&env.client.get(&h.id).await.expect("detail").listed.end_at);
    assert!((86_000..=86_400).contains(&left), "capped at 24 h: {left}");
}

/// An `env -i setsid` child that keeps the output open. Where the sandbox's root has a
/// writable cgroup v2 (the emulator on a host with one, as an E2B VM), every exec runs
/// in a cgroup of its own and the timeout's tree kill ends the child with the rest: no
/// reboot. Without one the marker-less child survives the kill and holds the output, so
/// the provider falls back to a reboot (pause, connect). Either way nothing survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reboot_when_an_escaped_child_holds_the_output() {
    let env = env().await;
    let p = provider(&env.emu).stop_wait(Duration::from_secs(2));
    let h = p.create(CreateSpec::new("reboot")).await.expect("create");
    p.write_file(&h, "/workspace/kept", b"disk")
        .await
        .expect("write");
    let probe = sandbox_support::root_api(&env, &h.id)
        .await
        .run(e2b_core::StartProcess::new("/bin/sh").user("root").args([
            "-c",
            "test -w /sys/fs/cgroup/cgroup.procs && test -e /sys/fs/cgroup/cgroup.kill",
        ]))
        .await
        .expect("cgroup probe");
    let reboots = if probe.end.exit_code == 0 { 0 } else { 1 };
    let cmd = "(env -i setsid sh -c 'echo $$ > /workspace/esc.pid; exec sleep 300' &); \
               while [ ! -s esc.pid ]; do sleep 0.05; done; echo started; sleep 300";
    env.emu.counters().reset();
    let r = p
        .exec(&h, ExecSpec::new(cmd).timeout(Duration::from_secs(2)))
        .await
        .expect("exec returns as usual");
    assert!(r.timed_out && r.exit_code.is_none(), "{r:?}");
    assert_eq!(r.stdout, "started\n");
    let snap = env.emu.counters().snapshot();
    assert_eq!(
        snap.get_on(Plane::Control, "POST /sandboxes/{sandboxID}/pause"),
        reboots
    );
    assert_eq!(
        snap.get_on(Plane::Control, "POST /v2/sandboxes/{sandboxID}/connect"),
        reboots
    );
    let pid = p
        .read_file(&h, "/workspace/esc.pid", 100)
        .await
        .expect("read")
        .map(|c| String::from_utf8_lossy(&c.data).trim().to_owned())
        .expect("pid file kept");
    // The pid is the sandbox's own (a PID namespace): look in the sandbox.
    let status = p
        .exec(
            &h,
            ExecSpec::new(format!(
                "grep '^State:' /proc/{pid}/status 2>/dev/null; true"
            )),
        )
        .await
        .expect("exec")
        .stdout;
    assert!(
        status.is_empty() || status.contains("State:\tZ"),
        "escapee {pid} survived: {status}"
    );
    assert_eq!(host_processes_of(&h.id), Vec::<u32>::new());
    let c = p.read_file(&h, "/workspace/kept", 10).await.expect("read");
    assert_eq!(
        c.map(|c| c.data),
        Some(b"disk".to_vec()),
        "files survive the reboot"
    );
    assert_eq!(
        p.exec(&h, ExecSpec::new("echo ok"))
            .await
            .expect("exec")
            .stdout,
        "ok\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_budget_on_a_fresh_lease() {
    let o = one("budget").await;
    let counters = o.env.emu.counters();
    let check = |what: &str, envd_max: u64| {
        let s = counters.snapshot();
        assert_eq!(s.plane_total(Plane::Control), 0, "{what}: {s:?}");
        assert!(
            (1..=envd_max).contains(&s.plane_total(Plane::Envd)),
            "{what}: {s:?}"
        );
        counters.reset();
    };
    counters.reset();
    let r =
        o.p.exec(&o.h, ExecSpec::new("echo hi"))
            .await
            .expect("exec");
    assert_eq!(r.stdout, "hi\n");
    check("exec", 1);
    o.p.write_file(&o.h, "/workspace/a", b"abc")
        .await
        .expect("write");
    // The first file operation starts the warm worker beside it (once per lease, in the
    // background): its `Start` lands in this window or the next one.
    check("write_file", 2);
    let c = o.p.read_file(&o.h, "/workspace/a", 2).await.expect("read");
    assert_eq!(
        c.map(|c| (c.data, c.truncated)),
        Some((b"ab".to_vec(), true))
    );
    check("read_file", 2);
    assert!(
        o.p.stat(&o.h, "/workspace/a")
            .await
            .expect("stat")
            .is_some()
    );
    // The worker may still be starting (then the stat is one `Start`, and the worker's
    // start may land in this window); once the worker answers, a stat is one `SendInput`.
    check("first stat", 2);
    let input = "POST /process.Process/SendInput";
    let mut answered = false;
    for _ in 0..200 {
        counters.reset();
        o.p.stat(&o.h, "/workspace/a").await.expect("stat");
        if counters.get_on(Plane::Envd, input) == 1 {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered, "the warm worker never answered a stat");
    assert_eq!(
        counters.snapshot().plane_total(Plane::Envd),
        1,
        "a stat on the warm worker is its one input"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_command_outlives_a_proxy_that_drops_idle_streams() {
    let env = env().await;
    let idle_cut = || {
        FaultRule::new(FaultAction::CutIdle(Duration::from_secs(2)))
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
    };
    let cmd = || ExecSpec::new("sleep 5; echo done").timeout(Duration::from_secs(60));
    // envd pings every second: the stream is never idle for 2 s
    let mut cfg = config(&env.emu);
    cfg.keepalive_interval = Some(Duration::from_secs(1));
    let pinged = E2bSandboxes::new(cfg).expect("provider");
    let h = pinged
        .create(CreateSpec::new("silent"))
        .await
        .expect("create");
    let id = env.emu.faults().add(idle_cut());
    let r = pinged.exec(&h, cmd()).await.expect("exec");
    assert_eq!(
        (r.exit_code, r.stdout.as_str()),
        (Some(0), "done\n"),
        "{r:?}"
    );
    // the fault is real: with envd's default 50 s pings the same command is cut
    let unpinged = provider(&env.emu);
    let e = unpinged.exec(&h, cmd()).await;
    assert!(e.is_err(), "{e:?}");
    env.emu.faults().remove(id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_runs_under_an_in_sandbox_backstop_in_its_own_session() {
    let o = one("backstop").await;
    let r = o
        .p
        .exec(
            &o.h,
            ExecSpec::new(
                "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; \
                 read -r st < /proc/$$/stat; set -- ${st##*) }; [ \"$3\" = \"$$\" ] && [ \"$4\" = \"$$\" ] && echo leader",
            )
            .timeout(Duration::from_millis(1500)),
        )
        .await
        .expect("exec");
    let lines: Vec<&str> = r.stdout.lines().collect();
    // The watching parent is the spawn helper with the backstop: the timeout rounded up
    // + 5 s (the sh helper's fallback is `timeout -s KILL 7` in front of bash).
    let parent: Vec<&str> = lines[0].split_whitespace().collect();
    let native = parent.get(1..3) == Some(&["--kill-after", "7"][..]);
    let sh = parent.get(..3) == Some(&["timeout", "-s", "KILL"][..]) && parent.get(3) == Some(&"7");
    assert!(native || sh, "a backstop of 7 s: {r:?}");
    assert_eq!(
        lines.get(1),
        Some(&"leader"),
        "bash leads its own session and group: {r:?}"
    );
    // signals we did not send: 128 + n
    let r =
        o.p.exec(&o.h, ExecSpec::new("kill -SEGV $$"))
            .await
            .expect("exec");
    assert_eq!(r.exit_code, Some(139), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reboot_when_the_kill_cannot_run() {
    let env = env().await;
    let p = provider(&env.emu).stop_wait(Duration::from_secs(2));
    let h = p.create(CreateSpec::new("no-kill")).await.expect("create");
    let run = p.exec(
        &h,
        ExecSpec::new("touch started; sleep 300").timeout(Duration::from_secs(3)),
    );
    let sabotage = async {
        let watcher = provider(&env.emu);
        for _ in 0..600 {
            if watcher
                .stat(&h, "/workspace/started")
                .await
                .expect("stat")
                .is_some()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // from now on envd refuses to start the kill script or send a signal
        let busy = || FaultAction::json(503, json!({"code": 503, "message": "busy"}));
        let a = env.emu.faults().add(
            FaultRule::new(busy())
                .surface(Plane::Envd)
                .path_prefix("/process.Process/Start"),
        );
        let b = env.emu.faults().add(
            FaultRule::new(busy())
                .surface(Plane::Envd)
                .path_prefix("/process.Process/SendSignal"),
        );
        (a, b)
    };
    env.emu.counters().reset();
    let (r, (a, b)) = tokio::join!(run, sabotage);
    env.emu.faults().remove(a);
    env.emu.faults().remove(b);
    let r = r.expect("exec returns as usual");
    assert!(r.timed_out && r.exit_code.is_none(), "{r:?}");
    let snap = env.emu.counters().snapshot();
    assert_eq!(
        snap.get_on(Plane::Control, "POST /sandboxes/{sandboxID}/pause"),
        1
    );
    assert_eq!(
        host_processes_of(&h.id),
        Vec::<u32>::new(),
        "the cold boot ended the command"
    );
    assert_eq!(
        p.exec(&h, ExecSpec::new("echo ok"))
            .await
            .expect("exec")
            .stdout,
        "ok\n"
    );
}

/// The spawn cgroups in the sandbox (its cgroup2 root as root sees it), the adapter's
/// probe excepted.
async fn spawn_cgroups(env: &sandbox_support::Env, id: &str) -> usize {
    let out = sandbox_support::root_sh(
        env,
        id,
        "ls -d /sys/fs/cgroup/exec-world-* 2>/dev/null | grep -vc -- '-probe$'; true",
    )
    .await;
    out.trim().parse().expect("a count")
}

/// A command that ended by itself gives its spawn cgroup back for the next one (each
/// used to leave one more cgroup for the sandbox's life), and a cgroup is never shared
/// with what a command left running: the next command gets another one, so its timeout
/// kill does not reach the leftover.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ended_commands_give_their_cgroup_back_and_never_share_it() {
    let o = one("cgroup-reuse").await;
    let probe = sandbox_support::root_sh(
        &o.env,
        &o.h.id,
        "test -w /sys/fs/cgroup/cgroup.procs && test -e /sys/fs/cgroup/cgroup.kill && echo yes; true",
    )
    .await;
    if probe.trim() != "yes" {
        println!("skipped: this host gives sandboxes no writable cgroup v2");
        return;
    }
    for _ in 0..12 {
        let r = o.p.exec(&o.h, ExecSpec::new("true")).await.expect("exec");
        assert_eq!(r.exit_code, Some(0), "{r:?}");
    }
    // One reused cgroup (two or three when a give-back trails the next start).
    let n = spawn_cgroups(&o.env, &o.h.id).await;
    assert!((1..=3).contains(&n), "12 execs left {n} cgroups");

    let own = "grep '^0::' /proc/self/cgroup";
    let a =
        o.p.exec(
            &o.h,
            ExecSpec::new(format!("sleep 60 >/dev/null 2>&1 & {own}; echo $!")),
        )
        .await
        .expect("exec");
    let mut lines = a.stdout.lines();
    let (a_cg, left) = (lines.next().expect("cgroup"), lines.next().expect("pid"));
    let b =
        o.p.exec(
            &o.h,
            ExecSpec::new(format!("{own}; sleep 60")).timeout(Duration::from_secs(1)),
        )
        .await
        .expect("exec");
    assert!(b.timed_out, "{b:?}");
    assert!(b.stdout.starts_with("0::/exec-world-"), "{b:?}");
    assert_ne!(
        b.stdout.trim(),
        a_cg,
        "a cgroup with a leftover is not shared"
    );
    let alive =
        o.p.exec(&o.h, ExecSpec::new(format!("kill -0 {left} && echo alive")))
            .await
            .expect("exec");
    assert_eq!(
        alive.stdout, "alive\n",
        "the leftover survived the next kill"
    );
    o.p.kill_all(&o.h).await.expect("kill_all");
}
