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

/// A directory removed on drop.
struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file planted on the host, removed on drop.
struct Planted(PathBuf);
impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The programs of the test's tree (`sh` and `nice` are what the emulator needs, `sleep`
/// its init, `bash` the template's shell, the rest what the commands below use).
const PROGRAMS: [&str; 10] = [
    "sh", "bash", "nice", "sleep", "cat", "ls", "stat", "id", "touch", "echo",
];

fn fresh_dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!(
        "template-root-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// Copy host file `host` (links followed) to `tree` + `at`, keeping its mode.
fn copy_in(tree: &Path, host: &Path, at: &Path) {
    let dst = tree.join(at.strip_prefix("/").unwrap_or(at));
    if dst.exists() {
        return;
    }
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(host, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", host.display()));
}

/// The host path of program `name`.
fn host_program(name: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("the host has no {name}"))
}

/// The shared libraries `ldd` names for `bin`, as the paths the loader asks for.
fn libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("ldd runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A small system tree: the host's top-level links (`bin -> /usr/bin` on a merged-/usr
/// host, made absolute so they must resolve inside the tree), [`PROGRAMS`] in `/usr/bin`
/// with their libraries, an `/etc` with a marker, a file owned by uid 1000 and a skeleton.
fn template_tree(extra: &[&str]) -> Dir {
    let d = fresh_dir("tree");
    let tree = &d.0;
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        if let Ok(target) = std::fs::read_link(Path::new("/").join(top)) {
            std::os::unix::fs::symlink(Path::new("/").join(target), tree.join(top)).unwrap();
        }
    }
    for name in PROGRAMS.iter().chain(extra) {
        let host = host_program(name);
        let real = std::fs::canonicalize(&host).unwrap();
        copy_in(tree, &real, &Path::new("/usr/bin").join(name));
        for lib in libraries(&real) {
            // Through the host's directory links, as the tree has them too.
            let dir = std::fs::canonicalize(lib.parent().unwrap()).unwrap();
            let real_lib = std::fs::canonicalize(&lib).unwrap();
            copy_in(tree, &real_lib, &dir.join(lib.file_name().unwrap()));
        }
    }
    for dir in ["etc/skel", "home", "tmp", "root", "usr/share"] {
        std::fs::create_dir_all(tree.join(dir)).unwrap();
    }
    std::fs::write(tree.join("etc/template-marker"), "from the template\n").unwrap();
    std::fs::write(tree.join("etc/skel/.template-profile"), "# skel\n").unwrap();
    let theirs = tree.join("etc/owned-by-1000");
    std::fs::write(&theirs, "x\n").unwrap();
    std::os::unix::fs::chown(&theirs, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(tree.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
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

/// Copy host paths (files or whole directories, modes kept) into `tree`, plus the
/// libraries of every shared object among them.
fn copy_tree_in(tree: &Path, paths: &[&str]) {
    for p in paths {
        let host = Path::new(p);
        if !host.exists() {
            continue;
        }
        let dst = tree.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        let ok = Command::new("cp")
            .arg("-aLT")
            .arg(host)
            .arg(&dst)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cp {p}");
        let mut objects = vec![dst.clone()];
        while let Some(o) = objects.pop() {
            if o.is_dir() {
                objects.extend(std::fs::read_dir(&o).unwrap().map(|e| e.unwrap().path()));
            } else if o.to_string_lossy().contains(".so") {
                for lib in libraries(&o) {
                    let dir = std::fs::canonicalize(lib.parent().unwrap()).unwrap();
                    let real = std::fs::canonicalize(&lib).unwrap();
                    copy_in(tree, &real, &dir.join(lib.file_name().unwrap()));
                }
            }
        }
    }
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
