//! The world one MCP session works in, and how it is opened and ended: a sandbox of the
//! backend (E2B or the embedded emulator, through fs-e2b and subprocess-e2b), this
//! machine's directory (`--local DIR`, files through exec-world's `Rooted`), or a
//! conversation sandbox of a `sandbox@1` provider (`--provider`).

use std::path::PathBuf;
use std::sync::Arc;

use agent_tools::BashTool;
use exec_world::sandbox::{
    CreateSpec, LocalSandboxes, ResumeOutcome, SandboxError, SandboxHandle, SandboxProvider,
};
use exec_world::{Fs, LocalFs, LocalSubprocess, Rooted, Subprocess, WorldPath};
use tokio::sync::Mutex;

use crate::cli::Global;
use crate::error::{CliError, CliResult};
use crate::target::{Backend, Session as SandboxSession};

/// How each session's world is made (one per server).
pub enum Opener {
    /// A sandbox per session from this backend (`--sandbox` in `global`: that one, kept).
    Sandbox {
        /// The control plane (or embedded emulator).
        backend: Arc<Backend>,
        /// Template and `--sandbox`.
        global: Global,
    },
    /// This machine, files rooted at the directory.
    Local(PathBuf),
    /// A conversation sandbox.
    Provider {
        /// The provider.
        provider: Arc<dyn SandboxProvider>,
        /// `e2b` or `local`: names the state subdirectory.
        kind: &'static str,
        /// Every session's conversation, when named.
        conversation: Option<String>,
        /// Where names map to sandbox ids.
        state_dir: PathBuf,
    },
}

/// One session's world.
pub enum World {
    /// Files, processes and terminals through the exec-world seams.
    Seams {
        /// Files.
        fs: Arc<dyn Fs>,
        /// Processes and terminals.
        proc: Arc<dyn Subprocess>,
        /// The bash tool over `proc`.
        bash: BashTool,
        /// The sandbox to end with the session, if any.
        sandbox: Mutex<Option<SandboxSession>>,
        /// `--local`: the real directory the files' `/` is (processes see real paths).
        local_root: Option<String>,
    },
    /// A `sandbox@1` conversation sandbox (no terminals).
    Provider {
        /// The provider.
        provider: Arc<dyn SandboxProvider>,
        /// The sandbox.
        handle: SandboxHandle,
        /// The tag of this session's commands (killed at its end).
        tag: String,
        /// Destroy the sandbox at the end (an unnamed conversation).
        destroy: bool,
    },
}

impl Opener {
    /// A world for session number `session`.
    pub async fn open(&self, session: u64) -> CliResult<World> {
        match self {
            Opener::Sandbox { backend, global } => {
                let s = backend.session(global).await?;
                let fs: Arc<dyn Fs> = Arc::new(s.fs().await?);
                let proc: Arc<dyn Subprocess> = Arc::new(s.subprocess(None).await?);
                Ok(World::seams(fs, proc, Some(s)))
            }
            Opener::Local(dir) => {
                let root = WorldPath::new(dir.to_string_lossy())
                    .map_err(|e| CliError::msg(format!("--local {}: {e}", dir.display())))?;
                let inner: Arc<dyn Fs> = Arc::new(
                    LocalFs::beneath(root.clone())
                        .map_err(|e| CliError::msg(format!("--local {}: {e}", dir.display())))?,
                );
                let fs = Rooted::new(inner, root.clone())
                    .map_err(|e| CliError::msg(format!("--local {}: {e}", dir.display())))?;
                let mut w = World::seams(
                    Arc::new(fs),
                    Arc::new(LocalSubprocess::at(root.clone())),
                    None,
                );
                if let World::Seams { local_root, .. } = &mut w {
                    *local_root = Some(root.as_str().to_owned());
                }
                Ok(w)
            }
            Opener::Provider {
                provider,
                kind,
                conversation,
                state_dir,
            } => {
                let tag = format!("mcp-{}-s{session}", std::process::id());
                let (handle, destroy) = match conversation {
                    Some(name) => (
                        join_conversation(provider.as_ref(), &state_dir.join(kind), name).await?,
                        false,
                    ),
                    None => {
                        let name = format!("mcp-{}", uuid::Uuid::new_v4().simple());
                        let h = provider
                            .create(CreateSpec::new(name))
                            .await
                            .map_err(provider_error)?;
                        (h, true)
                    }
                };
                Ok(World::Provider {
                    provider: provider.clone(),
                    handle,
                    tag,
                    destroy,
                })
            }
        }
    }
}

/// The local provider's sandboxes live under the state directory.
pub fn local_provider(state_dir: &std::path::Path) -> CliResult<LocalSandboxes> {
    LocalSandboxes::new(state_dir.join("local-sandboxes")).map_err(provider_error)
}

/// One line for a provider failure.
pub fn provider_error(e: SandboxError) -> CliError {
    CliError::msg(format!("conversation sandbox: {e}"))
}

/// The sandbox of conversation `name`: the one recorded under `dir` when the provider
/// still has it (resumed if paused), else a new one, recorded.
async fn join_conversation(
    provider: &dyn SandboxProvider,
    dir: &std::path::Path,
    name: &str,
) -> CliResult<SandboxHandle> {
    exec_world::sandbox::validate::name("conversation", name).map_err(provider_error)?;
    let record = dir.join(format!("{name}.id"));
    if let Ok(id) = std::fs::read_to_string(&record) {
        let h = SandboxHandle::new(id.trim());
        match provider.resume(&h).await {
            Ok(ResumeOutcome::Resumed) => return Ok(h),
            Ok(ResumeOutcome::Gone) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => return Err(provider_error(e)),
        }
    }
    let h = provider
        .create(CreateSpec::new(name))
        .await
        .map_err(provider_error)?;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&record, &h.id))
        .map_err(|e| {
            CliError::msg(format!(
                "cannot record conversation {name} in {}: {e}",
                dir.display()
            ))
        })?;
    Ok(h)
}

impl World {
    fn seams(fs: Arc<dyn Fs>, proc: Arc<dyn Subprocess>, sandbox: Option<SandboxSession>) -> World {
        World::Seams {
            bash: BashTool::new(proc.clone()),
            fs,
            proc,
            sandbox: Mutex::new(sandbox),
            local_root: None,
        }
    }

    /// Ends what the session leaves: its tagged commands (provider), the sandbox made for
    /// it (deleted, or kept when borrowed or named).
    pub async fn end(&self) {
        match self {
            World::Seams { sandbox, .. } => {
                if let Some(s) = sandbox.lock().await.take() {
                    s.end().await;
                }
            }
            World::Provider {
                provider,
                handle,
                tag,
                destroy,
            } => {
                if *destroy {
                    let _ = provider.destroy(handle).await;
                } else {
                    let _ = provider
                        .kill_tagged(handle, std::slice::from_ref(tag))
                        .await;
                }
            }
        }
    }
}
