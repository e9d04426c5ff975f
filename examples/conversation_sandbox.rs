//! The conversation-sandbox contract (`sandbox@1`) with both providers: `LocalSandboxes`
//! (a directory per conversation on this machine) and `E2bSandboxes` (one E2B sandbox per
//! conversation). The kernel code is written once against `SandboxProvider`.
//!
//! `cargo run -p examples --example conversation_sandbox` (E2B with `E2B_API_KEY` and
//! `E2B_TEMPLATE`, else the embedded emulator's `conversation` template).

use exec_world::sandbox::{CreateSpec, ExecSpec, LocalSandboxes, SandboxError, SandboxProvider};

/// One conversation's life: create, write, exec, read, suspend, resume, destroy.
async fn conversation(p: &dyn SandboxProvider, name: &str) -> Result<String, SandboxError> {
    let h = p.create(CreateSpec::new(name)).await?;
    p.write_file(&h, "/workspace/plan.md", b"1. write a test\n")
        .await?;
    let out = p
        .exec(
            &h,
            ExecSpec::new("echo '2. make it pass' >> plan.md && wc -l < plan.md"),
        )
        .await?;
    p.suspend(&h).await?;
    p.resume(&h).await?; // files are kept across hibernation
    let plan = p
        .read_file(&h, "/workspace/plan.md", 1024)
        .await?
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .unwrap_or_default();
    p.destroy(&h).await?;
    Ok(format!("{} lines:\n{plan}", out.stdout.trim()))
}

async fn run() -> Result<(String, String), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("conversations-{}", std::process::id()));
    let local = conversation(&LocalSandboxes::new(&dir)?, "conv-local").await;
    let _ = std::fs::remove_dir_all(&dir);

    let backend = examples::Backend::open().await?;
    let e2b = sandbox_e2b::E2bSandboxes::new(backend.sandbox_config())?;
    let remote = conversation(&e2b, "conv-e2b").await;
    Ok((local?, remote?))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (local, remote) = run().await?;
    println!("local provider: {local}\nE2B provider:   {remote}");
    Ok(())
}

#[test]
fn both_providers_keep_the_plan() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (local, remote) = rt.block_on(run()).expect("example runs");
    assert_eq!(local, "2 lines:\n1. write a test\n2. make it pass\n");
    assert_eq!(remote, local);
}
