//! File-system conformance tests (`fs_*`), for any [`Fs`](exec_world::Fs) with a
//! [`Subprocess`](exec_world::Subprocess) on the same world.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::{World, put, skip, symlink, within, wp};
use exec_world::{
    ByteStream, Created, Error, ErrorKind, FileKind, Target, WriteOptions, bytes_stream,
};

/// stat and lstat of a file and a directory; NotFound; NotADirectory through a file.
pub async fn fs_stat_lstat_files_and_dirs(w: &World) {
    let fs = w.fs.as_ref();
    let f = w.path("f.txt");
    put(fs, &f, b"hello").await;
    let m = fs.stat(&f).await.expect("stat file");
    assert_eq!(m.kind, FileKind::File);
    assert!(m.is_file() && !m.is_dir());
    assert_eq!(m.size, 5);
    assert_eq!(m.version.size, 5);
    assert_eq!(fs.lstat(&f).await.expect("lstat file").kind, FileKind::File);
    if fs.capabilities().mtime {
        assert!(m.mtime.is_some(), "mtime claimed but missing");
    }
    let d = w.path("d");
    fs.mkdir(&d, false).await.expect("mkdir");
    assert_eq!(fs.stat(&d).await.expect("stat dir").kind, FileKind::Dir);
    assert_eq!(fs.lstat(&d).await.expect("lstat dir").kind, FileKind::Dir);
    let missing = w.path("missing");
    assert!(matches!(
        fs.stat(&missing).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    assert!(matches!(
        fs.lstat(&missing).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    let through = w.path("f.txt/x");
    assert!(
        matches!(
            fs.stat(&through).await,
            Err(e) if e.kind() == ErrorKind::NotADirectory || e.kind() == ErrorKind::NotFound
        ),
        "stat through a file"
    );
}

/// stat follows symlinks, lstat does not; dangling links; links in listings.
pub async fn fs_symlinks(w: &World) {
    let fs = w.fs.as_ref();
    if !fs.capabilities().symlinks {
        return skip("fs_symlinks", "symlinks");
    }
    let f = w.path("target.txt");
    put(fs, &f, b"0123456789").await;
    let d = w.path("dir");
    fs.mkdir(&d, false).await.expect("mkdir");
    let lf = w.path("link-file");
    let ld = w.path("link-dir");
    let dangling = w.path("dangling");
    symlink(w, "target.txt", &lf).await;
    symlink(w, d.as_str(), &ld).await;
    symlink(w, "nowhere", &dangling).await;

    let s = fs.stat(&lf).await.expect("stat link");
    assert_eq!((s.kind, s.size), (FileKind::File, 10));
    let l = fs.lstat(&lf).await.expect("lstat link");
    assert_eq!(l.kind, FileKind::Symlink);
    assert!(l.is_symlink());
    let stored_or_resolved = |t: Option<&str>, stored: &str, resolved: &str| {
        assert!(
            t == Some(stored) || t == Some(resolved),
            "symlink_target {t:?}: expected {stored:?} or {resolved:?}"
        );
    };
    stored_or_resolved(l.symlink_target.as_deref(), "target.txt", f.as_str());
    assert_eq!(
        fs.stat(&ld).await.expect("stat dir link").kind,
        FileKind::Dir
    );
    let ldm = fs.lstat(&ld).await.expect("lstat dir link");
    assert_eq!(ldm.kind, FileKind::Symlink);
    stored_or_resolved(ldm.symlink_target.as_deref(), d.as_str(), d.as_str());
    assert!(matches!(
        fs.stat(&dangling).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    assert_eq!(
        fs.lstat(&dangling).await.expect("lstat dangling").kind,
        FileKind::Symlink
    );
    // Reading through a link reads the target.
    assert_eq!(
        &fs.read(&lf, 100).await.expect("read via link")[..],
        b"0123456789"
    );
    let entries = fs.read_dir(&w.scratch).await.expect("read_dir");
    let kind = |n: &str| {
        entries
            .iter()
            .find(|e| e.name == n)
            .map(|e| e.metadata.kind)
            .unwrap_or_else(|| panic!("{n} not listed"))
    };
    assert_eq!(kind("link-file"), FileKind::Symlink);
    assert_eq!(kind("link-dir"), FileKind::Symlink);
    assert_eq!(kind("dangling"), FileKind::Symlink);
    // Removing a link leaves its target.
    fs.remove(&lf, false).await.expect("remove link");
    assert!(fs.stat(&f).await.is_ok());
    fs.remove(&ld, true).await.expect("remove dir link");
    assert!(
        fs.stat(&d).await.is_ok(),
        "removing a link removed its target dir"
    );
}

/// read_dir lists one level, with names, absolute paths and kinds.
pub async fn fs_read_dir_one_level(w: &World) {
    let fs = w.fs.as_ref();
    assert!(fs.read_dir(&w.scratch).await.expect("empty dir").is_empty());
    put(fs, &w.path("a.txt"), b"a").await;
    fs.mkdir(&w.path("sub/deeper"), true)
        .await
        .expect("mkdir -p");
    put(fs, &w.path("sub/deeper/x"), b"x").await;
    put(fs, &w.path("sub/y"), b"yy").await;
    let mut names: Vec<(String, FileKind)> = fs
        .read_dir(&w.scratch)
        .await
        .expect("read_dir")
        .into_iter()
        .map(|e| {
            assert_eq!(e.path, w.path(&e.name), "entry path");
            (e.name, e.metadata.kind)
        })
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        names,
        vec![
            ("a.txt".into(), FileKind::File),
            ("sub".into(), FileKind::Dir)
        ]
    );
    let sub = fs.read_dir(&w.path("sub")).await.expect("read_dir sub");
    assert_eq!(sub.len(), 2);
    let y = sub.iter().find(|e| e.name == "y").expect("y listed");
    assert_eq!(y.metadata.size, 2);
    assert!(matches!(
        fs.read_dir(&w.path("nope")).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    assert!(matches!(
        fs.read_dir(&w.path("a.txt")).await,
        Err(e) if e.kind() == ErrorKind::NotADirectory
    ));
}

/// read with max_bytes below, at and above the size; empty files; errors.
pub async fn fs_bounded_read(w: &World) {
    let fs = w.fs.as_ref();
    let f = w.path("ten");
    put(fs, &f, b"0123456789").await;
    assert_eq!(&fs.read(&f, 10).await.expect("at max")[..], b"0123456789");
    assert_eq!(
        &fs.read(&f, 11).await.expect("above max")[..],
        b"0123456789"
    );
    assert_eq!(
        &fs.read(&f, u64::MAX).await.expect("huge max")[..],
        b"0123456789"
    );
    match fs.read(&f, 9).await {
        Err(e) if e.kind() == ErrorKind::TooLarge => assert_eq!(e.limit(), Some(9)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(matches!(
        fs.read(&f, 0).await,
        Err(e) if e.kind() == ErrorKind::TooLarge
    ));
    let e = w.path("empty");
    put(fs, &e, b"").await;
    assert!(fs.read(&e, 0).await.expect("empty at 0").is_empty());
    assert!(matches!(
        fs.read(&w.path("missing"), 10).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    assert!(matches!(
        fs.read(&w.scratch, 10).await,
        Err(e) if e.kind() == ErrorKind::IsADirectory
    ));
    assert!(matches!(
        fs.read_stream(&w.scratch).await.map(|_| ()),
        Err(e) if e.kind() == ErrorKind::IsADirectory
    ));
    assert!(matches!(
        fs.read_stream(&w.path("missing")).await.map(|_| ()),
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
}

/// Size of the large-file test: 256 MiB.
const LARGE: u64 = 256 << 20;
/// Chunk of generated data: 1 MiB.
const GEN_CHUNK: usize = 1 << 20;

/// Deterministic pseudo-random chunks (xorshift), `total` bytes, generated on the fly.
fn generated(total: u64) -> ByteStream {
    let state = (0x9E37_79B9_7F4A_7C15u64, 0u64);
    Box::pin(futures::stream::unfold(
        state,
        move |(mut x, done)| async move {
            if done >= total {
                return None;
            }
            let n = ((total - done) as usize).min(GEN_CHUNK);
            let mut buf = Vec::with_capacity(n + 8);
            while buf.len() < n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.extend_from_slice(&x.to_le_bytes());
            }
            buf.truncate(n);
            Some((Ok(Bytes::from(buf)), (x, done + n as u64)))
        },
    ))
}

/// Hashes a stream without holding it; returns (length, sha256, largest chunk).
async fn hash_stream(mut s: ByteStream) -> (u64, Vec<u8>, usize) {
    let mut h = Sha256::new();
    let (mut len, mut max_chunk) = (0u64, 0usize);
    while let Some(chunk) = s.next().await {
        let chunk = chunk.expect("stream item");
        len += chunk.len() as u64;
        max_chunk = max_chunk.max(chunk.len());
        h.update(&chunk);
    }
    (len, h.finalize().to_vec(), max_chunk)
}

/// A 256 MiB file written from a generated stream and read back as a stream, verified
/// by SHA-256; neither side holds the file in memory. `read` with a small max refuses it.
pub async fn fs_large_file_streaming(w: &World) {
    let fs = w.fs.as_ref();
    if !fs.capabilities().large_files {
        return skip("fs_large_file_streaming", "large_files");
    }
    let f = w.path("large.bin");
    let expected = within(600, "hash generated", hash_stream(generated(LARGE))).await;
    // Host-side memory: an adapter buffering the file shows as peak-RSS growth here.
    let peak_before = peak_rss();
    let v = within(
        600,
        "write 256 MiB",
        fs.write(&f, generated(LARGE), WriteOptions::default()),
    )
    .await
    .expect("write large");
    assert_eq!(v.size, LARGE);
    assert_eq!(fs.stat(&f).await.expect("stat large").size, LARGE);
    let stream = fs.read_stream(&f).await.expect("read_stream large");
    let got = within(600, "read 256 MiB", hash_stream(stream)).await;
    assert_eq!(got.0, LARGE, "length read back");
    assert_eq!(got.1, expected.1, "sha256 read back");
    assert!(
        got.2 < (64 << 20),
        "read_stream yielded a {} byte chunk: not streaming",
        got.2
    );
    assert!(matches!(
        fs.read(&f, 1 << 20).await,
        Err(e) if e.kind() == ErrorKind::TooLarge
    ));
    if let (Some(before), Some(after)) = (peak_before, peak_rss()) {
        assert!(
            after.saturating_sub(before) < LARGE / 2,
            "peak RSS grew by {} bytes while streaming {LARGE} bytes",
            after.saturating_sub(before)
        );
    }
}

/// This process's peak resident set (Linux `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Versions change on every write; modes apply; create_parents; writing onto a dir.
pub async fn fs_write_versions_modes_parents(w: &World) {
    let fs = w.fs.as_ref();
    let f = w.path("v.txt");
    let v1 = fs
        .write(&f, bytes_stream(&b"same"[..]), WriteOptions::default())
        .await
        .expect("write 1");
    let v2 = fs
        .write(&f, bytes_stream(&b"same"[..]), WriteOptions::default())
        .await
        .expect("write 2");
    let v3 = fs
        .write(&f, bytes_stream(&b"other"[..]), WriteOptions::default())
        .await
        .expect("write 3");
    assert_ne!(v1, v2, "rewriting identical bytes must change the version");
    assert_ne!(v2, v3);
    assert_eq!(
        fs.stat(&f).await.expect("stat").version,
        v3,
        "stat reports the last write"
    );
    assert_eq!(&fs.read(&f, 100).await.expect("read")[..], b"other");

    if fs.capabilities().posix_modes {
        let x = w.path("run.sh");
        fs.write(
            &x,
            bytes_stream(&b"#!/bin/sh\n"[..]),
            WriteOptions::default().mode(0o750),
        )
        .await
        .expect("write with mode");
        assert_eq!(fs.stat(&x).await.expect("stat").mode, Some(0o750));
        // A rewrite without a mode keeps the existing one.
        put(fs, &x, b"#!/bin/sh\necho\n").await;
        assert_eq!(fs.stat(&x).await.expect("stat").mode, Some(0o750));
        let n = w.path("new.txt");
        put(fs, &n, b"n").await;
        assert_eq!(fs.stat(&n).await.expect("stat").mode, Some(0o644));
    } else {
        skip("fs_write_versions_modes_parents (modes)", "posix_modes");
    }

    assert!(matches!(
        fs.write(
            &w.path("v.txt/x"),
            bytes_stream(&b"x"[..]),
            WriteOptions::default()
        )
        .await,
        Err(e) if e.kind() == ErrorKind::NotADirectory || e.kind() == ErrorKind::NotFound
    ));
    let deep = w.path("a/b/c.txt");
    assert!(matches!(
        fs.write(&deep, bytes_stream(&b"x"[..]), WriteOptions::default())
            .await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    fs.write(
        &deep,
        bytes_stream(&b"x"[..]),
        WriteOptions::default().create_parents(true),
    )
    .await
    .expect("write with create_parents");
    assert_eq!(&fs.read(&deep, 10).await.expect("read deep")[..], b"x");
    assert!(matches!(
        fs.write(
            &w.path("a"),
            bytes_stream(&b"x"[..]),
            WriteOptions::default()
        )
        .await,
        Err(e) if e.kind() == ErrorKind::IsADirectory
    ));
}

/// A reader racing many writes sees the old or the new content, never a mix.
pub async fn fs_atomic_write_concurrent_reader(w: &World) {
    if !w.fs.capabilities().atomic_write {
        return skip("fs_atomic_write_concurrent_reader", "atomic_write");
    }
    let f = w.path("atomic.bin");
    let size = 256 * 1024;
    let content = |b: u8| -> ByteStream {
        // Several chunks, so a non-atomic write would expose a prefix.
        let chunks: Vec<Result<Bytes, Error>> =
            (0..8).map(|_| Ok(Bytes::from(vec![b; size / 8]))).collect();
        Box::pin(futures::stream::iter(chunks))
    };
    w.fs.write(&f, content(b'a'), WriteOptions::default())
        .await
        .expect("initial write");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let fs = w.fs.clone();
        let f = f.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut reads = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 20 {
                let data = fs.read(&f, size as u64).await.expect("concurrent read");
                assert_eq!(data.len(), size, "read a partial file");
                let first = data[0];
                assert!(first == b'a' || first == b'b', "unexpected byte");
                assert!(data.iter().all(|&x| x == first), "read a mix of two writes");
                reads += 1;
            }
            reads
        })
    };
    for i in 0..40u32 {
        let b = if i % 2 == 0 { b'b' } else { b'a' };
        within(
            60,
            "write",
            w.fs.write(&f, content(b), WriteOptions::default()),
        )
        .await
        .expect("racing write");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = within(120, "reader", reader).await.expect("reader task");
    assert!(reads >= 20);
}

/// A write whose stream fails midway returns the error and leaves the old file (and no
/// temporary file in the directory).
pub async fn fs_failed_write_keeps_old(w: &World) {
    let fs = w.fs.as_ref();
    if !fs.capabilities().atomic_write {
        return skip("fs_failed_write_keeps_old", "atomic_write");
    }
    let f = w.path("keep.txt");
    put(fs, &f, b"old content").await;
    let before = fs.stat(&f).await.expect("stat").version;
    let failing: ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(Bytes::from(vec![b'n'; 64 * 1024])),
        Ok(Bytes::from(vec![b'n'; 64 * 1024])),
        Err(Error::other("source failed midway")),
        Ok(Bytes::from_static(b"never")),
    ]));
    let r = fs.write(&f, failing, WriteOptions::default()).await;
    assert!(r.is_err(), "a failing stream must fail the write");
    assert_eq!(&fs.read(&f, 100).await.expect("read")[..], b"old content");
    assert_eq!(fs.stat(&f).await.expect("stat").version, before);
    // A new file whose write fails does not appear at all.
    let g = w.path("never.txt");
    let failing: ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(Error::other("source failed")),
    ]));
    assert!(
        fs.write(&g, failing, WriteOptions::default())
            .await
            .is_err()
    );
    assert!(matches!(fs.stat(&g).await, Err(e) if e.kind() == ErrorKind::NotFound));
    let names: Vec<String> = fs
        .read_dir(&w.scratch)
        .await
        .expect("read_dir")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec!["keep.txt".to_string()],
        "temporary files left behind"
    );
}

/// create_if_absent racing with itself: exactly one wins, its content is the file's.
pub async fn fs_create_if_absent_race(w: &World) {
    if !w.fs.capabilities().exclusive_create {
        return skip("fs_create_if_absent_race", "exclusive_create");
    }
    let f = w.path("lock");
    let racers = 16;
    let mut tasks = Vec::new();
    for i in 0..racers {
        let fs = w.fs.clone();
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let data = Bytes::from(format!("owner {i} {}", "x".repeat(4096)));
            (
                i,
                fs.create_if_absent(&f, data)
                    .await
                    .expect("create_if_absent"),
            )
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (i, r) = within(60, "racer", t).await.expect("racer task");
        if r == Created::Created {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let data = w.fs.read(&f, 1 << 20).await.expect("read");
    let expected = format!("owner {} {}", winners[0], "x".repeat(4096));
    assert_eq!(
        &data[..],
        expected.as_bytes(),
        "file is the winner's, whole"
    );
    assert_eq!(
        w.fs.create_if_absent(&f, Bytes::from_static(b"late"))
            .await
            .expect("late"),
        Created::AlreadyExisted
    );
    assert!(matches!(
        w.fs.create_if_absent(&w.path("no/parent"), Bytes::from_static(b"x"))
            .await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    // A directory in the way also counts as existing.
    assert_eq!(
        w.fs.create_if_absent(&w.scratch, Bytes::from_static(b"x"))
            .await
            .expect("on dir"),
        Created::AlreadyExisted
    );
}

/// mkdir (plain and recursive) and remove (file, empty dir, non-empty dir → NotEmpty).
pub async fn fs_mkdir_and_remove(w: &World) {
    let fs = w.fs.as_ref();
    let d = w.path("d");
    fs.mkdir(&d, false).await.expect("mkdir");
    assert!(matches!(
        fs.mkdir(&d, false).await,
        Err(e) if e.kind() == ErrorKind::AlreadyExists
    ));
    fs.mkdir(&d, true).await.expect("mkdir -p on existing dir");
    assert!(matches!(
        fs.mkdir(&w.path("x/y"), false).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    fs.mkdir(&w.path("x/y/z"), true).await.expect("mkdir -p");
    assert!(fs.stat(&w.path("x/y/z")).await.expect("stat").is_dir());
    put(fs, &w.path("file"), b"f").await;
    assert!(
        fs.mkdir(&w.path("file"), true).await.is_err(),
        "mkdir -p over a file"
    );

    put(fs, &w.path("x/y/z/f"), b"f").await;
    assert!(matches!(
        fs.remove(&w.path("x"), false).await,
        Err(e) if e.kind() == ErrorKind::NotEmpty
    ));
    assert!(
        fs.stat(&w.path("x/y/z/f")).await.is_ok(),
        "failed remove removed something"
    );
    fs.remove(&w.path("x"), true).await.expect("remove -r");
    assert!(matches!(
        fs.stat(&w.path("x")).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    fs.remove(&d, false).await.expect("remove empty dir");
    fs.remove(&w.path("file"), false)
        .await
        .expect("remove file");
    assert!(matches!(
        fs.remove(&w.path("file"), false).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    assert!(fs.read_dir(&w.scratch).await.expect("read_dir").is_empty());
}

/// rename of files and dirs, replacing a file, errors.
pub async fn fs_rename(w: &World) {
    let fs = w.fs.as_ref();
    let a = w.path("a");
    let b = w.path("b");
    put(fs, &a, b"A").await;
    fs.rename(&a, &b).await.expect("rename");
    assert!(matches!(fs.stat(&a).await, Err(e) if e.kind() == ErrorKind::NotFound));
    assert_eq!(&fs.read(&b, 10).await.expect("read")[..], b"A");
    put(fs, &a, b"A2").await;
    fs.rename(&a, &b).await.expect("rename over a file");
    assert_eq!(&fs.read(&b, 10).await.expect("read")[..], b"A2");
    let d = w.path("dir");
    fs.mkdir(&d, false).await.expect("mkdir");
    put(fs, &w.path("dir/in"), b"i").await;
    let d2 = w.path("moved");
    fs.rename(&d, &d2).await.expect("rename dir");
    assert_eq!(
        &fs.read(&w.path("moved/in"), 10).await.expect("read")[..],
        b"i"
    );
    assert!(matches!(
        fs.rename(&w.path("nope"), &w.path("nope2")).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    ));
    fs.mkdir(&w.path("full"), false).await.expect("mkdir");
    put(fs, &w.path("full/x"), b"x").await;
    assert!(
        fs.rename(&d2, &w.path("full")).await.is_err(),
        "rename onto a non-empty dir"
    );
}

/// Relative paths resolve against the Fs's cwd by POSIX rules.
pub async fn fs_relative_paths(w: &World) {
    let base = w.fs.with_cwd(&w.scratch);
    assert_eq!(base.cwd(), &w.scratch);
    base.mkdir(&wp("sub"), false).await.expect("mkdir relative");
    let sub = base.with_cwd(&wp("sub"));
    assert_eq!(sub.cwd(), &w.path("sub"));
    put(sub.as_ref(), &wp("f.txt"), b"rel").await;
    assert_eq!(
        &w.fs
            .read(&w.path("sub/f.txt"), 10)
            .await
            .expect("read absolute")[..],
        b"rel"
    );
    assert_eq!(
        &sub.read(&wp("../sub/./f.txt"), 10).await.expect("read ..")[..],
        b"rel"
    );
    assert_eq!(
        &base.read(&wp("sub//f.txt"), 10).await.expect("read //")[..],
        b"rel"
    );
    let listed = base.read_dir(&wp("sub")).await.expect("read_dir relative");
    assert_eq!(
        listed[0].path,
        w.path("sub/f.txt"),
        "entries carry absolute paths"
    );
    match sub.stat(&wp("nope")).await {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            assert_eq!(e.path(), Some(w.path("sub/nope").as_str()))
        }
        other => panic!("expected NotFound with the resolved path, got {other:?}"),
    }
    sub.rename(&wp("f.txt"), &wp("../g.txt"))
        .await
        .expect("rename relative");
    assert!(base.stat(&wp("g.txt")).await.is_ok());
    assert_eq!(sub.resolve(&wp("..")), w.scratch);
}

/// canonical: absolute normalized paths, percent-encoded file: URIs, containment.
pub async fn fs_canonical_targets(w: &World) {
    let base = w.fs.with_cwd(&w.scratch);
    let t = base.canonical(&wp("a b/./c%/../é#.rs"));
    assert_eq!(t.path(), &w.path("a b/é#.rs"));
    assert!(t.path().is_absolute());
    let uri = t.uri();
    assert!(uri.starts_with("file:///"), "{uri}");
    assert!(uri.ends_with("/a%20b/%C3%A9%23.rs"), "{uri}");
    assert_eq!(Target::from_uri(&uri).expect("parse uri"), t);
    let root = base.canonical(&wp("."));
    assert_eq!(root.path(), &w.scratch);
    assert!(root.contains(&t));
    assert!(!t.contains(&root));
    let sibling = base.canonical(&wp(&format!(
        "../{}-other/x",
        w.scratch.file_name().expect("scratch has a name")
    )));
    assert!(
        !root.contains(&sibling),
        "prefix of a name is not containment"
    );
    assert!(!root.contains(&base.canonical(&wp(".."))));
    assert_eq!(base.canonical(&w.path("x")), base.canonical(&wp("x")));
}

/// Dropping a write future midway (cancellation) leaves the old file, and the backend
/// cleans its temporary file up.
pub async fn fs_dropped_write_keeps_old(w: &World) {
    let fs = w.fs.as_ref();
    if !fs.capabilities().atomic_write {
        return skip("fs_dropped_write_keeps_old", "atomic_write");
    }
    let f = w.path("cancel.txt");
    put(fs, &f, b"old").await;
    let stalled: ByteStream = Box::pin(
        futures::stream::iter(vec![Ok(Bytes::from(vec![b'n'; 64 * 1024]))])
            .chain(futures::stream::pending()),
    );
    let r = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        fs.write(&f, stalled, WriteOptions::default()),
    )
    .await;
    assert!(r.is_err(), "a write whose input never ends cannot finish");
    assert_eq!(&fs.read(&f, 100).await.expect("read")[..], b"old");
    // Remote backends may clean up from a background task: give it time to land.
    let mut names = Vec::new();
    for _ in 0..100 {
        names = fs
            .read_dir(&w.scratch)
            .await
            .expect("read_dir")
            .into_iter()
            .map(|e| e.name)
            .collect();
        if names.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        names,
        vec!["cancel.txt".to_string()],
        "temporary files left behind"
    );
}
