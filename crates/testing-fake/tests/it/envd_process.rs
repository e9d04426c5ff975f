//! envd process service: start/data/end values, kill, timeout, keepalive, reconnect,
//! stdin, PTY, users, environment.
#![allow(clippy::unwrap_used)]

use crate::envd_support;

use std::time::Duration;

use envd_support::{Item, basic, boot, outputs, run};
use serde_json::json;

#[tokio::test]
async fn echo_exit_codes_and_unknown_program() {
    let fake = boot("base", None).await;
    let (out, _, end) = run(&fake, "echo hi", None).await;
    assert_eq!(out, b"hi\n");
    assert_eq!(end, json!({"exited": true, "status": "exit status 0"}));

    let (_, _, end) = run(&fake, "exit 3", None).await;
    assert_eq!(
        end,
        json!({"exitCode": 3, "exited": true, "status": "exit status 3", "error": "exit status 3"})
    );

    // envd wraps in /bin/sh -c '… exec "$@"': an unknown program is exit 127, not an error.
    let body = json!({"process":{"cmd":"no-such-program-xyz"}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, trailer) = s.collect().await;
    assert_eq!(trailer, json!({}));
    let (_, err, _, end) = outputs(&msgs);
    assert!(!err.is_empty());
    assert_eq!(end.unwrap()["exitCode"], 127);
}

#[tokio::test]
async fn environment_is_exactly_envds() {
    let fake = boot("base", None).await;
    let body =
        json!({"process":{"cmd":"/usr/bin/env","envs":{"REQ":"x","GLOBAL_A":"2"}},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (msgs, _) = s.collect().await;
    let (out, _, _, _) = outputs(&msgs);
    let text = String::from_utf8(out).unwrap();
    let mut keys: Vec<&str> = text.lines().map(|l| l.split('=').next().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys,
        [
            "E2B_SANDBOX",
            "E2B_SANDBOX_ID",
            "E2B_TEMPLATE_ID",
            "GLOBAL_A",
            "HOME",
            "LOGNAME",
            "PATH",
            "PWD", // set by /bin/sh, as on envd
            "REQ",
            "USER"
        ],
        "{text}"
    );
    assert!(text.contains("GLOBAL_A=2\n"), "request envs win: {text}");
    assert!(text.contains("E2B_SANDBOX=true\n"));
    assert!(text.contains("USER=user\n"));
    if fake.envd.is_isolated() {
        assert!(text.contains("HOME=/home/user\n"), "{text}");
    }
}

#[tokio::test]
async fn users_and_cwd() {
    let fake = boot("base", None).await;
    if !fake.envd.is_isolated() {
        eprintln!("skipped: users need isolation (root with CAP_SYS_ADMIN)");
        return;
    }
    let (out, _, _) = run(&fake, "id -un; pwd; id -u", None).await;
    assert_eq!(String::from_utf8(out).unwrap(), "user\n/home/user\n1000\n");
    let (out, _, _) = run(&fake, "id -un; pwd", Some("root")).await;
    assert_eq!(String::from_utf8(out).unwrap(), "root\n/root\n");
    // unknown user → unauthenticated in the trailer
    let body = json!({"process":{"cmd":"true"}});
    let auth = basic("bob");
    let mut s = fake
        .stream(
            "/process.Process/Start",
            &body,
            &[("Authorization", auth.as_str())],
        )
        .await;
    let (msgs, end) = s.collect().await;
    assert!(msgs.is_empty());
    assert_eq!(end["error"]["code"], "unauthenticated");
    // missing cwd → invalid_argument
    let body = json!({"process":{"cmd":"true","cwd":"/nope"}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let (_, end) = s.collect().await;
    assert_eq!(end["error"]["code"], "invalid_argument");
    assert_eq!(end["error"]["message"], "cwd '/nope' does not exist");
    // root writes into the sandbox's own overlay root, never into the host's
    let (_, _, end) = run(&fake, "touch /usr/e2b-local-escape-test", Some("root")).await;
    assert!(end.get("exitCode").is_none(), "{end}");
    assert!(!std::path::Path::new("/usr/e2b-local-escape-test").exists());
    let (_, _, end) = run(&fake, "echo 1 > /proc/sys/vm/drop_caches", Some("root")).await;
    assert_eq!(end["exitCode"], 1, "/proc/sys is read-only");
    let (out, _, _) = run(&fake, "ls -A /dev/shm; stat -c %a /dev/shm", None).await;
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "1777\n",
        "private /dev/shm"
    );
    // /tmp and home are the sandbox's own
    let (_, _, end) = run(&fake, "echo x > /tmp/t && echo y > ~/h", None).await;
    assert_eq!(end["exited"], true);
    assert!(end.get("exitCode").is_none(), "{end}");
}

#[tokio::test]
async fn kill_and_list_and_reconnect() {
    let fake = boot("base", None).await;
    let body = json!({"process":{"cmd":"/bin/bash","args":["-c","echo first; read x; echo got $x; sleep 100"]},"tag":"t1"});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let start = s.msg().await;
    let pid = start["event"]["start"]["pid"].as_u64().unwrap();
    let first = s.msg().await;
    assert_eq!(first["event"]["data"]["stdout"], "Zmlyc3QK");
    // disconnect: the process keeps running
    drop(s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (st, list) = fake.unary("/process.Process/List", &json!({}), None).await;
    assert_eq!(st, 200);
    assert_eq!(list["processes"][0]["pid"], pid);
    assert_eq!(list["processes"][0]["tag"], "t1");
    assert_eq!(list["processes"][0]["config"]["cmd"], "/bin/bash");
    // reconnect by tag: start, then only new output
    let mut c = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"tag":"t1"}}),
            &[],
        )
        .await;
    assert_eq!(c.msg().await["event"]["start"]["pid"], pid);
    let (st, _) = fake
        .unary(
            "/process.Process/SendInput",
            &json!({"process":{"pid":pid},"input":{"stdin":"aGkK"}}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(c.msg().await["event"]["data"]["stdout"], "Z290IGhpCg==");
    let (st, body) = fake
        .unary(
            "/process.Process/SendSignal",
            &json!({"process":{"pid":pid},"signal":"SIGNAL_SIGKILL"}),
            None,
        )
        .await;
    assert_eq!((st, body), (200, json!({})));
    let (msgs, trailer) = c.collect().await;
    assert_eq!(trailer, json!({}));
    let (_, _, _, end) = outputs(&msgs);
    assert_eq!(
        end.unwrap(),
        json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"})
    );
    // gone from List at once; late Connect replays start + end
    let (_, list) = fake.unary("/process.Process/List", &json!({}), None).await;
    assert_eq!(list, json!({}));
    let mut late = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"pid":pid}}),
            &[],
        )
        .await;
    let (msgs, _) = late.collect().await;
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1]["event"]["end"]["status"], "signal: killed");
    // unknown pid
    let (st, body) = fake
        .unary(
            "/process.Process/SendSignal",
            &json!({"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}),
            None,
        )
        .await;
    assert_eq!(st, 404);
    assert_eq!(body["code"], "not_found");
    assert_eq!(body["message"], "process with pid 999999 not found");
    let mut c = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"pid":999999}}),
            &[],
        )
        .await;
    let (_, end) = c.collect().await;
    assert_eq!(end["error"]["code"], "not_found");
}

#[tokio::test]
async fn timeout_kills_and_keepalive_ticks() {
    let fake = boot("base", None).await;
    let body = json!({"process":{"cmd":"sleep","args":["30"]},"stdin":false});
    let mut s = fake
        .stream(
            "/process.Process/Start",
            &body,
            &[
                ("Connect-Timeout-Ms", "2500"),
                ("Keepalive-Ping-Interval", "1"),
            ],
        )
        .await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    let ka = s.msg().await;
    assert_eq!(ka, json!({"event":{"keepalive":{}}}));
    let (msgs, trailer) = s.collect().await;
    // either the end event or the deadline trailer wins the race, as on envd
    let got_end = msgs.iter().any(|m| m["event"].get("end").is_some());
    assert!(
        got_end || trailer["error"]["code"] == "deadline_exceeded",
        "{msgs:?} {trailer}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // the process is dead (the pid is the sandbox's; no live process of it has it)
    let host = fake.envd.host_pid(u32::try_from(pid).unwrap());
    assert!(
        host.is_none_or(|h| {
            let st = std::fs::read_to_string(format!("/proc/{h}/status")).unwrap_or_default();
            st.is_empty() || st.contains("State:\tZ")
        }),
        "{host:?}"
    );
    let mut late = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"pid":pid}}),
            &[],
        )
        .await;
    let (msgs, _) = late.collect().await;
    assert_eq!(msgs[1]["event"]["end"]["status"], "signal: killed");
}

#[tokio::test]
async fn stdin_rules_and_close() {
    let fake = boot("base", None).await;
    // stdin:false → internal on SendInput
    let body = json!({"process":{"cmd":"sleep","args":["5"]},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    let (st, b) = fake
        .unary(
            "/process.Process/SendInput",
            &json!({"process":{"pid":pid},"input":{"stdin":"aGkK"}}),
            None,
        )
        .await;
    assert_eq!(st, 500);
    assert_eq!(b["code"], "internal");
    // Update on a non-PTY process → internal
    let (st, b) = fake
        .unary(
            "/process.Process/Update",
            &json!({"process":{"pid":pid},"pty":{"size":{"cols":10,"rows":10}}}),
            None,
        )
        .await;
    assert_eq!((st, b["code"].as_str()), (500, Some("internal")));
    fake.unary(
        "/process.Process/SendSignal",
        &json!({"process":{"pid":pid},"signal":"SIGNAL_SIGTERM"}),
        None,
    )
    .await;
    let (msgs, _) = s.collect().await;
    let (_, _, _, end) = outputs(&msgs);
    assert_eq!(end.unwrap()["status"], "signal: terminated");

    // stdin absent → pipe; CloseStdin gives EOF
    let body = json!({"process":{"cmd":"cat"}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    fake.unary(
        "/process.Process/SendInput",
        &json!({"process":{"pid":pid},"input":{"stdin":"YWJj"}}),
        None,
    )
    .await;
    let (st, _) = fake
        .unary(
            "/process.Process/CloseStdin",
            &json!({"process":{"pid":pid}}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (msgs, _) = s.collect().await;
    let (out, _, _, end) = outputs(&msgs);
    assert_eq!(out, b"abc");
    assert_eq!(end.unwrap()["status"], "exit status 0");
}

#[tokio::test]
async fn pty_output_input_and_resize() {
    let fake = boot("base", None).await;
    let body = json!({"process":{"cmd":"/bin/bash","args":["--norc","--noprofile","-i"],"envs":{"TERM":"xterm","PS1":"$ "}},"pty":{"size":{"cols":80,"rows":24}}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    let (st, _) = fake
        .unary(
            "/process.Process/Update",
            &json!({"process":{"pid":pid},"pty":{"size":{"cols":123,"rows":45}}}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    use base64::Engine as _;
    let input = base64::engine::general_purpose::STANDARD.encode("stty size; exit 7\n");
    let (st, _) = fake
        .unary(
            "/process.Process/SendInput",
            &json!({"process":{"pid":pid},"input":{"pty":input}}),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (msgs, _) = s.collect().await;
    for m in &msgs {
        if let Some(d) = m["event"].get("data") {
            assert!(d.get("pty").is_some(), "PTY emits only data.pty: {m}");
        }
    }
    let (_, _, pty, end) = outputs(&msgs);
    let text = String::from_utf8_lossy(&pty);
    assert!(text.contains("45 123"), "{text}");
    assert_eq!(end.unwrap()["exitCode"], 7);
}

#[tokio::test]
async fn connect_protocol_shapes() {
    let fake = boot("base", None).await;
    // wrong content type on a unary procedure → 415
    let r = fake
        .req(reqwest::Method::POST, "/process.Process/List")
        .header("Content-Type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    // unknown procedure → plain 404 (connect-es: unimplemented)
    let r = fake
        .req(reqwest::Method::POST, "/process.Process/Nope")
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // bad signal → unimplemented
    let (st, b) = fake
        .unary(
            "/process.Process/SendSignal",
            &json!({"process":{"pid":1},"signal":"SIGNAL_UNSPECIFIED"}),
            None,
        )
        .await;
    assert!(st == 404 || st == 501, "{st} {b}");
    // multiple Connect streams each get every event
    let body =
        json!({"process":{"cmd":"/bin/bash","args":["-c","read x; echo $x; read y; echo $y"]}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    let mut a = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"pid":pid}}),
            &[],
        )
        .await;
    let mut b = fake
        .stream(
            "/process.Process/Connect",
            &json!({"process":{"pid":pid}}),
            &[],
        )
        .await;
    a.msg().await;
    b.msg().await;
    for line in ["b25lCg==", "dHdvCg=="] {
        fake.unary(
            "/process.Process/SendInput",
            &json!({"process":{"pid":pid},"input":{"stdin":line}}),
            None,
        )
        .await;
    }
    for st in [&mut s, &mut a, &mut b] {
        let (msgs, trailer) = st.collect().await;
        assert_eq!(trailer, json!({}));
        let (out, _, _, end) = outputs(&msgs);
        assert_eq!(out, b"one\ntwo\n");
        assert!(end.is_some());
    }
    let _ = Item::End(json!({}));
}

/// POST a unary call in the binary codec: (status, content type, body).
async fn proto_call(
    fake: &envd_support::Fake,
    path: &str,
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    let r = fake
        .req(reqwest::Method::POST, path)
        .header("Content-Type", "application/proto")
        .header("Connect-Protocol-Version", "1")
        .body(body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (st, ct, r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn the_process_services_unary_calls_speak_the_binary_codec() {
    use e2b_proto::process::{ListResponse, SendInputRequest};
    use e2b_proto::wire::ProtoMessage as _;
    let fake = boot("base", None).await;
    let body = json!({"process":{"cmd":"cat"}});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap() as u32;

    // SendInput by hand (field 1: selector {pid}, field 2: input {stdin}) with every byte
    // value, 256 KiB: 4 pipe buffers, all of them through the one request.
    let data: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    fn varint(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut sel = vec![0x08];
    varint(&mut sel, pid as usize);
    let mut input = vec![0x0a];
    varint(&mut input, data.len());
    input.extend_from_slice(&data);
    let mut req = vec![0x0a];
    varint(&mut req, sel.len());
    req.extend_from_slice(&sel);
    req.push(0x12);
    varint(&mut req, input.len());
    req.extend_from_slice(&input);
    let decoded = SendInputRequest::decode_proto(&req).unwrap();
    assert_eq!(
        decoded.process,
        e2b_proto::process::ProcessSelector::Pid(pid)
    );
    let (st, ct, out) = proto_call(&fake, "/process.Process/SendInput", req).await;
    assert_eq!((st, ct.as_str(), out.len()), (200, "application/proto", 0));

    // List answers in the codec it was asked in.
    let (st, ct, out) = proto_call(&fake, "/process.Process/List", vec![]).await;
    assert_eq!((st, ct.as_str()), (200, "application/proto"));
    let list = ListResponse::decode_proto(&out).unwrap();
    let cat = list
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .expect("cat listed");
    assert_eq!(cat.config.cmd, "cat");

    // No selector: envd's 501 (as JSON, the error codec of both); broken bytes: 400.
    let (st, ct, out) = proto_call(&fake, "/process.Process/SendInput", vec![0x12, 0x00]).await;
    let err: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!((st, ct.as_str()), (501, "application/json"), "{err}");
    assert_eq!(err["code"], "unimplemented");
    let (st, _, out) = proto_call(&fake, "/process.Process/SendInput", vec![0x0a, 0x09]).await;
    let err: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (st, err["code"].as_str()),
        (400, Some("invalid_argument")),
        "{err}"
    );

    // CloseStdin in binary: cat ends, and its output is every byte sent.
    let (st, _, _) = proto_call(
        &fake,
        "/process.Process/CloseStdin",
        e2b_proto::process::CloseStdinRequest {
            process: e2b_proto::process::ProcessSelector::Pid(pid),
        }
        .encode_proto(),
    )
    .await;
    assert_eq!(st, 200);
    let (msgs, _) = s.collect().await;
    let (out, _, _, end) = outputs(&msgs);
    assert!(
        out == data,
        "cat echoed {} bytes, not the {} sent",
        out.len(),
        data.len()
    );
    assert_eq!(end.unwrap()["status"], "exit status 0");
}

#[tokio::test]
async fn dropping_envd_kills_its_processes() {
    let fake = boot("base", None).await;
    let body =
        json!({"process":{"cmd":"/bin/bash","args":["-c","sleep 100 & sleep 100"]},"stdin":false});
    let mut s = fake.stream("/process.Process/Start", &body, &[]).await;
    let pid = s.msg().await["event"]["start"]["pid"].as_u64().unwrap();
    // The reported pid is the sandbox's; watch the process under its host pid.
    let pid = fake.envd.host_pid(u32::try_from(pid).unwrap()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(s);
    drop(fake);
    let mut alive = true;
    for _ in 0..100 {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if st.is_empty() || st.contains(") Z ") {
            alive = false;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive, "process {pid} survived the drop of its envd");
}
