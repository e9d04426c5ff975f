//! [`LocalSandboxes`]: the sandbox contract on this machine, one directory per
//! conversation, for developing without E2B and then swapping providers.
//!
//! Layout under the root: `<id>/` is the sandbox's `/` (so `/workspace/a` is
//! `<root>/<id>/workspace/a`), with `workspace/`, `skills/`, `tmp/`, and two bookkeeping
//! files beside them (`.sandbox-name`, `.suspended`). The id is `<name>@<unique>`.
//!
//! Commands run as this process's user with `bash -c` in their own process group and
//! session (exec-world's [`LocalSubprocess`]), `HOME` = the workspace directory, and
//! carry [`TAG_VAR`](super::TAG_VAR) and [`SANDBOX_ID_VAR`](super::SANDBOX_ID_VAR) so
//! `kill_tagged`, `kill_all`, `suspend` (SIGSTOP) and `resume` (SIGCONT) find them from
//! any instance. There is **no isolation**: commands see the whole machine and egress is
//! not restricted (capabilities `user_isolation` and `egress_control` are false). A
//! command that clears its environment before backgrounding escapes suspend and kill_all.
//! File operations refuse a path that existing links lead out of the sandbox directory
//! (a guard against mistakes, not against a command racing the check), and `read_file`
//! refuses anything but a regular file (a planted FIFO would block the reader).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    CreateSpec, ExecOutput, ExecSpec, FileContent, FileStat, ResumeOutcome, SANDBOX_ID_VAR,
    SandboxCapabilities, SandboxError, SandboxHandle, SandboxProvider, TAG_VAR, UNTAGGED,
    WORKSPACE, run_capped, signal_execs_args, validate,
};
use crate::{LocalSubprocess, SpawnSpec, Subprocess, WorldPath};

pub(super) const NAME_FILE: &str = ".sandbox-name";
pub(super) const SUSPENDED_FILE: &str = ".suspended";
/// How long a stop (tree kill and end of output) may take before `exec` gives up on it.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// Conversation sandboxes as directories on this machine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalSandboxes {
    root: PathBuf,
}

pub(super) fn io_err(op: &'static str, path: &str, e: std::io::Error) -> SandboxError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return SandboxError::PermissionDenied {
            op,
            path: path.to_owned(),
            detail: e.to_string(),
        };
    }
    SandboxError::from_source(op, Some(path), e)
}

impl LocalSandboxes {
    /// Sandboxes under `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> Result<LocalSandboxes, SandboxError> {
        let root = root.into();
        std::fs::create_dir_all(&root)
            .map_err(|e| io_err("new", &root.display().to_string(), e))?;
        Ok(LocalSandboxes { root })
    }

    /// The host directory that is the sandbox's `/`.
    pub fn dir_of(&self, h: &SandboxHandle) -> PathBuf {
        self.root.join(&h.id)
    }

    /// The directory of a live sandbox, or `Gone`.
    pub(super) fn live(
        &self,
        op: &'static str,
        h: &SandboxHandle,
    ) -> Result<PathBuf, SandboxError> {
        let ok = !h.id.is_empty() && !h.id.contains('/') && h.id != "." && h.id != "..";
        let dir = self.dir_of(h);
        if ok && dir.join(NAME_FILE).is_file() {
            Ok(dir)
        } else {
            Err(SandboxError::Gone {
                op,
                id: h.id.clone(),
            })
        }
    }

    /// A sandbox path on the host (the path is validated first), refused when links
    /// already there lead it out of the sandbox directory (see [`contained`]).
    fn host_path(
        &self,
        op: &'static str,
        h: &SandboxHandle,
        path: &str,
    ) -> Result<PathBuf, SandboxError> {
        validate::path(op, path)?;
        let dir = self.live(op, h)?;
        let p = dir.join(path.trim_start_matches('/'));
        contained(op, path, &dir, &p)?;
        Ok(p)
    }

    pub(super) async fn signal(
        &self,
        op: &'static str,
        h: &SandboxHandle,
        mode: &str,
        tags: Option<&[String]>,
    ) -> Result<(), SandboxError> {
        let out = tokio::process::Command::new("sh")
            .args(signal_execs_args(mode, &h.id, tags))
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| SandboxError::from_source(op, None, e))?;
        if !out.status.success() {
            return Err(SandboxError::failed(
                op,
                None,
                format!(
                    "could not stop every command: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
        Ok(())
    }

    /// Continues a suspended sandbox (auto-start).
    async fn wake(&self, op: &'static str, h: &SandboxHandle) -> Result<PathBuf, SandboxError> {
        let dir = self.live(op, h)?;
        if dir.join(SUSPENDED_FILE).exists() {
            self.signal(op, h, "cont", None).await?;
            let _ = std::fs::remove_file(dir.join(SUSPENDED_FILE));
        }
        Ok(dir)
    }

    fn ids_named(&self, name: &str) -> Result<Vec<String>, SandboxError> {
        let rd = match std::fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) => {
                return Err(io_err(
                    "destroy_by_name",
                    &self.root.display().to_string(),
                    e,
                ));
            }
        };
        let mut ids = Vec::new();
        for entry in rd.flatten() {
            let n = std::fs::read_to_string(entry.path().join(NAME_FILE)).unwrap_or_default();
            if n == name {
                ids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(ids)
    }
}

/// Refuses `p` when its deepest existing ancestor (itself included) resolves outside
/// `dir`: a link a command planted cannot send a file operation out of the sandbox.
/// (Same user, no isolation: this guards mistakes, not an adversary racing the check.)
fn contained(op: &'static str, path: &str, dir: &Path, p: &Path) -> Result<(), SandboxError> {
    let root = dir
        .canonicalize()
        .map_err(|e| io_err(op, &dir.display().to_string(), e))?;
    let mut probe = Some(p);
    while let Some(q) = probe {
        match q.canonicalize() {
            Ok(real) if real.starts_with(&root) => return Ok(()),
            Ok(_) => {
                return Err(SandboxError::PermissionDenied {
                    op,
                    path: path.to_owned(),
                    detail: "a link leads out of the sandbox".into(),
                });
            }
            Err(_) => probe = q.parent(),
        }
    }
    Ok(())
}

fn remove_tree(op: &'static str, dir: &Path) -> Result<(), SandboxError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(op, &dir.display().to_string(), e)),
    }
}

#[async_trait]
impl SandboxProvider for LocalSandboxes {
    async fn create(&self, spec: CreateSpec) -> Result<SandboxHandle, SandboxError> {
        validate::name("create", &spec.name)?;
        validate::limits("create", &spec.limits)?;
        self.destroy_by_name(&spec.name).await?;
        let h = SandboxHandle::new(format!("{}@{}", spec.name, crate::local::new_marker()));
        let dir = self.dir_of(&h);
        for sub in ["workspace", "skills", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| io_err("create", &dir.display().to_string(), e))?;
        }
        std::fs::write(dir.join(NAME_FILE), &spec.name)
            .map_err(|e| io_err("create", &dir.display().to_string(), e))?;
        Ok(h)
    }

    async fn resume(&self, h: &SandboxHandle) -> Result<ResumeOutcome, SandboxError> {
        match self.wake("resume", h).await {
            Ok(_) => Ok(ResumeOutcome::Resumed),
            Err(SandboxError::Gone { .. }) => Ok(ResumeOutcome::Gone),
            Err(e) => Err(e),
        }
    }

    async fn suspend(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        let dir = match self.live("suspend", h) {
            Ok(d) => d,
            Err(SandboxError::Gone { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        std::fs::write(dir.join(SUSPENDED_FILE), b"")
            .map_err(|e| io_err("suspend", &dir.display().to_string(), e))?;
        self.signal("suspend", h, "stop", None).await
    }

    async fn destroy(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        let dir = match self.live("destroy", h) {
            Ok(d) => d,
            Err(SandboxError::Gone { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        // Stopped processes must be continued to die of SIGTERM; the tree kill sends CONT.
        let _ = std::fs::remove_file(dir.join(NAME_FILE));
        self.signal("destroy", h, "kill", None).await?;
        remove_tree("destroy", &dir)
    }

    async fn destroy_by_name(&self, name: &str) -> Result<(), SandboxError> {
        validate::name("destroy_by_name", name)?;
        for id in self.ids_named(name)? {
            self.destroy(&SandboxHandle::new(id)).await?;
        }
        Ok(())
    }

    async fn kill_all(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        self.wake("kill_all", h).await?;
        self.signal("kill_all", h, "kill", None).await
    }

    async fn kill_tagged(&self, h: &SandboxHandle, tags: &[String]) -> Result<(), SandboxError> {
        for t in tags {
            validate::tag("kill_tagged", t)?;
        }
        self.wake("kill_tagged", h).await?;
        if tags.is_empty() {
            return Ok(());
        }
        self.signal("kill_tagged", h, "kill", Some(tags)).await
    }

    async fn exec(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecOutput, SandboxError> {
        const OP: &str = "exec";
        validate::exec_spec(OP, &spec)?;
        let cwd = self.host_path(OP, h, spec.cwd.as_deref().unwrap_or(WORKSPACE))?;
        let dir = self.wake(OP, h).await?;
        let home = dir.join("workspace");
        let world_path = |p: &Path| {
            WorldPath::new(p.to_string_lossy().into_owned())
                .map_err(|e| SandboxError::from_source(OP, None, e))
        };
        let mut s = SpawnSpec::new("/bin/bash")
            .args(["-c", spec.command.as_str()])
            .cwd(world_path(&cwd)?)
            .env("HOME", home.to_string_lossy())
            .env("LANG", "C.UTF-8");
        for (k, v) in &spec.env {
            s = s.env(k, v);
        }
        s = s
            .env(TAG_VAR, spec.tag.as_deref().unwrap_or(UNTAGGED))
            .env(SANDBOX_ID_VAR, &h.id);
        let child = LocalSubprocess::at(world_path(&home)?)
            .spawn(s)
            .map_err(|e| SandboxError::from_source(OP, None, e))?;
        let r = run_capped(
            child,
            spec.timeout,
            &spec.cancel,
            spec.max_output_bytes,
            STOP_WAIT,
        )
        .await
        .map_err(|e| SandboxError::from_source(OP, None, e))?;
        Ok(r.output())
    }

    async fn read_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        max_bytes: u64,
    ) -> Result<Option<FileContent>, SandboxError> {
        use tokio::io::AsyncReadExt as _;
        let p = self.host_path("read_file", h, path)?;
        // O_NONBLOCK: opening a FIFO the agent planted must not wait for a writer.
        let f = match tokio::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .await
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("read_file", path, e)),
        };
        let meta = f
            .metadata()
            .await
            .map_err(|e| io_err("read_file", path, e))?;
        if meta.is_dir() {
            return Ok(None);
        }
        if !meta.is_file() {
            return Err(SandboxError::not_regular_file("read_file", path));
        }
        let mut data = Vec::new();
        f.take(max_bytes.saturating_add(1))
            .read_to_end(&mut data)
            .await
            .map_err(|e| io_err("read_file", path, e))?;
        Ok(Some(FileContent::capped(data, max_bytes)))
    }

    async fn write_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        data: &[u8],
    ) -> Result<(), SandboxError> {
        let p = self.host_path("write_file", h, path)?;
        if let Some(parent) = p.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_err("write_file", path, e))?;
            contained("write_file", path, &self.dir_of(h), &p)?;
        }
        tokio::fs::write(&p, data)
            .await
            .map_err(|e| io_err("write_file", path, e))
    }

    async fn stat(&self, h: &SandboxHandle, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let p = self.host_path("stat", h, path)?;
        match tokio::fs::metadata(&p).await {
            Ok(m) => Ok(Some(FileStat {
                size: m.len(),
                is_dir: m.is_dir(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("stat", path, e)),
        }
    }

    async fn fork(&self, h: &SandboxHandle, new_name: &str) -> Result<SandboxHandle, SandboxError> {
        self.fork_dir(h, new_name).await
    }

    fn capabilities(&self) -> SandboxCapabilities {
        SandboxCapabilities {
            concurrent_exec: true,
            suspend_keeps_processes: true,
            user_isolation: false,
            egress_control: false,
        }
    }
}
