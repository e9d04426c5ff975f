//! `E2bSubprocess` output routing on the emulator, where the reader drives envd's event
//! stream itself: stderr is routed apart while the stdout reader drives, the bound holds
//! for the queue nobody reads (the process is held back, not buffered), a reader that
//! stops polling in the middle does not stall `wait` or the rest of the output, and a
//! reader polled outside any tokio runtime still works.

use crate::subprocess_e2b_support;

use std::time::Duration;

use exec_world::{OutputStream, SpawnSpec, Subprocess};
use futures::StreamExt;
use subprocess_e2b_support::{env, proc_of};

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
}

/// Every byte of `s`, checking each is `fill`.
async fn drain(mut s: OutputStream, fill: u8) -> usize {
    let mut n = 0;
    while let Some(c) = within("output", s.next()).await {
        let c = c.expect("chunk");
        assert!(c.iter().all(|b| *b == fill), "a byte other than {fill}");
        n += c.len();
    }
    n
}

/// `sh -c` writing `err` bytes of `e` to stderr, then `out` bytes of `o` to stdout.
fn err_then_out(err: usize, out: usize) -> SpawnSpec {
    SpawnSpec::new("sh").arg("-c").arg(format!(
        "head -c {err} /dev/zero | tr '\\0' e >&2; head -c {out} /dev/zero | tr '\\0' o"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_routed_apart_while_the_stdout_reader_drives() {
    let env = env().await;
    let p = proc_of(&env).await;
    // stderr (within the bound) first, then 4 MiB of stdout; stdout is read to its end
    // before stderr is touched, so the stdout reader routed both.
    let mut child = p.spawn(err_then_out(300 << 10, 4 << 20)).expect("spawn");
    let out = child.take_stdout().expect("stdout");
    let err = child.take_stderr().expect("stderr");
    assert_eq!(drain(out, b'o').await, 4 << 20);
    assert_eq!(drain(err, b'e').await, 300 << 10);
    assert!(within("wait", child.wait()).await.expect("wait").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_stderr_holds_the_process_back_while_stdout_is_read() {
    let env = env().await;
    let p = proc_of(&env).await.output_buffer(64 << 10);
    // 4 MiB to stderr before any stdout: with stderr unread, the stdout reader must stop
    // routing once stderr's queue is full and read no further (else it would buffer
    // all of stderr on the host and reach the stdout behind it).
    let mut child = p.spawn(err_then_out(4 << 20, 1 << 20)).expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let err = child.take_stderr().expect("stderr");
    assert!(
        tokio::time::timeout(Duration::from_secs(2), out.next())
            .await
            .is_err(),
        "stdout arrived although stderr's 4 MiB were not read: stderr was not bounded"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(10), child.wait())
            .await
            .is_err(),
        "the command finished although nobody read its stderr"
    );
    // Read together, both arrive whole.
    let (o, e) = tokio::join!(drain(out, b'o'), drain(err, b'e'));
    assert_eq!((o, e), (1 << 20, 4 << 20));
    assert!(within("wait", child.wait()).await.expect("wait").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_polling_does_not_stall_the_process() {
    let env = env().await;
    let p = proc_of(&env).await;
    let mut child = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("echo a; sleep 1; echo b; echo c >&2"),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    let err = child.take_stderr().expect("stderr");
    let first = within("first chunk", out.next()).await.expect("a chunk");
    assert_eq!(&first.expect("chunk")[..], b"a\n");
    // Poll once more while the program sleeps and give up: the reader is left
    // registered for the stream's next wake, which it will never act on.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), out.next())
            .await
            .is_err()
    );
    // Nobody reads now; the exit and the rest of the output must still come through.
    assert!(within("wait", child.wait()).await.expect("wait").success());
    let mut rest = Vec::new();
    while let Some(c) = within("rest", out.next()).await {
        rest.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(rest, b"b\n");
    let mut e = Vec::new();
    let mut err = err;
    while let Some(c) = within("stderr", err.next()).await {
        e.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(e, b"c\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_can_be_read_outside_the_runtime() {
    let env = env().await;
    let p = proc_of(&env).await;
    let mut child = p
        .spawn(
            SpawnSpec::new("sh")
                .arg("-c")
                .arg("head -c 300000 /dev/zero | tr '\\0' o"),
        )
        .expect("spawn");
    let mut out = child.take_stdout().expect("stdout");
    // A plain thread with futures' executor: no tokio context while the reader drives
    // envd's stream (whose idle timeout is a tokio timer).
    let reader = std::thread::spawn(move || {
        futures::executor::block_on(async move {
            let mut n = 0;
            while let Some(c) = out.next().await {
                n += c.expect("chunk").len();
            }
            n
        })
    });
    let n = within(
        "the reader thread",
        tokio::task::spawn_blocking(move || reader.join()),
    )
    .await
    .expect("joined")
    .expect("the reader thread did not panic");
    assert_eq!(n, 300000);
    assert!(within("wait", child.wait()).await.expect("wait").success());
}
