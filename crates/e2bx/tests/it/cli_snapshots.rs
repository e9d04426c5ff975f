//! e2bx's snapshot, fork and volume commands against an emulator in the test process:
//! `sandbox snapshot` then `sandbox create --template SNAPSHOT` carries a file, `sandbox
//! snapshots` lists by sandbox, `sandbox fork --count 2` prints two diverging sandboxes,
//! `volume create/list/rm` and `sandbox create --volume NAME:/PATH` share a directory.

use crate::support;

use bytes::Bytes;
use e2b_core::{ConnectOptions, EnvdApi as _};
use support::Remote;

async fn connect(r: &Remote, id: &str) -> e2b_core::Sandbox {
    r.client()
        .connect(id, ConnectOptions::default())
        .await
        .expect("connect")
}

async fn read(sb: &e2b_core::Sandbox, path: &str) -> String {
    String::from_utf8(sb.download_bytes(path, None, 1 << 20).await.expect("read")).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_fork_and_volume_commands() {
    let r = Remote::start().await;
    let id = r.out(&["sandbox", "create", "--name", "src"]).await.ok();
    let id = id.trim().to_owned();
    let src = connect(&r, &id).await;
    src.upload_bytes("/home/user/f", None, Bytes::from_static(b"v1"))
        .await
        .expect("write");

    let snap = r
        .out(&["sandbox", "snapshot", "src", "--name", "cp1"])
        .await
        .ok();
    assert_eq!(snap.trim(), "local/cp1:default");
    let listed = r
        .out(&["--json", "sandbox", "snapshots", "--sandbox", "src"])
        .await
        .json();
    assert_eq!(listed[0]["snapshotId"], "local/cp1:default");
    let from = r
        .out(&["--template", "cp1", "sandbox", "create"])
        .await
        .ok();
    assert_eq!(
        read(&connect(&r, from.trim()).await, "/home/user/f").await,
        "v1"
    );

    let forks = r.out(&["sandbox", "fork", &id, "--count", "2"]).await.ok();
    let forks: Vec<&str> = forks.lines().collect();
    assert_eq!(forks.len(), 2, "{forks:?}");
    let (a, b) = (connect(&r, forks[0]).await, connect(&r, forks[1]).await);
    a.upload_bytes("/home/user/f", None, Bytes::from_static(b"a"))
        .await
        .expect("write a");
    assert_eq!(read(&a, "/home/user/f").await, "a");
    assert_eq!(read(&b, "/home/user/f").await, "v1");

    let del = r.out(&["sandbox", "delete-snapshot", "cp1"]).await;
    assert_eq!(del.code, 0, "{}", del.stderr);
    let again = r.out(&["sandbox", "delete-snapshot", "cp1"]).await;
    assert!(again.one_line_error().contains("no snapshot"));

    let vid = r.out(&["volume", "create", "data"]).await.ok();
    assert_eq!(vid.trim().len(), 36, "{vid}");
    let list = r.out(&["--json", "volume", "list"]).await.json();
    assert_eq!(list[0]["name"], "data");
    let one = r
        .out(&["sandbox", "create", "--volume", "data:/mnt/data"])
        .await
        .ok();
    let two = r
        .out(&["sandbox", "create", "--volume", "data:/opt/d"])
        .await
        .ok();
    let (one, two) = (connect(&r, one.trim()).await, connect(&r, two.trim()).await);
    one.upload_bytes("/mnt/data/x", None, Bytes::from_static(b"shared"))
        .await
        .expect("write to the volume");
    assert_eq!(read(&two, "/opt/d/x").await, "shared");
    let bad = r
        .out(&["sandbox", "create", "--volume", "data:relative"])
        .await;
    assert_ne!(bad.code, 0);
    let rm = r.out(&["volume", "rm", "data"]).await;
    assert_eq!(rm.code, 0, "{}", rm.stderr);
    let list = r.out(&["--json", "volume", "list"]).await.json();
    assert_eq!(list, serde_json::json!([]));
    r.emu.shutdown().await;
}
