//! Shared tests of the LSP bridge: a real language server (python-lsp-server) and a
//! scripted JSON-RPC server for the protocol's hard cases.

use std::sync::Arc;
use std::time::Duration;

use exec_world::{SpawnSpec, WorldPath, WriteOptions, bytes_stream};

use super::{HANG, ToolWorld, gone_eventually, is_alive};
use crate::bash::BashRequest;
use crate::lsp::{LspClient, LspOptions, default_client_capabilities};

/// Makes sure `python-lsp-server` and `pyflakes` import from `cache` with `python`,
/// installing them with pip (`--target cache`) if not. Panics loudly if that fails.
pub async fn ensure_pylsp(world: &ToolWorld, python: &str, cache: &WorldPath) {
    let check = format!(
        "PYTHONPATH='{cache}' '{python}' -c 'import pylsp, pyflakes, pylsp.plugins.pyflakes_lint'"
    );
    let tool = world.bash();
    let probe = tool
        .run(BashRequest::new(check.clone()).timeout(HANG))
        .await
        .expect("probe pylsp");
    if probe.success() {
        return;
    }
    let install = format!(
        "mkdir -p '{cache}' && '{python}' -m pip install --disable-pip-version-check \
         --no-input --no-cache-dir -q --target '{cache}' python-lsp-server pyflakes \
         && chmod -R a+rX '{cache}'"
    );
    let out = tool
        .run(
            BashRequest::new(install)
                .timeout(Duration::from_secs(600))
                .max_output_bytes(256 * 1024),
        )
        .await
        .expect("run pip");
    assert!(
        out.success(),
        "installing python-lsp-server into {cache} failed (this test does not skip):\n\
         stdout: {}\nstderr: {}",
        out.stdout.text,
        out.stderr.text
    );
    let again = tool
        .run(BashRequest::new(check).timeout(HANG))
        .await
        .expect("probe pylsp");
    assert!(
        again.success(),
        "pylsp still does not import from {cache}: {}",
        again.stderr.text
    );
}

/// Against a real language server (python-lsp-server + pyflakes): initialize, a Python
/// file with an undefined name written through `Fs`, `didOpen`, non-empty
/// `publishDiagnostics` for its URI, shutdown, exit; the server process is gone after.
pub async fn lsp_pylsp_diagnostics(world: &ToolWorld) {
    let python = world
        .proc
        .which("python3")
        .await
        .expect("which python3")
        .expect("python3 must be on the world's PATH for the LSP test");
    let cache = world
        .lsp_cache
        .clone()
        .unwrap_or_else(|| world.path("lsp-cache"));
    ensure_pylsp(world, &python, &cache).await;

    let project = world.path("proj");
    world.fs.mkdir(&project, true).await.expect("mkdir project");
    let file = project.join("bad.py").expect("path");
    let text = "import os\n\nprint(undefined_name_xyz)\n";
    world
        .fs
        .write(&file, bytes_stream(text), WriteOptions::default())
        .await
        .expect("write bad.py");
    let root = world.fs.canonical(&project);
    let uri = world.fs.canonical(&file).uri();

    let spec = SpawnSpec::new(python.clone())
        .arg("-m")
        .arg("pylsp")
        .env("PYTHONPATH", cache.as_str())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .cwd(project.clone());
    // Record the server's own requests (answered by the default handler).
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let handler = {
        let asked = asked.clone();
        move |method: &str, params: &serde_json::Value| {
            if let Ok(mut a) = asked.lock() {
                a.push(method.to_string());
            }
            crate::lsp::ServerRequestHandler::handle(&crate::lsp::DefaultHandler, method, params)
        }
    };
    let lsp = LspClient::spawn(
        world.proc.as_ref(),
        spec,
        LspOptions::default().request_timeout(HANG).handler(handler),
    )
    .expect("spawn pylsp");
    let pid = lsp.pid();
    let mut notes = lsp.subscribe();

    let init = lsp
        .initialize(&root, default_client_capabilities())
        .await
        .expect("initialize");
    assert!(
        init.capabilities.text_document_sync.is_some(),
        "InitializeResult without textDocumentSync: {init:?}"
    );
    lsp.initialized().await.expect("initialized");
    let opened = lsp
        .open_document(world.fs.as_ref(), &file, "python", 1 << 20)
        .await
        .expect("didOpen");
    assert_eq!(opened, uri);
    let diags = lsp
        .wait_for_diagnostics(&uri, HANG, |d| !d.is_empty())
        .await
        .expect("diagnostics");
    let messages: Vec<&str> = diags
        .iter()
        .filter_map(|d| d.get("message").and_then(|m| m.as_str()))
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("undefined_name_xyz")),
        "no undefined-name diagnostic in {diags:?}"
    );
    // The same notification went to subscribers too.
    let mut saw = false;
    while let Ok(n) = notes.try_recv() {
        if n.method == "textDocument/publishDiagnostics" && n.params["uri"] == uri.as_str() {
            saw = true;
        }
    }
    assert!(saw, "publishDiagnostics not broadcast to subscribers");

    // pylsp reports linting progress: it asked us to create a progress token first.
    let asked = asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(
        asked.iter().any(|m| m == "window/workDoneProgress/create"),
        "pylsp sent no window/workDoneProgress/create (it does when the client supports \
         workDoneProgress); server requests seen: {asked:?}"
    );

    // A request the server does not know is a typed server error, not a hang.
    let err = lsp
        .request_value("agentTools/noSuchMethod", serde_json::json!({}), HANG)
        .await
        .expect_err("unknown method");
    assert!(
        matches!(err, crate::lsp::LspError::Server { .. }),
        "unexpected error {err:?}"
    );

    lsp.shutdown().await.expect("shutdown");
    lsp.exit().await.expect("exit");
    let status = tokio::time::timeout(HANG, lsp.wait())
        .await
        .expect("server exits after exit")
        .expect("wait");
    assert_eq!(status.code, Some(0), "pylsp exit status {status:?}");
    drop(lsp);
    if let Some(pid) = pid {
        assert!(!is_alive(world, pid).await, "pylsp {pid} still running");
    }
}

/// The scripted JSON-RPC server (`src/testing/scripted_lsp.py`, stdlib Python).
const SCRIPTED_SERVER: &str = include_str!("scripted_lsp.py");

/// Starts the scripted server from `script` with the bridge options `opts`.
fn scripted(world: &ToolWorld, python: &str, script: &WorldPath, opts: LspOptions) -> LspClient {
    let spec = SpawnSpec::new(python.to_string())
        .arg(script.as_str().to_string())
        .cwd(world.scratch.clone());
    LspClient::spawn(world.proc.as_ref(), spec, opts).expect("spawn scripted server")
}

/// The bridge against a scripted server: concurrent requests answered out of order,
/// typed server errors, server→client requests answered by the handler (and
/// `MethodNotFound` for unknown ones), frames split and merged across reads with a
/// `Content-Type` header, an oversize response skipped without losing the stream, a
/// timeout that sends `$/cancelRequest`, a stalled server (a request given up while its
/// frame is being written leaves the stream intact), a crash failing pending requests with `Closed`,
/// `close` (shutdown + exit), and drop killing the server.
pub async fn lsp_bridge_scripted_server(world: &ToolWorld) {
    use crate::lsp::{DefaultHandler, LspError, ResponseError, ServerRequestHandler};
    use serde_json::{Value, json};

    let python = world
        .proc
        .which("python3")
        .await
        .expect("which python3")
        .expect("python3 must be on the world's PATH for the LSP tests");
    let script = world.path("scripted_lsp.py");
    world
        .fs
        .write(
            &script,
            bytes_stream(SCRIPTED_SERVER),
            WriteOptions::default(),
        )
        .await
        .expect("write script");
    let handler = |method: &str, params: &Value| match method {
        "custom/hello" => Ok(json!({"hello": params["name"]})),
        other => DefaultHandler.handle(other, params),
    };
    let opts = LspOptions::default()
        .max_body(4096)
        .request_timeout(HANG)
        .handler(handler);
    let lsp = scripted(world, &python, &script, opts.clone());
    let mut notes = lsp.subscribe();

    // Concurrent requests, answered in the reverse order of sending.
    let (a, b, c) = tokio::join!(
        lsp.request::<_, Value>("echo", json!({"delay": 0.4, "tag": "a"})),
        lsp.request::<_, Value>("echo", json!({"delay": 0.2, "tag": "b"})),
        lsp.request::<_, Value>("echo", json!({"delay": 0.0, "tag": "c"})),
    );
    assert_eq!(a.expect("a")["tag"], "a");
    assert_eq!(b.expect("b")["tag"], "b");
    assert_eq!(c.expect("c")["tag"], "c");

    // A server error is typed, with code, message and data.
    match lsp.request::<_, Value>("fail", json!({})).await {
        Err(LspError::Server { method, error }) => {
            assert_eq!(method, "fail");
            assert_eq!(error.code, -32001);
            assert_eq!(error.message, "nope");
            assert_eq!(error.data, Some(json!({"why": "asked"})));
        }
        other => panic!("expected a server error, got {other:?}"),
    }

    // Server→client requests: default answers, a custom one, an unknown one.
    let ask = |method: &str, params: Value| {
        lsp.request::<_, Value>("ask", json!({"method": method, "params": params}))
    };
    let r = ask("workspace/configuration", json!({"items": [{}, {}]}))
        .await
        .expect("ask");
    assert_eq!(r["result"], json!([null, null]));
    let r = ask("window/workDoneProgress/create", json!({"token": "t"}))
        .await
        .expect("ask");
    assert_eq!(r, json!({"result": null, "error": null}));
    let r = ask("custom/hello", json!({"name": "world"}))
        .await
        .expect("ask");
    assert_eq!(r["result"], json!({"hello": "world"}));
    let r = ask("custom/unknown", json!({})).await.expect("ask");
    assert_eq!(r["error"]["code"], ResponseError::METHOD_NOT_FOUND);

    // Split and merged frames, Content-Type tolerated; notifications arrive in order.
    let done: String = lsp.request("burst", json!({})).await.expect("burst");
    assert_eq!(done, "burst-done");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let n = tokio::time::timeout(HANG, notes.recv())
            .await
            .expect("notification in time")
            .expect("notification");
        if n.method == "note" {
            seen.push(n.params["n"].clone());
        }
    }
    assert_eq!(seen, vec![json!(1), json!(2)]);

    // An oversize response is skipped (its request times out); the stream goes on.
    let big = lsp
        .request_value("big", json!({"size": 20000}), Duration::from_secs(2))
        .await;
    assert!(matches!(big, Err(LspError::Timeout { .. })), "{big:?}");
    loop {
        let n = tokio::time::timeout(HANG, notes.recv())
            .await
            .expect("after-big in time")
            .expect("notification");
        if n.method == "after-big" {
            break;
        }
    }
    let after: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "after"}))
        .await
        .expect("echo after big");
    assert_eq!(after["tag"], "after");

    // A timeout cancels the request on the server.
    let never = lsp
        .request_value("never", json!({}), Duration::from_millis(300))
        .await;
    assert!(matches!(never, Err(LspError::Timeout { .. })), "{never:?}");
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let ids: Vec<Value> = lsp.request("cancelled", json!({})).await.expect("ids");
        if !ids.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no $/cancelRequest reached the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A server that stops reading: a 1 MiB request times out (its frame is still written
    // whole by the writer task), and the stream is intact once the server reads again.
    lsp.notify("stall", json!({"secs": 3}))
        .await
        .expect("stall");
    let pad = "y".repeat(1 << 20);
    let stalled = lsp
        .request_value(
            "echo",
            json!({"delay": 0, "pad": pad}),
            Duration::from_millis(300),
        )
        .await;
    assert!(
        matches!(stalled, Err(LspError::Timeout { .. })),
        "{stalled:?}"
    );
    let after: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "after-stall"}))
        .await
        .expect("echo after stall");
    assert_eq!(after["tag"], "after-stall");

    // A crash fails the pending request and every later one with Closed.
    let (pending, _) = tokio::join!(lsp.request_value("never", json!({}), HANG), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = lsp.notify("crash", json!({})).await;
    });
    assert!(
        matches!(pending, Err(LspError::Closed { .. })),
        "{pending:?}"
    );
    let later = lsp.request_value("echo", json!({"delay": 0}), HANG).await;
    assert!(matches!(later, Err(LspError::Closed { .. })), "{later:?}");
    let status = tokio::time::timeout(HANG, lsp.wait())
        .await
        .expect("exit in time")
        .expect("wait");
    assert_eq!(status.code, Some(3));
    drop(lsp);

    // close(): shutdown + exit, the server exits 0.
    let lsp = scripted(world, &python, &script, opts.clone());
    let status = lsp.close(Duration::from_secs(5)).await.expect("close");
    assert_eq!(status.code, Some(0), "{status:?}");

    // Drop kills the server.
    let lsp = scripted(world, &python, &script, opts);
    let pid = lsp.pid();
    let r: Value = lsp
        .request("echo", json!({"delay": 0, "tag": "alive"}))
        .await
        .expect("echo");
    assert_eq!(r["tag"], "alive");
    drop(lsp);
    if let Some(pid) = pid {
        assert!(
            gone_eventually(world, pid).await,
            "server {pid} survived drop"
        );
    }
}
