//! Conformance tests of [`Fs::watch`](exec_world::Fs::watch): create, write, remove, rename,
//! recursive and not, overflow (then the watch goes on), stop on drop, permission. Changes
//! are made with the world's own processes (`sh`), as an agent would make them.

use std::time::Duration;

use futures::StreamExt;

use super::{World, sh, skip, within};
use exec_world::{ErrorKind, WatchEvent, WatchEventKind, WatchOptions, WatchStream, WorldPath};

fn claims_watch(world: &World, test: &str) -> bool {
    if world.fs.capabilities().watch {
        true
    } else {
        skip(test, "watch");
        false
    }
}

/// Runs `script` in the world with `dir` (as the processes see it) as `$1`.
async fn change(world: &World, dir: &WorldPath, script: &str) {
    let out = sh(
        world.proc.as_ref(),
        &format!("cd \"$1\" && {{ {script} ; }}"),
        &[world.proc_path(dir).to_string()],
    )
    .await;
    assert!(out.status.success(), "change `{script}` failed: {out:?}");
}

/// Reads events until one matches `want`; checks numbering as it goes.
async fn until(
    stream: &mut WatchStream,
    seen: &mut Vec<WatchEvent>,
    what: &str,
    want: impl Fn(&WatchEvent) -> bool,
) {
    let fut = async {
        loop {
            let ev = match stream.next().await {
                Some(Ok(ev)) => ev,
                Some(Err(e)) => panic!("{what}: watch error {e}"),
                None => panic!("{what}: watch ended; seen {seen:?}"),
            };
            let expected = seen.last().map(|l| l.seq + 1).unwrap_or(0);
            assert_eq!(ev.seq, expected, "sequence numbers go up by one: {seen:?}");
            seen.push(ev.clone());
            if want(&ev) {
                return;
            }
        }
    };
    within(30, what, fut).await
}

fn is(kind: WatchEventKind, path: &'static str) -> impl Fn(&WatchEvent) -> bool {
    move |e| e.kind == kind && e.path == path
}

async fn fresh_dir(world: &World, name: &str) -> WorldPath {
    let d = world.path(name);
    world.fs.mkdir(&d, false).await.expect("mkdir watched dir");
    d
}

/// Create, write, metadata, remove, rename: each reported with its relative path, in order.
pub async fn watch_create_write_remove_rename(world: &World) {
    if !claims_watch(world, "watch_create_write_remove_rename") {
        return;
    }
    let dir = fresh_dir(world, "w").await;
    let mut s = world
        .fs
        .watch(&dir, WatchOptions::default())
        .await
        .expect("watch");
    let mut seen = Vec::new();
    change(world, &dir, "printf hello > a.txt").await;
    until(
        &mut s,
        &mut seen,
        "create",
        is(WatchEventKind::Created, "a.txt"),
    )
    .await;
    until(
        &mut s,
        &mut seen,
        "write",
        is(WatchEventKind::Written, "a.txt"),
    )
    .await;
    change(world, &dir, "chmod 600 a.txt").await;
    until(
        &mut s,
        &mut seen,
        "chmod",
        is(WatchEventKind::MetadataChanged, "a.txt"),
    )
    .await;
    change(world, &dir, "mv a.txt b.txt").await;
    until(
        &mut s,
        &mut seen,
        "rename from",
        is(WatchEventKind::Renamed, "a.txt"),
    )
    .await;
    until(
        &mut s,
        &mut seen,
        "rename to",
        is(WatchEventKind::Created, "b.txt"),
    )
    .await;
    change(world, &dir, "rm b.txt").await;
    until(
        &mut s,
        &mut seen,
        "remove",
        is(WatchEventKind::Removed, "b.txt"),
    )
    .await;
    assert!(
        seen.iter().all(|e| e.kind != WatchEventKind::Overflow),
        "no overflow for a few changes: {seen:?}"
    );
}

/// Recursive watches see deep changes (in directories made while watching too); a
/// plain watch reports a subdirectory's own entry but nothing inside it.
pub async fn watch_recursive(world: &World) {
    if !claims_watch(world, "watch_recursive") {
        return;
    }
    let dir = fresh_dir(world, "r").await;
    change(world, &dir, "mkdir old").await;
    let mut rec = world
        .fs
        .watch(&dir, WatchOptions::default().recursive(true))
        .await
        .expect("recursive watch");
    let mut flat = world
        .fs
        .watch(&dir, WatchOptions::default())
        .await
        .expect("plain watch");
    change(world, &dir, "printf 1 > old/x").await;
    let mut seen = Vec::new();
    until(
        &mut rec,
        &mut seen,
        "file in old subdir",
        is(WatchEventKind::Created, "old/x"),
    )
    .await;
    change(world, &dir, "mkdir new").await;
    until(
        &mut rec,
        &mut seen,
        "new subdir",
        is(WatchEventKind::Created, "new"),
    )
    .await;
    // A directory made while watching gets its own watch; a remote watcher adds it
    // asynchronously, so files are made until one is reported (bounded).
    let mut got = false;
    for k in 0..20 {
        change(world, &dir, &format!("printf 2 > new/y{k}")).await;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
        while let Ok(Some(item)) = tokio::time::timeout_at(deadline, rec.next()).await {
            let ev = item.expect("watch event");
            let expected = seen.last().map(|l: &WatchEvent| l.seq + 1).unwrap_or(0);
            assert_eq!(ev.seq, expected, "sequence numbers go up by one");
            let hit = ev.kind == WatchEventKind::Created && ev.path.starts_with("new/y");
            seen.push(ev);
            if hit {
                got = true;
                break;
            }
        }
        if got {
            break;
        }
    }
    assert!(
        got,
        "a file in a directory made while watching is reported: {seen:?}"
    );

    change(world, &dir, "printf 3 > marker").await;
    let mut flat_seen = Vec::new();
    until(
        &mut flat,
        &mut flat_seen,
        "marker",
        is(WatchEventKind::Created, "marker"),
    )
    .await;
    assert!(
        flat_seen.iter().any(|e| e.path == "new"),
        "a plain watch reports the subdirectory itself: {flat_seen:?}"
    );
    assert!(
        flat_seen
            .iter()
            .all(|e| !e.path.contains('/') && e.kind != WatchEventKind::Overflow),
        "a plain watch reports nothing inside subdirectories: {flat_seen:?}"
    );
}

/// Events lost (more changes than the watcher's queue holds while nobody reads) come as
/// an explicit overflow event, and the watch goes on after it.
pub async fn watch_overflow(world: &World) {
    if !claims_watch(world, "watch_overflow") {
        return;
    }
    let dir = fresh_dir(world, "o").await;
    let out = sh(
        world.proc.as_ref(),
        "cat /proc/sys/fs/inotify/max_queued_events",
        &[],
    )
    .await;
    let max: u64 = out.stdout_text().trim().parse().unwrap_or(16384);
    if max > 200_000 {
        println!("skipped: watch_overflow: the inotify queue holds {max} events");
        return;
    }
    let mut s = world
        .fs
        .watch(&dir, WatchOptions::default())
        .await
        .expect("watch");
    // Nobody reads while the world makes twice a queue's worth of creations, then removes
    // them all. Long names: a remote watcher's events must also outgrow the buffers on
    // the way (sockets) before the watcher's own queue fills.
    let n = 2 * max;
    let long = "n".repeat(200);
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do : > f${{i}}_{long}; i=$((i+1)); done; find . -name 'f*' -delete"
    );
    change(world, &dir, &script).await;
    let mut seen = Vec::new();
    let mut count = 0u64;
    let fut = async {
        loop {
            match s.next().await {
                Some(Ok(ev)) => {
                    count += 1;
                    if ev.kind == WatchEventKind::Overflow {
                        seen.push(ev);
                        return;
                    }
                    if seen.len() < 4 {
                        seen.push(ev);
                    }
                }
                Some(Err(e)) => panic!("watch error instead of an overflow event: {e}"),
                None => panic!("watch ended instead of an overflow event"),
            }
        }
    };
    within(120, "overflow event", fut).await;
    assert!(
        count <= 2 * n + 10,
        "an overflow among at most the events made"
    );
    // The watch is still alive: drain what is queued, then a new change shows up.
    change(world, &dir, "printf z > after").await;
    let mut rest = Vec::new();
    within(60, "event after overflow", async {
        loop {
            match s.next().await {
                Some(Ok(ev)) => {
                    let hit = ev.kind == WatchEventKind::Created && ev.path == "after";
                    rest.push(ev.kind);
                    if hit {
                        return;
                    }
                }
                Some(Err(e)) => panic!("watch error after overflow: {e}"),
                None => panic!("watch ended after overflow"),
            }
        }
    })
    .await;
}

/// The inotify watches of this process on the inode `ino` (`/proc/self/fdinfo`): the
/// watchers of a local backend or an in-process emulator.
fn watches_on(ino: u64) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc/self/fdinfo") else {
        return 0;
    };
    let needle = format!("ino:{ino:x} ");
    rd.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with("inotify ") && l.contains(&needle))
                .count()
        })
        .sum()
}

/// Dropping the stream stops the watcher on the world's side. Checked where the watcher
/// lives in this process (local, the emulator); skipped where it cannot be seen.
pub async fn watch_stops_on_drop(world: &World) {
    if !claims_watch(world, "watch_stops_on_drop") {
        return;
    }
    let dir = fresh_dir(world, "d").await;
    let out = sh(
        world.proc.as_ref(),
        "stat -c %i \"$1\"",
        &[world.proc_path(&dir).to_string()],
    )
    .await;
    let ino: u64 = out.stdout_text().trim().parse().expect("inode number");
    let s = world
        .fs
        .watch(&dir, WatchOptions::default())
        .await
        .expect("watch");
    let mut found = 0;
    for _ in 0..50 {
        found = watches_on(ino);
        if found > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if found == 0 {
        println!("skipped: watch_stops_on_drop: the watcher is not in this process");
        drop(s);
        return;
    }
    drop(s);
    let mut left = found;
    for _ in 0..100 {
        left = watches_on(ino);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "the watcher is gone after the stream is dropped");
}

/// A directory the acting user cannot list: PermissionDenied; a file: NotADirectory;
/// nothing: NotFound.
pub async fn watch_permission_and_kinds(world: &World) {
    if !claims_watch(world, "watch_permission_and_kinds") {
        return;
    }
    let opts = WatchOptions::default;
    let missing = world.path("missing");
    let e = world.fs.watch(&missing, opts()).await.expect_err("missing");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let file = world.path("file");
    super::put(world.fs.as_ref(), &file, b"x").await;
    let e = world.fs.watch(&file, opts()).await.expect_err("file");
    assert_eq!(e.kind(), ErrorKind::NotADirectory, "{e}");

    let uid = sh(world.proc.as_ref(), "id -u", &[]).await.stdout_text();
    if uid.trim() == "0" {
        println!("skipped: watch_permission_and_kinds: the world's user is root");
        return;
    }
    let closed = fresh_dir(world, "closed").await;
    change(world, &closed, "chmod 000 .").await;
    let e = world
        .fs
        .watch(&closed, opts())
        .await
        .expect_err("closed dir");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    change(world, &world.scratch, "chmod 755 closed").await;
}

/// A recursive watch reports nothing below a subdirectory the acting user cannot list
/// (root made it, mode 700), while changes beside it still arrive; once the user can
/// list it, its changes arrive too. Needs a non-root user with passwordless `sudo` (the
/// E2B worlds); skipped elsewhere.
pub async fn watch_recursive_hides_unreadable_subdirs(world: &World) {
    let test = "watch_recursive_hides_unreadable_subdirs";
    if !claims_watch(world, test) {
        return;
    }
    let uid = sh(world.proc.as_ref(), "id -u", &[]).await.stdout_text();
    if uid.trim() == "0" {
        println!("skipped: {test}: the world's user is root");
        return;
    }
    if !sh(world.proc.as_ref(), "sudo -n true", &[])
        .await
        .status
        .success()
    {
        println!("skipped: {test}: no passwordless sudo in the world");
        return;
    }
    let dir = fresh_dir(world, "hide").await;
    change(
        world,
        &dir,
        "mkdir open && sudo -n mkdir closed && sudo -n chmod 700 closed",
    )
    .await;
    let mut rec = world
        .fs
        .watch(&dir, WatchOptions::default().recursive(true))
        .await
        .expect("recursive watch");
    let mut seen = Vec::new();
    change(
        world,
        &dir,
        "sudo -n sh -c 'echo s > closed/secret && mkdir closed/sub && echo t > closed/sub/t' \
         && printf v > open/visible",
    )
    .await;
    until(
        &mut rec,
        &mut seen,
        "the readable subdirectory's file",
        is(WatchEventKind::Created, "open/visible"),
    )
    .await;
    // Anything still in flight.
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(500), rec.next()).await {
        let ev = item.expect("watch event");
        let expected = seen.last().map(|l: &WatchEvent| l.seq + 1).unwrap_or(0);
        assert_eq!(ev.seq, expected, "sequence numbers go up by one");
        seen.push(ev);
    }
    assert!(
        seen.iter().all(|e| !e.path.starts_with("closed/")),
        "no name below the unreadable directory: {seen:?}"
    );
    change(
        world,
        &dir,
        "sudo -n chmod 755 closed && sudo -n sh -c 'echo u > closed/later'",
    )
    .await;
    until(
        &mut rec,
        &mut seen,
        "a file in the directory once readable",
        is(WatchEventKind::Created, "closed/later"),
    )
    .await;
    drop(rec);
    change(world, &dir, "sudo -n rm -rf closed").await;
}
