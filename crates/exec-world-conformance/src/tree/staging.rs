//! Staging left by cancelled transfers: entries of a world process that is gone are
//! removed by the next transfer beside them (and by [`tree::sweep`]), entries of a live
//! one and other names are kept; a dropped `upload_via_file` / `download_via_file`
//! leaves nothing once the next transfer has run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use exec_world::tree::{self, TreeOptions};
use exec_world::{SpawnSpec, StdinMode, WorldPath};
use futures::StreamExt as _;

use super::HostDir;
use crate::{World, sh, within};

/// The sorted names in the world directory `dir`.
async fn names(world: &World, dir: &str) -> Vec<String> {
    let out = sh(world.proc.as_ref(), "ls -A \"$1\"", &[dir.to_string()]).await;
    assert!(out.status.success(), "ls {dir}: {out:?}");
    let mut v: Vec<String> = out.stdout_text().lines().map(str::to_owned).collect();
    v.sort();
    v
}

/// Waits until the world process `pid` is gone.
async fn gone(world: &World, pid: &str) {
    within(30, "the cancelled transfer's process ends", async {
        loop {
            let out = sh(
                world.proc.as_ref(),
                "[ -d \"/proc/$1\" ] && echo alive; true",
                &[pid.to_string()],
            )
            .await;
            if !out.stdout_text().contains("alive") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// The pid in a staging name `….ew-tree-PID-XXXXXXXXXX`.
fn pid_of(name: &str) -> String {
    let tail = name.rsplit("ew-tree-").next().expect("a staging name");
    tail.split('-').next().expect("a pid").to_owned()
}

/// Options whose progress callback blocks the transfer's worker until `go` is set (at
/// most 30 s), so the test can cancel a transfer while its staging exists.
fn held(go: &Arc<AtomicBool>) -> TreeOptions {
    let go = go.clone();
    TreeOptions::default().progress(move |_| {
        for _ in 0..3000 {
            if go.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// See the module docs.
pub async fn tree_cancelled_transfers_leave_no_staging(world: &World) {
    let proc = world.proc.as_ref();
    let scratch = world.proc_path(&world.scratch).to_string();
    let tmp = sh(proc, "printf %s \"${TMPDIR:-/tmp}\"", &[])
        .await
        .stdout_text();
    let dead = sh(proc, "echo $$", &[])
        .await
        .stdout_text()
        .trim()
        .to_owned();
    let mut live = proc
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("echo $$; exec cat >/dev/null")
                .stdin(StdinMode::Piped),
        )
        .expect("spawn a live owner");
    let live_stdin = live.take_stdin().expect("stdin");
    let mut out = live.take_stdout().expect("stdout");
    let mut first = Vec::new();
    while !first.contains(&b'\n') {
        let chunk = within(30, "the live pid", out.next())
            .await
            .expect("a line")
            .expect("stdout");
        first.extend_from_slice(&chunk);
    }
    let alive = String::from_utf8_lossy(&first).trim().to_owned();
    let made = sh(
        proc,
        r#"cd "$1" && : > ".up.ew-tree-$2-aaaaaaaaaa" && mkdir ".up.ew-tree-$2-bbbbbbbbbb" \
  && : > ".up.ew-tree-$2-bbbbbbbbbb/x" && : > ".up.ew-tree-$3-cccccccccc" \
  && : > "keep.ew-tree-$2-dddddddddd" && : > ".keep.ew-tree-$2-short" \
  && : > "$4/.ew-tree-$2-eeeeeeeeee""#,
        &[scratch.clone(), dead.clone(), alive.clone(), tmp.clone()],
    )
    .await;
    assert!(made.status.success(), "{made:?}");

    // The next upload beside them removes the dead process's entries only.
    let src = HostDir::new("stage");
    std::fs::write(src.0.join("f"), b"f").expect("write");
    within(
        120,
        "upload",
        tree::upload(
            proc,
            &src.0,
            &world.proc_path(&world.path("up")),
            &TreeOptions::default(),
        ),
    )
    .await
    .expect("upload");
    let after = names(world, &scratch).await;
    assert_eq!(
        after,
        [
            format!(".keep.ew-tree-{dead}-short"),
            format!(".up.ew-tree-{alive}-cccccccccc"),
            format!("keep.ew-tree-{dead}-dddddddddd"),
            "up".to_owned(),
        ],
        "the stale staging of process {dead} is swept, that of the live {alive} kept"
    );
    // Once its owner is gone, an explicit sweep takes the last one.
    drop(live_stdin);
    within(30, "the live owner ends", live.wait())
        .await
        .expect("wait");
    let n = tree::sweep(proc, &WorldPath::new(&scratch).expect("path"))
        .await
        .expect("sweep");
    assert_eq!(n, 1);
    assert!(
        !names(world, &scratch)
            .await
            .iter()
            .any(|n| n.starts_with(".up.")),
        "swept"
    );

    // Through a file (fs and processes must see the same paths).
    if world.proc_root.is_some() {
        return;
    }
    let big = HostDir::new("stage-big");
    std::fs::write(big.0.join("big"), vec![7u8; 4 << 20]).expect("write");
    let go = Arc::new(AtomicBool::new(false));
    let up2 = world.path("up2");
    let staging = {
        let opts = held(&go);
        let upload = tree::upload_via_file(world.fs.as_ref(), proc, &big.0, &up2, &opts);
        let find = async {
            loop {
                if let Some(n) = names(world, &scratch)
                    .await
                    .into_iter()
                    .find(|n| n.starts_with(".up2.ew-tree-"))
                {
                    return n;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            r = upload => panic!("the upload ended before it was cancelled: {r:?}"),
            n = within(60, "the upload's staging archive", find) => n,
        }
        // The upload future is dropped here: cancelled mid-write.
    };
    go.store(true, Ordering::SeqCst);
    gone(world, &pid_of(&staging)).await;
    let up3 = world.path("up3");
    within(
        120,
        "upload after a cancelled one",
        tree::upload_via_file(
            world.fs.as_ref(),
            proc,
            &src.0,
            &up3,
            &TreeOptions::default(),
        ),
    )
    .await
    .expect("upload_via_file");
    let left = names(world, &scratch).await;
    assert!(
        !left
            .iter()
            .any(|n| n.contains(".ew-tree-") && n.starts_with('.') && !n.starts_with(".keep.")),
        "no staging left after a cancelled upload_via_file: {left:?}"
    );
    assert!(!left.contains(&"up2".to_owned()), "{left:?}");
    assert!(left.contains(&"up3".to_owned()), "{left:?}");

    // A download cancelled while it reads its archive.
    let before = names(world, &tmp).await;
    let stale_tmp = format!(".ew-tree-{dead}-eeeeeeeeee");
    assert!(
        before.contains(&stale_tmp),
        "uploads sweep beside their destination only: {before:?}"
    );
    let go = Arc::new(AtomicBool::new(false));
    let back = HostDir::new("stage-back");
    let ours = {
        let (missing, x, plain) = (
            world.path("up2-src-missing"),
            back.0.join("x"),
            TreeOptions::default(),
        );
        // (A missing source fails cleanly.)
        let e = within(
            60,
            "download of a missing tree",
            tree::download_via_file(world.fs.as_ref(), proc, &missing, &x, &plain),
        )
        .await
        .expect_err("missing");
        assert_eq!(e.kind(), exec_world::ErrorKind::NotFound, "{e}");
        let (from, to, opts) = (world.path("up"), back.0.join("c"), held(&go));
        let download = tree::download_via_file(world.fs.as_ref(), proc, &from, &to, &opts);
        let find = async {
            loop {
                let now = names(world, &tmp).await;
                if let Some(n) = now
                    .into_iter()
                    .find(|n| n.starts_with(".ew-tree-") && !before.contains(n))
                {
                    return n;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            r = download => panic!("the download ended before it was cancelled: {r:?}"),
            n = within(60, "the download's archive", find) => n,
        }
    };
    go.store(true, Ordering::SeqCst);
    gone(world, &pid_of(&ours)).await;
    within(
        120,
        "download after a cancelled one",
        tree::download_via_file(
            world.fs.as_ref(),
            proc,
            &world.path("up"),
            &back.0.join("d"),
            &TreeOptions::default(),
        ),
    )
    .await
    .expect("download_via_file");
    let left = names(world, &tmp).await;
    assert!(
        !left.contains(&ours) && !left.contains(&stale_tmp),
        "the cancelled download's archive {ours} and the stale {stale_tmp} are gone: {left:?}"
    );
    assert_eq!(std::fs::read(back.0.join("d/f")).expect("downloaded"), b"f");
}
