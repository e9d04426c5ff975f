//! `sandbox_e2b::E2bWorld` on the emulator: one call gives an `Fs` and a `Subprocess` on
//! the same sandbox (a file written through one is read by the other), a rooted view,
//! terminals; `shutdown` deletes a created or owned sandbox and leaves a brought one.

use std::time::Duration;

use bytes::Bytes;
use e2b_core::lifecycle::{OwnerOptions, ShutdownOutcome};
use e2b_core::{CreateOptions, ListQuery};
use exec_world::{SpawnSpec, WorldPath, bytes_stream};
use sandbox_e2b::E2bWorld;
use testing_fake::{Emulator, EmulatorConfig};

async fn emulator() -> (Emulator, e2b_core::Client) {
    let emu = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator");
    let client = e2b_core::Client::new(emulator_fixture::emulator_config(
        &emu,
        Duration::from_secs(30),
    ))
    .expect("client");
    (emu, client)
}

async fn listed(client: &e2b_core::Client, id: &str) -> bool {
    client
        .list_all(ListQuery::new())
        .await
        .expect("list")
        .iter()
        .any(|s| s.sandbox_id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_gives_one_world_and_shutdown_deletes_it() {
    let (_emu, client) = emulator().await;
    let world = E2bWorld::create(&client, OwnerOptions::new(CreateOptions::new("base")))
        .await
        .expect("world");
    let id = world.sandbox_id().to_owned();
    assert!(listed(&client, &id).await);
    // Written through the Fs (relative: the workdir), read by a process in the same world.
    let fs = world.fs();
    fs.write(
        &WorldPath::new("note.txt").expect("path"),
        bytes_stream(Bytes::from_static(b"from fs")),
        Default::default(),
    )
    .await
    .expect("write");
    let mut child = world
        .subprocess()
        .spawn(SpawnSpec::new("sh").args(["-c", "cat note.txt; pwd; id -un"]))
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let mut text = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut out).await {
        text.extend_from_slice(&chunk.expect("chunk"));
    }
    assert!(child.wait().await.expect("wait").success());
    assert_eq!(
        String::from_utf8_lossy(&text),
        "from fs/home/user/workspace\nuser\n"
    );
    // A rooted view at the workdir sees the same file at `/note.txt`, and nothing above.
    let rooted = world.rooted("/home/user/workspace").expect("rooted");
    let root_fs: &dyn exec_world::Fs = &rooted;
    assert_eq!(
        root_fs
            .read(&WorldPath::new("/../note.txt").expect("path"), 100)
            .await
            .expect("read"),
        Bytes::from_static(b"from fs")
    );
    assert_eq!(
        world.shutdown().await.expect("shutdown"),
        ShutdownOutcome::Deleted
    );
    assert!(!listed(&client, &id).await, "a created sandbox is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brought_sandboxes_are_never_deleted_and_names_reconnect() {
    let (_emu, client) = emulator().await;
    let sandbox = client
        .create(&CreateOptions::new("base"))
        .await
        .expect("create");
    let id = sandbox.id().to_owned();
    let world = E2bWorld::attach(sandbox.into_api(), None, OwnerOptions::default())
        .await
        .expect("attach");
    assert_eq!(world.sandbox_id(), id);
    world.shutdown().await.expect("shutdown");
    assert!(listed(&client, &id).await, "a brought sandbox stays");

    let named = E2bWorld::create(&client, OwnerOptions::default().name("conv-7"))
        .await
        .expect("named");
    let again = E2bWorld::connect_by_name(&client, "conv-7", OwnerOptions::default())
        .await
        .expect("by name");
    assert_eq!(again.sandbox_id(), named.sandbox_id());
    let missing = E2bWorld::connect_by_name(&client, "nobody", OwnerOptions::default()).await;
    assert!(
        matches!(
            missing,
            Err(e2b_core::lifecycle::LifecycleError::NameNotFound { .. })
        ),
        "{missing:?}"
    );
    again.shutdown().await.expect("shutdown");
    assert!(!listed(&client, named.sandbox_id()).await);
}
