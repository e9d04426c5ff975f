//! exec: `/bin/bash -c COMMAND` as the sandbox user, started through subprocess-e2b (its
//! spawn helper: own session and group, cgroup, spawn marker, bounded output queues,
//! tree kill), with exec-world's shared loop ([`run_capped`]) for the cap, the timeout
//! and cancel. subprocess-e2b's in-sandbox backstop (`kill_after`, 5 s past the
//! command's timeout) kills the command's whole tree when the host that started it is
//! gone. When the tree kill fails or the output does not end within the stop wait, the
//! sandbox is rebooted. A command that ended by itself gives its spawn cgroup back for
//! reuse ([`ReleaseOnExit`]).

use std::time::Duration;

use exec_world::sandbox::{
    ExecOutput, ExecSpec, SANDBOX_ID_VAR, SandboxError, TAG_VAR, UNTAGGED, WORKSPACE,
    durable_program, durable_spec, exec_group, failed_by, gone, invalid, run_capped, validate,
};
use exec_world::{Child, EnvBase, SpawnSpec, Subprocess as _, WorldPath};

use e2b_core::lifecycle::Leases;
use e2b_core::lifecycle::leases::is_stale;

use crate::conversation::{self, Attached, check_id, contract};
use crate::release_on_exit::ReleaseOnExit;

/// Extra life the sandbox gets beyond a command's timeout.
pub(crate) const TIMEOUT_MARGIN: Duration = Duration::from_secs(120);
/// The in-sandbox backstop fires this long after the command's timeout.
pub(crate) const BACKSTOP_GRACE_SECS: u64 = 5;

const OP: &str = "exec";

/// The spawn of `spec` (durable, under the in-sandbox `timeout` watchdog, when it has an
/// id), started at once (its start error comes from `started`).
fn spawn(
    op: &'static str,
    a: &Attached,
    id: &str,
    spec: &ExecSpec,
    cwd: &WorldPath,
) -> Result<Child, SandboxError> {
    let mut s = if spec.id.is_some() {
        let (prog, args) = durable_program(spec);
        SpawnSpec::new(prog)
            .args(args)
            .durable(durable_spec(op, spec)?)
    } else {
        SpawnSpec::new("/bin/bash").args(["-c".to_owned(), spec.command.clone()])
    };
    s = s
        .env_base(EnvBase::Base)
        .cwd(cwd.clone())
        .env("HOME", WORKSPACE)
        .env("LANG", "C.UTF-8");
    for (k, v) in &spec.env {
        s = s.env(k, v);
    }
    s = s
        .env(TAG_VAR, spec.tag.as_deref().unwrap_or(UNTAGGED))
        .env(SANDBOX_ID_VAR, id)
        .group(exec_group(id, spec.tag.as_deref()));
    let backstop = spec
        .timeout
        .saturating_add(Duration::from_secs(BACKSTOP_GRACE_SECS));
    let durable = spec.id.is_some();
    a.proc
        .clone()
        .kill_after(Some(backstop))
        .spawn(s)
        // A durable command's handle is given up as it is (dropping one kills nothing).
        .map(|c| if durable { c } else { ReleaseOnExit::wrap(c) })
        .map_err(|e| failed_by(op, None, e))
}

/// Checks `spec`, leases the sandbox for the command's time limit, and starts it (once
/// more after a fresh connect when the lease was stale: a durable start that reached
/// the sandbox is refused the second time as AlreadyExists, so it never runs twice).
pub(crate) async fn start(
    op: &'static str,
    leases: &Leases<Attached>,
    id: &str,
    spec: &ExecSpec,
) -> Result<Child, SandboxError> {
    validate::exec_spec(op, spec)?;
    let cwd = spec.cwd.as_deref().unwrap_or(WORKSPACE);
    validate::path(op, cwd)?;
    let cwd = WorldPath::new(cwd).map_err(|e| invalid(op, "cwd", e.to_string()))?;
    let need = spec.timeout.saturating_add(TIMEOUT_MARGIN);
    check_id(op, id)?;
    let a = leases
        .attach(op, id, need)
        .await
        .map_err(|e| contract(op, id, e))?;
    let mut child = spawn(op, &a, id, spec, &cwd)?;
    if let Err(e) = child.started().await {
        if !is_stale(&e) {
            return Err(start_error(op, id, e));
        }
        // Paused or deleted behind our lease (another replica): connect once, retry.
        let a = leases
            .connect(op, id, need, None)
            .await
            .map_err(|e| contract(op, id, e))?;
        child = spawn(op, &a, id, spec, &cwd)?;
        child.started().await.map_err(|e| start_error(op, id, e))?;
        a.containment.observe(id, &a.proc);
        return Ok(child);
    }
    a.containment.observe(id, &a.proc);
    Ok(child)
}

pub(crate) async fn exec(
    leases: &Leases<Attached>,
    id: &str,
    spec: ExecSpec,
    stop_wait: Duration,
) -> Result<ExecOutput, SandboxError> {
    let child = start(OP, leases, id, &spec).await?;
    let r = run_capped(
        child,
        spec.timeout,
        &spec.cancel,
        spec.max_output_bytes,
        stop_wait,
    )
    .await
    .map_err(|e| failed_by(OP, None, e))?;
    if r.stuck {
        conversation::reboot(leases, id).await;
    }
    Ok(r.output())
}

fn start_error(op: &'static str, id: &str, e: exec_world::Error) -> SandboxError {
    if e.is_gone() {
        return gone(op, id);
    }
    failed_by(op, None, e)
}
