//! `E2bSubprocess` and the bash tool under faults, on the emulator: any end of a
//! process's stream that is not its observed exit (a cut stream, envd's process deadline,
//! a frozen envd) runs the tree kill before the error is reported, so no process of the
//! tree survives; a frozen envd ends `wait` with an error instead of a hang (stream idle
//! timeout over envd's keepalives). Each test checks survivors by pid in the sandbox.

use crate::subprocess_e2b_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_tools::bash::{BashRequest, BashTool};
use e2b_core::{Client, ConnectOptions};
use exec_world::{ErrorKind, SpawnSpec, Subprocess};
use futures::StreamExt;
use subprocess_e2b::E2bSubprocess;
use subprocess_e2b_support::{env, proc_of, stdout_of, within};
use testing_fake::{FaultAction, FaultRule, Plane};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A tree: the shell, a background job, a `setsid`'d child and an orphaned `setsid`'d
/// grandchild; every member appends its pid to `$1`, then the shell prints `ready` and
/// ticks (so a stream cut after a few frames lands while the whole tree runs).
const TREE: &str = r#"f=$1
echo $$ >> "$f"
sleep 1000 & echo $! >> "$f"
setsid sh -c 'echo $$ >> "$1"; exec sleep 1000' sh "$f" &
sh -c 'setsid sh -c "echo \$\$ >> \"\$1\"; exec sleep 1000" sh "$1" &' sh "$f" &
while [ "$(wc -l < "$f")" -lt 4 ]; do sleep 0.05; done
echo ready
while :; do echo tick; sleep 0.2; done
"#;

/// The pids in the tree's pid file.
async fn tree_pids(p: &E2bSubprocess, file: &str) -> Vec<u32> {
    let text = stdout_of(p, r#"cat -- "$1" 2>/dev/null"#, &[file]).await;
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The live (non-zombie) ones of `pids`.
async fn alive(p: &E2bSubprocess, pids: &[u32]) -> Vec<u32> {
    let args: Vec<String> = pids.iter().map(u32::to_string).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = stdout_of(
        p,
        r#"for p; do
  st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
  case ${st##*) } in Z*|X*) continue ;; esac
  echo "$p"
done"#,
        &args,
    )
    .await;
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Starts [`TREE`] through `p`, its members' pids going to `file`.
fn spawn_tree(p: &E2bSubprocess, file: &str) -> exec_world::Child {
    p.spawn(SpawnSpec::new("sh").arg("-c").arg(TREE).arg("sh").arg(file))
        .expect("spawn the tree")
}

/// The tree in `file` started (at least its 4 members) and none of it is alive now.
async fn assert_no_survivors(p: &E2bSubprocess, file: &str) {
    let pids = tree_pids(p, file).await;
    assert!(pids.len() >= 4, "the tree started: {pids:?}");
    assert_eq!(
        alive(p, &pids).await,
        Vec::<u32>::new(),
        "survivors of {pids:?}"
    );
}

/// Waits for `ready` on `out`.
async fn until_ready(out: &mut exec_world::OutputStream) {
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        match within("ready", 60, out.next()).await {
            Some(Ok(c)) => seen.extend_from_slice(&c),
            _ => panic!(
                "output ended before ready: {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_stream_kills_the_tree_before_wait_reports() {
    let env = env().await;
    let p = proc_of(&env).await;
    let file = format!("{}/pids-cut", p.cwd());
    // start event, wrapper header, `ready`, then ticks: cut after a few ticks.
    env.emu.faults().add(
        FaultRule::new(FaultAction::CutStream { after_frames: 6 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let child = spawn_tree(&p, &file);
    let r = within("wait after a cut", 120, child.wait()).await;
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::Transport),
        "{r:?}"
    );
    // No wait, no polling: the kill ran before `wait` reported the loss.
    assert_no_survivors(&p, &file).await;
    drop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_deadline_kills_the_tree() {
    let env = env().await;
    let p = proc_of(&env).await;
    let file = format!("{}/pids-deadline", p.cwd());
    let timed = p.clone().process_timeout(Some(Duration::from_secs(3)));
    let mut child = spawn_tree(&timed, &file);
    let mut out = child.take_stdout().expect("stdout");
    until_ready(&mut out).await;
    // envd ends the stream with deadline_exceeded and no end event, having killed at
    // most its own child: the adapter must end the rest.
    let r = within("wait past the deadline", 120, child.wait()).await;
    assert!(r.is_err(), "no end event, so no exit status: {r:?}");
    assert_no_survivors(&p, &file).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bash_tool_terminates_when_its_stream_is_lost() {
    let env = env().await;
    let p = proc_of(&env).await;
    let tool = BashTool::new(Arc::new(p.clone()));
    tool.shell().await.expect("shell looked up");
    let file = format!("{}/pids-bash", p.cwd());
    env.emu.faults().add(
        FaultRule::new(FaultAction::CutStream { after_frames: 6 })
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
    let cmd = format!("set -- '{file}'\n{TREE}");
    let r = within(
        "bash tool",
        120,
        tool.run(BashRequest::new(cmd).timeout(Duration::from_secs(60))),
    )
    .await;
    assert!(r.is_err(), "a lost stream is an error: {r:?}");
    assert_no_survivors(&p, &file).await;
}

/// A TCP proxy in front of the emulator that can freeze: while frozen it forwards no
/// byte in either direction (an envd that stopped answering, e.g. SIGSTOPped).
struct FreezingProxy {
    url: String,
    frozen: Arc<AtomicBool>,
}

impl FreezingProxy {
    async fn start(target: std::net::SocketAddr) -> FreezingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, f.clone()));
                tokio::spawn(pump(ro, wi, f.clone()));
            }
        });
        FreezingProxy { url, frozen }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_envd_ends_wait_with_an_error_and_drop_still_kills() {
    let env = env().await;
    let direct = proc_of(&env).await;
    let proxy = FreezingProxy::start(env.emu.addr()).await;
    let cfg = emulator_fixture::emulator_config(&env.emu, Duration::from_secs(3))
        .with_sandbox_url(proxy.url.clone())
        .with_stream_idle_timeout(Some(Duration::from_secs(2)));
    let client = Client::new(cfg).expect("client");
    let sb = client
        .connect(env.sandbox.id(), ConnectOptions::default())
        .await
        .expect("connect through the proxy");
    let p = E2bSubprocess::at_home(sb.into_api(), None)
        .await
        .expect("adapter through the proxy");
    let file = format!("{}/pids-frozen", p.cwd());
    let mut child = spawn_tree(&p, &file);
    let mut out = child.take_stdout().expect("stdout");
    until_ready(&mut out).await;
    proxy.freeze(true);
    // Silence past the idle bound is a lost stream: an error, not a hang. (The kill
    // after the loss cannot get through either; it is bounded by the request timeout.)
    let r = within("wait on a frozen envd", 120, child.wait()).await;
    assert!(r.is_err(), "{r:?}");
    drop(out);
    proxy.freeze(false);
    let pids = tree_pids(&direct, &file).await;
    assert!(pids.len() >= 4, "{pids:?}");
    // The kill after the loss failed, so dropping the child runs it again.
    drop(child);
    let mut left = pids.clone();
    for _ in 0..300 {
        left = alive(&direct, &pids).await;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left,
        Vec::<u32>::new(),
        "survivors of drop after a frozen envd"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spawn_errors_name_the_operation_and_the_cause_once() {
    let env = env().await;
    let p = proc_of(&env).await;
    // An HTTP status from envd's Start: kept, said once.
    env.emu.faults().add(
        FaultRule::new(FaultAction::json(
            503,
            serde_json::json!({"code": "unavailable", "message": "envd is overloaded"}),
        ))
        .surface(Plane::Envd)
        .path_prefix("/process.Process/Start")
        .times(1),
    );
    let child = p.spawn(SpawnSpec::new("true")).expect("spawn");
    let e = within("wait", 60, child.wait())
        .await
        .expect_err("503")
        .to_string();
    eprintln!("503: {e}");
    assert_eq!(e.matches("transport error").count(), 1, "{e}");
    assert_eq!(e.matches("starting true in ").count(), 1, "{e}");
    assert!(e.contains("503") && e.contains("envd is overloaded"), "{e}");

    // One argument over the kernel's limit: refused before anything is sent.
    let big = "x".repeat(200 << 10);
    let r = p.spawn(SpawnSpec::new("echo").arg(&big));
    let e = match r {
        Err(e) => e,
        Ok(c) => within("wait", 60, c.wait()).await.expect_err("E2BIG"),
    };
    assert!(e.kind() == ErrorKind::InvalidSpec, "{e:?}");
    let e = e.to_string();
    assert!(e.contains("argument 1") && e.contains("E2BIG"), "{e}");

    // Many arguments under the per-argument limit but over the total: the kernel's cause
    // reaches the caller whole.
    let args: Vec<String> = (0..40).map(|_| "y".repeat(100 << 10)).collect();
    let child = p.spawn(SpawnSpec::new("echo").args(args)).expect("spawn");
    let e = within("wait", 60, child.wait())
        .await
        .expect_err("E2BIG")
        .to_string();
    eprintln!("E2BIG: {e}");
    assert!(
        e.to_lowercase().contains("argument list too long"),
        "the cause survives: {e}"
    );
    assert_eq!(e.matches("starting echo in ").count(), 1, "{e}");
    assert!(
        e.len() < 2000,
        "the argv is not echoed back: {} bytes",
        e.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminal_past_its_deadline_leaves_nothing_running() {
    let env = env().await;
    let p = proc_of(&env).await;
    let file = format!("{}/pids-terminal", p.cwd());
    let timed = p.clone().process_timeout(Some(Duration::from_secs(4)));
    let mut t = timed
        .spawn_terminal(
            exec_world::TerminalSpec::new("sh")
                .arg("-c")
                .arg(TREE)
                .arg("sh")
                .arg(file.clone()),
        )
        .expect("terminal");
    let mut out = t.take_output().expect("output");
    until_ready(&mut out).await;
    let r = within("terminal wait past the deadline", 120, t.wait()).await;
    assert!(r.is_err(), "no end event, so no exit status: {r:?}");
    assert_no_survivors(&p, &file).await;
}
