//! Retries of e2b-core against the emulator's faults, proven by its request counters:
//! idempotent control-plane calls and envd unary reads retry 503/502 and connection
//! resets a capped number of times; create is retried after a refusal but never
//! duplicated when its answer is lost; a pooled connection dropped by the server does
//! not fail the next call (a read is sent once more even without retries), and neither
//! does a graceful shutdown (HTTP/2 `GOAWAY`, HTTP/1.1 close) of the emulator's side.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use e2b_core::retry::RetryPolicy;
use e2b_core::{CREATE_TOKEN_KEY, Client, CreateOptions, EnvdApi, ListQuery};
use testing_fake::{Emulator, EmulatorConfig, FaultAction, FaultRule, Plane};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// Short delays so the tests stay fast; the attempt count is the default's.
fn quick() -> RetryPolicy {
    RetryPolicy::default()
        .min_delay(Duration::from_millis(5))
        .max_delay(Duration::from_millis(20))
}

async fn emulator() -> Emulator {
    Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts")
}

fn client_for(emu: &Emulator, api_url: &str) -> Client {
    let cfg = emulator_fixture::emulator_config(emu, Duration::from_secs(20)).with_api_url(api_url);
    Client::new(cfg).expect("client").with_retry_policy(quick())
}

fn status(code: u16) -> FaultAction {
    FaultAction::json(
        code,
        serde_json::json!({"code": code, "message": "injected"}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_control_calls_retry_refusals_and_resets_a_capped_number_of_times() {
    let emu = emulator().await;
    let c = client_for(&emu, &emu.api_url());
    let sb = c.create(&CreateOptions::new("base")).await.expect("create");
    let key = "GET /sandboxes/{sandboxID}";
    let count = || emu.counters().get_on(Plane::Control, key);

    // Two 503s, then success: three requests.
    emu.faults().add(
        FaultRule::new(status(503))
            .surface(Plane::Control)
            .method("GET")
            .path_prefix("/sandboxes/")
            .times(2),
    );
    let before = count();
    c.get(sb.id()).await.expect("get after two 503");
    assert_eq!(count() - before, 3);

    // A reset connection, then success: two requests.
    emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Control)
            .method("GET")
            .path_prefix("/sandboxes/")
            .times(1),
    );
    let before = count();
    c.get(sb.id()).await.expect("get after a reset");
    assert_eq!(count() - before, 2);

    // A 502 that never ends: the default number of attempts, then the error.
    emu.faults().add(
        FaultRule::new(status(502))
            .surface(Plane::Control)
            .method("GET")
            .path_prefix("/sandboxes/"),
    );
    let before = count();
    match c.get(sb.id()).await {
        Err(e) => assert_eq!(e.status(), Some(502), "{e}"),
        Ok(_) => panic!("expected the persistent 502"),
    }
    assert_eq!(count() - before, u64::from(quick().attempts()));

    // Without retries, one request.
    let once = c.with_retry_policy(RetryPolicy::none());
    let before = count();
    assert!(once.get(sb.id()).await.is_err());
    assert_eq!(count() - before, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envd_unary_reads_and_the_download_handshake_retry() {
    let env = emulator_fixture::EmulatedSandbox::start(Duration::from_secs(20)).await;
    let count = |k: &str| env.emu.counters().get_on(Plane::Envd, k);
    env.emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Envd)
            .path_prefix("/filesystem.Filesystem/Stat")
            .times(1),
    );
    let before = count("POST /filesystem.Filesystem/Stat");
    env.api.stat("/home/user", None).await.expect("stat");
    assert_eq!(count("POST /filesystem.Filesystem/Stat") - before, 2);

    env.api
        .upload_bytes("/home/user/r.txt", None, bytes::Bytes::from_static(b"abc"))
        .await
        .expect("upload");
    env.emu.faults().add(
        FaultRule::new(status(503))
            .surface(Plane::Envd)
            .method("GET")
            .path_prefix("/files")
            .times(1),
    );
    let before = count("GET /files");
    let got = env
        .api
        .download_bytes("/home/user/r.txt", None, 100)
        .await
        .expect("download");
    assert_eq!(got, b"abc");
    assert_eq!(count("GET /files") - before, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_retries_a_refusal_and_checks_before_retrying_a_reset() {
    let emu = emulator().await;
    let c = client_for(&emu, &emu.api_url());
    let creates = || emu.counters().get_on(Plane::Control, "POST /v2/sandboxes");
    let lists = || emu.counters().get_on(Plane::Control, "GET /v2/sandboxes");

    // 503: nothing was done, retried at once.
    emu.faults().add(
        FaultRule::new(status(503))
            .surface(Plane::Control)
            .method("POST")
            .path_prefix("/v2/sandboxes")
            .times(1),
    );
    let (c0, l0) = (creates(), lists());
    c.create(&CreateOptions::new("base"))
        .await
        .expect("create after 503");
    assert_eq!((creates() - c0, lists() - l0), (2, 0));

    // A reset: maybe done, so the second attempt is preceded by a look-up by token.
    emu.faults().add(
        FaultRule::new(FaultAction::Reset)
            .surface(Plane::Control)
            .method("POST")
            .path_prefix("/v2/sandboxes")
            .times(1),
    );
    let (c0, l0) = (creates(), lists());
    c.create(&CreateOptions::new("base"))
        .await
        .expect("create after a reset");
    assert_eq!((creates() - c0, lists() - l0), (2, 1));
    let all = c.list_all(ListQuery::new()).await.expect("list");
    assert_eq!(all.len(), 2, "one sandbox per successful create");
}

/// A TCP proxy in front of the emulator's control plane that can lose the answer of the
/// next create (the request reaches the emulator; the response is dropped with the
/// connection) and can drop every open connection.
struct Proxy {
    url: String,
    cut_next_create: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let cut_next_create = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (cut, list) = (cut_next_create.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let h = tokio::spawn(relay(client, server, cut.clone()));
                list.lock().await.push(h);
            }
        });
        Proxy {
            url,
            cut_next_create,
            conns,
            accept,
        }
    }

    /// Close every connection open through the proxy.
    async fn drop_connections(&self) {
        for h in self.conns.lock().await.drain(..) {
            h.abort();
            let _ = h.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies both ways; once this connection carried a create while `cut` was armed, the
/// answer coming back is dropped together with the connection.
async fn relay(client: TcpStream, server: TcpStream, cut: Arc<AtomicBool>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let lose_answer = Arc::new(AtomicBool::new(false));
    let lose = lose_answer.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if buf[..n].windows(19).any(|w| w == b"POST /v2/sandboxes ")
                && cut.swap(false, Ordering::SeqCst)
            {
                lose.store(true, Ordering::SeqCst);
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if lose_answer.load(Ordering::SeqCst) {
                return;
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either direction ending closes the whole connection.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_is_not_duplicated() {
    let emu = emulator().await;
    let proxy = Proxy::start(emu.addr()).await;
    let c = client_for(&emu, &proxy.url);
    proxy.cut_next_create.store(true, Ordering::SeqCst);
    let creates = emu.counters().get_on(Plane::Control, "POST /v2/sandboxes");
    let sb = c
        .create(&CreateOptions::new("base").metadata("case", "lost-answer"))
        .await
        .expect("create whose first answer was lost");
    assert!(
        !proxy.cut_next_create.load(Ordering::SeqCst),
        "the cut fired"
    );
    // One create reached the control plane; the sandbox it made is the one returned.
    assert_eq!(
        emu.counters().get_on(Plane::Control, "POST /v2/sandboxes") - creates,
        1
    );
    let all = c.list_all(ListQuery::new()).await.expect("list");
    assert_eq!(all.len(), 1, "no duplicate sandbox");
    assert_eq!(all[0].sandbox_id, sb.id());
    let meta = all[0].metadata.clone().unwrap_or_default();
    assert_eq!(meta.get("case").map(String::as_str), Some("lost-answer"));
    assert!(meta.contains_key(CREATE_TOKEN_KEY));
    // And the handle works (its envd access token came from the connect).
    sb.stat("/home/user", None)
        .await
        .expect("stat through the handle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pooled_connection_does_not_fail_the_next_call() {
    let emu = emulator().await;
    let proxy = Proxy::start(emu.addr()).await;
    let c = client_for(&emu, &proxy.url);
    let sb = c.create(&CreateOptions::new("base")).await.expect("create");
    for round in 0..5 {
        c.get(sb.id()).await.expect("get warms the pool");
        proxy.drop_connections().await;
        match c.get(sb.id()).await {
            Ok(_) => {}
            Err(e) => panic!("round {round}: the call after a dropped connection failed: {e}"),
        }
    }
}

/// The emulator's `GoAway` fault answers a request, then shuts its connection down
/// gracefully (HTTP/2 `GOAWAY`; HTTP/1.1: closed after the answer); the calls after it,
/// a process start included (not idempotent), succeed without retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_never_fails_the_next_call() {
    let emu = emulator().await;
    for http2 in [true, false] {
        let cfg =
            emulator_fixture::emulator_config(&emu, Duration::from_secs(20)).with_http2(http2);
        // No retries: the next call must succeed on its own, not by being sent again.
        let c = Client::new(cfg)
            .expect("client")
            .with_retry_policy(RetryPolicy::none());
        let sb = c.create(&CreateOptions::new("base")).await.expect("create");
        let api = sb.into_api();
        for round in 0..5 {
            // The next request is answered, then its connection is shut down (GOAWAY).
            emu.faults()
                .add(FaultRule::new(FaultAction::GoAway).times(1));
            let first = api.run(e2b_core::StartProcess::new("true")).await;
            assert!(first.is_ok(), "http2 {http2} round {round}: {first:?}");
            for what in ["start", "stat"] {
                let next = match what {
                    "start" => api.run(e2b_core::StartProcess::new("true")).await.map(drop),
                    _ => api.stat("/", None).await.map(drop),
                };
                if let Err(e) = next {
                    panic!("http2 {http2} round {round}: the {what} after a GOAWAY failed: {e}");
                }
            }
        }
    }
}

/// Without retries, a read sent right after the server dropped every pooled connection
/// (through the proxy, no GOAWAY, no `Connection: close`) still succeeds, over HTTP/1.1
/// and HTTP/2: it is sent once more on a fresh connection. Without that resend about one
/// in eight such calls failed here ("connection closed before message completed",
/// "stream closed because of a broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_dropped_pooled_connection_is_sent_again_without_retries() {
    let emu = emulator().await;
    let proxy = Proxy::start(emu.addr()).await;
    for http2 in [false, true] {
        let cfg = emulator_fixture::emulator_config(&emu, Duration::from_secs(20))
            .with_api_url(&proxy.url)
            .with_sandbox_url(&proxy.url)
            .with_http2(http2);
        let c = Client::new(cfg)
            .expect("client")
            .with_retry_policy(RetryPolicy::none());
        let sb = c.create(&CreateOptions::new("base")).await.expect("create");
        let id = sb.id().to_owned();
        let api = sb.into_api();
        for round in 0..40 {
            api.stat("/", None).await.expect("warm");
            proxy.drop_connections().await;
            if let Err(e) = api.stat("/", None).await {
                panic!("http2 {http2} round {round}: envd stat after a drop failed: {e}");
            }
            proxy.drop_connections().await;
            if let Err(e) = c.get(&id).await {
                panic!("http2 {http2} round {round}: control get after a drop failed: {e}");
            }
        }
    }
}
