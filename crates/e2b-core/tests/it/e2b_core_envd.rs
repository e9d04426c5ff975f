//! e2b-core's envd client against the emulator: every process and filesystem RPC, the
//! streamed `/files` routes (a 64 MiB+ round trip checked by hash), signed URLs, and the
//! error mapping of envd faults (cut streams, missing token, proxy 502, resets).

use crate::e2b_core_support;

use std::time::Duration;

use bytes::Bytes;
use e2b_core::proto::connect::Code;
use e2b_core::proto::filesystem::{EventType, FileType};
use e2b_core::proto::process::{
    DataEvent, ProcessEvent, ProcessInput, ProcessSelector, PtySize, Signal,
};
use e2b_core::{
    ByteStream, EnvdApi, Error, Sandbox, SandboxParts, StartProcess, StreamOptions, Surface,
    WatchOptions, bytes_stream,
};
use e2b_core_support::{client, config, emulator, sandbox, within};
use futures::StreamExt as _;
use sha2::{Digest as _, Sha256};
use testing_fake::{FaultAction, FaultRule, Plane};

/// A caller that stops reading a process at its `end` event and drops the stream still
/// leaves the connection reusable (the end-of-stream frame that follows `end` is read
/// with it): five such processes cost at most one new connection, not five.
#[tokio::test]
async fn a_process_stream_dropped_at_its_end_keeps_the_connection() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    sb.run(StartProcess::shell("true")).await.expect("warm");
    let before = emu.counters().connections();
    for _ in 0..5 {
        let mut s = sb
            .start_process(StartProcess::shell("echo hi"))
            .await
            .expect("start");
        loop {
            match within("end", s.next()).await {
                Some(Ok(ProcessEvent::End(e))) => {
                    assert_eq!(e.exit_code, 0);
                    break;
                }
                Some(Ok(_)) => {}
                other => panic!("no end event: {other:?}"),
            }
        }
        drop(s);
    }
    let opened = emu.counters().connections() - before;
    assert!(opened <= 1, "{opened} new connections for five processes");
}

#[tokio::test]
async fn processes_run_stream_and_exit() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    sb.health().await.expect("health");

    let out = within("echo", async {
        sb.start_process(StartProcess::shell("echo hi; echo err >&2; exit 3"))
            .await
            .expect("start")
            .wait_output()
            .await
            .expect("wait")
    })
    .await;
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(out.stderr, b"err\n");
    assert_eq!(out.end.exit_code, 3);
    assert!(out.end.exited);

    // exit 0: exitCode omitted on the wire, decoded as 0 (through the provided `run`)
    let ok = sb.run(StartProcess::shell("true")).await.expect("run");
    assert_eq!(ok.end.exit_code, 0);
    assert!(ok.end.exited);
    assert!(ok.end.error.is_none());

    // env, cwd and user
    let out = sb
        .start_process(
            StartProcess::new("/bin/sh")
                .args(["-c", "printf '%s|%s|%s' \"$FOO\" \"$(pwd)\" \"$(id -un)\""])
                .env("FOO", "bar")
                .cwd("/tmp")
                .user("root"),
        )
        .await
        .expect("start")
        .wait_output()
        .await
        .expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bar|/tmp|root");

    // a quiet process under an idle timeout: the keepalive interval asked of envd is
    // lowered under it, so the stream stays alive until the process ends
    let quiet = sb
        .run(StartProcess::shell("sleep 3; echo done").idle_timeout(Duration::from_secs(2)))
        .await
        .expect("keepalives keep an idle-timed stream alive");
    assert_eq!(quiet.stdout, b"done\n");

    // an unsecured sandbox: no token at all. v2 sandboxes are always secured (NewSandboxV2
    // has no `secure`), so force the v1 path with a bare 404 on v2.
    emu.faults().add(
        FaultRule::new(FaultAction::Status {
            status: 404,
            body: "404 page not found".into(),
            content_type: "text/plain".into(),
        })
        .surface(Plane::Control)
        .path_prefix("/v2/sandboxes")
        .times(1),
    );
    let open = client(&emu)
        .create(&e2b_core::CreateOptions::new("base").secure(false))
        .await
        .expect("create unsecured");
    assert!(open.access_token().is_none());
    let out = open
        .run(StartProcess::shell("echo open"))
        .await
        .expect("run");
    assert_eq!(out.stdout, b"open\n");
    let url = open
        .download_url("/home/user", None, None)
        .expect("unsigned url");
    assert!(!url.contains("signature"), "{url}");

    // unknown user is refused by envd
    let err = sb
        .start_process(StartProcess::shell("true").user("no-such-user-xyz"))
        .await
        .unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn stdin_list_connect_signal() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;

    // stdin: send, close, read back
    let cat = sb
        .start_process(StartProcess::new("cat").stdin(true))
        .await
        .expect("start cat");
    let pid = cat.pid();
    sb.send_input(
        ProcessSelector::Pid(pid),
        ProcessInput::Stdin(b"abc\n".to_vec()),
    )
    .await
    .expect("send input");
    // In pieces (binary, one copy each), every byte value, past a pipe buffer.
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 256) as u8).collect();
    sb.send_stdin_parts(ProcessSelector::Pid(pid), &[b"de", b"", &big])
        .await
        .expect("send parts");
    sb.close_stdin(ProcessSelector::Pid(pid))
        .await
        .expect("close stdin");
    let out = within("cat", cat.wait_output()).await.expect("cat output");
    let mut want = b"abc\nde".to_vec();
    want.extend_from_slice(&big);
    assert!(out.stdout == want, "cat echoed {} bytes", out.stdout.len());
    assert_eq!(out.end.exit_code, 0);

    // a tagged long runner: list, connect, signal
    let sleeper = sb
        .start_process(StartProcess::shell("sleep 600").tag("sleeper"))
        .await
        .expect("start sleep");
    let pid = sleeper.pid();
    let listed = sb.list_processes().await.expect("list");
    let info = listed.iter().find(|p| p.pid == pid).expect("listed");
    assert_eq!(info.tag.as_deref(), Some("sleeper"));
    assert_eq!(info.config.cmd, "/bin/bash");

    let attached = sb
        .connect_process(
            ProcessSelector::Tag("sleeper".into()),
            StreamOptions::default(),
        )
        .await
        .expect("connect by tag");
    assert_eq!(attached.pid(), pid);
    drop(sleeper); // disconnecting does not stop the process
    assert!(
        sb.list_processes()
            .await
            .expect("list")
            .iter()
            .any(|p| p.pid == pid)
    );

    // a deadline on Connect bounds the stream, not the process
    let mut bounded = sb
        .connect_process(
            ProcessSelector::Pid(pid),
            StreamOptions {
                deadline: Some(Duration::from_millis(300)),
                idle_timeout: None,
            },
        )
        .await
        .expect("connect with deadline");
    let last = within("deadline", async {
        loop {
            match bounded.next().await {
                Some(Ok(_)) => continue,
                other => return other,
            }
        }
    })
    .await;
    match last {
        Some(Err(e)) => assert!(e.is_timeout(), "{e:?}"),
        other => panic!("the deadline should end the stream with an error: {other:?}"),
    }
    assert!(
        sb.list_processes()
            .await
            .expect("list")
            .iter()
            .any(|p| p.pid == pid),
        "the process outlives the connect deadline"
    );

    sb.send_signal(ProcessSelector::Pid(pid), Signal::Sigkill)
        .await
        .expect("kill");
    let out = within("killed", attached.wait_output()).await.expect("end");
    assert_eq!(out.end.exit_code, -1);
    assert!(!out.end.exited);
    assert!(out.end.status.contains("killed"), "{:?}", out.end);

    // unknown pid: not_found, both for signal and connect
    let err = sb
        .send_signal(ProcessSelector::Pid(999_999), Signal::Sigterm)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.status(), Some(404));
    let err = sb
        .connect_process(ProcessSelector::Pid(999_999), StreamOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn pty_resize_and_process_timeout() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;

    let out = sb
        .start_process(StartProcess::shell("stty size").pty(100, 30))
        .await
        .expect("pty start")
        .wait_output()
        .await
        .expect("pty output");
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.pty).contains("30 100"),
        "{:?}",
        out.pty
    );

    let mut shell = sb
        .start_process(StartProcess::new("/bin/sh").pty(80, 24))
        .await
        .expect("pty shell");
    let sel = ProcessSelector::Pid(shell.pid());
    sb.resize_pty(
        sel.clone(),
        PtySize {
            cols: 120,
            rows: 40,
        },
    )
    .await
    .expect("resize");
    sb.send_input(
        sel.clone(),
        ProcessInput::Pty(b"stty size; exit 0\n".to_vec()),
    )
    .await
    .expect("pty input");
    let mut pty = Vec::new();
    let mut end = None;
    within("pty shell", async {
        while let Some(ev) = shell.next().await {
            match ev.expect("event") {
                ProcessEvent::Data(DataEvent::Pty(b)) => pty.extend_from_slice(&b),
                ProcessEvent::End(e) => end = Some(e),
                _ => {}
            }
        }
    })
    .await;
    assert!(String::from_utf8_lossy(&pty).contains("40 120"));
    assert_eq!(end.expect("end").exit_code, 0);

    // resizing a pipe process is refused
    let pipe = sb
        .start_process(StartProcess::shell("sleep 600"))
        .await
        .expect("start");
    let err = sb
        .resize_pty(
            ProcessSelector::Pid(pipe.pid()),
            PtySize { cols: 1, rows: 1 },
        )
        .await
        .unwrap_err();
    assert!(err.connect_code().is_some(), "{err:?}");
    sb.send_signal(ProcessSelector::Pid(pipe.pid()), Signal::Sigkill)
        .await
        .expect("kill");

    // process lifetime: envd kills it (end -1) or the stream ends with deadline_exceeded
    let r = within(
        "timed process",
        sb.start_process(StartProcess::shell("sleep 600").timeout(Duration::from_millis(300)))
            .await
            .expect("start")
            .wait_output(),
    )
    .await;
    match r {
        Ok(out) => assert_eq!(out.end.exit_code, -1, "{:?}", out.end),
        Err(e) => assert!(e.is_timeout(), "{e:?}"),
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn filesystem_rpcs_and_watch() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;

    let dir = sb
        .make_dir("/home/user/work/sub", None)
        .await
        .expect("mkdir -p");
    assert_eq!(dir.file_type, FileType::Directory);
    let err = sb.make_dir("/home/user/work/sub", None).await.unwrap_err();
    assert!(err.is_already_exists(), "{err:?}");

    let mut watch = sb
        .watch_dir(
            "/home/user/work",
            WatchOptions {
                recursive: true,
                ..Default::default()
            },
        )
        .await
        .expect("watch");

    let written = sb
        .upload("/home/user/work/a.txt", None, bytes_stream(&b"hello"[..]))
        .await
        .expect("upload");
    assert_eq!(written.path, "/home/user/work/a.txt");
    assert_eq!(written.name, "a.txt");

    let ev = within("watch event", async {
        loop {
            let ev = watch.next().await.expect("watch open").expect("event");
            if ev.name == "a.txt" {
                return ev;
            }
        }
    })
    .await;
    assert!(
        matches!(ev.event_type, EventType::Create | EventType::Write),
        "{ev:?}"
    );
    drop(watch);

    let st = sb
        .stat("work/a.txt", None)
        .await
        .expect("stat relative to home");
    assert_eq!(st.path, "/home/user/work/a.txt");
    assert_eq!(st.size, 5);
    assert_eq!(st.file_type, FileType::File);
    assert_eq!(st.owner, "user");

    let one = sb.list_dir("/home/user/work", 1, None).await.expect("ls");
    let names: Vec<_> = one.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "sub"]);
    sb.upload(
        "/home/user/work/sub/deep.txt",
        None,
        bytes_stream(&b"x"[..]),
    )
    .await
    .expect("upload deep");
    let two = sb
        .list_dir("/home/user/work", 2, None)
        .await
        .expect("ls -R");
    let paths: Vec<_> = two.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/home/user/work/a.txt",
            "/home/user/work/sub",
            "/home/user/work/sub/deep.txt"
        ]
    );

    let moved = sb
        .rename("/home/user/work/a.txt", "/home/user/work/new/b.txt", None)
        .await
        .expect("move");
    assert_eq!(moved.path, "/home/user/work/new/b.txt");
    let err = sb.stat("/home/user/work/a.txt", None).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.connect_code(), Some(Code::NotFound));
    let err = sb
        .rename("/home/user/nope", "/home/user/x", None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");

    sb.remove("/home/user/work", None).await.expect("rm -r");
    sb.remove("/home/user/work", None)
        .await
        .expect("rm missing is ok");
    let err = sb.list_dir("/home/user/work", 1, None).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");

    // provided helpers: bytes in, bytes out, bounded
    sb.upload_bytes("/home/user/h.txt", None, Bytes::from_static(b"helper"))
        .await
        .expect("upload bytes");
    assert_eq!(
        sb.download_bytes("/home/user/h.txt", None, 6)
            .await
            .expect("download bytes"),
        b"helper"
    );
    assert!(
        sb.download_bytes("/home/user/h.txt", None, 5)
            .await
            .is_err()
    );

    // root's view and a user that does not exist
    let root_home = sb.stat("~", Some("root")).await.expect("root home");
    assert_eq!(root_home.path, "/root");
    let err = sb.stat("/tmp", Some("no-such-user-xyz")).await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");

    let err = sb
        .watch_dir("/home/user/missing", WatchOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    emu.shutdown().await;
}

/// Deterministic pseudo-random chunks (xorshift), produced lazily one at a time so the
/// upload never has the whole file in memory; the expected hash is computed by a first
/// pass over the same generator.
fn generated(total: usize, chunk: usize) -> (ByteStream, [u8; 32]) {
    fn chunks(total: usize, chunk: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut left = total;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let n = left.min(chunk);
            let mut buf = Vec::with_capacity(n + 8);
            while buf.len() < n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                buf.extend_from_slice(&state.to_le_bytes());
            }
            buf.truncate(n);
            left -= n;
            Some(buf)
        })
    }
    let mut hasher = Sha256::new();
    for c in chunks(total, chunk) {
        hasher.update(&c);
    }
    let stream = futures::stream::iter(chunks(total, chunk).map(|c| Ok(Bytes::from(c))));
    (Box::pin(stream), hasher.finalize().into())
}

#[tokio::test]
async fn streamed_64mib_round_trip_verified_by_hash() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    let size = 64 * 1024 * 1024 + 12_345;
    let (body, want) = generated(size, 1024 * 1024 - 7);
    let info = within("upload", sb.upload("/home/user/big.bin", None, body))
        .await
        .expect("upload");
    assert_eq!(info.path, "/home/user/big.bin");
    let st = sb.stat("/home/user/big.bin", None).await.expect("stat");
    assert_eq!(st.size, size as i64);

    let mut dl = sb
        .download("/home/user/big.bin", None)
        .await
        .expect("download");
    assert_eq!(dl.content_length(), Some(size as u64));
    let mut hasher = Sha256::new();
    let mut got = 0usize;
    within("download", async {
        while let Some(chunk) = dl.next().await {
            let chunk = chunk.expect("chunk");
            got += chunk.len();
            hasher.update(&chunk);
        }
    })
    .await;
    assert_eq!(got, size);
    let have: [u8; 32] = hasher.finalize().into();
    assert_eq!(have, want);

    // an envd older than 0.5.7 gets the same stream framed as multipart/form-data (and,
    // older than 0.4.0 too, the user named explicitly)
    let old = c
        .attach(SandboxParts {
            sandbox_id: sb.id().to_owned(),
            envd_version: "0.3.9".to_owned(),
            access_token: sb.access_token().cloned(),
            ..Default::default()
        })
        .expect("attach");
    let (body, want_old) = generated(5 * 1024 * 1024 + 3, 100_000);
    let info = old
        .upload("/home/user/multi.bin", None, body)
        .await
        .expect("multipart upload");
    assert_eq!(info.path, "/home/user/multi.bin");
    let mut hasher = Sha256::new();
    let mut dl = old
        .download("/home/user/multi.bin", None)
        .await
        .expect("download");
    while let Some(chunk) = dl.next().await {
        hasher.update(chunk.expect("chunk"));
    }
    let have: [u8; 32] = hasher.finalize().into();
    assert_eq!(have, want_old);
    assert_eq!(
        sb.stat("/home/user/multi.bin", None)
            .await
            .expect("stat")
            .owner,
        "user"
    );

    // from an AsyncRead, and back through AsyncRead
    let data = b"from a reader\n".repeat(1000);
    sb.upload_reader("/home/user/r.txt", None, std::io::Cursor::new(data.clone()))
        .await
        .expect("upload reader");
    let mut back = Vec::new();
    let mut reader = sb
        .download("/home/user/r.txt", None)
        .await
        .expect("download")
        .into_async_read();
    tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut back)
        .await
        .expect("read");
    assert_eq!(back, data);

    // empty file
    sb.upload("/home/user/empty", None, bytes_stream(Bytes::new()))
        .await
        .expect("empty");
    let dl = sb
        .download("/home/user/empty", None)
        .await
        .expect("download empty");
    assert_eq!(dl.collect(10).await.expect("collect"), b"");

    // missing file and directory
    let err = sb.download("/home/user/missing", None).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let err = sb.download("/home/user", None).await.unwrap_err();
    assert_eq!(err.connect_code(), Some(Code::InvalidArgument), "{err:?}");

    // an upload source that fails is reported as such
    let failing: ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(Bytes::from_static(b"part")),
        Err(std::io::Error::other("disk on fire")),
    ]));
    let err = sb
        .upload("/home/user/f.txt", None, failing)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Source(_) | Error::Transport { .. }),
        "{err:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn signed_urls_work_without_headers() {
    let emu = emulator().await;
    let c = client(&emu);
    let sb = sandbox(&c).await;
    sb.upload("/home/user/s.txt", None, bytes_stream(&b"signed"[..]))
        .await
        .expect("upload");
    let http = reqwest::Client::new();
    let url = sb
        .download_url("/home/user/s.txt", None, Some(Duration::from_secs(300)))
        .expect("url");
    let resp = http
        .get(&url)
        .header("E2b-Sandbox-Id", sb.id())
        .header("E2b-Sandbox-Port", "49983")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.bytes().await.expect("body").as_ref(), b"signed");
    let up = sb.upload_url("/home/user/t.txt", None, None).expect("url");
    let resp = http
        .post(&up)
        .header("E2b-Sandbox-Id", sb.id())
        .header("E2b-Sandbox-Port", "49983")
        .header("Content-Type", "application/octet-stream")
        .body("via url")
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 200);
    let back = sb
        .download("/home/user/t.txt", None)
        .await
        .expect("dl")
        .collect(100)
        .await;
    assert_eq!(back.expect("bytes"), b"via url");
    // a wrong signature is refused
    let bad = url.replace("signature=v1_", "signature=v1_x");
    let resp = http
        .get(&bad)
        .header("E2b-Sandbox-Id", sb.id())
        .header("E2b-Sandbox-Port", "49983")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 401);
    emu.shutdown().await;
}

fn envd_rule(action: FaultAction, path: &str) -> FaultRule {
    FaultRule::new(action)
        .surface(Plane::Envd)
        .path_prefix(path)
        .times(1)
}

#[tokio::test]
async fn envd_faults_map_to_typed_errors() {
    let emu = emulator().await;
    // Without retries: each injected fault maps to one error (retries are proven in
    // crates/e2b-core/tests/it/e2b_core_retry.rs).
    let c = client(&emu).with_retry_policy(e2b_core::retry::RetryPolicy::none());
    let sb = sandbox(&c).await;
    let token = sb.access_token().expect("secured").expose().to_owned();

    // stream cut after the start event, before the end-of-stream frame → error
    emu.faults().add(envd_rule(
        FaultAction::CutStream { after_frames: 1 },
        "/process.Process/Start",
    ));
    let stream = sb
        .start_process(StartProcess::shell("echo hi"))
        .await
        .expect("start event arrives");
    let err = within("cut stream", stream.wait_output())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::StreamCut {
                surface: Surface::Envd,
                ..
            }
        ),
        "{err:?}"
    );

    // cut before anything: the start itself fails
    emu.faults().add(envd_rule(
        FaultAction::CutStream { after_frames: 0 },
        "/process.Process/Start",
    ));
    let err = sb
        .start_process(StartProcess::shell("echo hi"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StreamCut { .. }), "{err:?}");

    // cut a watch after its start
    sb.make_dir("/home/user/w", None).await.expect("mkdir");
    emu.faults().add(envd_rule(
        FaultAction::CutStream { after_frames: 1 },
        "/filesystem.Filesystem/WatchDir",
    ));
    let mut w = sb
        .watch_dir("/home/user/w", WatchOptions::default())
        .await
        .expect("watch");
    let last = within("cut watch", w.next()).await.expect("an item");
    assert!(matches!(last, Err(Error::StreamCut { .. })), "{last:?}");

    // missing token → 401, and neither the token nor the key is printed
    emu.faults().add(envd_rule(
        FaultAction::DropAccessToken,
        "/filesystem.Filesystem/Stat",
    ));
    let err = sb.stat("/home/user", None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unauthorized {
                surface: Surface::Envd,
                ..
            }
        ),
        "{err:?}"
    );
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains(&token) && !shown.contains(emu.api_key()),
        "{shown}"
    );

    // a handle without the token (bring-your-own with missing token) is refused on RPCs
    let tokenless = Sandbox::attach(
        &config(&emu),
        SandboxParts {
            sandbox_id: sb.id().to_owned(),
            envd_version: sb.envd_version().to_owned(),
            ..Default::default()
        },
    )
    .expect("attach");
    assert!(tokenless.health().await.is_ok(), "health needs no token");
    let err = tokenless.list_processes().await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    let err = tokenless.download("/home/user/x", None).await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");

    // the proxy's 502 for a vanished sandbox
    emu.faults().add(envd_rule(
        FaultAction::json(
            502,
            serde_json::json!({"sandboxId": sb.id(), "message": "The sandbox was not found", "code": 502}),
        ),
        "/process.Process/List",
    ));
    let err = sb.list_processes().await.unwrap_err();
    assert!(err.is_sandbox_not_found(), "{err:?}");

    // a bare 404 in front of envd is not a missing file
    emu.faults().add(envd_rule(
        FaultAction::Status {
            status: 404,
            body: "404 page not found".into(),
            content_type: "text/plain".into(),
        },
        "/filesystem.Filesystem/Stat",
    ));
    let err = sb.stat("/home/user", None).await.unwrap_err();
    assert!(matches!(err, Error::EndpointNotFound { .. }), "{err:?}");

    // a unary answer with the wrong content type
    emu.faults().add(envd_rule(
        FaultAction::Status {
            status: 200,
            body: "{}".into(),
            content_type: "text/plain".into(),
        },
        "/process.Process/List",
    ));
    let err = sb.list_processes().await.unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");

    // a stream answer with the wrong content type
    emu.faults().add(envd_rule(
        FaultAction::Status {
            status: 200,
            body: "hello".into(),
            content_type: "text/plain".into(),
        },
        "/process.Process/Start",
    ));
    let err = sb
        .start_process(StartProcess::shell("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");

    // envd rate limit and server error
    emu.faults().add(envd_rule(
        FaultAction::json(
            429,
            serde_json::json!({"code": 429, "message": "slow down"}),
        ),
        "/files",
    ));
    let err = sb.download("/home/user/x", None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::RateLimited {
                surface: Surface::Envd,
                ..
            }
        ),
        "{err:?}"
    );
    emu.faults().add(envd_rule(
        FaultAction::json(
            503,
            serde_json::json!({"code": "unavailable", "message": "busy"}),
        ),
        "/process.Process/List",
    ));
    let err = sb.list_processes().await.unwrap_err();
    assert_eq!(err.connect_code(), Some(Code::Unavailable), "{err:?}");

    // connection reset and a slow envd (a read met by a reset is sent once more on a
    // fresh connection, as after a dropped pooled one: both attempts are reset here)
    emu.faults()
        .add(envd_rule(FaultAction::Reset, "/filesystem.Filesystem/Stat").times(2));
    let err = sb.stat("/home/user", None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Transport {
                surface: Surface::Envd,
                ..
            }
        ),
        "{err:?}"
    );
    emu.faults()
        .add(envd_rule(FaultAction::Reset, "/process.Process/Start"));
    let err = sb
        .start_process(StartProcess::shell("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");

    let impatient =
        e2b_core::Client::new(config(&emu).with_request_timeout(Duration::from_millis(200)))
            .expect("client");
    // attach, not connect: no control-plane call under the tight timeout
    let slow = impatient
        .attach(SandboxParts {
            sandbox_id: sb.id().to_owned(),
            envd_version: sb.envd_version().to_owned(),
            access_token: sb.access_token().cloned(),
            ..Default::default()
        })
        .expect("attach");
    emu.faults().add(envd_rule(
        FaultAction::Delay(Duration::from_secs(5)),
        "/filesystem.Filesystem/Stat",
    ));
    let err = slow.stat("/home/user", None).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    emu.faults().add(envd_rule(
        FaultAction::Delay(Duration::from_secs(5)),
        "/process.Process/Start",
    ));
    let err = slow
        .start_process(StartProcess::shell("true"))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    // a stalled upload and a stalled download time out (envd delays before reading)
    let stingy = e2b_core::Client::new(
        config(&emu)
            .with_request_timeout(Duration::from_millis(500))
            .with_transfer_idle_timeout(Some(Duration::from_millis(300))),
    )
    .expect("client");
    let stalled = stingy
        .attach(SandboxParts {
            sandbox_id: sb.id().to_owned(),
            envd_version: sb.envd_version().to_owned(),
            access_token: sb.access_token().cloned(),
            ..Default::default()
        })
        .expect("attach");
    emu.faults()
        .add(envd_rule(FaultAction::Delay(Duration::from_secs(5)), "/files").method("POST"));
    let (body, _) = generated(16 * 1024 * 1024, 256 * 1024);
    let err = stalled
        .upload("/home/user/stall.bin", None, body)
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    emu.faults()
        .add(envd_rule(FaultAction::Delay(Duration::from_secs(5)), "/files").method("GET"));
    let err = stalled
        .download("/home/user/s.txt", None)
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    // after all that, the sandbox still answers
    let out = sb
        .start_process(StartProcess::shell("echo fine"))
        .await
        .expect("start")
        .wait_output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"fine\n");
    emu.shutdown().await;
}
