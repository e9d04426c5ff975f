//! One world per conversation sandbox: what every connect builds on the sandbox's envd
//! API ([`Attached`]: fs-e2b as the sandbox user and as root for `/skills`,
//! subprocess-e2b), leased through e2b-core's [`Leases`] (the one lease and reconnect).

use std::sync::Arc;
use std::time::Duration;

use e2b_core::EnvdApi;
use e2b_core::lifecycle::Leases;
use exec_world::sandbox::{SandboxError, WORKSPACE, gone, invalid};
use fs_e2b::{E2bFs, E2bFsOptions};
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions, UserInfo};

use crate::config::{MAX_TIMEOUT_SECONDS, SandboxConfig};
use crate::io::UPLOAD_DIR;

/// The template's sandbox user.
pub(crate) const SANDBOX_USER: &str = "sandbox";
/// Host-side queue per output stream of a command (read eagerly; output past the cap
/// is dropped as it arrives).
const OUTPUT_BUFFER: usize = 64 * 1024;

/// A usable sandbox: its envd API and the world's adapters on it.
#[derive(Clone, Debug)]
pub(crate) struct Attached {
    pub(crate) api: Arc<dyn EnvdApi>,
    pub(crate) proc: E2bSubprocess,
    /// Files as the sandbox user.
    pub(crate) fs: E2bFs,
    /// Files as root, for `/skills` only (root-owned all the way down).
    pub(crate) root_fs: E2bFs,
    /// What this provider's spawns showed about escapes (shared by every sandbox).
    pub(crate) containment: Arc<Containment>,
}

/// Whether `kill_tagged` / `kill_all` reach escaped processes, as far as the provider's
/// spawns have shown: the template is assumed to give each spawn a cgroup (E2B's and the
/// emulator's do) until a spawn's setup finds none; from then on the provider says it
/// cannot ([`SandboxCapabilities::kill_reaches_escapes`](exec_world::sandbox::SandboxCapabilities))
/// and logs it once.
#[derive(Debug, Default)]
pub(crate) struct Containment {
    uncontained: std::sync::atomic::AtomicBool,
}

impl Containment {
    /// False once a spawn ran without a cgroup of its own.
    pub(crate) fn holds(&self) -> bool {
        !self.uncontained.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Takes note of what the started spawn's adapter found.
    pub(crate) fn observe(&self, sandbox: &str, proc: &E2bSubprocess) {
        use exec_world::Subprocess as _;
        if !proc.capabilities().contained_escapes
            && !self
                .uncontained
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::warn!(
                sandbox,
                "sandbox-e2b: the template gives spawns no cgroup of their own (no writable cgroup2 mount for root); kill_tagged and kill_all cannot reach an env-cleared setsid escapee"
            );
        }
    }
}

/// The template's user, known in advance so exec needs no lookup.
fn sandbox_user() -> UserInfo {
    UserInfo {
        name: SANDBOX_USER.into(),
        home: WORKSPACE.into(),
        shell: "/bin/bash".into(),
        path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    }
}

impl Attached {
    /// The world on `api`.
    fn build(
        api: Arc<dyn EnvdApi>,
        containment: Arc<Containment>,
    ) -> Result<Attached, exec_world::Error> {
        let opts = E2bSubprocessOptions::new("/")
            .output_buffer(OUTPUT_BUFFER)
            .known_user(sandbox_user());
        let proc = E2bSubprocess::new(api.clone(), opts)?;
        let fs_opts = |user: &str| {
            E2bFsOptions::new(WORKSPACE)
                .user(user)
                .root_staging(UPLOAD_DIR)
        };
        let fs = E2bFs::new(api.clone(), fs_opts(SANDBOX_USER))?;
        let root_fs = E2bFs::new(api.clone(), fs_opts("root"))?;
        Ok(Attached {
            api,
            proc,
            fs,
            root_fs,
            containment,
        })
    }
}

/// The leases of one provider instance.
pub(crate) fn leases(
    client: e2b_core::Client,
    cfg: &SandboxConfig,
    containment: Arc<Containment>,
) -> Leases<Attached> {
    Leases::new(
        client,
        cfg.timeout(),
        Duration::from_secs(MAX_TIMEOUT_SECONDS),
        move |api| Attached::build(api, containment.clone()),
    )
}

/// `^[a-zA-Z0-9-]{1,128}$`: an id safe to put in a URL path.
pub(crate) fn check_id(op: &'static str, id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("sandbox id {:?}", id.chars().take(140).collect::<String>()),
            "it must match ^[a-zA-Z0-9-]{1,128}$",
        ))
    }
}

/// A lease error as the contract's: `Gone` names the sandbox.
pub(crate) fn contract(op: &'static str, id: &str, e: exec_world::Error) -> SandboxError {
    if e.is_gone() {
        gone(op, id)
    } else {
        e.with_op(op)
    }
}

/// Reboot: pause, then connect with `memory: false` (a cold boot from disk ends every
/// process). Failures are logged, never returned.
pub(crate) async fn reboot(leases: &Leases<Attached>, id: &str) {
    tracing::warn!(
        sandbox = id,
        "sandbox-e2b: could not stop a command cleanly; rebooting the sandbox"
    );
    leases.forget(id);
    let paused = match leases
        .client()
        .pause(id, e2b_core::PauseOptions { memory: true })
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.is_conflict() => Ok(()),
        Err(e) => Err(e.into_world("reboot")),
    };
    let result = match paused {
        Ok(()) => leases
            .connect("reboot", id, Duration::ZERO, Some(false))
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::warn!(
            sandbox = id,
            error = %e,
            "sandbox-e2b: sandbox reboot failed; the stuck command may still be running"
        );
    }
}
