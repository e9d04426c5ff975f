//! e2bx without any E2B variable: the embedded emulator, its one-line notice, the README's
//! main command, exit codes (plain and signal), argv passed verbatim, --cwd/--env, the
//! --json run summary, help text and usage errors.

use crate::support;

use support::{Out, embedded};

const NOTICE: &str = "e2bx: no E2B_API_KEY set; using the embedded E2B emulator (sandboxes are local and end with this command)";

#[tokio::test]
async fn readme_command_prints_hello_with_one_notice() {
    let o = Out::of(embedded().args([
        "run",
        "--",
        "sh",
        "-c",
        "echo hello > notes.txt && cat notes.txt",
    ]))
    .await;
    assert_eq!(o.ok(), "hello\n");
    assert_eq!(o.stderr, format!("{NOTICE}\n"));
}

#[tokio::test]
async fn exit_codes_pass_through() {
    let o = Out::of(embedded().args(["-q", "run", "--", "sh", "-c", "exit 7"])).await;
    assert_eq!(o.code, 7, "{}", o.stderr);
    assert_eq!(o.stderr, "", "--quiet drops the notice");
    let o = Out::of(embedded().args(["-q", "run", "--", "sh", "-c", "kill -TERM $$"])).await;
    assert_eq!(o.code, 128 + 15, "{}", o.stderr);
    let o = Out::of(embedded().args(["-q", "run", "--", "no-such-program-e2bx"])).await;
    assert_eq!(o.code, 127, "{}", o.stderr);
}

#[tokio::test]
async fn argv_is_passed_verbatim_with_cwd_and_env() {
    let o = Out::of(embedded().args([
        "-q", "run", "--", "printf", "%s|", "a b", "$HOME", "it's", "\"q\"", "", "*",
    ]))
    .await;
    assert_eq!(o.ok(), "a b|$HOME|it's|\"q\"||*|");
    let o = Out::of(embedded().args([
        "-q",
        "run",
        "--cwd",
        "/tmp",
        "--env",
        "GREETING=hi there",
        "-e",
        "B=x=y",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING\" \"$B\"; pwd; echo err >&2",
    ]))
    .await;
    assert_eq!(o.ok(), "hi there x=y\n/tmp\n");
    assert_eq!(o.stderr, "err\n");
    // relative paths land in the user's home
    let o =
        Out::of(embedded().args(["-q", "run", "--", "sh", "-c", "pwd; touch f; ls $PWD/f"])).await;
    assert_eq!(o.ok(), "/home/user\n/home/user/f\n");
}

#[tokio::test]
async fn piped_stdin_reaches_the_command() {
    use tokio::io::AsyncWriteExt as _;
    let mut child = embedded()
        .args(["-q", "run", "--", "sh", "-c", "wc -l; echo done"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"one\ntwo\nthree\n").await.expect("write");
    drop(stdin);
    let o = child.wait_with_output().await.expect("wait");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "3\ndone\n");
}

#[tokio::test]
async fn run_json_summary_is_the_last_stderr_line() {
    let o = Out::of(embedded().args(["-q", "--json", "run", "--", "sh", "-c", "echo out; exit 3"]))
        .await;
    assert_eq!(o.code, 3);
    assert_eq!(o.text(), "out\n");
    let last = o.stderr.lines().last().expect("a summary line");
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON summary");
    assert_eq!(v["exitCode"], 3);
    assert_eq!(v["interrupted"], false);
    assert!(v["sandboxId"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn help_and_usage_errors() {
    let o = Out::of(embedded().arg("--help")).await;
    let help = o.ok();
    for word in [
        "run",
        "shell",
        "cp",
        "ls",
        "cat",
        "stat",
        "sandbox",
        "serve",
        "--sandbox",
        "killed",
    ] {
        assert!(help.contains(word), "help lacks {word}: {help}");
    }
    let o = Out::of(embedded().args(["run"])).await;
    assert_eq!(o.code, 2, "usage error: {}", o.stderr);
}

#[tokio::test]
async fn unknown_sandbox_in_embedded_mode_says_what_to_do() {
    let o = Out::of(embedded().args(["-q", "--sandbox", "nope", "run", "--", "true"])).await;
    let line = o.one_line_error();
    assert!(line.contains("e2bx serve"), "{line}");
}

#[tokio::test]
async fn url_without_key_is_one_line_error() {
    let o = Out::of(
        embedded()
            .env("E2B_API_URL", "http://127.0.0.1:9")
            .args(["run", "--", "true"]),
    )
    .await;
    assert!(o.one_line_error().contains("E2B_API_KEY"));
}
