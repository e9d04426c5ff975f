//! Conformance tests of [`exec_world::tree`]: a round trip hashed (modes and links kept),
//! special files reported, limits with their numbers, hostile destinations on both sides
//! and hostile archives refused with nothing written outside. The world side runs through
//! the world's `Subprocess` at [`World::proc_path`]; host directories are made under the
//! system temp directory and removed at the end.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

mod staging;

pub use staging::tree_cancelled_transfers_leave_no_staging;

use super::{World, sh, within};
use exec_world::tree::{self, SkipReason, TreeOptions};
use exec_world::{ErrorKind, WorldPath};

/// A host directory removed on drop.
pub struct HostDir(pub PathBuf);

impl HostDir {
    /// A fresh empty directory under the temp directory.
    pub fn new(tag: &str) -> HostDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "exec-world-tree-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("host temp dir");
        HostDir(p)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        // Restore search rights a test may have removed, then delete.
        let _ = sh_host(&format!(
            "chmod -R u+rwx '{}' 2>/dev/null",
            self.0.display()
        ));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sh_host(script: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What a tree holds, by relative path: kind, mode, content hash or link text.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .expect("below root")
                .display()
                .to_string();
            let md = std::fs::symlink_metadata(&p).expect("lstat");
            let mode = md.mode() & 0o7777;
            let what = if md.file_type().is_symlink() {
                format!(
                    "link {}",
                    std::fs::read_link(&p).expect("readlink").display()
                )
            } else if md.is_dir() {
                todo.push(p.clone());
                format!("dir {mode:o}")
            } else if md.is_file() {
                let data = std::fs::read(&p).expect("read");
                format!("file {mode:o} {}", hex(&Sha256::digest(&data)))
            } else {
                "special".to_string()
            };
            out.insert(rel, what);
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A sample tree: nested dirs, modes, an empty file, a larger file, links.
fn sample(root: &Path) {
    let w = |rel: &str, data: &[u8], mode: u32| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, data).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    w("a.txt", b"alpha\n", 0o644);
    w("bin/run.sh", b"#!/bin/sh\necho hi\n", 0o755);
    w("secret/key", b"k", 0o600);
    w("empty", b"", 0o640);
    let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    w("deep/er/still/big.bin", &big, 0o644);
    w("name with spaces/ünïcode.txt", b"u", 0o644);
    std::fs::create_dir_all(root.join("emptydir")).expect("emptydir");
    std::fs::set_permissions(root.join("secret"), std::fs::Permissions::from_mode(0o750))
        .expect("chmod dir");
    std::os::unix::fs::symlink("a.txt", root.join("link-rel")).expect("symlink");
    std::os::unix::fs::symlink("/nonexistent/abs", root.join("link-abs")).expect("symlink");
    std::os::unix::fs::symlink("../a.txt", root.join("bin/up")).expect("symlink");
}

/// The world path `rel` below the scratch directory, as the world's processes see it.
fn wpath(world: &World, rel: &str) -> WorldPath {
    world.proc_path(&world.path(rel))
}

/// Up, compared in the world, down, compared on the host: hashes, modes, links.
pub async fn tree_round_trip_hashed(world: &World) {
    let src = HostDir::new("src");
    sample(&src.0);
    let want = snapshot(&src.0);
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let opts = TreeOptions::default().progress(move |p| {
        seen2.fetch_max(p.bytes, Ordering::Relaxed);
    });
    let dest = wpath(world, "up");
    let sum = within(
        120,
        "upload",
        tree::upload(world.proc.as_ref(), &src.0, &dest, &opts),
    )
    .await
    .expect("upload");
    assert_eq!(sum.files, 6, "{sum:?}");
    assert_eq!(sum.symlinks, 3, "{sum:?}");
    assert_eq!(sum.bytes, 6 + 18 + 1 + (3 << 20) + 1, "{sum:?}");
    assert_eq!(
        seen.load(Ordering::Relaxed),
        sum.bytes,
        "progress reached the total"
    );
    // In the world: the same hashes, modes and links.
    let out = sh(
        world.proc.as_ref(),
        "cd \"$1\" && sha256sum deep/er/still/big.bin a.txt && stat -c '%a %n' bin/run.sh secret secret/key && readlink link-rel link-abs bin/up && ls -A | grep -c '^.up.tree-' ; true",
        &[dest.to_string()],
    )
    .await;
    let text = out.stdout_text();
    let big_hash = want["deep/er/still/big.bin"]
        .rsplit(' ')
        .next()
        .expect("hash")
        .to_string();
    assert!(text.contains(&big_hash), "{text}");
    for line in [
        "755 bin/run.sh",
        "750 secret",
        "600 secret/key",
        "a.txt\n/nonexistent/abs\n../a.txt",
    ] {
        assert!(text.contains(line), "world copy lacks `{line}`: {text}");
    }
    let parent = sh(
        world.proc.as_ref(),
        "ls -A \"$1\"",
        &[world.proc_path(&world.scratch).to_string()],
    )
    .await;
    assert_eq!(
        parent.stdout_text().trim(),
        "up",
        "no staging directory left"
    );

    let back = HostDir::new("back");
    let local = back.0.join("copy");
    let sum2 = within(
        120,
        "download",
        tree::download(world.proc.as_ref(), &dest, &local, &TreeOptions::default()),
    )
    .await
    .expect("download");
    assert_eq!(sum2.bytes, sum.bytes);
    assert_eq!(
        snapshot(&local),
        want,
        "the round trip keeps every byte, mode and link"
    );
    let names: Vec<_> = std::fs::read_dir(&back.0)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("copy")],
        "no staging left"
    );
}

/// FIFOs (and other special files) are reported, never opened or made; nothing blocks.
pub async fn tree_special_files_reported(world: &World) {
    let src = HostDir::new("fifo");
    std::fs::write(src.0.join("f"), b"x").expect("write");
    assert!(sh_host(&format!(
        "mkfifo '{}'",
        src.0.join("pipe").display()
    )));
    let dest = wpath(world, "sp");
    let sum = within(
        60,
        "upload with fifo",
        tree::upload(world.proc.as_ref(), &src.0, &dest, &TreeOptions::default()),
    )
    .await
    .expect("upload");
    assert_eq!(sum.skipped, vec![("pipe".to_string(), SkipReason::Special)]);
    let out = sh(
        world.proc.as_ref(),
        "cd \"$1\" && mkfifo wpipe && ls -A",
        &[dest.to_string()],
    )
    .await;
    assert_eq!(
        out.stdout_text().split_whitespace().collect::<Vec<_>>(),
        ["f", "wpipe"]
    );
    let back = HostDir::new("fifo-back");
    let local = back.0.join("c");
    let sum = within(
        60,
        "download with fifo",
        tree::download(world.proc.as_ref(), &dest, &local, &TreeOptions::default()),
    )
    .await
    .expect("download");
    assert_eq!(
        sum.skipped,
        vec![("wpipe".to_string(), SkipReason::Special)]
    );
    assert!(
        !local.join("wpipe").exists(),
        "a FIFO is not made on the host"
    );
    assert_eq!(std::fs::read(local.join("f")).expect("f"), b"x");
}

/// Entry and byte limits refuse a transfer with the numbers in the error, leaving nothing.
pub async fn tree_limits(world: &World) {
    let src = HostDir::new("lim");
    for i in 0..5 {
        std::fs::write(src.0.join(format!("f{i}")), vec![b'x'; 1000]).expect("write");
    }
    let dest = wpath(world, "lim");
    let e = tree::upload(
        world.proc.as_ref(),
        &src.0,
        &dest,
        &TreeOptions::default().max_entries(3),
    )
    .await
    .expect_err("too many entries");
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("limit 3 entries"), "{e}");
    let e = tree::upload(
        world.proc.as_ref(),
        &src.0,
        &dest,
        &TreeOptions::default().max_bytes(2500),
    )
    .await
    .expect_err("too many bytes");
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
    assert!(
        e.to_string().contains("3000 bytes (limit 2500 bytes)"),
        "{e}"
    );
    let ls = sh(
        world.proc.as_ref(),
        "ls -A \"$1\"",
        &[world.proc_path(&world.scratch).to_string()],
    )
    .await;
    assert_eq!(ls.stdout_text().trim(), "", "nothing uploaded");

    tree::upload(world.proc.as_ref(), &src.0, &dest, &TreeOptions::default())
        .await
        .expect("upload within limits");
    let back = HostDir::new("lim-back");
    let local = back.0.join("c");
    let e = tree::download(
        world.proc.as_ref(),
        &dest,
        &local,
        &TreeOptions::default().max_bytes(2500),
    )
    .await
    .expect_err("download over the byte limit");
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("(limit 2500 bytes)"), "{e}");
    let e = tree::download(
        world.proc.as_ref(),
        &dest,
        &local,
        &TreeOptions::default().max_entries(4),
    )
    .await
    .expect_err("download over the entry limit");
    assert!(e.to_string().contains("limit 4 entries"), "{e}");
    assert_eq!(
        std::fs::read_dir(&back.0).expect("ls").count(),
        0,
        "nothing downloaded"
    );
}

/// Destinations an agent planted: a symlink (world side and host side), a non-empty
/// directory; refused, and nothing written where they point.
pub async fn tree_hostile_destinations(world: &World) {
    let src = HostDir::new("hd");
    std::fs::write(src.0.join("payload"), b"p").expect("write");
    let target = wpath(world, "elsewhere");
    let link = wpath(world, "planted");
    let out = sh(
        world.proc.as_ref(),
        "mkdir \"$1\" && ln -s \"$1\" \"$2\" && mkdir \"$3\" && : > \"$3/keep\"",
        &[
            target.to_string(),
            link.to_string(),
            wpath(world, "full").to_string(),
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let e = tree::upload(world.proc.as_ref(), &src.0, &link, &TreeOptions::default())
        .await
        .expect_err("symlink destination");
    assert_eq!(e.kind(), ErrorKind::InvalidPath, "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let e = tree::upload(
        world.proc.as_ref(),
        &src.0,
        &wpath(world, "full"),
        &TreeOptions::default(),
    )
    .await
    .expect_err("non-empty destination");
    assert_eq!(e.kind(), ErrorKind::NotEmpty, "{e}");
    let ls = sh(
        world.proc.as_ref(),
        "ls -A \"$1\"; ls -A \"$2\"",
        &[target.to_string(), wpath(world, "full").to_string()],
    )
    .await;
    assert_eq!(
        ls.stdout_text().trim(),
        "keep",
        "nothing written through the link or into the full dir"
    );

    // Host side: a destination that is a symlink to somewhere else.
    let host = HostDir::new("hd-host");
    let outside = host.0.join("outside");
    std::fs::create_dir(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, host.0.join("dest")).expect("symlink");
    tree::upload(
        world.proc.as_ref(),
        &src.0,
        &wpath(world, "ok"),
        &TreeOptions::default(),
    )
    .await
    .expect("upload");
    let e = tree::download(
        world.proc.as_ref(),
        &wpath(world, "ok"),
        &host.0.join("dest"),
        &TreeOptions::default(),
    )
    .await
    .expect_err("symlink host destination");
    assert_eq!(e.kind(), ErrorKind::InvalidPath, "{e}");
    assert_eq!(
        std::fs::read_dir(&outside).expect("ls").count(),
        0,
        "nothing written through it"
    );
}

/// One crafted archive entry: raw name (no checks), type, link name, data.
fn raw_entry(
    b: &mut tar::Builder<Vec<u8>>,
    name: &str,
    kind: tar::EntryType,
    link: &str,
    data: &[u8],
) {
    let mut h = tar::Header::new_old();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data).expect("append raw entry");
}

/// Archives that try to write outside the destination: each refused with InvalidPath
/// naming the entry, nothing written outside, nothing left at the destination. The
/// host-side guard every download goes through ([`tree::extract`]).
pub async fn tree_hostile_archives(world: &World) {
    let _ = world;
    use tar::EntryType::{Directory, Link, Regular, Symlink};
    type Entry = (&'static str, tar::EntryType, &'static str, &'static [u8]);
    let cases: Vec<(&str, Vec<Entry>)> = vec![
        ("dot-dot", vec![("../escaped", Regular, "", b"x")]),
        (
            "nested dot-dot",
            vec![("a/../../escaped", Regular, "", b"x")],
        ),
        ("absolute", vec![("/tmp/escaped-abs", Regular, "", b"x")]),
        (
            "through a planted link",
            vec![
                ("l", Symlink, "OUTSIDE", b""),
                ("l/escaped", Regular, "", b"x"),
            ],
        ),
        (
            "through a planted relative link",
            vec![
                ("d", Directory, "", b""),
                ("d/l", Symlink, "../..", b""),
                ("d/l/escaped", Regular, "", b"x"),
            ],
        ),
        (
            "hard link outside",
            vec![("h", Link, "OUTSIDE/victim", b"")],
        ),
        ("hard link dot-dot", vec![("h", Link, "../victim", b"")]),
        (
            "file over a planted link",
            vec![
                ("l", Symlink, "OUTSIDE/victim", b""),
                ("l/", Directory, "", b""),
            ],
        ),
    ];
    for (what, entries) in cases {
        let host = HostDir::new("hostile");
        let outside = host.0.join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::write(outside.join("victim"), b"original").expect("victim");
        let mut b = tar::Builder::new(Vec::new());
        raw_entry(&mut b, "./", Directory, "", b"");
        raw_entry(&mut b, "fine.txt", Regular, "", b"fine");
        for (name, kind, link, data) in entries {
            let link = link.replace("OUTSIDE", &outside.display().to_string());
            raw_entry(&mut b, name, kind, &link, data);
        }
        let bytes = b.into_inner().expect("archive");
        let dest = host.0.join("dest");
        let r = tree::extract(&bytes[..], &dest, &TreeOptions::default());
        let before = snapshot(&outside);
        match r {
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    ErrorKind::InvalidPath | ErrorKind::NotADirectory | ErrorKind::IsADirectory
                ),
                "{what}: {e}"
            ),
            Ok(sum) => panic!("{what}: hostile archive accepted: {sum:?}"),
        }
        assert!(!dest.exists(), "{what}: nothing at the destination");
        assert_eq!(before.len(), 1, "{what}: nothing new outside");
        assert_eq!(
            std::fs::read(outside.join("victim")).expect("victim"),
            b"original",
            "{what}"
        );
        assert!(
            !host.0.join("escaped").exists() && !Path::new("/tmp/escaped-abs").exists(),
            "{what}"
        );
        let left: Vec<_> = std::fs::read_dir(&host.0)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("outside")],
            "{what}: no staging left"
        );
    }
}

/// A tree with an entry the acting user cannot read, and a destination whose parent the
/// user cannot write, fail as `PermissionDenied`, decided from the file system rather
/// than from tar's words, through both the stream and the file path. Skipped where the
/// acting user reads everything (root).
pub async fn tree_denied_is_permission_denied(world: &World) {
    let src = wpath(world, "denied");
    let ro = wpath(world, "ro");
    let setup = sh(
        world.proc.as_ref(),
        "mkdir -p \"$1/open\" \"$1/closed\" \"$2\" && echo x > \"$1/open/f\" && \
         echo y > \"$1/closed/g\" && chmod 000 \"$1/closed\" && chmod 555 \"$2\" && \
         if [ -r \"$1/closed\" ] || [ -w \"$2\" ]; then echo all-rights; fi",
        &[src.to_string(), ro.to_string()],
    )
    .await;
    assert!(setup.status.success(), "setup: {setup:?}");
    let restore = || async {
        sh(
            world.proc.as_ref(),
            "chmod 755 \"$1/closed\" \"$2\"",
            &[src.to_string(), ro.to_string()],
        )
        .await
    };
    if setup.stdout_text().contains("all-rights") {
        restore().await;
        println!("skipped: tree_denied_is_permission_denied: the acting user reads everything");
        return;
    }
    let host = HostDir::new("denied");
    let denied = |what: &str, r: Result<tree::TreeSummary, exec_world::Error>| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{what}: {e}");
    };
    let opts = TreeOptions::default();
    let r = within(
        60,
        "download of an unreadable tree",
        tree::download(world.proc.as_ref(), &src, &host.0.join("a"), &opts),
    )
    .await;
    denied("download", r);
    let up = HostDir::new("denied-up");
    std::fs::write(up.0.join("f"), b"x").expect("write");
    let r = within(
        60,
        "upload below a read-only parent",
        tree::upload(
            world.proc.as_ref(),
            &up.0,
            &ro.join("sub").expect("path"),
            &opts,
        ),
    )
    .await;
    denied("upload", r);
    // Through a file (fs and processes must see the same paths).
    if world.proc_root.is_none() {
        let r = within(
            60,
            "download_via_file of an unreadable tree",
            tree::download_via_file(
                world.fs.as_ref(),
                world.proc.as_ref(),
                &src,
                &host.0.join("b"),
                &opts,
            ),
        )
        .await;
        denied("download_via_file", r);
        let r = within(
            60,
            "upload_via_file below a read-only parent",
            tree::upload_via_file(
                world.fs.as_ref(),
                world.proc.as_ref(),
                &up.0,
                &ro.join("sub").expect("path"),
                &opts,
            ),
        )
        .await;
        denied("upload_via_file", r);
    }
    restore().await;
}
