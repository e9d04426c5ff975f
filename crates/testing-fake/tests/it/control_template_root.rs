//! `--template-root NAME=DIR`: a template's sandboxes run on a root filesystem built from a
//! tree the person names, not from the host's. The tree here is made by the test: a few
//! host programs and the libraries `ldd` names, copied (so owned by host uid 0), plus
//! marker files. Needs root (the sandbox boundary); `e2b-local`'s refusals need nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use testing_fake::{EmulatorConfig, TemplateRoot};

use crate::support::{Env, stdout_of};
use emulator_fixture::system_tree::{copy_tree_in, fresh_dir, template_tree};

/// A file planted on the host, removed on drop.
struct Planted(PathBuf);
impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn env_with_root(tree: &Path) -> Env {
    let root = TemplateRoot::new("base", tree).expect("the test's tree is usable");
    Env::with(EmulatorConfig {
        template_roots: vec![root],
        ..EmulatorConfig::default()
    })
    .await
}

/// Run `cmd` (`bash -l -c`) as `user`: (stdout, exit code).
async fn run_as(env: &Env, sbx: &serde_json::Value, cmd: &str, user: &str) -> (String, i64) {
    let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}, "stdin": false});
    let resp = env
        .envd(reqwest::Method::POST, "/process.Process/Start", sbx)
        .header("Content-Type", "application/connect+json")
        .header("Connect-Protocol-Version", "1")
        .header(
            "Authorization",
            format!(
                "Basic {}",
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    format!("{user}:")
                )
            ),
        )
        .body(e2b_proto::envelope::encode_json(&msg).unwrap())
        .send()
        .await
        .expect("Start reaches envd");
    let (frames, _) = crate::support::read_frames(resp).await;
    let code = frames
        .iter()
        .find_map(|f| f["event"]["end"].as_object().cloned())
        .map(|end| end.get("exitCode").and_then(|c| c.as_i64()).unwrap_or(0))
        .unwrap_or(-1);
    (stdout_of(&frames), code)
}

#[tokio::test]
async fn a_template_root_is_the_sandboxs_system_and_stays_unchanged() {
    let tree = template_tree(&[]);
    // Host files the allowlist would show (`/usr/share`, `/etc`): not in the tree.
    let pid = std::process::id();
    let share = Planted(PathBuf::from(format!(
        "/usr/share/e2b-template-root-host-only-{pid}"
    )));
    std::fs::write(&share.0, "host only\n").unwrap();
    let etc = Planted(PathBuf::from(format!(
        "/etc/e2b-template-root-host-only-{pid}"
    )));
    std::fs::write(&etc.0, "host only\n").unwrap();

    let env = env_with_root(&tree.0).await;
    let sbx = env.create(json!({})).await;

    // The tree's marker, none of the host's files; what the host's own tree has and this
    // one lacks (a program) is missing too.
    let script = format!(
        "cat /etc/template-marker; cat {s} {e} 2>/dev/null || echo host-files-absent; \
         ls /usr/bin/sudo 2>/dev/null || echo no-host-sudo; ls -a /home/user",
        s = share.0.display(),
        e = etc.0.display()
    );
    let (out, code) = run_as(&env, &sbx, &script, "user").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("from the template"), "{out}");
    assert!(out.contains("host-files-absent"), "{out}");
    assert!(!out.contains("host only"), "{out}");
    assert!(out.contains("no-host-sudo"), "{out}");
    // The home got the tree's skeleton, not the host's.
    assert!(out.contains(".template-profile"), "{out}");

    // The template's accounts and ownership: host uid 0's files are root's inside, uid
    // 1000's are the user's; the default user is `user`.
    let (out, code) = run_as(
        &env,
        &sbx,
        "id -un; stat -c '%u:%g' /usr/bin/nice /etc/template-marker /etc/owned-by-1000 /home/user; cat /etc/passwd",
        "user",
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..5],
        ["user", "0:0", "0:0", "1000:1000", "1000:1000"],
        "{out}"
    );
    assert!(
        out.contains("user:x:1000:1000:user:/home/user:/bin/bash"),
        "{out}"
    );

    // Writes land in the sandbox, never in the tree: a new file and a changed one.
    let (out, code) = run_as(
        &env,
        &sbx,
        "echo mine > /etc/written-inside && echo changed > /etc/template-marker && cat /etc/written-inside /etc/template-marker && stat -c %u /etc/written-inside",
        "root",
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "mine\nchanged\n0\n");
    assert!(!tree.0.join("etc/written-inside").exists());
    assert_eq!(
        std::fs::read_to_string(tree.0.join("etc/template-marker")).unwrap(),
        "from the template\n"
    );
    // The user cannot write the tree's root-owned files (ownership holds inside).
    let (_, code) = run_as(&env, &sbx, "echo x > /etc/template-marker", "user").await;
    assert_ne!(code, 0);
    // The tree itself kept no trace of the sandbox's paths either.
    assert!(
        std::fs::read_dir(tree.0.join("home"))
            .unwrap()
            .next()
            .is_none()
    );
    // A template without a root still runs on the host's allowlisted system.
    let other = env.create(json!({"templateID": "conversation"})).await;
    let (out, _) = run_as(
        &env,
        &other,
        "cat /etc/template-marker 2>&1; ls /usr/bin/nice",
        "root",
    )
    .await;
    assert!(!out.contains("from the template"), "{out}");
    assert!(out.contains("/usr/bin/nice"), "{out}");
}

/// `e2b-local` with `args`: its exit status and stderr, once it ended (or `None` when it
/// was still serving after 10 s and was stopped).
fn e2b_local_refuses(args: &[&str]) -> (Option<i32>, String) {
    let root = fresh_dir("e2b-local-root");
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b-local"))
        .args(["--port", "0", "--root"])
        .arg(&root.0)
        .args(args)
        .env_remove("E2B_LOCAL_NO_ISOLATION")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("e2b-local starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (None, String::new());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn e2b_local_refuses_to_start_on_a_bad_template_root() {
    let tree = fresh_dir("bad");
    let bin = tree.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for p in ["sh", "sleep"] {
        std::fs::write(bin.join(p), "").unwrap();
        std::fs::set_permissions(bin.join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let file = tree.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    let missing = tree.0.join("missing");
    let t = tree.0.display().to_string();
    let cases: Vec<(String, &str)> = vec![
        ("base".into(), "expected NAME=DIR"),
        (format!("nosuch={t}"), "no template named \"nosuch\""),
        (
            format!("base={}", missing.display()),
            "No such file or directory",
        ),
        (format!("base={}", file.display()), "not a directory"),
        (format!("base={t}"), "lacks /usr/bin/nice"),
    ];
    for (flag, says) in cases {
        let (code, err) = e2b_local_refuses(&["--template-root", &flag]);
        assert!(
            code.is_some_and(|c| c != 0),
            "{flag}: e2b-local did not refuse to start ({code:?}): {err}"
        );
        assert!(err.contains(says), "{flag}: {err}");
        assert!(err.contains("--template-root"), "{flag}: {err}");
    }
    // Without the boundary a template root cannot hold: refused too.
    let good = template_tree(&[]);
    let flag = format!("base={}", good.0.display());
    let (code, err) = e2b_local_refuses(&["--no-isolation", "--template-root", &flag]);
    assert!(code.is_some_and(|c| c != 0), "{code:?}: {err}");
    assert!(err.contains("needs the sandbox boundary"), "{err}");
}

#[test]
fn e2b_local_help_describes_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_e2b-local"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--template-root <NAME=DIR>"), "{text}");
    assert!(text.contains("/usr/bin/nice"), "{text}");
}

/// `sudo` works in a tree that provides it: the template's sudoers entry is laid over the
/// tree's `/etc`, and the tree's setuid `sudo`, owned by host uid 0, is root's inside.
#[tokio::test]
async fn sudo_from_the_tree_works_for_the_default_user() {
    if !Path::new("/usr/bin/sudo").exists() {
        panic!("this test needs the host's sudo to copy into the tree");
    }
    let tree = template_tree(&["sudo"]);
    copy_tree_in(
        &tree.0,
        &[
            "/etc/sudoers",
            "/etc/sudo.conf",
            "/etc/pam.d",
            "/etc/security",
            "/etc/nsswitch.conf",
            "/etc/login.defs",
            "/usr/libexec/sudo",
            "/usr/lib/x86_64-linux-gnu/security",
            "/usr/lib/aarch64-linux-gnu/security",
        ],
    );
    let env = env_with_root(&tree.0).await;
    let sbx = env.create(json!({})).await;
    let (out, code) = run_as(
        &env,
        &sbx,
        "stat -c '%u %a' /usr/bin/sudo; sudo -n id -u 2>/dev/null; sudo -n cat /etc/shadow 2>/dev/null",
        "user",
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first().copied(), Some("0 4755"), "{out}");
    assert_eq!(lines.get(1).copied(), Some("0"), "sudo -n id -u: {out}");
    assert!(out.contains("root:*:"), "the template's shadow: {out}");
}
