//! LocalSubprocess `EnvBase::Inherit` drops the host's credentials with the one scrub
//! list of `exec_world_sys::env_scrub` (the E2B adapter runs the same list in the sandbox):
//! the host's `E2B_API_KEY` and `AWS_SECRET_ACCESS_KEY` never reach a local child.
//! One test in its own binary: it sets variables of this process before any thread runs.

use exec_world::{EnvBase, LocalSubprocess, SpawnSpec, Subprocess};
use futures::StreamExt;

#[test]
fn inherit_scrubs_the_hosts_credentials() {
    let secret = [
        ("E2B_API_KEY", "e2b_host_key"),
        ("AWS_SECRET_ACCESS_KEY", "aws_host_secret"),
        ("GITHUB_PAT", "ghp_host"),
        ("MYSQL_PASSWD", "host_passwd"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/host/creds.json"),
        ("NPM_AUTH", "host_auth"),
        ("DATABASE_URL", "postgres://app:host_pw@db/app"),
    ];
    let kept = [
        ("ENV_SCRUB_TEST_PLAIN", "plain"),
        ("PUBLIC_URL", "https://app@example.com/x"),
    ];
    for (k, v) in secret.iter().chain(kept.iter()) {
        // SAFETY: no other thread exists yet (the runtime is built below).
        unsafe { std::env::set_var(k, v) };
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let text = rt.block_on(async {
        let proc = LocalSubprocess::new().expect("proc");
        let mut child = proc
            .spawn(
                SpawnSpec::new("env")
                    .env_base(EnvBase::Inherit)
                    .env("EXPLICIT_TOKEN", "caller-choice"),
            )
            .expect("spawn env");
        let mut out = child.take_stdout().expect("stdout");
        let mut buf = Vec::new();
        while let Some(c) = out.next().await {
            buf.extend_from_slice(&c.expect("chunk"));
        }
        assert!(child.wait().await.expect("wait").success());
        String::from_utf8_lossy(&buf).into_owned()
    });
    for (k, v) in secret {
        assert!(
            !text.contains(k) && !text.contains(v),
            "{k} leaked to the child"
        );
    }
    for (k, v) in kept {
        assert!(text.contains(&format!("{k}={v}\n")), "{k} missing");
    }
    assert!(text.contains("EXPLICIT_TOKEN=caller-choice\n"));
}
