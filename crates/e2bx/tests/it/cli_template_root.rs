//! `e2bx --template-root NAME=DIR`: the embedded emulator builds template NAME's sandboxes
//! on DIR (a tree the test makes from host programs) instead of the host's system
//! directories; bad flags and a remote E2B are refused before anything starts.

use crate::support;

use emulator_fixture::system_tree::template_tree;
use support::{Out, embedded};

/// What subprocess-e2b's setup and spawn helper run, besides the tree's own programs.
const SPAWN_TOOLS: [&str; 16] = [
    "getent", "mkdir", "rm", "sed", "setpriv", "setsid", "chmod", "base64", "env", "mv", "kill",
    "tr", "head", "grep", "cut", "readlink",
];

#[tokio::test]
async fn run_on_a_template_root_sees_the_tree_and_not_the_host() {
    let tree = template_tree(&SPAWN_TOOLS);
    let flag = format!("base={}", tree.0.display());
    let run = |script: &'static str| {
        let flag = flag.clone();
        async move {
            Out::of(embedded().args([
                "-q",
                "--template-root",
                &flag,
                "run",
                "--",
                "sh",
                "-c",
                script,
            ]))
            .await
        }
    };
    let o = run(
        "cat /etc/template-marker; test -e /usr/bin/perl && echo host perl || echo no perl; id -un",
    )
    .await;
    assert_eq!(o.ok(), "from the template\nno perl\nuser\n");
    // The tree is never written: the sandbox's writes stay in the sandbox.
    let o = run("echo changed > /tmp/x && cat /tmp/x").await;
    assert_eq!(o.ok(), "changed\n");
    assert!(!tree.0.join("tmp/x").exists(), "the tree was written");
}

#[tokio::test]
async fn bad_template_roots_and_a_remote_e2b_are_refused() {
    let tree = template_tree(&[]);
    let dir = tree.0.display().to_string();
    for (flag, says) in [
        (format!("nope={dir}"), "no template named \"nope\""),
        ("base".to_owned(), "expected NAME=DIR"),
        (format!("base={dir}/missing"), "missing"),
    ] {
        let o =
            Out::of(embedded().args(["-q", "--template-root", &flag, "run", "--", "true"])).await;
        assert_ne!(o.code, 0, "{flag}");
        assert!(
            o.stderr.contains("--template-root: "),
            "{flag}: {}",
            o.stderr
        );
        assert!(o.stderr.contains(says), "{flag}: {}", o.stderr);
    }
    let o = Out::of(embedded().env("E2B_API_KEY", "e2b_not_used").args([
        "--template-root",
        &format!("base={dir}"),
        "run",
        "--",
        "true",
    ]))
    .await;
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("--template-root builds sandboxes of the embedded emulator"),
        "{}",
        o.stderr
    );
}
