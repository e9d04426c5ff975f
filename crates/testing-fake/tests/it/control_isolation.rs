//! Sandbox isolation through the control plane: a SIGKILLed emulator leaves no sandbox
//! process behind, a cold boot keeps the writable root and gets a new boot id, and a
//! sandbox created without internet access cannot reach the host's loopback. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use e2b_proto::envelope::{FrameDecoder, encode_json};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Env, alive, stdout_of};

/// Host pids (not zombies) whose PID namespace has inode `ino`.
fn members_of_pid_ns(ino: u64) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/pid")).is_ok_and(|m| m.ino() == ino)
                && alive(*pid)
        })
        .collect()
}

#[tokio::test]
async fn sigkilled_emulator_leaves_no_sandbox_process() {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b-local"))
        .args(["--port", "0", "--root"])
        .arg(root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("e2b-local starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut value = |prefix: &str| {
        let line = lines.next().unwrap().unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned()
    };
    let api = value("E2B_API_URL=");
    let sandbox_url = value("E2B_SANDBOX_URL=");
    let key = value("E2B_API_KEY=");

    let http = reqwest::Client::new();
    let sbx: Value = http
        .post(format!("{api}/v2/sandboxes"))
        .header("X-API-KEY", &key)
        .json(&json!({"templateID": "base"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-c", "sleep 4242.5 & sleep 4242.5"]}, "stdin": false});
    let mut resp = http
        .post(format!("{sandbox_url}/process.Process/Start"))
        .header("E2b-Sandbox-Id", sbx["sandboxID"].as_str().unwrap())
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", sbx["envdAccessToken"].as_str().unwrap())
        .header("Content-Type", "application/connect+json")
        .header("Connect-Protocol-Version", "1")
        .body(encode_json(&msg).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut dec = FrameDecoder::default();
    loop {
        if let Some(f) = dec.next_frame().unwrap() {
            let v: Value = serde_json::from_slice(&f.payload).unwrap();
            assert!(v["event"]["start"]["pid"].is_u64(), "start event: {v}");
            break;
        }
        dec.push(&resp.chunk().await.unwrap().expect("a start event"));
    }
    // The reported pid is the sandbox's; find a sleep on the host by its argument.
    let mut sleeper = None;
    for _ in 0..100 {
        sleeper = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c == b"sleep\x004242.5\x00")
            });
        if sleeper.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = sleeper.expect("the sandbox's sleep runs");
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .unwrap()
        .ino();
    let own = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    assert_ne!(
        ns, own,
        "the sandbox process lives in the host's PID namespace"
    );
    // The shell, both sleeps and the holder.
    for _ in 0..100 {
        if members_of_pid_ns(ns).len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        members_of_pid_ns(ns).len() >= 4,
        "{:?}",
        members_of_pid_ns(ns)
    );

    // SAFETY: kill(2) on the child we spawned.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    drop(resp);
    let mut left = members_of_pid_ns(ns);
    for _ in 0..200 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = members_of_pid_ns(ns);
    }
    assert!(
        left.is_empty(),
        "sandbox processes survived the emulator: {left:?}"
    );
}

/// The sandbox's boot id followed by its `/0/x`.
async fn boot_id_and_x(env: &Env, sbx: &Value) -> String {
    let (frames, ended) = env
        .run_frames(sbx, "cat /proc/sys/kernel/random/boot_id /0/x")
        .await;
    assert!(ended, "{frames:?}");
    stdout_of(&frames)
}

#[tokio::test]
async fn cold_boot_keeps_the_root_and_changes_the_boot_id() {
    let env = Env::start().await;
    let sbx = env.create(json!({})).await;
    let id = sbx["sandboxID"].as_str().unwrap();
    assert_eq!(
        env.write_file(&sbx, "/0/x&username=root", "root layer")
            .await,
        StatusCode::OK
    );
    let first = boot_id_and_x(&env, &sbx).await;
    assert!(first.ends_with("root layer"), "{first}");

    // A memory pause keeps the boot.
    let a = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"memory": true}))
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = env
        .post(
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(boot_id_and_x(&env, &sbx).await, first);

    // A cold boot is a new boot with the same files.
    let a = env.pause_and_resume_cold(id).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let second = boot_id_and_x(&env, &sbx).await;
    assert!(second.ends_with("root layer"), "{second}");
    assert_ne!(second, first, "a cold boot keeps the boot id");
    env.emu.shutdown().await;
}

/// A cold boot builds the sandbox's root as the host's root, partly through directories
/// the sandbox could change while it ran: a volume mounted below `/home` is attached
/// inside the sandbox's writable `/home`. A link the sandbox's root planted in its place
/// must not take that work onto the host: the host directory the link names stays empty,
/// and the boot fails, naming the mount namespace and the path.
#[tokio::test]
async fn a_link_planted_on_a_mount_path_does_not_reach_the_host_at_a_cold_boot() {
    let target = tempfile::tempdir().unwrap();
    let env = Env::start().await;
    let v = env.post("/volumes", json!({"name": "nested"})).await;
    assert_eq!(v.status, StatusCode::CREATED, "{}", v.text);
    let sbx = env
        .create(json!({"volumeMounts": [{"name": "nested", "path": "/home/user/vol"}]}))
        .await;
    let id = sbx["sandboxID"].as_str().unwrap();
    let plant = format!(
        "sudo -n mv /home/user /home/user.old && sudo -n ln -s {} /home/user && echo planted",
        target.path().display()
    );
    let (frames, ended) = env.run_frames(&sbx, &plant).await;
    assert!(ended, "{frames:?}");
    assert_eq!(stdout_of(&frames), "planted\n", "{frames:?}");
    let a = env.pause_and_resume_cold(id).await;
    let left = support::names_in(target.path());
    assert!(left.is_empty(), "the cold boot wrote {left:?} on the host");
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", a.text);
    assert!(a.text.contains("mount-namespace"), "{}", a.text);
    // The error names the path, as the sandbox names it, the cause, and no cure that
    // does not apply (the emulator is root and has namespaces).
    assert!(!a.text.contains("run e2b-local as root"), "{}", a.text);
    assert!(
        a.text
            .contains("/home/user/vol: a symbolic link lies on the way"),
        "{}",
        a.text
    );
    env.emu.shutdown().await;
}

#[tokio::test]
async fn no_internet_access_means_no_host_loopback() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached");
    let env = Env::start().await;
    for offline in [
        json!({"allow_internet_access": false}),
        json!({"network": {"denyOut": ["0.0.0.0/0"]}}),
    ] {
        let sbx = env.create(offline.clone()).await;
        let (frames, _) = env.run_frames(&sbx, &probe).await;
        assert_eq!(stdout_of(&frames), "", "{offline}: {frames:?}");
        // Only loopback: no uplink at all.
        let (frames, _) = env
            .run_frames(&sbx, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
            .await;
        assert_eq!(stdout_of(&frames), "lo\n", "{offline}: {frames:?}");
    }
    env.emu.shutdown().await;
}

/// An out-of-memory kill shows in the sandbox's metrics: the first sample after a hog of
/// twice the template's memory was killed reports the memory at the template's size
/// (the most the sandbox held since the sample before); another sandbox's stays low.
/// Needs the host's cgroup v1 memory controller (the sandbox's limit); without it, says
/// so and checks nothing.
#[tokio::test]
async fn an_out_of_memory_kill_shows_in_the_metrics() {
    if !std::path::Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        eprintln!("SKIPPED: no cgroup v1 memory controller on this host");
        return;
    }
    let env = Env::start().await;
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let samples = |id: Value| {
        let env = &env;
        async move {
            let a = env
                .get(&format!("/sandboxes/{}/metrics", id.as_str().unwrap()))
                .await;
            assert_eq!(a.status, StatusCode::OK, "{}", a.text);
            a.json.as_array().unwrap().clone()
        }
    };
    let before = samples(a["sandboxID"].clone()).await.len();
    let (frames, _) = env
        .run_frames(
            &a,
            "python3 -c \"b = b'a' * (1 << 30); print('survived', len(b))\"",
        )
        .await;
    assert!(!stdout_of(&frames).contains("survived"), "{frames:?}");
    // Samples come every 5 s: of the (at most) two first ones after `before`, one was
    // taken after the kill (one may fall between the count and the hog's start).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut total = 0;
    loop {
        let new: Vec<Value> = samples(a["sandboxID"].clone())
            .await
            .into_iter()
            .skip(before)
            .take(2)
            .collect();
        let shown = new.iter().find(|m| {
            total = m["memTotal"].as_u64().unwrap();
            m["memUsed"].as_u64().unwrap() * 10 >= total * 9
        });
        if let Some(m) = shown {
            assert!(m["memUsed"].as_u64().unwrap() <= total, "{m}");
            break;
        }
        assert!(new.len() < 2, "the kill does not show: {new:?}");
        assert!(
            std::time::Instant::now() < deadline,
            "no sample after the kill"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let other = samples(b["sandboxID"].clone()).await;
    let last = other.last().unwrap();
    assert!(
        last["memUsed"].as_u64().unwrap() * 2 < total,
        "the other sandbox: {last}"
    );
    env.emu.shutdown().await;
}

/// The first spare sandbox's directory name under `sandboxes`, once one is prepared.
async fn spare_name(sandboxes: &std::path::Path) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(sandboxes).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with(".spare-"))
        });
        if let Some(n) = found {
            return n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no spare sandbox was prepared after a create"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An emulator on a state directory of the test's own, and where its sandboxes live.
async fn env_with_sandboxes_dir() -> (tempfile::TempDir, Env, std::path::PathBuf) {
    let state = tempfile::tempdir().unwrap();
    let env = Env::with(testing_fake::EmulatorConfig {
        root: Some(state.path().to_path_buf()),
        ..Default::default()
    })
    .await;
    let sandboxes = std::fs::canonicalize(state.path())
        .unwrap()
        .join("sandboxes");
    (state, env, sandboxes)
}

/// A sandbox made from a spare (prepared after the previous sandbox's first command) is as
/// new as any: the spare's directory became its root, its clocks started when it was
/// prepared (after the previous create began), its namespaces are not the other
/// sandbox's, it holds nothing the other wrote, and the other cannot see where spares
/// wait. A sandbox of another kind (no internet) does not
/// take a spare made for one with internet.
#[tokio::test]
async fn a_sandbox_made_from_a_spare_is_its_own() {
    let (_state, env, sandboxes) = env_with_sandboxes_dir().await;
    let began = std::time::Instant::now();
    let a = env.create(json!({})).await;
    let spare = spare_name(&sandboxes).await;
    // Where spares wait is hidden from a sandbox, its root included.
    let (frames, ended) = env
        .run_frames(
            &a,
            &format!("sudo -n ls -A {}; echo end", sandboxes.display()),
        )
        .await;
    assert!(ended, "{frames:?}");
    assert_eq!(stdout_of(&frames), "end\n", "{frames:?}");
    let (frames, _) = env
        .run_frames(&a, "sudo -n sh -c 'echo mine > /etc/from-a'; readlink /proc/self/ns/user /proc/self/ns/net /proc/self/ns/mnt /proc/self/ns/pid")
        .await;
    let a_ns = stdout_of(&frames);
    assert_eq!(a_ns.lines().count(), 4, "{frames:?}");

    let b = env.create(json!({})).await;
    let b_id = b["sandboxID"].as_str().unwrap();
    assert!(
        !sandboxes.join(&spare).exists() && sandboxes.join(b_id).is_dir(),
        "the spare {spare} did not become {b_id}'s root"
    );
    let (frames, ended) = env
        .run_frames(&b, "cut -d' ' -f1 /proc/uptime; readlink /proc/self/ns/user /proc/self/ns/net /proc/self/ns/mnt /proc/self/ns/pid; cat /etc/from-a 2>&1 || true")
        .await;
    let elapsed = began.elapsed().as_secs_f64();
    assert!(ended, "{frames:?}");
    let out = stdout_of(&frames);
    let mut lines = out.lines();
    let uptime: f64 = lines.next().unwrap().parse().unwrap();
    assert!(
        uptime <= elapsed,
        "uptime {uptime} > {elapsed} since the previous create began"
    );
    for (mine, theirs) in lines.by_ref().take(4).zip(a_ns.lines()) {
        assert_ne!(mine, theirs, "a namespace of the other sandbox");
    }
    let rest: Vec<&str> = lines.collect();
    assert!(
        rest.len() == 1 && rest[0].contains("No such file"),
        "{rest:?}"
    );
    // Made at a lower priority, the sandbox runs at the usual one: its commands (started
    // by threads the spare's builder made) and its init.
    let (frames, _) = env
        .run_frames(&b, "nice; cut -d' ' -f19 /proc/1/stat")
        .await;
    assert_eq!(stdout_of(&frames), "0\n0\n", "{frames:?}");
    // Its init started after its clocks' zero (the holder is not in the sandbox's time
    // namespace; its start shows shifted by the sandbox's offsets): not before the boot,
    // not after now.
    let (frames, _) = env
        .run_frames(
            &b,
            "cut -d' ' -f22 /proc/1/stat; cut -d' ' -f1 /proc/uptime; getconf CLK_TCK",
        )
        .await;
    let out = stdout_of(&frames);
    let v: Vec<f64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(
        v.len() == 3 && v[0] / v[2] <= v[1],
        "init's start, uptime, ticks: {out}"
    );

    // Spares are made at a lower priority; the pasta processes that carry the sandboxes'
    // traffic (theirs included) run at the usual one.
    let me = std::process::id().to_string();
    let pastas: Vec<(String, i64)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(") ")?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let pasta = head.contains("(pasta") || head.contains("(passt");
            if !pasta || f.get(1) != Some(&me.as_str()) {
                return None;
            }
            Some((head.to_owned(), f.get(16)?.parse().ok()?))
        })
        .collect();
    assert!(!pastas.is_empty(), "no pasta of this emulator");
    assert!(pastas.iter().all(|(_, nice)| *nice == 0), "{pastas:?}");

    // A spare for a sandbox with internet is not one without.
    spare_name(&sandboxes).await;
    let c = env.create(json!({"allow_internet_access": false})).await;
    let (frames, _) = env
        .run_frames(&c, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        .await;
    assert_eq!(stdout_of(&frames), "lo\n", "{frames:?}");
    env.emu.shutdown().await;
}

/// A create that comes while the spare for it is still being made waits for that spare
/// (hurried) instead of building a second sandbox beside it: the directory seen being made
/// (or ready) after the first sandbox's first command becomes the next sandbox's root.
/// A spare is begun only once that first command ended.
#[tokio::test]
async fn a_create_takes_the_spare_being_made_for_it() {
    let (_state, env, sandboxes) = env_with_sandboxes_dir().await;
    let spare_dirs = || -> Vec<(String, u64)> {
        std::fs::read_dir(&sandboxes)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        (name.starts_with(".making-") || name.starts_with(".spare-"))
                            .then(|| Some((name, e.metadata().ok()?.ino())))
                            .flatten()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let a = env.create(json!({"allow_internet_access": false})).await;
    let (frames, ended) = env.run_frames(&a, "true").await;
    assert!(ended, "{frames:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (name, ino) = loop {
        if let Some(found) = spare_dirs().into_iter().next() {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no spare was begun after the first command ended"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let b = env.create(json!({"allow_internet_access": false})).await;
    let b_id = b["sandboxID"].as_str().unwrap();
    let b_ino = std::fs::metadata(sandboxes.join(b_id)).unwrap().ino();
    assert_eq!(b_ino, ino, "{name} did not become {b_id}'s root");
    let (frames, ended) = env.run_frames(&b, "echo ok").await;
    assert!(ended && stdout_of(&frames) == "ok\n", "{frames:?}");
    env.emu.shutdown().await;
}

/// A create storm (creates coming faster than one spare is made) makes several spares at
/// once, and once no create came for a while (two seconds), the spares beyond the one
/// kept are dropped. Without the storm's burst, at most one spare exists at any time.
#[tokio::test]
async fn a_create_storm_makes_spares_at_once_and_drops_the_extra_after_it() {
    let (_state, env, sandboxes) = env_with_sandboxes_dir().await;
    let count = {
        let sandboxes = sandboxes.clone();
        move || -> (usize, usize) {
            let names: Vec<String> = std::fs::read_dir(&sandboxes)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            let making = names.iter().filter(|n| n.starts_with(".making-")).count();
            let ready = names.iter().filter(|n| n.starts_with(".spare-")).count();
            (making, ready)
        }
    };
    // Watch how many spares exist at once (being made or ready) during the storm.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        let count = count.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (making, ready) = count();
                most = most.max(making + ready);
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    let offline = json!({"allow_internet_access": false});
    let mut storm = Vec::new();
    for _ in 0..5 {
        let sbx = env.create(offline.clone()).await;
        let (frames, ended) = env.run_frames(&sbx, "true").await;
        assert!(ended, "{frames:?}");
        storm.push(sbx);
    }
    // The spares the last creates asked for are made meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.join().unwrap();
    assert!(most >= 2, "at most {most} spare at once during a storm");
    // After the storm, one spare stays.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (making, ready) = count();
        if making == 0 && ready == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{making} being made and {ready} ready long after the storm"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The one kept serves the next create.
    let next = env.create(offline).await;
    let (frames, ended) = env.run_frames(&next, "echo ok").await;
    assert!(ended && stdout_of(&frames) == "ok\n", "{frames:?}");
    env.emu.shutdown().await;
}

/// CPU use shows in the metrics (envd's `cpu_used_pct` since its previous reading, the
/// control plane's `cpuUsedPct`): a sandbox whose process used half a second of CPU time
/// between two readings reads more than 0, and more than an idle sandbox read over the same
/// time (no wall-clock bound: the share depends on the host's load).
#[tokio::test]
async fn cpu_use_shows_in_the_metrics() {
    let env = Env::start().await;
    let busy = env.create(json!({})).await;
    let idle = env.create(json!({})).await;
    let read = |sbx: Value| {
        let env = &env;
        async move {
            let r = env
                .envd(reqwest::Method::GET, "/metrics", &sbx)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let m: Value = r.json().await.unwrap();
            m["cpu_used_pct"].as_f64().unwrap()
        }
    };
    read(busy.clone()).await;
    read(idle.clone()).await;
    let (frames, ended) = env
        .run_frames(
            &busy,
            "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint(\"spun\")'",
        )
        .await;
    assert!(ended && stdout_of(&frames) == "spun\n", "{frames:?}");
    let spent = read(busy.clone()).await;
    let rested = read(idle.clone()).await;
    assert!(spent > 0.0 && spent > rested, "busy {spent}, idle {rested}");
    assert!(spent <= 100.0, "{spent}");
    // The control plane's samples carry a number for it.
    let a = env
        .get(&format!(
            "/sandboxes/{}/metrics",
            busy["sandboxID"].as_str().unwrap()
        ))
        .await;
    assert!(a.json[0]["cpuUsedPct"].is_f64(), "{}", a.text);
    env.emu.shutdown().await;
}
