//! A workspace that cannot be escaped: `exec_world::Rooted` puts a virtual `/` at a real
//! directory of any `Fs`. An agent that tries `..`, absolute paths or a symlink it planted
//! itself stays inside the workspace.
//!
//! `cargo run -p examples --example rooted_workspace` (E2B with `E2B_API_KEY`, else the
//! embedded emulator).

use exec_world::{ErrorKind, Fs, SpawnSpec, WorldPath};

async fn run() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let backend = examples::Backend::open().await?;
    let world = sandbox_e2b::E2bWorld::create(&backend.client, Default::default()).await?;
    // The agent (a process in the sandbox) plants a link to the sandbox's /etc.
    let status = world
        .subprocess()
        .spawn(SpawnSpec::new("ln").args(["-s", "/etc", "etc-link"]))?
        .wait()
        .await?;
    assert!(status.success());
    let ws = world.rooted("/home/user/workspace")?;
    let mut seen = Vec::new();
    for attempt in ["/../../etc/hostname", "/etc/hostname", "/etc-link/hostname"] {
        let shown = match ws.read(&WorldPath::new(attempt)?, 4096).await {
            Ok(bytes) => format!("{attempt}: read {} bytes", bytes.len()),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                format!("{attempt}: not found ({})", e.path().unwrap_or_default())
            }
            Err(e) => format!("{attempt}: {e}"),
        };
        seen.push(shown);
    }
    world.shutdown().await?;
    Ok(seen)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for line in run().await? {
        println!("{line}");
    }
    Ok(())
}

#[test]
fn nothing_outside_the_workspace_is_reachable() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let seen = rt.block_on(run()).expect("example runs");
    assert_eq!(
        seen,
        [
            "/../../etc/hostname: not found (/etc/hostname)",
            "/etc/hostname: not found (/etc/hostname)",
            "/etc-link/hostname: not found (/etc/hostname)",
        ]
    );
}
