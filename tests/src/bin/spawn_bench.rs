//! `spawn_bench`: what each way of starting a program through envd costs, on one emulator
//! in one run (the exec target: subprocess-e2b `true` p50 <= 1.5x a raw `Start`).
//!
//! Run: `cargo run --release -p integration-tests --bin spawn_bench [-- ROUNDS PER_ROUND]`
//! (default 10 rounds of 20). Every round runs each option `PER_ROUND` times in turn, so
//! a noisy neighbour hits all options alike. Options, each one envd `Start` of `true`
//! run to its end event:
//! * `raw`: `true` itself (no wrapper);
//! * `raw setsid`: `setsid -w true`;
//! * `inline script`: `setsid -w /bin/sh -c HELPER …` as the user, the helper's text in
//!   the request (how every spawn ran before the helper was placed once per adapter);
//! * `helper, plain`: `setsid -w /bin/sh HELPER_FILE --user …` as the user (no cgroup);
//! * `helper, cgroup`: `setsid -w /bin/sh HELPER_FILE --root …` as root: own cgroup, then
//!   `setpriv` to the user;
//! * `E2bSubprocess`: `spawn(true)` + `wait()` (the adapter with its native spawn helper;
//!   contained mode where the sandbox allows it);
//! * `E2bSubprocess, no lease`: the same with the host lease off (no watching parent:
//!   the helper execs the program in place);
//! * `E2bSubprocess, sh`: the same with the native helper off (the `sh` helper chain);
//! * local baselines: `tokio::process` and `LocalSubprocess`.
//!
//! It prints p50 and p90 per option and the ratio of each p50 to `raw`'s. Figures, not
//! assertions: the machine is shared and noisy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2b_core::{EnvdApi, StartProcess};
use exec_world::{LocalSubprocess, SpawnSpec, Subprocess};
use subprocess_e2b::E2bSubprocess;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The helper's positional arguments for `true` in a clean environment (see
/// `subprocess_e2b::wrapper`): MODE TERM HOME SHELL USER PATH FAST NENV K=V… PROGRAM.
fn user_args() -> Vec<String> {
    [
        "clean",
        "0",
        "/home/user",
        "/bin/sh",
        "user",
        "/usr/bin:/bin",
        "1",
        "1",
        "EXEC_WORLD_SPAWN=bench",
        "true",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// One envd `Start` run to its end; fails on a non-zero exit.
async fn run(api: &Arc<dyn EnvdApi>, spec: StartProcess) -> Result<(), AnyError> {
    let out = api.start_process(spec).await?.wait_output().await?;
    if out.end.exit_code != 0 {
        return Err(format!(
            "exit code {}: {}",
            out.end.exit_code,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// stdout of `sh -c script` as root.
async fn root_sh(api: &Arc<dyn EnvdApi>, script: &str) -> Result<String, AnyError> {
    let out = api
        .start_process(
            StartProcess::new("/bin/sh")
                .args(["-c", script])
                .user("root"),
        )
        .await?
        .wait_output()
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let mut argv = std::env::args().skip(1);
    let rounds: usize = argv.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let per_round: usize = argv.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let sb = emulator_fixture::EmulatedSandbox::start(Duration::from_secs(60)).await;
    let api = sb.api.clone();

    // The helper, placed as the adapter places it (root-owned, 0755).
    let dir = "/tmp/.spawn-bench";
    root_sh(&api, &format!("mkdir -m 0755 -p {dir}")).await?;
    let helper = format!("{dir}/spawn.sh");
    api.upload_bytes(
        &helper,
        Some("root"),
        Bytes::from_static(subprocess_e2b::wrapper::helper_sh().as_bytes()),
    )
    .await?;
    let ids = root_sh(&api, "echo $(id -u user) $(id -g user)").await?;
    let (uid, gid) = ids.split_once(' ').ok_or("id of user")?;
    let (uid, gid) = (uid.to_owned(), gid.to_owned());
    let cgroups = root_sh(
        &api,
        "test -w /sys/fs/cgroup/cgroup.procs && test -e /sys/fs/cgroup/cgroup.kill && echo yes",
    )
    .await?
        == "yes";

    let e2b = E2bSubprocess::at_home(api.clone(), None).await?;
    let e2b_no_lease = E2bSubprocess::new(
        api.clone(),
        subprocess_e2b::E2bSubprocessOptions::new("/").host_lease(None),
    )?
    .with_cwd(e2b.cwd());
    let e2b_sh = E2bSubprocess::new(
        api.clone(),
        subprocess_e2b::E2bSubprocessOptions::new("/").native_helper(false),
    )?
    .with_cwd(e2b.cwd());
    let local = LocalSubprocess::new()?;

    let mut names: Vec<&str> = vec![
        "raw",
        "raw setsid",
        "inline script",
        "helper, plain",
        "helper, cgroup",
        "E2bSubprocess",
        "E2bSubprocess, no lease",
        "E2bSubprocess, sh",
        "tokio::process",
        "LocalSubprocess",
    ];
    if !cgroups {
        eprintln!("no writable cgroup v2 in the sandbox: `helper, cgroup` left out");
        names.retain(|n| *n != "helper, cgroup");
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        for (k, name) in names.iter().enumerate() {
            for _ in 0..per_round {
                let t = Instant::now();
                match *name {
                    "raw" => run(&api, StartProcess::new("true")).await?,
                    "raw setsid" => {
                        run(&api, StartProcess::new("setsid").args(["-w", "true"])).await?
                    }
                    "inline script" => {
                        let mut a = vec![
                            "-w".to_owned(),
                            "/bin/sh".to_owned(),
                            "-c".to_owned(),
                            subprocess_e2b::wrapper::helper_sh().to_owned(),
                            "exec-world-spawn".to_owned(),
                            "--user".to_owned(),
                            "0".to_owned(),
                            String::new(),
                        ];
                        a.extend(user_args());
                        run(&api, StartProcess::new("setsid").args(a).user("user")).await?
                    }
                    "helper, plain" => {
                        let mut a = vec![
                            "-w".to_owned(),
                            "/bin/sh".to_owned(),
                            helper.clone(),
                            "--user".to_owned(),
                            "0".to_owned(),
                            String::new(),
                        ];
                        a.extend(user_args());
                        run(&api, StartProcess::new("setsid").args(a).user("user")).await?
                    }
                    "helper, cgroup" => {
                        let mut a = vec![
                            "-w".to_owned(),
                            "/bin/sh".to_owned(),
                            helper.clone(),
                            "--root".to_owned(),
                            "/sys/fs/cgroup".to_owned(),
                            "spawn-bench".to_owned(),
                            "/usr/bin/setpriv".to_owned(),
                            uid.clone(),
                            gid.clone(),
                        ];
                        a.extend(user_args());
                        run(&api, StartProcess::new("setsid").args(a).user("root")).await?
                    }
                    "E2bSubprocess" => {
                        let st = e2b.spawn(SpawnSpec::new("true"))?.wait().await?;
                        if !st.success() {
                            return Err(format!("E2bSubprocess true: {st:?}").into());
                        }
                    }
                    "E2bSubprocess, no lease" => {
                        let st = e2b_no_lease.spawn(SpawnSpec::new("true"))?.wait().await?;
                        if !st.success() {
                            return Err(format!("E2bSubprocess, no lease true: {st:?}").into());
                        }
                    }
                    "E2bSubprocess, sh" => {
                        let st = e2b_sh.spawn(SpawnSpec::new("true"))?.wait().await?;
                        if !st.success() {
                            return Err(format!("E2bSubprocess, sh true: {st:?}").into());
                        }
                    }
                    "tokio::process" => {
                        tokio::process::Command::new("true").status().await?;
                    }
                    _ => {
                        local.spawn(SpawnSpec::new("true"))?.wait().await?;
                    }
                }
                times[k].push(t.elapsed());
            }
        }
        eprintln!("round {}/{rounds} done", round + 1);
    }
    let raw_p50 = {
        let mut t = times[0].clone();
        t.sort();
        percentile(&t, 0.5)
    };
    println!(
        "exec `true`, sequential, {} runs each ({rounds} rounds of {per_round}, interleaved)",
        rounds * per_round
    );
    println!(
        "{:<24} {:>9} {:>9} {:>8}",
        "option", "p50 ms", "p90 ms", "/ raw"
    );
    for (name, mut t) in names.iter().zip(times) {
        t.sort();
        let (p50, p90) = (percentile(&t, 0.5), percentile(&t, 0.9));
        println!(
            "{name:<24} {:>9.2} {:>9.2} {:>7.2}x",
            p50.as_secs_f64() * 1e3,
            p90.as_secs_f64() * 1e3,
            p50.as_secs_f64() / raw_p50.as_secs_f64()
        );
    }
    Ok(())
}
