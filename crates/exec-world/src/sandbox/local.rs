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
//! File operations go through [`Rooted`] over [`LocalFs`] anchored at the sandbox
//! directory: `..`, absolute paths and every symlink (dangling or not, in any
//! component) resolve inside it, as `openat2(RESOLVE_IN_ROOT)` does, so a link an agent
//! planted cannot send a read or a write out of the sandbox (a final link of a write is
//! followed inside the root too, the way a shell's `>` follows it in an E2B sandbox).
//! Reads open with `O_NONBLOCK` and check the kind on the opened descriptor: a FIFO,
//! socket or device planted or swapped in is refused at once, never read. What remains:
//! a directory swapped for a link between `Rooted`'s resolution and the operation can
//! redirect that one operation (the same user's commands can write anywhere anyway:
//! there is no isolation here).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt as _;

use super::{
    CreateSpec, ExecId, ExecInfo, ExecOutput, ExecSpec, ExecStream, FileContent, FileStat,
    ResumeOutcome, SANDBOX_ID_VAR, SandboxCapabilities, SandboxError, SandboxHandle,
    SandboxProvider, TAG_VAR, UNTAGGED, WORKSPACE, durable_program, durable_spec, exec_events,
    exec_group, exec_id, exec_info, failed, failed_by, gone, not_an_exec, run_capped,
    signal_execs_args, validate,
};
use crate::{
    Error, ErrorKind, Fs as _, LocalFs, LocalSubprocess, OutputOffsets, Rooted, SpawnSpec,
    Subprocess, WorldPath, WriteOptions, bytes_stream,
};

pub(super) const NAME_FILE: &str = ".sandbox-name";
pub(super) const SUSPENDED_FILE: &str = ".suspended";
/// Where the durable execs' records are kept (beside `workspace/`, out of its tree).
pub(super) const EXECS_DIR: &str = ".execs";
/// How long `exec_kill` lets a command end after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long a stop (tree kill and end of output) may take before `exec` gives up on it.
const STOP_WAIT: Duration = Duration::from_secs(3);
/// How many links a write's final component may go through (Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Conversation sandboxes as directories on this machine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalSandboxes {
    root: PathBuf,
}

pub(super) fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> SandboxError {
    let p = path.to_string_lossy();
    match WorldPath::new(p.as_ref()) {
        Ok(wp) => Error::from_io(&wp, op, e),
        Err(_) => failed_by(op, Some(p.as_ref()), e),
    }
}

impl LocalSandboxes {
    /// Sandboxes under `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> Result<LocalSandboxes, SandboxError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| io_err("new", &root, e))?;
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
            Err(gone(op, &h.id))
        }
    }

    /// The sandbox's files: its directory as the root of a [`Rooted`] [`LocalFs`].
    fn files(&self, op: &'static str, h: &SandboxHandle) -> Result<Rooted, SandboxError> {
        let dir = self.live(op, h)?;
        let root = WorldPath::new(dir.to_string_lossy().into_owned())
            .map_err(|e| failed_by(op, None, e))?;
        let fs = LocalFs::beneath(root.clone()).map_err(|e| failed_by(op, None, e))?;
        Rooted::new(Arc::new(fs), root).map_err(|e| failed_by(op, None, e))
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
            .map_err(|e| failed_by(op, None, e))?;
        if !out.status.success() {
            return Err(failed(
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

    /// The world's processes for sandbox directory `dir`, their durable records kept
    /// in it (so every instance on this root, and a new host process, finds them).
    fn procs(&self, dir: &Path) -> LocalSubprocess {
        let home = WorldPath::new(dir.join("workspace").to_string_lossy().into_owned())
            .unwrap_or_else(|_| WorldPath::root());
        LocalSubprocess::at(home).with_state_dir(dir.join(EXECS_DIR))
    }

    /// The spawn of `spec` in sandbox `h` (durable with `spec.id`), and the processes to
    /// start it with; checks the spec and wakes the sandbox.
    async fn spawn_spec(
        &self,
        op: &'static str,
        h: &SandboxHandle,
        spec: &ExecSpec,
    ) -> Result<(SpawnSpec, LocalSubprocess), SandboxError> {
        validate::exec_spec(op, spec)?;
        let cwd = spec.cwd.as_deref().unwrap_or(WORKSPACE);
        validate::path(op, cwd)?;
        let dir = self.wake(op, h).await?;
        // The sandbox's layout is ours; what runs in it starts in its directory.
        let world_path = |p: &Path| {
            WorldPath::new(p.to_string_lossy().into_owned()).map_err(|e| failed_by(op, None, e))
        };
        let home = world_path(&dir.join("workspace"))?;
        let mut s = if spec.id.is_some() {
            let (prog, args) = durable_program(spec);
            SpawnSpec::new(prog)
                .args(args)
                .durable(durable_spec(op, spec)?)
        } else {
            SpawnSpec::new("/bin/bash").args(["-c", spec.command.as_str()])
        };
        s = s
            .cwd(world_path(&dir.join(cwd.trim_start_matches('/')))?)
            .env("HOME", home.as_str())
            .env("LANG", "C.UTF-8");
        for (k, v) in &spec.env {
            s = s.env(k, v);
        }
        s = s
            .env(TAG_VAR, spec.tag.as_deref().unwrap_or(UNTAGGED))
            .env(SANDBOX_ID_VAR, &h.id)
            .group(exec_group(&h.id, spec.tag.as_deref()));
        Ok((s, self.procs(&dir)))
    }

    /// A durable attach of exec `id` of sandbox `h`; NotFound unless it is a sandbox exec.
    async fn attach_exec(
        &self,
        op: &'static str,
        h: &SandboxHandle,
        id: &ExecId,
        from: OutputOffsets,
    ) -> Result<crate::Attached, SandboxError> {
        let dir = self.wake(op, h).await?;
        let a = self
            .procs(&dir)
            .durable_attach(id, from)
            .await
            .map_err(|e| failed_by(op, None, e))?;
        if exec_info(&a.info, |c| c.to_owned()).is_none() {
            a.child.detach();
            return Err(not_an_exec(op, id));
        }
        Ok(a)
    }

    fn ids_named(&self, name: &str) -> Result<Vec<String>, SandboxError> {
        let rd =
            std::fs::read_dir(&self.root).map_err(|e| io_err("destroy_by_name", &self.root, e))?;
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

/// `p` with a final symlink followed inside the sandbox (through `fs`'s `lstat`, so the
/// link text is the sandbox's view: an absolute text starts again at its root).
async fn follow_final(fs: &Rooted, op: &'static str, p: &WorldPath) -> Result<WorldPath, Error> {
    let mut p = p.clone();
    for _ in 0..MAX_LINKS {
        let meta = match fs.lstat(&p).await {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e.with_op(op)),
        };
        let is_link = meta.is_symlink();
        let Some(text) = meta.symlink_target.filter(|_| is_link) else {
            return Ok(p);
        };
        let base = p.parent().unwrap_or_else(WorldPath::root);
        p = WorldPath::new(text)
            .map(|t| t.resolve(&base))
            .map_err(|e| e.with_op(op))?;
    }
    Err(Error::invalid_path(&p, format!("more than {MAX_LINKS} symbolic links")).with_op(op))
}

/// A world path under sandbox directory `dir` as the sandbox sees it (`/workspace/...`).
fn sandbox_view(dir: &Path, world: &str) -> String {
    match Path::new(world).strip_prefix(dir) {
        Ok(rel) => format!("/{}", rel.to_string_lossy()),
        Err(_) => world.to_owned(),
    }
}

/// A start failure of `op`: the backend's kind kept (AlreadyExists for a used id).
fn start_error(op: &'static str, e: Error) -> SandboxError {
    failed_by(op, None, e)
}

fn remove_tree(op: &'static str, dir: &Path) -> Result<(), SandboxError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(op, dir, e)),
    }
}

#[async_trait]
impl SandboxProvider for LocalSandboxes {
    async fn create(&self, spec: CreateSpec) -> Result<SandboxHandle, SandboxError> {
        validate::name("create", &spec.name)?;
        validate::limits("create", &spec.limits)?;
        self.destroy_by_name(&spec.name).await?;
        let h = SandboxHandle::new(format!(
            "{}@{}",
            spec.name,
            exec_world_sys::tree_script::new_marker()
        ));
        let dir = self.dir_of(&h);
        for sub in ["workspace", "skills", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| io_err("create", &dir, e))?;
        }
        std::fs::write(dir.join(NAME_FILE), &spec.name).map_err(|e| io_err("create", &dir, e))?;
        Ok(h)
    }

    async fn resume(&self, h: &SandboxHandle) -> Result<ResumeOutcome, SandboxError> {
        match self.wake("resume", h).await {
            Ok(_) => Ok(ResumeOutcome::Resumed),
            Err(e) if e.is_gone() => Ok(ResumeOutcome::Gone),
            Err(e) => Err(e),
        }
    }

    async fn suspend(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        let dir = match self.live("suspend", h) {
            Ok(d) => d,
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(e),
        };
        std::fs::write(dir.join(SUSPENDED_FILE), b"").map_err(|e| io_err("suspend", &dir, e))?;
        self.signal("suspend", h, "stop", None).await
    }

    async fn destroy(&self, h: &SandboxHandle) -> Result<(), SandboxError> {
        let dir = match self.live("destroy", h) {
            Ok(d) => d,
            Err(e) if e.is_gone() => return Ok(()),
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
        let (s, procs) = self.spawn_spec(OP, h, &spec).await?;
        let child = procs.spawn(s).map_err(|e| failed_by(OP, None, e))?;
        child.started().await.map_err(|e| start_error(OP, e))?;
        let r = run_capped(
            child,
            spec.timeout,
            &spec.cancel,
            spec.max_output_bytes,
            STOP_WAIT,
        )
        .await
        .map_err(|e| failed_by(OP, None, e))?;
        Ok(r.output())
    }

    async fn exec_start(&self, h: &SandboxHandle, spec: ExecSpec) -> Result<ExecId, SandboxError> {
        const OP: &str = "exec_start";
        let id = exec_id(OP, &spec)?;
        let (s, procs) = self.spawn_spec(OP, h, &spec).await?;
        let child = procs.spawn(s).map_err(|e| failed_by(OP, None, e))?;
        child.started().await.map_err(|e| start_error(OP, e))?;
        child.detach();
        Ok(id)
    }

    async fn exec_attach(
        &self,
        h: &SandboxHandle,
        id: &ExecId,
        from: OutputOffsets,
    ) -> Result<ExecStream, SandboxError> {
        const OP: &str = "exec_attach";
        let a = self.attach_exec(OP, h, id, from).await?;
        Ok(exec_events(OP, a))
    }

    async fn exec_list(&self, h: &SandboxHandle) -> Result<Vec<ExecInfo>, SandboxError> {
        const OP: &str = "exec_list";
        let dir = self.wake(OP, h).await?;
        let listed = self
            .procs(&dir)
            .durable_list()
            .await
            .map_err(|e| failed_by(OP, None, e))?;
        Ok(listed
            .iter()
            .filter_map(|d| exec_info(d, |c| sandbox_view(&dir, c)))
            .collect())
    }

    async fn exec_kill(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError> {
        const OP: &str = "exec_kill";
        let a = self
            .attach_exec(OP, h, id, OutputOffsets::default())
            .await?;
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

    async fn exec_forget(&self, h: &SandboxHandle, id: &ExecId) -> Result<(), SandboxError> {
        const OP: &str = "exec_forget";
        let dir = self.wake(OP, h).await?;
        self.procs(&dir)
            .durable_collect(id)
            .await
            .map_err(|e| failed_by(OP, None, e))
    }

    async fn read_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        max_bytes: u64,
    ) -> Result<Option<FileContent>, SandboxError> {
        const OP: &str = "read_file";
        validate::path(OP, path)?;
        let fs = self.files(OP, h)?;
        let p = WorldPath::new(path).map_err(|e| failed_by(OP, Some(path), e))?;
        let mut stream = match fs.read_stream(&p).await {
            Ok(s) => s,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::IsADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(failed_by(OP, Some(path), e)),
        };
        let want = max_bytes.saturating_add(1);
        let mut data = Vec::new();
        while (data.len() as u64) < want {
            match stream.next().await {
                Some(Ok(b)) => {
                    let room = usize::try_from(want - data.len() as u64).unwrap_or(usize::MAX);
                    data.extend_from_slice(&b[..room.min(b.len())]);
                }
                Some(Err(e)) => return Err(failed_by(OP, Some(path), e)),
                None => break,
            }
        }
        Ok(Some(FileContent::capped(data, max_bytes)))
    }

    async fn write_file(
        &self,
        h: &SandboxHandle,
        path: &str,
        data: &[u8],
    ) -> Result<(), SandboxError> {
        const OP: &str = "write_file";
        validate::path(OP, path)?;
        let fs = self.files(OP, h)?;
        let p = WorldPath::new(path).map_err(|e| failed_by(OP, Some(path), e))?;
        let target = follow_final(&fs, OP, &p)
            .await
            .map_err(|e| failed_by(OP, Some(path), e))?;
        fs.write(
            &target,
            bytes_stream(Bytes::copy_from_slice(data)),
            WriteOptions::default().create_parents(true),
        )
        .await
        .map(|_| ())
        .map_err(|e| failed_by(OP, Some(path), e))
    }

    async fn stat(&self, h: &SandboxHandle, path: &str) -> Result<Option<FileStat>, SandboxError> {
        const OP: &str = "stat";
        validate::path(OP, path)?;
        let fs = self.files(OP, h)?;
        let p = WorldPath::new(path).map_err(|e| failed_by(OP, Some(path), e))?;
        match fs.stat(&p).await {
            Ok(m) => Ok(Some(FileStat {
                size: m.size,
                is_dir: m.is_dir(),
            })),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(failed_by(OP, Some(path), e)),
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
            // A cgroup per spawn where this process may make them (root, delegation).
            kill_reaches_escapes: LocalSubprocess::at(WorldPath::root())
                .capabilities()
                .contained_escapes,
        }
    }
}
