//! Shared helpers of the fs-e2b tests: an emulator with one `base` sandbox, an `E2bFs`
//! on it, and a minimal run-to-completion `Subprocess` over envd (enough for the fs
//! suite's `ln -s` helper) until `subprocess-e2b` provides the real one.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use e2b_core::{Client, Config, CreateOptions, EnvdApi, Sandbox, StartProcess};
use exec_world::conformance::World;
use exec_world::{
    Child, ChildBackend, ExitStatus, Fs, InputSink, OutputStream, ProcCapabilities, ProcError,
    Signal, SpawnSpec, Subprocess, Terminal, TerminalSpec, WorldPath,
};
use fs_e2b::{E2bFs, E2bFsOptions};
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use testing_fake::{Emulator, EmulatorConfig};

/// An emulator, a sandbox on it and an `E2bFs` acting as the default user.
pub struct Env {
    /// The file system, cwd `/home/user`.
    pub fs: E2bFs,
    /// The envd API of the sandbox.
    pub api: Arc<dyn EnvdApi>,
    /// The sandbox handle.
    pub sandbox: Sandbox,
    /// A control-plane client of the emulator.
    pub client: Client,
    /// The emulator (declared last: dropped after the handles on it).
    pub emu: Emulator,
}

/// Start an emulator and create a `base` sandbox on it.
pub async fn env() -> Env {
    let emu = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let cfg = Config::new()
        .api_key(emu.api_key())
        .api_url(emu.api_url())
        .sandbox_url(emu.sandbox_url())
        .request_timeout(Duration::from_secs(60))
        .connect_timeout(Duration::from_secs(5));
    let client = Client::new(cfg).expect("client");
    let sandbox = client
        .create(&CreateOptions::new("base"))
        .await
        .expect("create sandbox");
    let api = sandbox.clone().into_api();
    let fs = E2bFs::new(api.clone(), E2bFsOptions::new("/home/user")).expect("E2bFs");
    Env {
        emu,
        client,
        sandbox,
        api,
        fs,
    }
}

/// A fresh empty directory under `/home/user`.
pub async fn scratch(fs: &E2bFs) -> WorldPath {
    let p = WorldPath::new(format!(
        "/home/user/scratch-{}",
        e2b_core::control_shell::random_suffix()
    ))
    .expect("path");
    fs.mkdir(&p, false).await.expect("mkdir scratch");
    p
}

/// A conformance world: its own emulator and sandbox (kept alive by the world).
pub async fn world() -> World {
    let env = env().await;
    let scratch = scratch(&env.fs).await;
    let fs: Arc<dyn Fs> = Arc::new(env.fs.clone());
    let proc: Arc<dyn Subprocess> = Arc::new(RunProc {
        api: env.api.clone(),
        cwd: WorldPath::new("/home/user").expect("path"),
    });
    World::new(fs, proc, scratch).with_guard(env)
}

type Outcome = Result<(i32, Bytes, Bytes), String>;

/// Runs each spawn to completion through envd `Process.Start`; no stdin, signals or
/// terminals (the fs suite needs none of them).
pub struct RunProc {
    api: Arc<dyn EnvdApi>,
    cwd: WorldPath,
}

#[async_trait]
impl Subprocess for RunProc {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn capabilities(&self) -> ProcCapabilities {
        ProcCapabilities::default()
    }

    async fn which(&self, program: &str) -> Result<Option<String>, ProcError> {
        let out = self
            .api
            .run(StartProcess::new("/bin/sh").args(["-c", "command -v \"$1\"", "sh", program]))
            .await
            .map_err(|e| ProcError::other(e.to_string()))?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((out.end.exit_code == 0 && !path.is_empty()).then_some(path))
    }

    fn spawn(&self, spec: SpawnSpec) -> Result<Child, ProcError> {
        let cwd = spec.cwd.as_ref().unwrap_or(&self.cwd).resolve(&self.cwd);
        let mut start = StartProcess::new(spec.program.clone())
            .args(spec.args.clone())
            .cwd(cwd.as_str());
        for (k, v) in &spec.env {
            start = start.env(k.clone(), v.clone());
        }
        let api = self.api.clone();
        let fut: BoxFuture<'static, Outcome> = Box::pin(async move {
            let out = api.run(start).await.map_err(|e| e.to_string())?;
            Ok((
                out.end.exit_code,
                Bytes::from(out.stdout),
                Bytes::from(out.stderr),
            ))
        });
        let shared = fut.shared();
        tokio::spawn(shared.clone().map(drop));
        Ok(Child::new(Box::new(RunChild {
            outcome: shared,
            taken: Mutex::new((false, false)),
        })))
    }

    fn spawn_terminal(&self, _spec: TerminalSpec) -> Result<Terminal, ProcError> {
        Err(ProcError::Unsupported {
            what: "terminals in the fs test helper".into(),
        })
    }
}

struct RunChild {
    outcome: Shared<BoxFuture<'static, Outcome>>,
    taken: Mutex<(bool, bool)>,
}

impl RunChild {
    fn output(&self, stdout: bool) -> OutputStream {
        let fut = self.outcome.clone();
        Box::pin(
            async move {
                match fut.await {
                    Ok((_, o, e)) => Ok(if stdout { o } else { e }),
                    Err(e) => Err(ProcError::other(e)),
                }
            }
            .into_stream(),
        )
    }
}

#[async_trait]
impl ChildBackend for RunChild {
    fn pid(&self) -> Option<u32> {
        None
    }
    async fn started(&self) -> Result<u32, ProcError> {
        self.outcome.clone().await.map_err(ProcError::other)?;
        Ok(0)
    }
    fn take_stdin(&mut self) -> Option<InputSink> {
        None
    }
    fn take_stdout(&mut self) -> Option<OutputStream> {
        let t = self.taken.get_mut().ok()?;
        if t.0 {
            return None;
        }
        t.0 = true;
        Some(self.output(true))
    }
    fn take_stderr(&mut self) -> Option<OutputStream> {
        let t = self.taken.get_mut().ok()?;
        if t.1 {
            return None;
        }
        t.1 = true;
        Some(self.output(false))
    }
    async fn wait(&self) -> Result<ExitStatus, ProcError> {
        let (code, _, _) = self.outcome.clone().await.map_err(ProcError::other)?;
        Ok(ExitStatus {
            code: Some(code),
            signal: None,
        })
    }
    async fn signal(&self, _sig: Signal) -> Result<(), ProcError> {
        Err(ProcError::Unsupported {
            what: "signals in the fs test helper".into(),
        })
    }
    async fn terminate(&self, _grace: Duration) -> Result<ExitStatus, ProcError> {
        self.wait().await
    }
    fn detach(&mut self) {}
}
