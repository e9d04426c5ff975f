//! Terminal conformance tests (`term_*`), for backends with
//! [`ProcCapabilities::terminals`](exec_world::ProcCapabilities::terminals).

use std::time::Duration;

use super::{World, pids_in, read_until, skip, survivors, within};
use exec_world::{Signal, TermSize, Terminal, TerminalSpec};

fn start(w: &World, size: TermSize) -> Option<(Terminal, exec_world::OutputStream)> {
    if !w.proc.capabilities().terminals {
        skip("terminal tests", "terminals");
        return None;
    }
    let mut t = w
        .proc
        .spawn_terminal(
            TerminalSpec::new("sh")
                .arg("-i")
                .cwd(w.scratch.clone())
                .size(size),
        )
        .expect("spawn_terminal");
    let out = t.take_output().expect("output");
    Some((t, out))
}

/// Input reaches the program, its output comes back; exit codes pass through.
/// (`''` inside words keeps the echoed input from matching the expected output.)
pub async fn term_io_and_exit(w: &World) {
    let Some((t, mut out)) = start(w, TermSize::default()) else {
        return;
    };
    let mut seen = Vec::new();
    t.write(b"echo hel''lo-$((6*7)); pwd\n")
        .await
        .expect("write");
    // pwd's output proves the cwd applies (the echoed input holds no path).
    let cwd = w.scratch.to_string();
    read_until(&mut out, &mut seen, 60, "echo and pwd output", |s| {
        s.contains("hello-42") && s.contains(&cwd)
    })
    .await;
    t.write(b"exit 7\n").await.expect("write exit");
    let st = within(60, "terminal exit", t.wait()).await.expect("wait");
    assert_eq!(st.code, Some(7));
}

/// The initial size and resize are what `stty size` reports.
pub async fn term_resize(w: &World) {
    if !w.proc.capabilities().terminal_resize {
        return skip("term_resize", "terminal_resize");
    }
    let Some((t, mut out)) = start(w, TermSize { cols: 91, rows: 27 }) else {
        return;
    };
    let mut seen = Vec::new();
    t.write(b"stty size\n").await.expect("write");
    read_until(&mut out, &mut seen, 60, "initial size", |s| {
        s.contains("27 91")
    })
    .await;
    t.resize(TermSize {
        cols: 132,
        rows: 43,
    })
    .await
    .expect("resize");
    seen.clear();
    t.write(b"stty size\n").await.expect("write");
    read_until(&mut out, &mut seen, 60, "resized", |s| s.contains("43 132")).await;
    within(60, "terminate", t.terminate(Duration::from_secs(1)))
        .await
        .expect("terminate");
}

/// signal reaches the foreground job, as a keyboard's would.
pub async fn term_signal_foreground(w: &World) {
    let Some((t, mut out)) = start(w, TermSize::default()) else {
        return;
    };
    let mut seen = Vec::new();
    t.write(
        b"sh -c 'trap \"echo got''int; exit 0\" INT; echo rea''dy; while :; do sleep 0.1; done'; echo after''job\n",
    )
    .await
    .expect("write");
    read_until(&mut out, &mut seen, 60, "ready", |s| s.contains("ready")).await;
    t.signal(Signal::Int).await.expect("signal");
    read_until(&mut out, &mut seen, 60, "handler ran", |s| {
        s.contains("gotint") && s.contains("afterjob")
    })
    .await;
    // The shell survived the job's signal and still answers.
    t.write(b"echo sti''ll-here\n").await.expect("write");
    read_until(&mut out, &mut seen, 60, "shell alive", |s| {
        s.contains("still-here")
    })
    .await;
    within(60, "terminate", t.terminate(Duration::from_secs(1)))
        .await
        .expect("terminate");
}

/// terminate ends every process group of the session: background jobs (own groups under
/// job control), nohup'd and setsid'd processes.
pub async fn term_terminate_every_group(w: &World) {
    let Some((t, mut out)) = start(w, TermSize::default()) else {
        return;
    };
    let caps = w.proc.capabilities();
    let mut seen = Vec::new();
    let mut script = String::from(
        "echo \"p\"\"id $$\"\n\
         sleep 1000 &\necho \"p\"\"id $!\"\n\
         nohup sleep 1000 >/dev/null 2>&1 &\necho \"p\"\"id $!\"\n\
         sh -c 'trap \"\" TERM HUP; echo \"p\"\"id $$\"; exec sleep 1000' &\n",
    );
    let mut expected = 4;
    if caps.escaped_descendants {
        script.push_str("setsid sh -c 'echo \"p\"\"id $$\"; exec sleep 1000' &\n");
        expected += 1;
    }
    t.write(script.as_bytes()).await.expect("write");
    read_until(&mut out, &mut seen, 60, "pids", |s| {
        pids_in(s).len() >= expected
    })
    .await;
    let pids = pids_in(&String::from_utf8_lossy(&seen));
    assert_eq!(
        survivors(w.proc.as_ref(), &pids).await.len(),
        pids.len(),
        "all started"
    );
    within(120, "terminate", t.terminate(Duration::from_millis(500)))
        .await
        .expect("terminate");
    let alive = survivors(w.proc.as_ref(), &pids).await;
    assert!(
        alive.is_empty(),
        "survivors of terminal terminate: {alive:?} of {pids:?}"
    );
}
