//! The durable execs of `sandbox@1` on E2B: `exec_start`, `exec_attach`, `exec_list`,
//! `exec_kill` and `exec_forget` on subprocess-e2b's durable commands, whose records the
//! spawn helper keeps in the sandbox (root-owned, so the sandbox user cannot forge or
//! read them), so any provider instance, on any host, finds an exec by id. A start is
//! one envd request, as `exec`'s is; the time limit is kept in the sandbox twice (the
//! `timeout` watchdog at the deadline, the spawn helper's cgroup backstop 5 s later).

use std::time::Duration;

use exec_world::sandbox::{
    ExecId, ExecInfo, ExecSpec, ExecStream, SandboxError, exec_events, exec_id, exec_info,
    failed_by, not_an_exec,
};
use exec_world::{Attached as DurableAttach, ErrorKind, OutputOffsets, Subprocess as _};

use e2b_core::lifecycle::Leases;

use crate::conversation::{Attached, check_id, contract};
use crate::exec;
use crate::io::FILE_OP_NEED;

/// How long `exec_kill` lets a command end after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

pub(crate) async fn start(
    leases: &Leases<Attached>,
    sandbox: &str,
    spec: ExecSpec,
) -> Result<ExecId, SandboxError> {
    const OP: &str = "exec_start";
    let id = exec_id(OP, &spec)?;
    let child = exec::start(OP, leases, sandbox, &spec).await?;
    child.detach();
    Ok(id)
}

/// A durable attach of exec `id`; NotFound unless it is a sandbox exec.
async fn attach_exec(
    op: &'static str,
    leases: &Leases<Attached>,
    sandbox: &str,
    id: &ExecId,
    from: OutputOffsets,
) -> Result<DurableAttach, SandboxError> {
    check_id(op, sandbox)?;
    let a = leases
        .run(op, sandbox, FILE_OP_NEED, |w: Attached| async move {
            w.proc.durable_attach(id, from).await
        })
        .await
        .map_err(|e| failed_by(op, None, contract(op, sandbox, e)))?;
    if exec_info(&a.info, str::to_owned).is_none() {
        a.child.detach();
        return Err(not_an_exec(op, id));
    }
    Ok(a)
}

pub(crate) async fn attach(
    leases: &Leases<Attached>,
    sandbox: &str,
    id: &ExecId,
    from: OutputOffsets,
) -> Result<ExecStream, SandboxError> {
    const OP: &str = "exec_attach";
    let a = attach_exec(OP, leases, sandbox, id, from).await?;
    Ok(exec_events(OP, a))
}

pub(crate) async fn list(
    leases: &Leases<Attached>,
    sandbox: &str,
) -> Result<Vec<ExecInfo>, SandboxError> {
    const OP: &str = "exec_list";
    check_id(OP, sandbox)?;
    let listed = leases
        .run(OP, sandbox, FILE_OP_NEED, |w: Attached| async move {
            w.proc.durable_list().await
        })
        .await
        .map_err(|e| failed_by(OP, None, contract(OP, sandbox, e)))?;
    Ok(listed
        .iter()
        .filter_map(|d| exec_info(d, str::to_owned))
        .collect())
}

pub(crate) async fn kill(
    leases: &Leases<Attached>,
    sandbox: &str,
    id: &ExecId,
) -> Result<(), SandboxError> {
    const OP: &str = "exec_kill";
    let a = attach_exec(OP, leases, sandbox, id, OutputOffsets::default()).await?;
    let mut child = a.child;
    drop((child.take_stdout(), child.take_stderr()));
    let r = child.terminate(KILL_GRACE).await;
    child.detach();
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => Ok(()),
        Err(e) => Err(failed_by(OP, None, e)),
    }
}

pub(crate) async fn forget(
    leases: &Leases<Attached>,
    sandbox: &str,
    id: &ExecId,
) -> Result<(), SandboxError> {
    const OP: &str = "exec_forget";
    check_id(OP, sandbox)?;
    leases
        .run(OP, sandbox, FILE_OP_NEED, |w: Attached| async move {
            w.proc.durable_collect(id).await
        })
        .await
        .map_err(|e| failed_by(OP, None, contract(OP, sandbox, e)))
}
