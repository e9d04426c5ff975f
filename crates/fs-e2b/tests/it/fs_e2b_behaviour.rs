//! Behaviours of `E2bFs` the conformance suite does not prove: construction and cwd
//! rules, TooLarge without a download (emulator counters), content past the checked size,
//! reads as the acting user (root-only files, planted links, a path swapped midway), staging directories (0700, the acting user's, never left behind), versions
//! on identical rewrites, symlinks, ownership, `Gone` after the sandbox is killed, and the
//! kind, temporariness and text of envd's HTTP failures.

use crate::fs_e2b_support;

use std::time::Duration;

use bytes::Bytes;
use e2b_core::StartProcess;
use exec_world::{
    ByteStream, Created, Error, ErrorKind, FileKind, Fs, WorldPath, WriteOptions, bytes_stream,
};
use fs_e2b::{E2bFs, E2bFsOptions};
use fs_e2b_support::{Env, env, scratch};
use futures::StreamExt as _;
use testing_fake::{FaultAction, FaultRule, Plane};

fn wp(s: &str) -> WorldPath {
    WorldPath::new(s).expect("path")
}

/// Runs `script` (positional `args`) as root in the sandbox; returns stdout.
async fn sh(env: &Env, script: &str, args: &[&str]) -> String {
    let mut argv = vec!["-c".to_string(), script.to_string(), "sh".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let out = env
        .api
        .run(StartProcess::new("/bin/sh").args(argv).user("root"))
        .await
        .expect("run");
    assert_eq!(
        out.end.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Names in `dir` (with dotfiles), listed independently of `E2bFs`.
async fn names(env: &Env, dir: &WorldPath) -> Vec<String> {
    let out = sh(env, r#"ls -A1 -- "$1""#, &[dir.as_str()]).await;
    out.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn construction_and_cwd() {
    let env = env().await;
    assert!(matches!(
        E2bFs::new(env.api.clone(), E2bFsOptions::new("home/user")),
        Err(e) if e.kind() == ErrorKind::InvalidPath
    ));
    assert!(matches!(
        E2bFs::new(env.api.clone(), E2bFsOptions::new("")),
        Err(e) if e.kind() == ErrorKind::InvalidPath
    ));
    assert!(matches!(
        E2bFs::new(
            env.api.clone(),
            E2bFsOptions::new("/").staging_prefix("a/b")
        ),
        Err(e) if e.kind() == ErrorKind::InvalidPath
    ));
    let fs = E2bFs::new(env.api.clone(), E2bFsOptions::new("/home/user/./x/..")).expect("fs");
    assert_eq!(fs.cwd().as_str(), "/home/user");
    // Relative paths: the construction cwd…
    fs.write(
        &wp("rel.txt"),
        bytes_stream(&b"r"[..]),
        WriteOptions::default(),
    )
    .await
    .expect("write relative");
    assert_eq!(sh(&env, "cat /home/user/rel.txt", &[]).await, "r");
    // …or the caller's with_cwd, by POSIX rules.
    fs.mkdir(&wp("sub"), false).await.expect("mkdir");
    let sub = fs.with_cwd(&wp("sub"));
    assert_eq!(sub.cwd().as_str(), "/home/user/sub");
    assert_eq!(
        &sub.read(&wp("../rel.txt"), 10).await.expect("read")[..],
        b"r"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_is_decided_without_a_download() {
    let env = env().await;
    // The holder path (a `Start` per call) is what this counts, not the warm worker.
    let fs = E2bFs::new(
        env.api.clone(),
        E2bFsOptions::new("/home/user").warm_worker(false),
    )
    .expect("fs");
    let dir = scratch(&fs).await;
    let f = dir.join("big").expect("path");
    // Larger than a holder answers inline: the content comes through envd's download.
    let size: usize = 3 << 20;
    fs.write(&f, bytes_stream(vec![7u8; size]), WriteOptions::default())
        .await
        .expect("write");
    // A first read asks the acting user's ids once per handle.
    assert_eq!(fs.read(&f, 4 << 20).await.expect("read").len(), size);
    let before = env.emu.counters().get_on(Plane::Envd, "GET /files");
    let starts = env
        .emu
        .counters()
        .get_on(Plane::Envd, "POST /process.Process/Start");
    match fs.read(&f, 1000).await {
        Err(e) if e.kind() == ErrorKind::TooLarge => {
            assert_eq!((e.limit(), e.path()), (Some(1000), Some(f.as_str())));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(
        env.emu.counters().get_on(Plane::Envd, "GET /files"),
        before,
        "TooLarge is decided before envd's GET /files"
    );
    // One reader process, which exits before any byte of content moves.
    assert_eq!(
        env.emu
            .counters()
            .get_on(Plane::Envd, "POST /process.Process/Start"),
        starts + 1
    );
    // Through a symlink the size is the target's, not the link text's.
    sh(&env, r#"ln -s big "$1/link""#, &[dir.as_str()]).await;
    assert!(matches!(
        fs.read(&dir.join("link").expect("path"), 1000).await,
        Err(e) if e.kind() == ErrorKind::TooLarge
    ));
    assert_eq!(env.emu.counters().get_on(Plane::Envd, "GET /files"), before);
    assert_eq!(
        fs.read(&dir.join("link").expect("path"), 4 << 20)
            .await
            .expect("read via link")
            .len(),
        size
    );
    // The content came through one GET of the reader's descriptor.
    assert_eq!(
        env.emu.counters().get_on(Plane::Envd, "GET /files"),
        before + 1
    );
}

/// Requests per operation on the emulator's counters (both planes) since `reset`.
fn requests(env: &Env) -> (u64, u64, u64) {
    let s = env.emu.counters().snapshot();
    (
        s.plane_total(Plane::Envd) + s.plane_total(Plane::Control),
        s.get_on(Plane::Envd, "POST /process.Process/Start"),
        s.get_on(Plane::Envd, "GET /files") + s.get_on(Plane::Envd, "POST /files"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_reads_and_writes_are_one_request_each() {
    let env = env().await;
    // The holder path (a `Start` per call) is what this counts, not the warm worker.
    let fs = E2bFs::new(
        env.api.clone(),
        E2bFsOptions::new("/home/user").warm_worker(false),
    )
    .expect("fs");
    let dir = scratch(&fs).await;
    let f = dir.join("small").expect("path");
    // The first operation asks the acting user's ids once per handle.
    fs.write(&f, bytes_stream(&b"warm"[..]), WriteOptions::default())
        .await
        .expect("warm-up write");
    for size in [0usize, 1, 4096, 1 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        env.emu.counters().reset();
        fs.write(&f, bytes_stream(data.clone()), WriteOptions::default())
            .await
            .expect("write");
        assert_eq!(requests(&env), (1, 1, 0), "write of {size} bytes");
        env.emu.counters().reset();
        let got = fs.read(&f, 1 << 20).await.expect("read");
        assert!(got[..] == data[..], "read back {size} bytes");
        assert_eq!(requests(&env), (1, 1, 0), "read of {size} bytes");
        env.emu.counters().reset();
        let mut s = fs.read_stream(&f).await.expect("read_stream");
        let mut streamed = Vec::new();
        while let Some(piece) = s.next().await {
            streamed.extend_from_slice(&piece.expect("bytes"));
        }
        assert!(streamed == data, "streamed {size} bytes");
        assert_eq!(requests(&env), (1, 1, 0), "read_stream of {size} bytes");
    }
    // TooLarge for a small file: the same one request, no byte of it kept.
    env.emu.counters().reset();
    assert_eq!(
        fs.read(&f, 1000)
            .await
            .map(|b| b.len())
            .map_err(|e| e.kind()),
        Err(ErrorKind::TooLarge)
    );
    assert_eq!(requests(&env), (1, 1, 0), "a small TooLarge");
    // The new file is the user's, made with the mode asked for, atomically.
    fs.write(
        &f,
        bytes_stream(&b"m"[..]),
        WriteOptions::default().mode(0o600),
    )
    .await
    .expect("write with a mode");
    assert_eq!(
        sh(&env, r#"stat -c '%U %a %s' -- "$1""#, &[f.as_str()]).await,
        "user 600 1\n"
    );
    // create_if_absent inline: made once, then AlreadyExisted with the content kept.
    let c = dir.join("c").expect("path");
    env.emu.counters().reset();
    assert_eq!(
        fs.create_if_absent(&c, Bytes::from_static(b"one"))
            .await
            .expect("create"),
        Created::Created
    );
    assert_eq!(requests(&env), (1, 1, 0), "create_if_absent");
    assert_eq!(
        fs.create_if_absent(&c, Bytes::from_static(b"two"))
            .await
            .expect("again"),
        Created::AlreadyExisted
    );
    assert_eq!(&fs.read(&c, 10).await.expect("read")[..], b"one");
    // The bytes of an inline write travel in its root wrapper's environment: root sees
    // them there while it runs, the user never does.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (fs, g, flag) = (fs.clone(), f.clone(), stop.clone());
    let writes = tokio::spawn(async move {
        let payload = vec![b'w'; 512 << 10];
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            fs.write(&g, bytes_stream(payload.clone()), WriteOptions::default())
                .await
                .expect("write");
        }
    });
    let probe = r#"n=0; while [ $n -lt 3000 ]; do
  grep -l FS_E2B_D0 /proc/[0-9]*/environ 2>/dev/null | grep -q . && exit 0; n=$((n + 1))
done; exit 1"#;
    // `sh` requires exit 0: root finds it.
    sh(&env, probe, &[]).await;
    let seen_by_user = sh_as_user(&env, probe, &[]).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writes.await.expect("join");
    assert_ne!(
        seen_by_user, 0,
        "the user read an inline write's environment"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_past_the_checked_size_is_cut_at_the_limit() {
    let env = env().await;
    // A /proc file reports size 0 when opened and checked, then yields more than the
    // limit: the reader is cut just past the limit and the read is TooLarge.
    match env.fs.read(&wp("/proc/self/status"), 100).await {
        Err(e) if e.kind() == ErrorKind::TooLarge => assert_eq!(e.limit(), Some(100)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // With room, the same file is read whole (its size said 0).
    let all = env
        .fs
        .read(&wp("/proc/self/status"), 1 << 20)
        .await
        .expect("read /proc/self/status");
    assert!(
        all.starts_with(b"Name:"),
        "{:?}",
        String::from_utf8_lossy(&all)
    );
}

/// Runs `script` as the default user; returns its exit code.
async fn sh_as_user(env: &Env, script: &str, args: &[&str]) -> i32 {
    let mut argv = vec!["-c".to_string(), script.to_string(), "sh".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    env.api
        .run(StartProcess::new("/bin/sh").args(argv))
        .await
        .expect("run as user")
        .end
        .exit_code
}

/// The whole stream, or its first error.
async fn drain(mut s: ByteStream) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_honour_the_acting_user() {
    let env = env().await;
    // Root-only files: 0600 in a world-readable directory, and in root's 0700 home.
    sh(
        &env,
        "umask 077; printf SECRET > /tmp/root-only; printf SECRET > /root/r.txt",
        &[],
    )
    .await;
    for p in ["/tmp/root-only", "/root/r.txt"] {
        match env.fs.read(&wp(p), 1 << 20).await {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => assert_eq!(e.path(), Some(p)),
            other => panic!("read {p}: expected PermissionDenied, got {other:?}"),
        }
        match env.fs.read_stream(&wp(p)).await {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {}
            Err(e) => panic!("read_stream {p}: expected PermissionDenied, got {e:?}"),
            Ok(s) => panic!("read_stream {p}: got {:?}", drain(s).await),
        }
    }
    // Root itself still reads them.
    let root = E2bFs::new(env.api.clone(), E2bFsOptions::new("/root").user("root")).expect("fs");
    assert_eq!(
        &root
            .read(&wp("/tmp/root-only"), 100)
            .await
            .expect("read as root")[..],
        b"SECRET"
    );
    // A symlink the user planted to a root-only file is refused, through both calls.
    let dir = scratch(&env.fs).await;
    let link = dir.join("planted").expect("path");
    assert_eq!(
        sh_as_user(&env, r#"ln -s /tmp/root-only "$1""#, &[link.as_str()]).await,
        0
    );
    assert!(matches!(
        env.fs.read(&link, 1 << 20).await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
    assert!(matches!(
        env.fs.read_stream(&link).await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_swapped_during_reads_never_yields_root_only_bytes() {
    let env = env().await;
    sh(&env, "umask 077; printf SECRET > /tmp/root-only", &[]).await;
    let dir = scratch(&env.fs).await;
    let target = dir.join("swapped").expect("path");
    // The user flips the path between its own file and a link to the root-only file,
    // as fast as it can, while we read it.
    let flipper = env
        .api
        .start_process(
            StartProcess::new("/bin/sh")
                .args([
                    "-c",
                    r#"cd "$1" || exit 1; printf mine > own
while :; do ln -sfn own swapped; ln -sfn /tmp/root-only swapped; done"#,
                    "sh",
                    dir.as_str(),
                ])
                .timeout(Duration::from_secs(60)),
        )
        .await
        .expect("start flipper");
    let (mut own, mut denied) = (0, 0);
    for i in 0..40 {
        let got = if i % 2 == 0 {
            env.fs.read(&target, 1 << 20).await
        } else {
            match env.fs.read_stream(&target).await {
                Ok(s) => drain(s).await.map(Bytes::from),
                Err(e) => Err(e),
            }
        };
        match got {
            Ok(b) => {
                assert_eq!(&b[..], b"mine", "read {i} returned foreign bytes");
                own += 1;
            }
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::NotFound) => {
                denied += 1
            }
            Err(e) => panic!("read {i}: unexpected {e:?}"),
        }
    }
    env.api
        .send_signal(
            e2b_core::proto::process::ProcessSelector::Pid(flipper.pid()),
            e2b_core::proto::process::Signal::Sigkill,
        )
        .await
        .expect("kill flipper");
    assert_eq!(own + denied, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_dir_is_private_owned_by_the_user_and_removed() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("target.txt").expect("path");
    env.fs
        .write(&f, bytes_stream(&b"old"[..]), WriteOptions::default())
        .await
        .expect("write");
    // A write whose input stalls (past what a write sends inline): its staging dir is
    // visible meanwhile.
    let stalled: ByteStream = Box::pin(
        futures::stream::iter(vec![Ok(Bytes::from(vec![b'n'; (1 << 20) + 1]))])
            .chain(futures::stream::pending()),
    );
    let fs = env.fs.clone();
    let g = f.clone();
    let write = tokio::spawn(async move { fs.write(&g, stalled, WriteOptions::default()).await });
    let mut stage = None;
    for _ in 0..100 {
        stage = names(&env, &dir)
            .await
            .into_iter()
            .find(|n| n.starts_with(".e2b-stage-"));
        if stage.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stage = stage.expect("a staging dir appears during the write");
    let info = sh(
        &env,
        r#"stat -c '%a %U' -- "$1/$2""#,
        &[dir.as_str(), &stage],
    )
    .await;
    assert_eq!(info.trim(), "700 user");
    write.abort();
    let _ = write.await;
    // Background cleanup, old content kept.
    let mut left = Vec::new();
    for _ in 0..100 {
        left = names(&env, &dir).await;
        if left == ["target.txt"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, ["target.txt"]);
    assert_eq!(&env.fs.read(&f, 10).await.expect("read")[..], b"old");
    // Successful writes and creates leave nothing behind either.
    for i in 0..5u8 {
        env.fs
            .write(&f, bytes_stream(vec![i; 10]), WriteOptions::default())
            .await
            .expect("write");
    }
    env.fs
        .create_if_absent(&dir.join("c").expect("path"), Bytes::from_static(b"c"))
        .await
        .expect("create");
    env.fs
        .create_if_absent(&dir.join("c").expect("path"), Bytes::from_static(b"d"))
        .await
        .expect("create again");
    let mut now = names(&env, &dir).await;
    now.sort();
    assert_eq!(now, ["c", "target.txt"]);
    // Files end up owned by the acting user.
    let owners = sh(
        &env,
        r#"stat -c '%U %a' -- "$1/target.txt" "$1/c""#,
        &[dir.as_str()],
    )
    .await;
    assert_eq!(owners, "user 644\nuser 644\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rewrite_changes_the_version_and_stat_agrees() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("v").expect("path");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let v = env
            .fs
            .write(&f, bytes_stream(&b"same"[..]), WriteOptions::default())
            .await
            .expect("write");
        assert_eq!(env.fs.stat(&f).await.expect("stat").version, v);
        assert_eq!(v.size, 4);
        assert!(seen.insert(v.token.clone()), "version repeated: {v:?}");
    }
    // An in-place change by someone else changes it too.
    let before = env.fs.stat(&f).await.expect("stat").version;
    sh(&env, r#"printf emas > "$1""#, &[f.as_str()]).await;
    assert_ne!(env.fs.stat(&f).await.expect("stat").version, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_are_reported_and_replaced_not_followed() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let t = dir.join("t").expect("path");
    let l = dir.join("l").expect("path");
    env.fs
        .write(&t, bytes_stream(&b"target"[..]), WriteOptions::default())
        .await
        .expect("write");
    sh(&env, r#"ln -s t "$1""#, &[l.as_str()]).await;
    let lm = env.fs.lstat(&l).await.expect("lstat");
    assert_eq!(lm.kind, FileKind::Symlink);
    assert_eq!(lm.symlink_target.as_deref(), Some("t"));
    let sm = env.fs.stat(&l).await.expect("stat");
    assert_eq!((sm.kind, sm.size), (FileKind::File, 6));
    assert_eq!(sm.version, env.fs.stat(&t).await.expect("stat").version);
    // Writing at the link replaces the link; the target is untouched.
    env.fs
        .write(&l, bytes_stream(&b"new"[..]), WriteOptions::default())
        .await
        .expect("write");
    assert_eq!(env.fs.lstat(&l).await.expect("lstat").kind, FileKind::File);
    assert_eq!(&env.fs.read(&t, 10).await.expect("read")[..], b"target");
    // A dangling link counts as existing for create_if_absent.
    let d = dir.join("dangling").expect("path");
    sh(&env, r#"ln -s nowhere "$1""#, &[d.as_str()]).await;
    assert_eq!(
        env.fs
            .create_if_absent(&d, Bytes::from_static(b"x"))
            .await
            .expect("create"),
        Created::AlreadyExisted
    );
    assert!(matches!(
        env.fs.read(&d, 10).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acting_user_owns_what_it_writes() {
    let env = env().await;
    let root = E2bFs::new(env.api.clone(), E2bFsOptions::new("/root").user("root")).expect("fs");
    root.write(
        &wp("r.txt"),
        bytes_stream(&b"x"[..]),
        WriteOptions::default().mode(0o600),
    )
    .await
    .expect("write as root");
    assert_eq!(
        sh(&env, "stat -c '%U %a' /root/r.txt", &[]).await.trim(),
        "root 600"
    );
    // The default user's shell commands meet the permissions (envd's own /files
    // routes run as envd and do not check them).
    assert!(matches!(
        env.fs.lstat(&wp("/root/r.txt")).await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
    assert!(matches!(
        env.fs
            .write(
                &wp("/root/u.txt"),
                bytes_stream(&b"x"[..]),
                WriteOptions::default()
            )
            .await,
        Err(e) if e.kind() == ErrorKind::PermissionDenied
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sandbox_is_gone() {
    let env = env().await;
    let f = wp("/home/user/x");
    env.fs
        .write(&f, bytes_stream(&b"x"[..]), WriteOptions::default())
        .await
        .expect("write");
    env.client.kill(env.sandbox.id()).await.expect("kill");
    match env.fs.stat(&f).await {
        Err(e) if e.kind() == ErrorKind::Gone => {}
        other => panic!("expected Gone, got {other:?}"),
    }
    match env.fs.read(&f, 10).await {
        Err(e) if e.kind() == ErrorKind::Gone => {}
        other => panic!("expected Gone, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_are_typed_errors_naming_operation_path_and_cause_once() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    // A name longer than NAME_MAX: InvalidPath on read, read_stream and write alike.
    let long = dir.join(&"n".repeat(300)).expect("path");
    let check = |what: &str, r: Result<(), Error>| match r {
        Err(e) if e.kind() == ErrorKind::InvalidPath => {
            let msg = e.to_string();
            assert_eq!(msg.matches(long.as_str()).count(), 1, "{msg}");
            assert_eq!(msg.matches("File name too long").count(), 1, "{msg}");
            assert!(msg.starts_with(&format!("{what} {long}: ")), "{msg}");
        }
        other => panic!("{what}: expected InvalidPath, got {other:?}"),
    };
    check("read", env.fs.read(&long, 10).await.map(drop));
    check("read_stream", env.fs.read_stream(&long).await.map(drop));
    check(
        "write",
        env.fs
            .write(&long, bytes_stream(&b"x"[..]), WriteOptions::default())
            .await
            .map(drop),
    );
    // `dir/` names a directory: never written as the file `dir`.
    let slash = wp(&format!("{}/newfile/", dir.as_str()));
    match env
        .fs
        .write(&slash, bytes_stream(&b"x"[..]), WriteOptions::default())
        .await
    {
        Err(e) if e.kind() == ErrorKind::InvalidPath => {
            assert_eq!(e.path(), Some(slash.as_str()));
            assert_eq!(e.op(), Some("write"), "{e}");
        }
        other => panic!("expected InvalidPath, got {other:?}"),
    }
    assert!(matches!(
        env.fs
            .create_if_absent(&slash, Bytes::from_static(b"x"))
            .await,
        Err(e) if e.kind() == ErrorKind::InvalidPath
    ));
    assert!(matches!(
        env.fs.lstat(&dir.join("newfile").expect("path")).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    // Reading a directory is IsADirectory; a FIFO is refused without being opened.
    assert!(matches!(
        env.fs.read(&dir, 10).await,
        Err(e) if e.kind() == ErrorKind::IsADirectory
    ));
    let fifo = dir.join("fifo").expect("path");
    assert_eq!(
        sh_as_user(&env, r#"mkfifo "$1""#, &[fifo.as_str()]).await,
        0
    );
    match env.fs.read(&fifo, 10).await {
        Err(e) if e.kind() == ErrorKind::Other => {
            assert!(e.to_string().contains("not a regular file"), "{e}")
        }
        other => panic!("expected not a regular file, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_never_let_root_follow_a_path_the_user_controls() {
    let env = env().await;
    sh(&env, "umask 077; printf SECRET > /tmp/root-only", &[]).await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("t.txt").expect("path");
    // While writes run, the user replaces `data` in every staging directory it can see
    // with a link to the root-only file (where a root write by path would land).
    let planter = env
        .api
        .start_process(
            StartProcess::new("/bin/sh")
                .args([
                    "-c",
                    r#"cd "$1" || exit 1
while :; do for s in .e2b-stage-*; do [ -d "$s" ] && ln -sf /tmp/root-only "$s/data" 2>/dev/null; done; done"#,
                    "sh",
                    dir.as_str(),
                ])
                .timeout(Duration::from_secs(60)),
        )
        .await
        .expect("start planter");
    for i in 0..15u8 {
        let _ = env
            .fs
            .write(&f, bytes_stream(vec![b'a' + i; 8]), WriteOptions::default())
            .await;
    }
    env.api
        .send_signal(
            e2b_core::proto::process::ProcessSelector::Pid(planter.pid()),
            e2b_core::proto::process::Signal::Sigkill,
        )
        .await
        .expect("kill planter");
    // The root-only file is untouched: same owner, mode and content.
    assert_eq!(
        sh(
            &env,
            "stat -c '%U %a' /tmp/root-only; cat /tmp/root-only",
            &[]
        )
        .await,
        "root 600\nSECRET"
    );
    // Writes still work and leave no staging directory behind.
    env.fs
        .write(&f, bytes_stream(&b"final"[..]), WriteOptions::default())
        .await
        .expect("write");
    assert_eq!(&env.fs.read(&f, 10).await.expect("read")[..], b"final");
    let mut left = String::new();
    for _ in 0..50 {
        left = sh(
            &env,
            r#"cd "$1" && ls -a | grep -c '^\.e2b-stage-'; true"#,
            &[dir.as_str()],
        )
        .await;
        if left.trim() == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left.trim(), "0", "staging directories left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_stream_leaves_no_process_running() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("sparse-big").expect("path");
    // 1 TiB that takes no disk: no read gets through it while the test runs.
    assert_eq!(
        sh_as_user(&env, r#"truncate -s 1T "$1""#, &[f.as_str()]).await,
        0
    );
    // Processes of a read: the holder's root wrapper and the holder (perl), and any
    // process of the sandbox holding the file open; not the warm worker (a perl too,
    // started in the background by the first calls, whenever it comes up).
    let script = r#"n=0
for p in /proc/[0-9]*; do
  case $(readlink "$p/exe" 2>/dev/null) in
    */perl*) grep -q PR_SET_DUMPABLE "$p/cmdline" 2>/dev/null || n=$((n + 1));;
  esac
  ls -l "$p/fd" 2>/dev/null | grep -q -- "$1" && n=$((n + 1))
done
echo "$n""#;
    let args = [f.as_str()];
    let running = || sh(&env, script, &args);
    let idle = running().await.trim().to_string();
    let settled = || async {
        let mut now = String::new();
        for _ in 0..100 {
            now = running().await.trim().to_string();
            if now == idle {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        now
    };
    let mut s = env.fs.read_stream(&f).await.expect("read_stream");
    let first = s.next().await.expect("a chunk").expect("bytes");
    assert!(!first.is_empty());
    // envd streams the file it opened; the holder let go and its wrapper ended.
    assert_eq!(settled().await, idle, "processes left while streaming");
    assert!(!s.next().await.expect("more").expect("bytes").is_empty());
    drop(s);
    assert_eq!(settled().await, idle, "processes left after the drop");
}

/// Pids of the sandbox processes with `path` open on fd 3 (seen as root).
async fn holders_of(env: &Env, path: &WorldPath) -> Vec<String> {
    let script = r#"for p in /proc/[0-9]*; do
  [ "$(readlink "$p/fd/3" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"
done; true"#;
    sh(env, script, &[path.as_str()])
        .await
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_holding_a_read_is_out_of_the_users_reach() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("held").expect("path");
    // Larger than a holder answers inline: it holds the file for envd's download.
    let content = b"held bytes".repeat(300_000);
    env.fs
        .write(&f, bytes_stream(content.clone()), WriteOptions::default())
        .await
        .expect("write");
    for kill in [false, true] {
        // envd's GET waits: the holder keeps the file open on fd 3 meanwhile. Long enough
        // for the probes and the kill below on a loaded machine (the kill case ends as
        // soon as envd answers, so its wait is the test's cost).
        let hold = Duration::from_secs(if kill { 15 } else { 3 });
        env.emu.faults().add(
            FaultRule::new(FaultAction::Delay(hold))
                .surface(Plane::Envd)
                .method("GET")
                .path_prefix("/files")
                .times(1),
        );
        let (fs, path) = (env.fs.clone(), f.clone());
        let read = tokio::spawn(async move { fs.read(&path, 4 << 20).await });
        let mut pids = Vec::new();
        for _ in 0..100 {
            pids = holders_of(&env, &f).await;
            if !pids.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let [pid] = &pids[..] else {
            panic!("one process holds the file, found {pids:?}");
        };
        // The user (its owner) can neither use its descriptor nor list or attach to it:
        // the holder is non-dumpable, so it cannot be made to hold another file.
        for probe in [
            r#"exec cat "/proc/$1/fd/3""#,
            r#"exec ls "/proc/$1/fd""#,
            r#"exec cat "/proc/$1/environ""#,
        ] {
            assert_ne!(
                sh_as_user(&env, probe, &[pid]).await,
                0,
                "as the user: {probe} succeeded"
            );
        }
        if kill {
            // Killed by the user: it stays a zombie (the root wrapper never reaps it), so
            // its pid cannot be reused and root has nothing to read.
            assert_eq!(sh_as_user(&env, r#"kill -9 "$1""#, &[pid]).await, 0);
            let got = read.await.expect("join");
            assert!(got.is_err(), "a read whose holder was killed: {got:?}");
            if let Err(e) = &got {
                // Never NotFound for a file that exists: the read was interrupted.
                assert_eq!(e.kind(), ErrorKind::Interrupted, "{e:?}");
            }
        } else {
            let got = read.await.expect("join").expect("read");
            assert!(got[..] == content[..], "the held file's bytes");
            // Released after the read, the holder lets go of the file (it ends on its own
            // time: the read does not wait for that). Until it has, the next round could
            // take it for its own holder and find it gone by the time it kills it.
            let mut left = holders_of(&env, &f).await;
            for _ in 0..250 {
                if left.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                left = holders_of(&env, &f).await;
            }
            assert!(
                left.is_empty(),
                "the released holder still holds the file: {left:?}"
            );
        }
    }
}

/// Fails the next envd `Start` (every fs operation begins with one) with `action`.
fn fail_next_start(env: &Env, action: FaultAction) {
    env.emu.faults().add(
        FaultRule::new(action)
            .surface(Plane::Envd)
            .path_prefix("/process.Process/Start")
            .times(1),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envd_failures_have_one_kind_and_name_operation_path_and_cause_once() {
    let env = env().await;
    // The ordinary path (a `Start` per call) is what the faults hit.
    let fs = E2bFs::new(
        env.api.clone(),
        E2bFsOptions::new("/home/user").warm_worker(false),
    )
    .expect("fs");
    let f = scratch(&fs).await.join("f").expect("path");
    // A first write makes the handle's upload directory: the next write's first `Start`
    // is its own prepare step.
    fs.write(&f, bytes_stream(&b"x"[..]), WriteOptions::default())
        .await
        .expect("first write");
    let text = |status: u16, body: &str| FaultAction::Status {
        status,
        body: body.into(),
        content_type: "text/plain".into(),
    };
    // A reset connection: Transport, temporary, the operation and path once.
    fail_next_start(&env, FaultAction::Reset);
    let e = fs.stat(&f).await.expect_err("reset");
    assert_eq!(
        (e.kind(), e.is_temporary()),
        (ErrorKind::Transport, true),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("stat {f}: transport error: ")),
        "{msg}"
    );
    assert_eq!(msg.matches("transport error").count(), 1, "{msg}");
    assert_eq!(msg.matches(f.as_str()).count(), 1, "{msg}");
    // 503: Transport, temporary, the status and envd's words kept.
    fail_next_start(
        &env,
        FaultAction::json(
            503,
            serde_json::json!({"code": "unavailable", "message": "envd is overloaded"}),
        ),
    );
    let e = fs.read(&f, 10).await.expect_err("503");
    assert_eq!(
        (e.kind(), e.is_temporary()),
        (ErrorKind::Transport, true),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("read {f}: transport error: ")),
        "{msg}"
    );
    assert!(
        msg.contains("503") && msg.contains("envd is overloaded"),
        "{msg}"
    );
    // 429: Transport and temporary, as on every other adapter (fs-e2b said Other).
    fail_next_start(&env, text(429, "slow down"));
    let e = fs
        .write(&f, bytes_stream(&b"x"[..]), WriteOptions::default())
        .await
        .expect_err("429");
    assert_eq!(
        (e.kind(), e.is_temporary()),
        (ErrorKind::Transport, true),
        "{e:?}"
    );
    assert!(e.to_string().starts_with(&format!("write {f}: ")), "{e}");
    // 401: PermissionDenied, not temporary (fs-e2b said Other).
    fail_next_start(&env, text(401, "bad access token"));
    let e = fs.lstat(&f).await.expect_err("401");
    assert_eq!(
        (e.kind(), e.is_temporary()),
        (ErrorKind::PermissionDenied, false),
        "{e:?}"
    );
    assert!(e.to_string().contains("bad access token"), "{e}");
    // 500 without a Connect code: Other, not temporary, the status kept.
    fail_next_start(&env, text(500, "it broke"));
    let e = fs.read_dir(&f).await.expect_err("500");
    assert_eq!(
        (e.kind(), e.is_temporary()),
        (ErrorKind::Other, false),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("500") && e.to_string().contains("it broke"),
        "{e}"
    );
    // The source is e2b-core's error, as a value.
    let src = std::error::Error::source(&e).expect("source");
    assert!(src.downcast_ref::<e2b_core::Error>().is_some(), "{src:?}");
    // Nothing of the faults is left: the next operation succeeds.
    fs.write(&f, bytes_stream(&b"x"[..]), WriteOptions::default())
        .await
        .expect("write after the faults");
}

/// Over HTTP/2 (one connection for everything), a large `read_stream` still completes:
/// the holder's release shares the connection with the download, whose window an
/// unread download would fill (the release then timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_work_over_http2() {
    let env = env().await;
    let cfg = emulator_fixture::emulator_config(&env.emu, Duration::from_secs(20)).with_http2(true);
    let client = e2b_core::Client::new(cfg).expect("client");
    let sb = client
        .connect(env.sandbox.id(), e2b_core::ConnectOptions::default())
        .await
        .expect("connect over HTTP/2");
    let fs = E2bFs::new(sb.into_api(), E2bFsOptions::new("/home/user")).expect("E2bFs");
    let dir = scratch(&fs).await;
    let f = dir.join("big").expect("path");
    let size: usize = 48 << 20;
    let chunk = bytes::Bytes::from(vec![7u8; 1 << 20]);
    let data = futures::stream::iter((0..size >> 20).map(move |_| Ok(chunk.clone())));
    fs.write(&f, Box::pin(data), WriteOptions::default())
        .await
        .expect("write over HTTP/2");
    let mut s = fs.read_stream(&f).await.expect("read_stream over HTTP/2");
    let mut got = 0usize;
    while let Some(piece) = s.next().await {
        let piece = piece.expect("bytes");
        assert!(piece.iter().all(|&b| b == 7));
        got += piece.len();
    }
    assert_eq!(got, size);
    assert_eq!(&fs.read(&f, 64 << 20).await.expect("read").len(), &size);
}

/// Stats `f` until the warm worker answers (the first call starts it in the background
/// and goes the ordinary way).
async fn warm_up(env: &Env, fs: E2bFs, f: WorldPath) {
    let input = "POST /process.Process/SendInput";
    for _ in 0..200 {
        let before = env.emu.counters().get_on(Plane::Envd, input);
        fs.stat(&f).await.expect("stat");
        if env.emu.counters().get_on(Plane::Envd, input) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the warm worker never answered");
}

/// Writes of at most 1 MiB run on the warm worker once it is up: one `SendInput` carrying
/// the bytes and no `Start`, with what the holder path gives (bytes, owner, modes kept or
/// set, parents made, `create_if_absent`, refusals with their kinds, no staging left);
/// a larger write goes the ordinary way; a lost answer is OutcomeUnknown, never twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_run_on_the_warm_worker() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let ordinary = E2bFs::new(
        env.api.clone(),
        E2bFsOptions::new("/home/user").warm_worker(false),
    )
    .expect("fs");
    let fs = E2bFs::new(env.api.clone(), E2bFsOptions::new("/home/user")).expect("fs");
    let count = |k: &str| env.emu.counters().get_on(Plane::Envd, k);
    let (start, input) = (
        "POST /process.Process/Start",
        "POST /process.Process/SendInput",
    );
    warm_up(&env, fs.clone(), dir.clone()).await;
    let small: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let (a, b) = (dir.join("a").expect("path"), dir.join("b").expect("path"));
    let deep = dir.join("x/y/c").expect("path");
    let (starts, inputs) = (count(start), count(input));
    let v1 = fs
        .write(&a, bytes_stream(small.clone()), WriteOptions::default())
        .await
        .expect("write 4 KiB");
    fs.write(
        &b,
        bytes_stream(big.clone()),
        WriteOptions::default().mode(0o640),
    )
    .await
    .expect("write 1 MiB");
    fs.write(
        &deep,
        bytes_stream(&b"deep"[..]),
        WriteOptions::default().create_parents(true),
    )
    .await
    .expect("write with parents");
    assert_eq!(
        fs.create_if_absent(&a, Bytes::from_static(b"no"))
            .await
            .expect("create"),
        Created::AlreadyExisted
    );
    let c = dir.join("c").expect("path");
    assert_eq!(
        fs.create_if_absent(&c, Bytes::from_static(b"new"))
            .await
            .expect("create"),
        Created::Created
    );
    assert_eq!(
        (count(start) - starts, count(input) - inputs),
        (0, 5),
        "five writes, one input each"
    );
    assert_eq!(
        &ordinary.read(&a, 1 << 20).await.expect("read")[..],
        &small[..]
    );
    assert_eq!(
        &ordinary.read(&b, 2 << 20).await.expect("read")[..],
        &big[..]
    );
    assert_eq!(&ordinary.read(&deep, 10).await.expect("read")[..], b"deep");
    assert_eq!(&ordinary.read(&c, 10).await.expect("read")[..], b"new");
    let meta = ordinary.stat(&a).await.expect("stat");
    assert_eq!(
        (meta.mode, meta.owner.as_deref()),
        (Some(0o644), Some("user"))
    );
    assert_eq!(meta.version, v1, "the version the write returned");
    assert_eq!(ordinary.stat(&b).await.expect("stat").mode, Some(0o640));
    // A rewrite keeps the file's mode.
    sh(&env, "chmod 600 \"$1\"", &[a.as_str()]).await;
    fs.write(&a, bytes_stream(&b"again"[..]), WriteOptions::default())
        .await
        .expect("rewrite");
    assert_eq!(ordinary.stat(&a).await.expect("stat").mode, Some(0o600));
    // Refusals have the ordinary path's kinds: a directory, a root-only directory, a
    // missing parent.
    sh(
        &env,
        "mkdir -m 755 \"$1/ro\" && chown root:root \"$1/ro\"",
        &[dir.as_str()],
    )
    .await;
    for (name, want) in [
        ("x", ErrorKind::IsADirectory),
        ("ro/f", ErrorKind::PermissionDenied),
        ("none/f", ErrorKind::NotFound),
    ] {
        let p = dir.join(name).expect("path");
        let warm = fs
            .write(&p, bytes_stream(&b"z"[..]), WriteOptions::default())
            .await
            .expect_err(name);
        assert_eq!(warm.kind(), want, "{name}: {warm}");
        let cold = ordinary
            .write(&p, bytes_stream(&b"z"[..]), WriteOptions::default())
            .await
            .expect_err(name);
        assert_eq!(warm.kind(), cold.kind(), "{name}");
    }
    let mut left = names(&env, &dir).await;
    left.sort();
    assert_eq!(left, ["a", "b", "c", "ro", "x"], "no staging dir left");
    // Past 1 MiB: the ordinary way.
    let starts = count(start);
    fs.write(
        &b,
        bytes_stream(vec![1u8; (1 << 20) + 1]),
        WriteOptions::default(),
    )
    .await
    .expect("write past 1 MiB");
    assert!(count(start) > starts, "a holder did the large write");
    // An answer lost after the bytes were sent: OutcomeUnknown, and not written twice
    // (here the request never arrived, so not at all).
    warm_up(&env, fs.clone(), dir.clone()).await;
    env.emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Envd)
            .path_prefix("/process.Process/SendInput")
            .times(1),
    );
    let e = fs
        .write(&c, bytes_stream(&b"lost"[..]), WriteOptions::default())
        .await
        .expect_err("lost answer");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert_eq!(&ordinary.read(&c, 10).await.expect("read")[..], b"new");
}

/// stat, lstat and listings run on the warm worker once it is up: one `SendInput` each and
/// no `Start`, with the answers the ordinary path gives; the worker is out of the user's
/// reach (non-dumpable: its descriptors cannot be opened to inject or forge an answer);
/// killed by the user, the next calls go the ordinary way and a new worker takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_and_listings_run_on_the_warm_worker_and_survive_its_death() {
    let env = env().await;
    let dir = scratch(&env.fs).await;
    let f = dir.join("f").expect("path");
    env.fs
        .write(&f, bytes_stream(&b"hello"[..]), WriteOptions::default())
        .await
        .expect("write");
    let ordinary = E2bFs::new(
        env.api.clone(),
        E2bFsOptions::new("/home/user").warm_worker(false),
    )
    .expect("fs");
    let count = |k: &str| env.emu.counters().get_on(Plane::Envd, k);
    let (start, input) = (
        "POST /process.Process/Start",
        "POST /process.Process/SendInput",
    );
    let fs = E2bFs::new(env.api.clone(), E2bFsOptions::new("/home/user")).expect("fs");
    let warm_up = |fs: E2bFs, f: WorldPath| warm_up(&env, fs, f);
    warm_up(fs.clone(), f.clone()).await;
    let (starts, inputs) = (count(start), count(input));
    for _ in 0..3 {
        assert_eq!(
            format!("{:?}", fs.stat(&f).await.expect("stat")),
            format!("{:?}", ordinary.stat(&f).await.expect("stat"))
        );
        assert_eq!(
            format!("{:?}", fs.lstat(&f).await.expect("lstat")),
            format!("{:?}", ordinary.lstat(&f).await.expect("lstat"))
        );
        assert_eq!(
            format!("{:?}", fs.read_dir(&dir).await.expect("read_dir")),
            format!("{:?}", ordinary.read_dir(&dir).await.expect("read_dir"))
        );
    }
    // Errors come back with their kind too.
    let missing = dir.join("missing").expect("path");
    assert_eq!(
        fs.stat(&missing).await.expect_err("missing").kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        count(input) - inputs,
        10,
        "nine calls and the error on the worker"
    );
    // The ordinary path's 9 Starts only; the worker's calls made none.
    assert_eq!(count(start) - starts, 9);
    // Reads of at most 2 MiB too, with the holder's answers: the bytes, TooLarge, a
    // root-only file, a FIFO, a directory, a head.
    sh(
        &env,
        "echo secret > \"$1/root-only\" && chmod 600 \"$1/root-only\" && mkfifo \"$1/fifo\" && chmod 666 \"$1/fifo\"",
        &[dir.as_str()],
    )
    .await;
    let (starts, inputs) = (count(start), count(input));
    assert_eq!(&fs.read(&f, 100).await.expect("read")[..], b"hello");
    assert_eq!(&fs.read_head(&f, 3).await.expect("head")[..], b"hel");
    let kind = |r: Result<Bytes, Error>| r.map(|b| b.len()).map_err(|e| e.kind());
    for (name, max) in [("f", 2), ("root-only", 100), ("fifo", 100), ("", 100)] {
        let p = if name.is_empty() {
            dir.clone()
        } else {
            dir.join(name).expect("path")
        };
        let warm = kind(fs.read(&p, max).await);
        assert!(warm.is_err(), "{name}: {warm:?}");
        assert_eq!(warm, kind(ordinary.read(&p, max).await), "{name}");
        let warm = kind(fs.read_head(&p, max).await);
        if name != "f" {
            assert_eq!(warm, kind(ordinary.read_head(&p, max).await), "{name} head");
        }
    }
    // The ordinary fs made its 7 holder Starts and one to learn the user's ids (its
    // first holder); the worker answered the other 10.
    assert_eq!((count(start) - starts, count(input) - inputs), (8, 10));
    // mkdir, rename and remove too: one input each.
    let (starts, inputs) = (count(start), count(input));
    let d = dir.join("d").expect("path");
    let e = dir.join("e").expect("path");
    fs.mkdir(&d, false).await.expect("mkdir");
    fs.rename(&d, &e).await.expect("rename");
    assert_eq!(
        fs.rename(&d, &e).await.expect_err("gone").kind(),
        ErrorKind::NotFound
    );
    fs.remove(&e, false).await.expect("remove");
    assert_eq!((count(start) - starts, count(input) - inputs), (0, 4));
    assert_eq!(
        ordinary.lstat(&e).await.expect_err("removed").kind(),
        ErrorKind::NotFound
    );
    // A request that may have reached the worker and got no answer is never sent twice:
    // a change is OutcomeUnknown (here it was not made), a read goes the ordinary way.
    env.emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Envd)
            .path_prefix("/process.Process/SendInput")
            .times(1),
    );
    let e = fs.mkdir(&d, false).await.expect_err("lost answer");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert_eq!(
        ordinary.lstat(&d).await.expect_err("not made").kind(),
        ErrorKind::NotFound,
        "never run twice"
    );
    warm_up(fs.clone(), f.clone()).await;
    env.emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Envd)
            .path_prefix("/process.Process/SendInput")
            .times(1),
    );
    assert!(
        fs.stat(&f)
            .await
            .expect("a read goes the ordinary way")
            .is_file()
    );
    warm_up(fs.clone(), f.clone()).await;
    // The worker: a perl of the user, not reachable by the user.
    let pid = sh(
        &env,
        "pgrep -u \"$(id -u user)\" -f PR_SET_DUMPABLE | head -n 1",
        &[],
    )
    .await;
    let pid = pid.trim();
    assert!(!pid.is_empty(), "the worker runs as the user");
    assert_ne!(
        sh_as_user(&env, "ls /proc/$1/fd >/dev/null 2>&1", &[pid]).await,
        0,
        "the user lists the worker's descriptors"
    );
    assert_ne!(
        sh_as_user(&env, "echo 1 x > /proc/$1/fd/0", &[pid]).await,
        0,
        "the user writes to the worker's stdin"
    );
    assert_ne!(
        sh_as_user(&env, "echo '1 0 - -' > /proc/$1/fd/1", &[pid]).await,
        0,
        "the user forges an answer"
    );
    // Killed by the user: calls go on, the ordinary way, then on a new worker.
    assert_eq!(sh_as_user(&env, "kill -9 $1", &[pid]).await, 0);
    assert!(fs.stat(&f).await.expect("stat after the kill").is_file());
    warm_up(fs.clone(), f.clone()).await;
    let again = sh(
        &env,
        "pgrep -u \"$(id -u user)\" -f PR_SET_DUMPABLE | head -n 1",
        &[],
    )
    .await;
    assert!(
        !again.trim().is_empty() && again.trim() != pid,
        "a new worker"
    );
}
