//! The same consumer (agent-tools' bash tool) on this machine and in an E2B sandbox: the
//! world is two values, an `Fs` and a `Subprocess`, and swapping them moves all the work.
//!
//! `cargo run -p examples --example local_or_e2b` (E2B with `E2B_API_KEY`, else the
//! embedded emulator).

use std::sync::Arc;

use agent_tools::{BashRequest, BashTool};
use exec_world::{Fs, Subprocess, WorldPath, bytes_stream};

/// Write a file through the world's `Fs`, then read it back with the bash tool.
async fn consumer(
    fs: Arc<dyn Fs>,
    proc: Arc<dyn Subprocess>,
) -> Result<String, Box<dyn std::error::Error>> {
    let note = WorldPath::new("note-from-example.txt")?;
    fs.write(
        &note,
        bytes_stream("written through Fs"),
        Default::default(),
    )
    .await?;
    let out = BashTool::new(proc)
        .run(BashRequest::new(
            "cat note-from-example.txt; rm note-from-example.txt",
        ))
        .await?;
    Ok(out.stdout.text)
}

async fn run() -> Result<(String, String), Box<dyn std::error::Error>> {
    // Local: a scratch directory of this machine.
    let dir = std::env::temp_dir().join(format!("local-or-e2b-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cwd = WorldPath::new(dir.to_string_lossy())?;
    let local = consumer(
        Arc::new(exec_world::LocalFs::at(cwd.clone())?),
        Arc::new(exec_world::LocalSubprocess::at(cwd)),
    )
    .await;
    std::fs::remove_dir_all(&dir)?;

    // E2B: one call for the whole world, one call to end it.
    let backend = examples::Backend::open().await?;
    let world = sandbox_e2b::E2bWorld::create(&backend.client, Default::default()).await?;
    let remote = consumer(world.fs(), world.subprocess()).await;
    world.shutdown().await?;
    Ok((local?, remote?))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (local, remote) = run().await?;
    println!("local: {local}\ne2b:   {remote}");
    Ok(())
}

#[test]
fn both_worlds_give_the_same_answer() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (local, remote) = rt.block_on(run()).expect("example runs");
    assert_eq!(local, "written through Fs");
    assert_eq!(remote, local);
}
