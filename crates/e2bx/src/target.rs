//! Where commands run: the backend (E2B, a compatible control plane, or the embedded
//! emulator started in this process) and the sandbox of one command (a fresh one, killed
//! at the end, or an existing one named by `--sandbox ID|NAME`, kept).

use std::time::Duration;

use e2b_core::{Client, Config, ConnectOptions, CreateOptions, ListQuery, Sandbox};
use testing_fake::{Emulator, EmulatorConfig};
use tokio::task::JoinHandle;

use crate::cli::Global;
use crate::error::{CliError, CliResult, for_sandbox};

/// Metadata key holding a sandbox's e2bx name.
pub const NAME_KEY: &str = "e2bx.name";

/// How often a sandbox in use gets its lifetime topped up.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(60);
/// The lifetime it is topped up to.
const KEEPALIVE_LIFETIME: Duration = Duration::from_secs(300);

/// The control plane in use, and the embedded emulator when there is one.
pub struct Backend {
    /// The control-plane client.
    pub client: Client,
    embedded: Option<Emulator>,
}

impl Backend {
    /// E2B (or a compatible server) when an API key or a URL is configured, else the
    /// embedded emulator (announced with one line on stderr unless `quiet`).
    pub async fn open(g: &Global) -> CliResult<Backend> {
        let mut cfg = Config::from_env().user_agent(format!("e2bx/{}", env!("CARGO_PKG_VERSION")));
        let remote_hint = g.api_url.is_some() || g.domain.is_some() || g.sandbox_url.is_some();
        if cfg.get_api_key().is_none() {
            if remote_hint {
                return Err(CliError::msg(
                    "E2B_API_KEY is not set but E2B_API_URL/E2B_DOMAIN/E2B_SANDBOX_URL (or --api-url/--domain/--sandbox-url) name a server; set E2B_API_KEY too (for `e2bx serve`, export all three lines it prints), or unset them to use the embedded emulator",
                ));
            }
            let emu = Emulator::start(EmulatorConfig::default())
                .await
                .map_err(|e| {
                    CliError::msg(format!("cannot start the embedded E2B emulator: {e}"))
                })?;
            if !g.quiet {
                eprintln!(
                    "e2bx: no E2B_API_KEY set; using the embedded E2B emulator (sandboxes are local and end with this command)"
                );
            }
            let cfg = cfg
                .api_key(emu.api_key())
                .api_url(emu.api_url())
                .sandbox_url(emu.sandbox_url());
            let client = Client::new(cfg)?;
            return Ok(Backend {
                client,
                embedded: Some(emu),
            });
        }
        if let Some(u) = &g.api_url {
            cfg = cfg.api_url(u.clone());
        }
        if let Some(d) = &g.domain {
            cfg = cfg.domain(d.clone());
        }
        if let Some(u) = &g.sandbox_url {
            cfg = cfg.sandbox_url(u.clone());
        }
        let client = Client::new(cfg)?;
        Ok(Backend {
            client,
            embedded: None,
        })
    }

    /// True when sandboxes live in this process's emulator.
    pub fn is_embedded(&self) -> bool {
        self.embedded.is_some()
    }

    /// Stop the embedded emulator (every sandbox process ends).
    pub async fn close(self) {
        if let Some(emu) = self.embedded {
            emu.shutdown().await;
        }
    }

    /// The id of the sandbox named `id_or_name`: a sandbox whose `e2bx.name` metadata is
    /// that name, else the string itself as an id.
    pub async fn resolve(&self, id_or_name: &str) -> CliResult<String> {
        let found = self
            .client
            .list_all(ListQuery::new().metadata(NAME_KEY, id_or_name))
            .await?;
        match found.as_slice() {
            [] => {
                if self.is_embedded() {
                    return Err(CliError::msg(format!(
                        "sandbox {id_or_name} not found: with the embedded emulator no sandbox outlives one e2bx command; run `e2bx serve` in another terminal and export the lines it prints"
                    )));
                }
                Ok(id_or_name.to_owned())
            }
            [one] => Ok(one.sandbox_id.clone()),
            many => Err(CliError::msg(format!(
                "{} sandboxes are named {id_or_name}; use an id: {}",
                many.len(),
                many.iter()
                    .map(|s| s.sandbox_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// The sandbox for one command: `--sandbox` connected (resumed if paused), or a fresh
    /// one from `--template`.
    pub async fn session(&self, g: &Global) -> CliResult<Session> {
        let (sandbox, owned) = match &g.sandbox {
            Some(s) => {
                let id = self.resolve(s).await?;
                let sb = self
                    .client
                    .connect(&id, ConnectOptions::default())
                    .await
                    .map_err(for_sandbox(&id))?;
                (sb, false)
            }
            None => {
                let sb = self
                    .client
                    .create(&CreateOptions::new(g.template.clone()))
                    .await
                    .map_err(|e| match e {
                        e2b_core::Error::TemplateNotFound { .. } => CliError::msg(format!(
                            "template {} not found; check --template (default: base)",
                            g.template
                        )),
                        e => e.into(),
                    })?;
                (sb, true)
            }
        };
        let keepalive = {
            let client = self.client.clone();
            let id = sandbox.id().to_owned();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(KEEPALIVE_EVERY);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    // Best effort: a failure here shows up in the command itself.
                    let _ = client.refresh(&id, Some(KEEPALIVE_LIFETIME)).await;
                }
            })
        };
        Ok(Session {
            sandbox,
            owned,
            keepalive,
        })
    }
}

/// The sandbox one command works in.
pub struct Session {
    /// The connected handle.
    pub sandbox: Sandbox,
    /// True when created for this command (killed at the end).
    pub owned: bool,
    keepalive: JoinHandle<()>,
}

impl Session {
    /// Stop topping its lifetime up, and kill it when it was created for this command.
    pub async fn end(self, backend: &Backend) {
        self.keepalive.abort();
        if self.owned {
            let _ = backend.client.kill(self.sandbox.id()).await;
        }
    }
}
