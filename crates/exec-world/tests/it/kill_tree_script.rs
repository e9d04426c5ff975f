//! The in-world kill script (`tree_script`) ends a detached local tree, setsid'd and
//! orphaned descendants included, without help from the local adapter.

use std::time::Duration;

use exec_world::{LocalSubprocess, SpawnSpec, Subprocess};
use exec_world_sys::tree_script::{MARKER_VAR, kill_tree_argv};
use futures::StreamExt;

async fn output(proc: &LocalSubprocess, argv: &[String]) -> (i32, String, String) {
    let mut child = proc
        .spawn(SpawnSpec::new(argv[0].clone()).args(argv[1..].iter().cloned()))
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut err = child.take_stderr().expect("stderr");
    let mut o = Vec::new();
    let mut e = Vec::new();
    while let Some(c) = out.next().await {
        o.extend_from_slice(&c.expect("stdout"));
    }
    while let Some(c) = err.next().await {
        e.extend_from_slice(&c.expect("stderr"));
    }
    let st = child.wait().await.expect("wait");
    (
        st.code.unwrap_or(-1),
        String::from_utf8_lossy(&o).into_owned(),
        String::from_utf8_lossy(&e).into_owned(),
    )
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s.rsplit(") ").next().and_then(|r| r.split(' ').next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_tree_script_leaves_no_survivor() {
    let proc = LocalSubprocess::new().expect("local");
    let script = r#"echo "pid $$"
sleep 1000 & echo "pid $!"
sh -c 'sleep 1000 & echo "pid $!"; wait' &
nohup sleep 1000 >/dev/null 2>&1 & echo "pid $!"
sh -c 'trap "" TERM; echo "pid $$"; exec sleep 1000' &
sh -c 'setsid sh -c "echo \"pid \$\$\"; exec sleep 1000" & ' &
echo done
wait
"#;
    let mut child = proc
        .spawn(SpawnSpec::new("sh").arg("-c").arg(script))
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut seen = String::new();
    while seen.matches("pid ").count() < 6 || !seen.contains("done") {
        let chunk = tokio::time::timeout(Duration::from_secs(60), out.next())
            .await
            .expect("tree output in time")
            .expect("stream open")
            .expect("read");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let pids: Vec<u32> = seen
        .split("pid ")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 6, "{seen}");
    let leader = child.pid().expect("pid");
    let environ = std::fs::read(format!("/proc/{leader}/environ")).expect("environ");
    let prefix = format!("{MARKER_VAR}=");
    let marker = environ
        .split(|b| *b == 0)
        .find_map(|v| std::str::from_utf8(v).ok()?.strip_prefix(&prefix))
        .expect("marker in environment")
        .to_string();
    child.detach(); // the script, not the adapter, must do the killing
    drop(out);
    assert!(pids.iter().all(|&p| alive(p)), "tree started");
    let argv = kill_tree_argv(leader, &marker, Duration::from_millis(300), false);
    let (code, _, err) = output(&proc, &argv).await;
    assert_eq!(code, 0, "kill script: {err}");
    let survivors: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(survivors.is_empty(), "survivors: {survivors:?}");
}
