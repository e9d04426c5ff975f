//! Where commands run: the backend (E2B, a compatible control plane, or the embedded
//! emulator started in this process) and the sandbox of one command (a fresh one, killed
//! at the end, or an existing one named by `--sandbox ID|NAME`, kept), owned through
//! `e2b_core::lifecycle` with keep-alive.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::lifecycle::{
    ActivityGuard, KeepAliveConfig, LifecycleError, OwnedHandle, OwnerOptions, Ownership,
    SandboxOwner,
};
use e2b_core::{Client, Config, CreateOptions, EnvdApi, ListQuery};
use fs_e2b::{E2bFs, E2bFsOptions};
use subprocess_e2b::E2bSubprocess;
#[cfg(feature = "embedded")]
use testing_fake::{Emulator, EmulatorConfig};

use crate::cli::Global;
use crate::error::{CliError, CliResult, describe, sandbox_not_found};

/// Metadata key holding a sandbox's e2bx name.
pub const NAME_KEY: &str = "e2bx.name";

/// The lifetime a sandbox is created or connected with; keep-alive tops it up to this
/// while a command runs.
const SANDBOX_TIMEOUT: Duration = Duration::from_secs(300);

/// The control plane in use, and the embedded emulator when there is one.
pub struct Backend {
    /// The control-plane client.
    pub client: Client,
    #[cfg(feature = "embedded")]
    embedded: Option<Emulator>,
}

impl Backend {
    /// E2B (or a compatible server) when an API key or a URL is configured, else the
    /// embedded emulator (announced with one line on stderr unless `quiet`).
    pub async fn open(g: &Global) -> CliResult<Backend> {
        let mut cfg =
            Config::from_env().with_user_agent(format!("e2bx/{}", env!("CARGO_PKG_VERSION")));
        let remote_hint = g.api_url.is_some() || g.domain.is_some() || g.sandbox_url.is_some();
        if cfg.api_key().is_none() {
            if remote_hint {
                return Err(CliError::msg(
                    "E2B_API_KEY is not set but E2B_API_URL/E2B_DOMAIN/E2B_SANDBOX_URL (or --api-url/--domain/--sandbox-url) name a server; set E2B_API_KEY too (for `e2bx serve`, export all three lines it prints), or unset them to use the embedded emulator",
                ));
            }
            return Self::open_embedded(cfg, g).await;
        }
        if !g.template_root.is_empty() {
            return Err(CliError::msg(
                "--template-root builds sandboxes of the embedded emulator (no E2B_API_KEY) or of `e2bx serve`; a remote E2B builds its templates itself",
            ));
        }
        if let Some(u) = &g.api_url {
            cfg = cfg.with_api_url(u.clone());
        }
        if let Some(d) = &g.domain {
            cfg = cfg.with_domain(d.clone());
        }
        if let Some(u) = &g.sandbox_url {
            cfg = cfg.with_sandbox_url(u.clone());
        }
        let client = Client::new(cfg)?;
        Ok(Backend {
            client,
            #[cfg(feature = "embedded")]
            embedded: None,
        })
    }

    /// The embedded emulator, announced with one line on stderr unless `quiet`.
    #[cfg(feature = "embedded")]
    async fn open_embedded(cfg: Config, g: &Global) -> CliResult<Backend> {
        let quiet = g.quiet;
        let emu = Emulator::start(EmulatorConfig {
            template_roots: template_roots(&g.template_root)?,
            ..EmulatorConfig::default()
        })
        .await
        .map_err(|e| CliError::msg(format!("cannot start the embedded E2B emulator: {e}")))?;
        // Loud whatever `quiet` says: the sandbox is not a boundary.
        if testing_fake::envd::isolation_opted_out() {
            eprintln!("e2bx: {}", testing_fake::envd::NO_ISOLATION_BANNER);
        }
        if !quiet {
            eprintln!(
                "e2bx: no E2B_API_KEY set; using the embedded E2B emulator (sandboxes are local and end with this command)"
            );
        }
        let cfg = cfg
            .with_api_key(emu.api_key())
            .with_api_url(emu.api_url())
            .with_sandbox_url(emu.sandbox_url());
        let client = Client::new(cfg)?;
        Ok(Backend {
            client,
            embedded: Some(emu),
        })
    }

    #[cfg(not(feature = "embedded"))]
    async fn open_embedded(_cfg: Config, _g: &Global) -> CliResult<Backend> {
        Err(CliError::msg(
            "E2B_API_KEY is not set and this e2bx was built without the embedded emulator (feature `embedded`); set E2B_API_KEY (and E2B_API_URL for a self-hosted E2B)",
        ))
    }

    /// True when sandboxes live in this process's emulator.
    pub fn is_embedded(&self) -> bool {
        #[cfg(feature = "embedded")]
        return self.embedded.is_some();
        #[cfg(not(feature = "embedded"))]
        false
    }

    /// Stop the embedded emulator (every sandbox process ends).
    pub async fn close(self) {
        #[cfg(feature = "embedded")]
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

    /// The sandbox for one command: `--sandbox` connected (resumed if paused) and
    /// borrowed, or a fresh one from `--template`, owned (deleted at the end). Either way a
    /// `KeepAlive` tops its lifetime up while the command runs (one open turn), and
    /// never extends it blindly.
    pub async fn session(&self, g: &Global) -> CliResult<Session> {
        let opts = OwnerOptions::new(CreateOptions::new(g.template.clone()))
            .timeout(SANDBOX_TIMEOUT)
            .keepalive(KeepAliveConfig::new())
            .skip_setup();
        let owner = match &g.sandbox {
            Some(s) => {
                let id = self.resolve(s).await?;
                SandboxOwner::connect(&self.client, &id, opts, Ownership::Borrowed)
                    .await
                    .map_err(|e| lifecycle_error(e, Some(&id), &g.template))?
            }
            None => SandboxOwner::create(&self.client, opts)
                .await
                .map_err(|e| lifecycle_error(e, None, &g.template))?,
        };
        let handle = match owner.handle().await {
            Ok(h) => h,
            Err(e) => {
                let _ = owner.shutdown().await;
                return Err(lifecycle_error(e, Some(owner.sandbox_id()), &g.template));
            }
        };
        let turn = owner.keepalive().map(|k| k.activity("e2bx command"));
        Ok(Session {
            owner,
            handle,
            _turn: turn,
        })
    }
}

/// One line for a lifecycle failure: the not-found and template hints, else the cause.
fn lifecycle_error(e: LifecycleError, id: Option<&str>, template: &str) -> CliError {
    match e.api_error() {
        Some(e2b_core::Error::TemplateNotFound { .. }) => CliError::msg(format!(
            "template {template} not found; check --template (default: base)"
        )),
        Some(api) if api.is_sandbox_not_found() && id.is_some() => {
            CliError::msg(sandbox_not_found(id.unwrap_or_default()))
        }
        Some(api) => CliError::msg(describe(api)),
        None => CliError::msg(e.to_string()),
    }
}

/// The sandbox one command works in.
pub struct Session {
    owner: SandboxOwner,
    handle: OwnedHandle,
    _turn: Option<ActivityGuard>,
}

impl Session {
    /// The sandbox's envd, behind the keep-alive lease.
    pub fn api(&self) -> Arc<dyn EnvdApi> {
        self.handle.api()
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        self.handle.sandbox_id()
    }

    /// True when created for this command (deleted at the end).
    pub fn owned(&self) -> bool {
        self.owner.ownership() == Ownership::Owned
    }

    /// Processes as `user` (default: the template's user), with that user's home as the
    /// working directory, as a login would have it.
    pub async fn subprocess(&self, user: Option<&str>) -> CliResult<E2bSubprocess> {
        E2bSubprocess::at_home(self.api(), user.map(str::to_owned))
            .await
            .map_err(|e| CliError::msg(format!("cannot look up the sandbox user: {e}")))
    }

    /// Files as the template's user, relative paths against its home (the login view).
    pub async fn fs(&self) -> CliResult<E2bFs> {
        use exec_world::Subprocess as _;
        let home = self.subprocess(None).await?.cwd().to_string();
        E2bFs::new(self.api(), E2bFsOptions::new(home))
            .map_err(|e| CliError::msg(format!("cannot use the sandbox's files: {e}")))
    }

    /// Close the turn and stop keep-alive; delete the sandbox when it was created for this
    /// command (a borrowed one is kept).
    pub async fn end(self) {
        let Session { owner, _turn, .. } = self;
        drop(_turn);
        let _ = owner.shutdown().await;
    }
}

/// The `--template-root NAME=DIR` flags, checked (the emulator checks DIR's programs
/// when it starts).
#[cfg(feature = "embedded")]
pub fn template_roots(flags: &[String]) -> CliResult<Vec<testing_fake::TemplateRoot>> {
    flags
        .iter()
        .map(|f| {
            f.parse::<testing_fake::TemplateRoot>()
                .map_err(|e| CliError::msg(format!("--template-root: {e}")))
        })
        .collect()
}
