//! `e2bx cp -r` up and down (a tree with modes and a symlink, compared byte for byte after
//! the round trip) and `e2bx watch --json` printing a change made in the sandbox, against
//! an emulator in the test process.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;

use crate::support::Remote;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_r_round_trip_keeps_bytes_modes_and_links() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("proj");
    std::fs::create_dir_all(src.join("src/deep")).expect("mkdir");
    let big: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 253) as u8).collect();
    std::fs::write(src.join("src/deep/big.bin"), &big).expect("write");
    std::fs::write(src.join("run.sh"), b"#!/bin/sh\necho ok\n").expect("write");
    std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::os::unix::fs::symlink("src/deep/big.bin", src.join("link")).expect("symlink");

    // Into an existing sandbox directory: the tree keeps its name.
    r.out(&[
        "--sandbox",
        &id,
        "cp",
        "-r",
        src.to_str().expect("utf-8"),
        "sbx:/home/user/",
    ])
    .await
    .ok();
    let listed = r
        .out(&[
            "--sandbox",
            &id,
            "run",
            "--",
            "sh",
            "-c",
            "cd proj && stat -c '%a %n' run.sh && readlink link && sha256sum src/deep/big.bin",
        ])
        .await
        .ok();
    assert!(listed.contains("755 run.sh"), "{listed}");
    assert!(listed.contains("src/deep/big.bin\n"), "{listed}");

    let back = dir.path().join("back");
    r.out(&[
        "--sandbox",
        &id,
        "cp",
        "-r",
        ":proj",
        back.to_str().expect("utf-8"),
    ])
    .await
    .ok();
    assert_eq!(
        std::fs::read(back.join("src/deep/big.bin")).expect("big"),
        big
    );
    let mode = std::fs::metadata(back.join("run.sh"))
        .expect("run.sh")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(back.join("link")).expect("link"),
        std::path::Path::new("src/deep/big.bin")
    );
    // Into a directory that already holds a non-empty `proj`: refused, in one line.
    let again = r
        .out(&[
            "--sandbox",
            &id,
            "cp",
            "-r",
            ":proj",
            dir.path().to_str().expect("utf-8"),
        ])
        .await;
    assert_ne!(again.code, 0);
    assert!(again.stderr.contains("not empty"), "{}", again.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_json_prints_changes() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create"]).await.ok().trim().to_owned();
    r.out(&["--sandbox", &id, "run", "--", "mkdir", "w"])
        .await
        .ok();
    let mut child = r
        .cmd()
        .args(["--sandbox", &id, "--json", "watch", "-r", ":w"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("e2bx watch");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    // Make changes until the watch (which starts asynchronously) reports one.
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        let mut n = 0;
        loop {
            r.out(&[
                "--sandbox",
                &id,
                "run",
                "--",
                "sh",
                "-c",
                &format!("mkdir -p w/sub && : > w/sub/f{n}"),
            ])
            .await
            .ok();
            n += 1;
            if let Ok(Ok(Some(line))) =
                tokio::time::timeout(Duration::from_secs(2), lines.next_line()).await
            {
                let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
                assert!(v["seq"].is_u64(), "{line}");
                assert!(v["kind"].is_string(), "{line}");
                return v;
            }
        }
    })
    .await
    .expect("a watch event within 60 s");
    assert_eq!(found["seq"], 0, "{found}");
    let _ = child.start_kill();
    let _ = child.wait().await;
}
