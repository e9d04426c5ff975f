//! e2bx against a hostile sandbox user: Ctrl-C and `--timeout` on a persistent sandbox end
//! descendants that left the process group with `setsid` and lost their parent,
//! `ls`/`stat` never print a name's control characters raw (no forged lines, no
//! terminal escapes), and `cp`, `cat`, `ls` and `stat` act as the sandbox user. Survivors are counted inside the sandbox, in its own pid view.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use e2b_core::{EnvdApi as _, Sandbox, StartProcess};
use support::Remote;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// A command that starts escapees before saying `ready`: a plain background job, a
/// `setsid` child, and a `setsid` double fork that loses its parent; each writes its pid
/// to /tmp/pids. (One that also clears its environment, `env -i`, is not contained on E2B
/// yet: subprocess-e2b does not claim `contained_escapes`; see docs/reliability.md.)
const ESCAPES: &str = r#"rm -f /tmp/pids
sleep 3000 & echo $! >> /tmp/pids
setsid sleep 3001 & echo $! >> /tmp/pids
setsid sh -c 'sh -c "sleep 3002 & echo \$! >> /tmp/pids" &' ; sleep 0.3
echo ready
sleep 3003"#;

/// A bound that only a hang reaches: the escapees sleep 3000 s.
const HANG: Duration = Duration::from_secs(120);

/// The pids of /tmp/pids that are still alive in the sandbox (zombies count as gone).
async fn survivors(sb: &Sandbox) -> Vec<String> {
    let script = r#"for p in $(cat /tmp/pids); do
  s=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' /proc/$p/status 2>/dev/null)
  [ -n "$s" ] && [ "$s" != Z ] && echo "$p"
done; true"#;
    let out = sb
        .run(
            StartProcess::new("/bin/sh")
                .args(["-c", script])
                .user("root"),
        )
        .await
        .expect("survivor check runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

async fn pid_count(sb: &Sandbox) -> usize {
    let out = sb
        .run(StartProcess::new("/bin/sh").args(["-c", "cat /tmp/pids"]))
        .await
        .expect("read pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .count()
}

/// Poll until nothing of /tmp/pids survives (the kill is done before e2bx exits; the
/// kernel may take a moment to reap), returning what still lives at the end.
async fn settle(sb: &Sandbox) -> Vec<String> {
    let mut left = survivors(sb).await;
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = survivors(sb).await;
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_setsid_escapees() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let mut child = r
        .cmd()
        .args(["--sandbox", &id, "run", "--", "sh", "-c", ESCAPES])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(
        lines.next_line().await.expect("read").as_deref(),
        Some("ready")
    );
    let sb = r
        .client()
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    assert_eq!(pid_count(&sb).await, 3, "three escapees started");
    assert_eq!(survivors(&sb).await.len(), 3, "all alive before Ctrl-C");
    let pid = child.id().expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .expect("e2bx exits after Ctrl-C (a survivor holding the output would keep it)")
        .expect("wait");
    assert_eq!(status.code(), Some(130));
    let left = settle(&sb).await;
    assert!(left.is_empty(), "survived Ctrl-C: {left:?}");
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_ends_the_whole_tree_and_exits_124() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let o = tokio::time::timeout(
        HANG,
        r.out(&[
            "--sandbox",
            &id,
            "run",
            "--timeout",
            "2",
            "--",
            "sh",
            "-c",
            ESCAPES,
        ]),
    )
    .await
    .expect("e2bx exits after --timeout (a survivor holding the output would keep it)");
    assert_eq!(o.code, 124, "stderr: {}", o.stderr);
    assert!(o.text().starts_with("ready\n"), "{}", o.text());
    assert!(o.stderr.contains("--timeout 2s"), "{}", o.stderr);
    let sb = r
        .client()
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    assert_eq!(pid_count(&sb).await, 3);
    let left = settle(&sb).await;
    assert!(left.is_empty(), "survived --timeout: {left:?}");
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_and_stat_escape_control_characters_in_names() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let sb = r
        .client()
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    let forged = "x\n-rw-r--r-- root     root            0 2026-01-01T00:00:00Z forged";
    let escape = "\u{1b}[2J\u{1b}]0;pwned\u{7}red";
    for name in [forged, escape, "plain.txt"] {
        sb.upload_bytes(
            &format!("/home/user/d/{name}"),
            None,
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .expect("upload");
    }
    let ls = r.out(&["--sandbox", &id, "ls", "d"]).await.ok();
    assert_eq!(ls.lines().count(), 3, "one line per entry: {ls:?}");
    assert!(!ls.contains('\u{1b}'), "raw ESC printed: {ls:?}");
    assert!(!ls.contains('\u{7}'), "raw BEL printed: {ls:?}");
    assert!(
        ls.contains(r"$'x\n-rw-r--r-- root"),
        "newline shown escaped: {ls:?}"
    );
    assert!(ls.contains(r"$'\033[2J\033]0;pwned\007red'"), "{ls:?}");
    assert!(ls.lines().any(|l| l.ends_with(" plain.txt")), "{ls:?}");
    // --json keeps the exact bytes (JSON escapes them itself).
    let json = r.out(&["--sandbox", &id, "--json", "ls", "d"]).await.json();
    let names: Vec<&str> = json
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        names.contains(&forged) && names.contains(&escape),
        "{names:?}"
    );
    let st = r
        .out(&["--sandbox", &id, "stat", &format!("d/{escape}")])
        .await
        .ok();
    assert!(!st.contains('\u{1b}'), "raw ESC in stat: {st:?}");
    assert_eq!(
        st.lines().next(),
        Some(r"path: $'/home/user/d/\033[2J\033]0;pwned\007red'")
    );
    r.emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_and_cat_act_as_the_sandbox_user_through_planted_links() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let sb = r
        .client()
        .connect(&id, e2b_core::ConnectOptions::default())
        .await
        .expect("connect");
    // A root-only file, and links to it planted by the sandbox user.
    let setup = sb
        .run(
            StartProcess::new("/bin/sh")
                .args(["-c", "mkdir -p /root/vault && echo SECRET > /root/vault/key && chmod 600 /root/vault/key"])
                .user("root"),
        )
        .await
        .expect("root setup");
    assert_eq!(setup.end.exit_code, 0, "{:?}", setup.stderr);
    let plant = sb
        .run(StartProcess::new("/bin/sh").args([
            "-c",
            "ln -s /root/vault/key /home/user/steal && ln -s /root/vault/key /home/user/clobber",
        ]))
        .await
        .expect("plant");
    assert_eq!(plant.end.exit_code, 0, "{:?}", plant.stderr);
    // Reading through the link: the user's permissions, so refused (root's /files would
    // have returned the bytes). The user cannot even traverse /root, so fs-e2b sees
    // nothing there: not found, or permission denied.
    let refused =
        |line: String| line.contains("permission denied") || line.contains("no such file");
    let cat = r.out(&["--sandbox", &id, "cat", "steal"]).await;
    assert!(refused(cat.one_line_error()), "{}", cat.stderr);
    assert!(!cat.text().contains("SECRET"));
    let dir = tempfile::tempdir().expect("tempdir");
    let got = dir.path().join("got");
    let down = r
        .out(&[
            "--sandbox",
            &id,
            "cp",
            "sbx:steal",
            got.to_str().expect("utf-8"),
        ])
        .await;
    assert!(
        down.one_line_error().contains("permission denied"),
        "{}",
        down.stderr
    );
    assert!(!got.exists());
    // Listing and stat act as the user too: root's envd ListDir/Stat would have shown
    // the vault's entries and the key's size.
    let ls = r.out(&["--sandbox", &id, "ls", "/root/vault"]).await;
    assert!(refused(ls.one_line_error()), "{}", ls.stderr);
    assert!(!ls.text().contains("key"), "{}", ls.text());
    let st = r.out(&["--sandbox", &id, "stat", "/root/vault/key"]).await;
    assert!(refused(st.one_line_error()), "{}", st.stderr);
    let link = r.out(&["--sandbox", &id, "stat", "steal"]).await.ok();
    assert!(
        link.contains("type: symlink") && link.contains("owner: user"),
        "{link}"
    );
    // Writing to the link replaces the link; the root-only file keeps its bytes.
    let src = dir.path().join("evil");
    std::fs::write(&src, b"overwritten").expect("local file");
    r.out(&[
        "--sandbox",
        &id,
        "cp",
        src.to_str().expect("utf-8"),
        "sbx:clobber",
    ])
    .await
    .ok();
    let check = sb
        .run(
            StartProcess::new("/bin/sh")
                .args(["-c", "cat /root/vault/key; stat -c %U:%a /root/vault/key; cat /home/user/clobber; [ -L /home/user/clobber ] && echo still-a-link; true"])
                .user("root"),
        )
        .await
        .expect("check");
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "SECRET\nroot:600\noverwritten"
    );
    r.emu.shutdown().await;
}
