//! envd filesystem service: Stat/MakeDir/Remove/Move/ListDir depth, symlinks, path
//! resolution, users, WatchDir and polled watchers.
#![allow(clippy::unwrap_used)]

use crate::envd_support;

use envd_support::{basic, boot, run};
use serde_json::json;

#[tokio::test]
async fn stat_mkdir_remove_move() {
    let fake = boot("base", None).await;
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"missing"}),
            None,
        )
        .await;
    assert_eq!(st, 404);
    assert_eq!(b["code"], "not_found");
    assert_eq!(
        b["message"],
        "file not found: lstat /home/user/missing: no such file or directory"
    );
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/MakeDir",
            &json!({"path":"a/b/c"}),
            None,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["entry"]["path"], "/home/user/a/b/c");
    assert_eq!(b["entry"]["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(b["entry"]["mode"], 0o755);
    assert!(b["entry"]["modifiedTime"].as_str().unwrap().ends_with('Z'));
    if fake.envd.is_isolated() {
        assert_eq!(b["entry"]["owner"], "user");
    }
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/MakeDir",
            &json!({"path":"~/a/b/c"}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (409, Some("already_exists")));
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"~bob/x"}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (400, Some("invalid_argument")));
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Remove",
            &json!({"path":"/home/user/nothing"}),
            None,
        )
        .await;
    assert_eq!((st, b), (200, json!({})));
    // Move creates destination parents
    run(&fake, "echo hi > ~/f.txt", None).await;
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Move",
            &json!({"source":"f.txt","destination":"x/y/g.txt"}),
            None,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["entry"]["path"], "/home/user/x/y/g.txt");
    assert_eq!(b["entry"]["size"], "3");
    assert_eq!(b["entry"]["permissions"], "-rw-r--r--");
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Move",
            &json!({"source":"f.txt","destination":"z.txt"}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (404, Some("not_found")));
    let (st, _) = fake
        .unary("/filesystem.Filesystem/Remove", &json!({"path":"x"}), None)
        .await;
    assert_eq!(st, 200);
    let (st, _) = fake
        .unary("/filesystem.Filesystem/Stat", &json!({"path":"x"}), None)
        .await;
    assert_eq!(st, 404);
    // users via Basic auth
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":""}),
            Some("root"),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(b["entry"]["path"], "/root");
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"/"}),
            Some("bob"),
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (401, Some("unauthenticated")));
    assert_eq!(b["message"], "invalid username: 'bob'");
}

#[tokio::test]
async fn list_dir_depth_and_symlinks() {
    let fake = boot("base", None).await;
    let (_, _, end) = run(
        &fake,
        "mkdir -p ~/t/a/deep && echo x > ~/t/a/x.txt && echo bb > ~/t/b.txt && echo d > ~/t/a/deep/d && ln -s /home/user/t/b.txt ~/t/link && ln -s /nowhere ~/t/broken && ln -s a ~/t/dirlink",
        None,
    )
    .await;
    assert_eq!(end["exited"], true);
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"t","depth":1}),
            None,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let paths: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/home/user/t/a",
            "/home/user/t/b.txt",
            "/home/user/t/broken",
            "/home/user/t/dirlink",
            "/home/user/t/link"
        ]
    );
    let (_, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"/home/user/t","depth":2}),
            None,
        )
        .await;
    let paths: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/home/user/t/a",
            "/home/user/t/a/deep",
            "/home/user/t/a/x.txt",
            "/home/user/t/b.txt",
            "/home/user/t/broken",
            "/home/user/t/dirlink",
            "/home/user/t/link"
        ]
    );
    let entries = b["entries"].as_array().unwrap();
    let link = entries.iter().find(|e| e["name"] == "link").unwrap();
    assert_eq!(link["type"], "FILE_TYPE_FILE");
    assert!(link["permissions"].as_str().unwrap().starts_with('L'));
    assert_eq!(link["symlinkTarget"], "/home/user/t/b.txt");
    assert_eq!(link["mode"], 0o644);
    let broken = entries.iter().find(|e| e["name"] == "broken").unwrap();
    assert!(
        broken.get("type").is_none(),
        "broken link is UNSPECIFIED: {broken}"
    );
    let dirlink = entries.iter().find(|e| e["name"] == "dirlink").unwrap();
    assert_eq!(dirlink["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(dirlink["symlinkTarget"], "/home/user/t/a");
    // listing through a symlinked directory keeps the requested path
    let (_, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"t/dirlink"}),
            None,
        )
        .await;
    assert_eq!(b["entries"][0]["path"], "/home/user/t/dirlink/deep");
    // errors
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"t/b.txt"}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (400, Some("invalid_argument")));
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/ListDir",
            &json!({"path":"nope"}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (404, Some("not_found")));
    // Stat of the symlink: target type, L permissions
    let (_, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"t/link"}),
            None,
        )
        .await;
    assert_eq!(b["entry"]["type"], "FILE_TYPE_FILE");
    assert_eq!(b["entry"]["size"], "18");
}

#[tokio::test]
async fn watch_dir_stream_and_polled_watcher() {
    let fake = boot("base", None).await;
    run(&fake, "mkdir -p ~/w/sub", None).await;
    let auth = basic("user");
    let mut s = fake
        .stream(
            "/filesystem.Filesystem/WatchDir",
            &json!({"path":"w","recursive":true}),
            &[
                ("Authorization", auth.as_str()),
                ("Keepalive-Ping-Interval", "1"),
            ],
        )
        .await;
    assert_eq!(s.msg().await, json!({"start":{}}));
    let (st, cw) = fake
        .unary(
            "/filesystem.Filesystem/CreateWatcher",
            &json!({"path":"w"}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let id = cw["watcherId"].as_str().unwrap().to_string();
    assert!(id.starts_with('w') && id.len() == 21);

    run(
        &fake,
        "echo 1 > ~/w/x && echo 2 > ~/w/sub/y && chmod 600 ~/w/x && mv ~/w/x ~/w/z && rm ~/w/z",
        None,
    )
    .await;
    let mut seen = Vec::new();
    while seen.len() < 100 {
        let m = s.msg().await;
        if m.get("keepalive").is_some() {
            if seen
                .iter()
                .any(|(n, t): &(String, String)| n == "z" && t == "EVENT_TYPE_REMOVE")
            {
                break;
            }
            continue;
        }
        let ev = &m["filesystem"];
        seen.push((
            ev["name"].as_str().unwrap().to_string(),
            ev["type"].as_str().unwrap().to_string(),
        ));
        if seen.last().unwrap() == &("z".to_string(), "EVENT_TYPE_REMOVE".to_string()) {
            break;
        }
    }
    let has = |n: &str, t: &str| seen.iter().any(|(a, b)| a == n && b == t);
    assert!(has("x", "EVENT_TYPE_CREATE"), "{seen:?}");
    assert!(has("x", "EVENT_TYPE_WRITE"), "{seen:?}");
    assert!(has("sub/y", "EVENT_TYPE_CREATE"), "{seen:?}");
    assert!(has("x", "EVENT_TYPE_CHMOD"), "{seen:?}");
    assert!(has("x", "EVENT_TYPE_RENAME"), "{seen:?}");
    assert!(has("z", "EVENT_TYPE_CREATE"), "{seen:?}");
    assert!(has("z", "EVENT_TYPE_REMOVE"), "{seen:?}");
    drop(s);

    let (st, evs) = fake
        .unary(
            "/filesystem.Filesystem/GetWatcherEvents",
            &json!({"watcherId": id}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let names: Vec<&str> = evs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"x"), "{evs}");
    assert!(!names.contains(&"sub/y"), "not recursive: {evs}");
    let (st, _) = fake
        .unary(
            "/filesystem.Filesystem/RemoveWatcher",
            &json!({"watcherId": id}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/GetWatcherEvents",
            &json!({"watcherId": id}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (404, Some("not_found")));

    // idle watch: keepalives, then the deadline ends it
    let mut s = fake
        .stream(
            "/filesystem.Filesystem/WatchDir",
            &json!({"path":"/tmp"}),
            &[
                ("Keepalive-Ping-Interval", "1"),
                ("Connect-Timeout-Ms", "1500"),
            ],
        )
        .await;
    assert_eq!(s.msg().await, json!({"start":{}}));
    assert_eq!(s.msg().await, json!({"keepalive":{}}));
    let (_, end) = s.collect().await;
    assert_eq!(end["error"]["code"], "deadline_exceeded");

    let mut s = fake
        .stream(
            "/filesystem.Filesystem/WatchDir",
            &json!({"path":"/nope"}),
            &[],
        )
        .await;
    let (msgs, end) = s.collect().await;
    assert!(msgs.is_empty());
    assert_eq!(end["error"]["code"], "not_found");
}

#[tokio::test]
async fn conversation_template_layout() {
    let fake = boot("conversation", None).await;
    if !fake.envd.is_isolated() {
        eprintln!("skipped: template users and modes need isolation (root with CAP_SYS_ADMIN)");
        return;
    }
    let (out, _, _) = run(
        &fake,
        "id -un; pwd; echo $HOME; stat -c '%U %a' /workspace /skills /opt/capybara; ls /opt/capybara 2>&1; echo x > /skills/f 2>&1 || echo denied",
        None,
    )
    .await;
    let text = String::from_utf8(out).unwrap();
    let (dot, _, _) = run(&fake, "ls -A ~", None).await;
    assert!(
        String::from_utf8(dot).unwrap().contains(".bashrc"),
        "skeleton copied"
    );
    assert!(
        text.starts_with("sandbox\n/workspace\n/workspace\nsandbox 755\nroot 755\nroot 700\n"),
        "{text}"
    );
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.trim_end().ends_with("denied"), "{text}");
    let (st, b) = fake
        .unary("/filesystem.Filesystem/Stat", &json!({"path":""}), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(b["entry"]["path"], "/workspace");
    assert_eq!(b["entry"]["owner"], "sandbox");
}

#[tokio::test]
async fn cold_boot_keeps_files_and_stop_all_kills() {
    let fake = boot("base", None).await;
    run(&fake, "echo keep > ~/k.txt", None).await;
    let body = json!({"process":{"cmd":"sleep","args":["100"]},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    let pid = fake.envd.host_pid(u32::try_from(pid).unwrap()).unwrap();
    fake.envd.freeze().await;
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(st.contains("State:\tT"), "{st}");
    fake.envd.thaw().await;
    fake.envd.stop_all().await;
    let (msgs, _) = s.collect().await;
    let end = msgs.last().unwrap();
    assert_eq!(end["event"]["end"]["status"], "signal: killed");
    let (_, list) = fake.unary("/process.Process/List", &json!({}), None).await;
    assert_eq!(list, json!({}));
    let (st, b) = fake
        .unary(
            "/filesystem.Filesystem/Stat",
            &json!({"path":"k.txt"}),
            None,
        )
        .await;
    assert_eq!((st, b["entry"]["size"].as_str()), (200, Some("5")));
}
