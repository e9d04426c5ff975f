//! e2b-core's snapshot, fork and volume calls against the emulator: a snapshot carries the
//! files of that instant and no process; listing filters and pages; deleting a snapshot in
//! use leaves its sandboxes running; forks diverge; a fork while a command writes gets a
//! consistent prefix; a fork or snapshot create is not resent after an ambiguous failure;
//! volumes are shared by running sandboxes and reachable through the content API.

use crate::e2b_core_support;

use std::time::Duration;

use bytes::Bytes;
use e2b_core::{CreateOptions, EnvdApi, Error, ForkOptions, SnapshotQuery, StartProcess};
use e2b_core_support::{client, emulator};
use testing_fake::{FaultAction, FaultRule, Plane};

/// The file's text (at most 64 MiB: the writer of the fork test appends for as long as
/// the machine lets it, past 1 MiB on a fast one).
async fn read(sb: &e2b_core::Sandbox, path: &str) -> String {
    let bytes = sb.download_bytes(path, None, 64 << 20).await.expect("read");
    String::from_utf8(bytes).expect("utf-8")
}

async fn write(sb: &e2b_core::Sandbox, path: &str, text: &str) {
    sb.upload_bytes(path, None, Bytes::from(text.to_owned()))
        .await
        .expect("write");
}

async fn sh(sb: &e2b_core::Sandbox, script: &str) -> String {
    let out = sb.run(StartProcess::shell(script)).await.expect("run");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_carries_files_not_processes_and_lists_by_sandbox_and_page() {
    let emu = emulator().await;
    let c = client(&emu);
    let src = c.create(&CreateOptions::new("base")).await.expect("create");
    write(&src, "/home/user/note.txt", "at snapshot").await;
    // A ticker: in a sandbox where it runs, /home/user/tick keeps changing.
    sh(
        &src,
        "nohup bash -c 'while true; do date +%s%N > /home/user/tick; sleep 0.05; done' >/dev/null 2>&1 &",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let a = c.create_snapshot(src.id(), None).await.expect("snapshot");
    assert!(a.snapshot_id.ends_with(":default"), "{a:?}");
    assert!(a.names.is_empty());
    let b = c
        .create_snapshot(src.id(), Some("named:v1"))
        .await
        .expect("named snapshot");
    assert_eq!(b.snapshot_id, "local/named:v1");
    write(&src, "/home/user/note.txt", "later").await;

    let from = c
        .create(&CreateOptions::new(&a.snapshot_id))
        .await
        .expect("create from snapshot");
    assert_eq!(read(&from, "/home/user/note.txt").await, "at snapshot");
    let ticks = |sb: &e2b_core::Sandbox| {
        let sb = sb.clone();
        async move {
            let a = read(&sb, "/home/user/tick").await;
            tokio::time::sleep(Duration::from_millis(400)).await;
            a != read(&sb, "/home/user/tick").await
        }
    };
    assert!(
        !ticks(&from).await,
        "a process came along with the snapshot"
    );
    assert!(ticks(&src).await, "the source's process stopped");
    let by_name = c
        .create(&CreateOptions::new("named:v1"))
        .await
        .expect("create by name");
    assert_eq!(read(&by_name, "/home/user/note.txt").await, "at snapshot");

    let other = c.create(&CreateOptions::new("base")).await.expect("create");
    c.create_snapshot(other.id(), None).await.expect("snapshot");
    let mine = c
        .list_all_snapshots(&SnapshotQuery::new().sandbox(src.id()))
        .await
        .expect("list");
    let mut ids: Vec<_> = mine.iter().map(|s| s.snapshot_id.clone()).collect();
    ids.sort();
    let mut want = vec![a.snapshot_id.clone(), b.snapshot_id.clone()];
    want.sort();
    assert_eq!(ids, want);
    let page = c
        .list_snapshots(&SnapshotQuery::new().limit(2), None)
        .await
        .expect("page 1");
    assert_eq!(page.snapshots.len(), 2);
    let token = page.next_token.expect("a next token");
    let rest = c
        .list_snapshots(&SnapshotQuery::new().limit(2), Some(&token))
        .await
        .expect("page 2");
    assert_eq!(rest.snapshots.len(), 1);
    assert!(rest.next_token.is_none());

    // Deleting a snapshot in use: later creates fail, its sandboxes keep their files.
    assert!(c.delete_snapshot(&a.snapshot_id).await.expect("delete"));
    assert!(
        !c.delete_snapshot(&a.snapshot_id)
            .await
            .expect("delete again")
    );
    assert_eq!(read(&from, "/home/user/note.txt").await, "at snapshot");
    match c.create(&CreateOptions::new(&a.snapshot_id)).await {
        Err(Error::TemplateNotFound { .. }) => {}
        other => panic!("create from a deleted snapshot: {other:?}"),
    }
    match c.create_snapshot("inosuchsandbox00000000", None).await {
        Err(Error::SandboxNotFound { .. }) => {}
        other => panic!("snapshot of a missing sandbox: {other:?}"),
    }
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_diverge_and_a_paused_source_is_a_conflict() {
    let emu = emulator().await;
    let c = client(&emu);
    let src = c.create(&CreateOptions::new("base")).await.expect("create");
    write(&src, "/home/user/state", "shared").await;
    let forks = c
        .fork(
            src.id(),
            &ForkOptions::new()
                .count(2)
                .timeout(Duration::from_secs(120)),
        )
        .await
        .expect("fork");
    assert_eq!(forks.len(), 2);
    let mut forks: Vec<e2b_core::Sandbox> = forks
        .into_iter()
        .map(|f| f.expect("fork started"))
        .collect();
    let (f2, f1) = (forks.pop().expect("two"), forks.pop().expect("two"));
    assert_ne!(f1.id(), f2.id());
    write(&f1, "/home/user/state", "one").await;
    write(&f2, "/home/user/state", "two").await;
    assert_eq!(read(&f1, "/home/user/state").await, "one");
    assert_eq!(read(&f2, "/home/user/state").await, "two");
    assert_eq!(read(&src, "/home/user/state").await, "shared");

    c.pause(src.id(), Default::default()).await.expect("pause");
    match c.fork(src.id(), &ForkOptions::new()).await {
        Err(Error::Conflict { message, .. }) => assert!(message.contains("paused"), "{message}"),
        other => panic!("fork of a paused sandbox: {other:?}"),
    }
    match c.fork(src.id(), &ForkOptions::new().count(0)).await {
        Err(Error::Config(_)) => {}
        other => panic!("fork with count 0: {other:?}"),
    }
    emu.shutdown().await;
}

/// A fork taken while a command appends numbered lines sees a prefix of them, every line
/// whole (the source's processes are frozen while its files are copied), and the command
/// goes on in the source only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_while_a_command_writes_gets_a_whole_prefix() {
    let emu = emulator().await;
    let c = client(&emu);
    let src = c.create(&CreateOptions::new("base")).await.expect("create");
    sh(
        &src,
        "nohup bash -c 'i=0; while true; do i=$((i+1)); echo \"line-$i-end\" >> /home/user/log; done' >/dev/null 2>&1 &",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fork = c
        .fork(src.id(), &ForkOptions::new())
        .await
        .expect("fork")
        .pop()
        .expect("one")
        .expect("fork started");
    let text = read(&fork, "/home/user/log").await;
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty());
    for (i, l) in lines.iter().enumerate() {
        // The last line may be cut (a write in flight when frozen); every other is whole.
        if i + 1 < lines.len() {
            assert_eq!(*l, format!("line-{}-end", i + 1));
        }
    }
    let n = text.len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read(&fork, "/home/user/log").await.len(),
        n,
        "nothing writes in the fork"
    );
    assert!(
        read(&src, "/home/user/log").await.len() > n,
        "the source goes on"
    );
    emu.shutdown().await;
}

/// A fork or snapshot whose answer is lost (the connection reset) is not resent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_fork_or_snapshot_is_not_resent() {
    let emu = emulator().await;
    let c = client(&emu);
    let src = c.create(&CreateOptions::new("base")).await.expect("create");
    for (path, key) in [
        ("fork", "POST /sandboxes/{sandboxID}/fork"),
        ("snapshots", "POST /sandboxes/{sandboxID}/snapshots"),
    ] {
        emu.faults().add(
            FaultRule::new(FaultAction::Reset)
                .surface(Plane::Control)
                .method("POST")
                .path_prefix(&format!("/sandboxes/{}/{path}", src.id()))
                .times(1),
        );
        let before = emu.counters().get_on(Plane::Control, key);
        let res = if path == "fork" {
            c.fork(src.id(), &ForkOptions::new()).await.map(drop)
        } else {
            c.create_snapshot(src.id(), None).await.map(drop)
        };
        assert!(res.is_err(), "{path}: {res:?}");
        assert_eq!(
            emu.counters().get_on(Plane::Control, key) - before,
            1,
            "{path}"
        );
    }
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_shared_by_running_sandboxes_and_its_content_api() {
    let emu = emulator().await;
    let c = client(&emu);
    let vol = c
        .create_volume("shared-cache")
        .await
        .expect("create volume");
    assert!(
        !format!("{vol:?}").contains(&vol.token),
        "Debug shows the token"
    );
    match c.create_volume("shared-cache").await {
        Err(Error::BadRequest { message, .. }) => assert!(message.contains("already exists")),
        other => panic!("a second volume of the same name: {other:?}"),
    }
    assert!(matches!(
        c.create_volume("bad/name").await,
        Err(Error::Config(_))
    ));
    assert_eq!(c.list_volumes().await.expect("list").len(), 1);

    let opts = CreateOptions::new("base").volume_mount("shared-cache", "/mnt/vol");
    let one = c.create(&opts).await.expect("create one");
    let two = c
        .create(&CreateOptions::new("base").volume_mount("shared-cache", "/srv/deep/vol"))
        .await
        .expect("create two");
    // `/srv` exists on the system, `/srv/deep` is made for the mount: both are root's,
    // and `/srv` keeps its mode.
    assert_eq!(
        sh(&two, "stat -c '%U %a' /srv /srv/deep").await,
        "root 755\nroot 755\n"
    );
    let mounts = c.get(one.id()).await.expect("get").listed.volume_mounts;
    assert_eq!(
        mounts.map(|m| (m[0].name.clone(), m[0].path.clone())),
        Some(("shared-cache".to_owned(), "/mnt/vol".to_owned()))
    );
    sh(&one, "echo from-one > /mnt/vol/a.txt").await;
    assert_eq!(read(&two, "/srv/deep/vol/a.txt").await, "from-one\n");
    // Written by the sandbox user, as the sandbox user: the owner is `user`.
    assert_eq!(
        sh(&two, "stat -c %U /srv/deep/vol/a.txt").await.trim(),
        "user"
    );

    let content = c.volume_content(&vol);
    assert_eq!(
        &content.read_file("/a.txt").await.expect("read")[..],
        b"from-one\n"
    );
    content
        .write_file("/b.txt", b"from-api".to_vec(), false)
        .await
        .expect("write");
    assert!(
        content
            .write_file("/b.txt", b"x".to_vec(), false)
            .await
            .is_err()
    );
    assert_eq!(read(&one, "/mnt/vol/b.txt").await, "from-api");
    // A link the sandbox plants is never followed by the content API.
    sh(
        &one,
        "ln -s /etc /mnt/vol/escape; ln -s /etc/hostname /mnt/vol/host",
    )
    .await;
    assert!(content.read_file("/escape/hostname").await.is_err());
    assert!(content.read_file("/host").await.is_err());
    let names: Vec<String> = content
        .list("/", 1)
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a.txt", "b.txt", "escape", "host"]);
    content.remove("/escape").await.expect("remove the link");
    assert_eq!(sh(&one, "ls /etc/hostname").await.trim(), "/etc/hostname");

    match c
        .create(&CreateOptions::new("base").volume_mount("nope", "/mnt/x"))
        .await
    {
        Err(Error::BadRequest { message, .. }) => {
            assert!(message.contains("volume 'nope' not found"), "{message}")
        }
        other => panic!("mount of a missing volume: {other:?}"),
    }
    assert!(c.delete_volume(&vol.volume_id).await.expect("delete"));
    assert!(!c.delete_volume(&vol.volume_id).await.expect("delete again"));
    assert!(matches!(
        c.get_volume(&vol.volume_id).await,
        Err(Error::VolumeNotFound { .. })
    ));
    emu.shutdown().await;
}

/// The upper layer keeps what the sandbox wrote, and the mount points' parents are made
/// in it at every boot by the emulator's root: a directory the sandbox swapped for a link
/// to a host path is never followed (the boot fails naming the path; nothing is made on
/// the host).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_points_parent_swapped_for_a_link_is_not_followed_at_the_next_boot() {
    let emu = emulator().await;
    let c = client(&emu);
    let host = std::env::temp_dir().join(format!("e2b-core-swap-{}", std::process::id()));
    std::fs::create_dir_all(&host).expect("host dir");
    c.create_volume("swap-vol").await.expect("create volume");
    let sb = c
        .create(&CreateOptions::new("base").volume_mount("swap-vol", "/srv/a/b/vol"))
        .await
        .expect("create");
    let target = host.display().to_string();
    let out = sb
        .run(StartProcess::shell(format!(
            "sudo sh -c 'mv /srv/a /srv/a.gone && ln -s {target} /srv/a' 2>&1; ls -ld /srv/a"
        )))
        .await
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("/srv/a -> "), "the swap: {text}");
    c.pause(sb.id(), e2b_core::PauseOptions { memory: false })
        .await
        .expect("pause");
    let again = c
        .connect(sb.id(), e2b_core::ConnectOptions::default())
        .await;
    let err = match again {
        Err(e) => e.to_string(),
        Ok(_) => String::new(),
    };
    let made: Vec<_> = std::fs::read_dir(&host)
        .expect("host dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir(&host);
    assert!(made.is_empty(), "made on the host: {made:?} ({err})");
    assert!(err.contains("srv/a"), "the boot names the path: {err:?}");
    emu.shutdown().await;
}
