//! Durable commands of [`LocalSubprocess`]: their records in the world's state directory
//! (`<state dir>/durable/<id>/`, 0700) and starting, listing, attaching and collecting.
//!
//! A record is built under a temporary name (`.new-<random>`: `meta`, the empty `stdout`
//! and `stderr`, the FIFO `stdin` when piped) and renamed to its id with
//! `RENAME_NOREPLACE`, so an id that exists makes the start fail with `AlreadyExists`
//! before anything runs. The command then starts under a supervisor
//! (`exec_world_sys::supervise`), which writes `pid`, the output and `status` (see there).
//! `meta` holds what the caller gave (`key value` lines, values percent-encoded).
//!
//! A record's state: `status` present: exited; else the supervisor (pid and start time from
//! `pid`) alive: running; else unknown. A record without `pid` (its start is under way in
//! another process, or that process died between the rename and the start) counts as
//! running for [`START_WINDOW`] after `started`, then as unknown.

use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use super::durable_child::{self, Identity};
use super::proc::{LocalSubprocess, absolute_program, build_env, spawn_error};
use super::tree::new_marker;
use crate::durable::{Attached, DurableId, DurableInfo, DurableSpec, DurableState, OutputOffsets};
use crate::error::{Error, ErrorKind};
use crate::path::WorldPath;
use crate::proc::{Child, ExitStatus, SpawnSpec, StdinMode};
use exec_world_sys::cgroup::SpawnCgroup;
use exec_world_sys::supervise::{self, files};

/// How long a record without a `pid` file counts as starting (running) after `started`.
pub(crate) const START_WINDOW: Duration = Duration::from_secs(30);

/// The default state directory of the local world: `$XDG_STATE_HOME/exec-world`, else
/// `$HOME/.local/state/exec-world`, else `/tmp/exec-world-<uid>`.
pub(crate) fn default_state_dir() -> PathBuf {
    let abs = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(x) = abs("XDG_STATE_HOME") {
        return x.join("exec-world");
    }
    if let Some(h) = abs("HOME") {
        return h.join(".local/state/exec-world");
    }
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/tmp/exec-world-{uid}"))
}

/// The durable records of one state directory.
#[derive(Clone, Debug)]
pub(crate) struct Records {
    root: PathBuf,
}

/// What `meta` holds.
#[derive(Clone, Debug)]
pub(crate) struct Meta {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) cwd: WorldPath,
    pub(crate) tag: Option<String>,
    pub(crate) cap: u64,
    pub(crate) started: SystemTime,
    pub(crate) piped: bool,
    pub(crate) marker: String,
    pub(crate) cgroup: Option<PathBuf>,
}

impl Meta {
    fn encode(&self) -> String {
        let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
        let mut out = format!("program {}\n", enc(&self.program));
        for a in &self.args {
            out.push_str(&format!("arg {}\n", enc(a)));
        }
        out.push_str(&format!("cwd {}\n", enc(self.cwd.as_str())));
        if let Some(t) = &self.tag {
            out.push_str(&format!("tag {}\n", enc(t)));
        }
        let nanos = self
            .started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        out.push_str(&format!("cap {}\nstarted {nanos}\n", self.cap));
        out.push_str(&format!(
            "stdin {}\nmarker {}\n",
            if self.piped { "piped" } else { "null" },
            enc(&self.marker)
        ));
        if let Some(c) = self.cgroup.as_deref().and_then(Path::to_str) {
            out.push_str(&format!("cgroup {}\n", enc(c)));
        }
        out
    }

    fn decode(text: &str) -> Option<Meta> {
        let dec = |s: &str| {
            percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        };
        let mut m = Meta {
            program: String::new(),
            args: Vec::new(),
            cwd: WorldPath::root(),
            tag: None,
            cap: 0,
            started: SystemTime::UNIX_EPOCH,
            piped: false,
            marker: String::new(),
            cgroup: None,
        };
        for line in text.lines() {
            let (k, v) = line.split_once(' ')?;
            match k {
                "program" => m.program = dec(v)?,
                "arg" => m.args.push(dec(v)?),
                "cwd" => m.cwd = WorldPath::new(dec(v)?).ok()?,
                "tag" => m.tag = Some(dec(v)?),
                "cap" => m.cap = v.parse().ok()?,
                "started" => {
                    let n: u128 = v.parse().ok()?;
                    let d = Duration::new((n / 1_000_000_000) as u64, (n % 1_000_000_000) as u32);
                    m.started = SystemTime::UNIX_EPOCH + d;
                }
                "stdin" => m.piped = v == "piped",
                "marker" => m.marker = dec(v)?,
                "cgroup" => m.cgroup = Some(PathBuf::from(dec(v)?)),
                _ => {}
            }
        }
        Some(m)
    }
}

/// Reads `status` (`exit N` / `signal N`); `None` when absent or unreadable.
pub(crate) fn read_status(dir: &Path) -> Option<ExitStatus> {
    let text = std::fs::read_to_string(dir.join(files::STATUS)).ok()?;
    let (k, v) = text.trim().split_once(' ')?;
    let n: i32 = v.parse().ok()?;
    match k {
        "exit" => Some(ExitStatus {
            code: Some(n),
            signal: None,
        }),
        "signal" => Some(ExitStatus {
            code: None,
            signal: Some(n),
        }),
        _ => None,
    }
}

/// Reads `pid`: the supervisor's and the command's identities.
pub(crate) fn read_pids(dir: &Path) -> Option<(Identity, Identity)> {
    let text = std::fs::read_to_string(dir.join(files::PID)).ok()?;
    let mut sup = None;
    let mut cmd = None;
    for line in text.lines() {
        let mut it = line.split(' ');
        let (k, pid, start) = (it.next()?, it.next()?, it.next()?);
        let id = Identity {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        };
        match k {
            "supervisor" => sup = Some(id),
            "command" => cmd = Some(id),
            _ => {}
        }
    }
    Some((sup?, cmd?))
}

/// The state of the record `dir` started at `started`.
pub(crate) fn state_of(dir: &Path, started: SystemTime) -> DurableState {
    if let Some(s) = read_status(dir) {
        return DurableState::Exited(s);
    }
    match read_pids(dir) {
        Some((sup, _)) if sup.alive() => DurableState::Running,
        Some(_) => match read_status(dir) {
            // Written between the two reads.
            Some(s) => DurableState::Exited(s),
            None => DurableState::Unknown,
        },
        None if started.elapsed().unwrap_or_default() < START_WINDOW => DurableState::Running,
        None => DurableState::Unknown,
    }
}

/// A random hex suffix for temporary names.
fn random_suffix() -> String {
    DurableId::random().as_str().to_owned()
}

impl Records {
    pub(crate) fn new(state_dir: &Path) -> Records {
        Records {
            root: state_dir.join("durable"),
        }
    }

    /// The record directory of `id`.
    pub(crate) fn dir(&self, id: &DurableId) -> PathBuf {
        self.root.join(id.as_str())
    }

    /// Creates the records directory (0700) and checks it is ours and closed to others.
    fn ensure(&self) -> Result<(), Error> {
        let op = "prepare the durable records directory";
        let path = self.root.to_string_lossy().into_owned();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|e| Error::io(op, e).with_path(&path))?;
        let m =
            std::fs::symlink_metadata(&self.root).map_err(|e| Error::io(op, e).with_path(&path))?;
        // SAFETY: geteuid(2) cannot fail.
        let me = unsafe { libc::geteuid() };
        if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
            return Err(Error::permission_denied(&path).with_op(op).with_detail(
                "it must be a directory owned by this user and writable by no one else",
            ));
        }
        Ok(())
    }

    /// Reads the record of `id` as listed.
    pub(crate) fn info(&self, id: &DurableId) -> Result<(DurableInfo, Meta), Error> {
        let dir = self.dir(id);
        let text = match std::fs::read_to_string(dir.join("meta")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found(id.as_str()).with_op("find durable command"));
            }
            Err(e) => {
                return Err(Error::io("read durable command record", e).with_path(id.as_str()));
            }
        };
        let meta = Meta::decode(&text).ok_or_else(|| {
            Error::other("damaged record")
                .with_op("read durable command record")
                .with_path(id.as_str())
        })?;
        let pids = read_pids(&dir);
        let info = DurableInfo {
            id: id.clone(),
            tag: meta.tag.clone(),
            program: meta.program.clone(),
            args: meta.args.clone(),
            cwd: meta.cwd.clone(),
            started: meta.started,
            pid: pids.map(|(_, c)| c.pid),
            state: state_of(&dir, meta.started),
        };
        Ok((info, meta))
    }

    pub(crate) fn list(&self) -> Result<Vec<DurableInfo>, Error> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list durable commands", e)),
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(id) = DurableId::new(name) else {
                continue; // `.new-…` / `.gone-…`
            };
            match self.info(&id) {
                Ok((info, _)) => out.push(info),
                // Collected meanwhile.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.started.cmp(&b.started).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    pub(crate) fn collect(&self, id: &DurableId) -> Result<(), Error> {
        let (info, _) = self.info(id)?;
        if info.state == DurableState::Running {
            return Err(Error::invalid_spec(format!(
                "durable command {id} still runs: wait for it or terminate it first"
            ))
            .with_op("collect durable command"));
        }
        // Renamed first: the id is free at once, and a second collect finds nothing.
        let gone = self.root.join(format!(".gone-{}", random_suffix()));
        match std::fs::rename(self.dir(id), &gone) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found(id.as_str()).with_op("collect durable command"));
            }
            Err(e) => return Err(Error::io("collect durable command", e).with_path(id.as_str())),
        }
        std::fs::remove_dir_all(&gone)
            .map_err(|e| Error::io("remove durable command record", e).with_path(id.as_str()))
    }

    pub(crate) fn attach(&self, id: &DurableId, from: OutputOffsets) -> Result<Attached, Error> {
        let (info, meta) = self.info(id)?;
        durable_child::attach(self.dir(id), info, meta, from)
    }

    /// Starts `spec` durably (see the module docs).
    pub(crate) fn start(
        &self,
        proc: &LocalSubprocess,
        spec: SpawnSpec,
        d: DurableSpec,
    ) -> Result<Child, Error> {
        d.validate()?;
        let cwd = proc.resolve_cwd(spec.cwd.as_ref())?;
        let program = absolute_program(&spec.program, &cwd);
        self.ensure()?;
        let op = "start durable command";
        let tmp = self.root.join(format!(".new-{}", random_suffix()));
        let marker = new_marker();
        let cg = match spec.group.as_deref() {
            Some(g) => SpawnCgroup::create_in_group(&marker, Some(g)),
            None => SpawnCgroup::create_new(&marker),
        };
        let meta = Meta {
            program: spec.program.clone(),
            args: spec.args.clone(),
            cwd: cwd.clone(),
            tag: d.tag.clone(),
            cap: d.output_cap,
            started: SystemTime::now(),
            piped: spec.stdin == StdinMode::Piped,
            marker: marker.clone(),
            cgroup: cg.as_ref().map(|c| c.dir.clone()),
        };
        let built = (|| -> std::io::Result<(std::fs::File, std::fs::File)> {
            std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
            let new_file = |name: &str| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(tmp.join(name))
            };
            std::io::Write::write_all(&mut new_file("meta")?, meta.encode().as_bytes())?;
            let out = new_file(files::STDOUT)?;
            let err = new_file(files::STDERR)?;
            if meta.piped {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    tmp.join(files::STDIN),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )?;
            }
            Ok((out, err))
        })();
        let cleanup_cg = |cg: Option<SpawnCgroup>| {
            if let Some(c) = cg {
                exec_world_sys::cgroup::discard(&c.dir);
            }
        };
        let (out, err) = match built {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                cleanup_cg(cg);
                return Err(Error::io(op, e).with_path(d.id.as_str()));
            }
        };
        let dir = self.dir(&d.id);
        if let Err(e) = rustix::fs::renameat_with(
            rustix::fs::CWD,
            &tmp,
            rustix::fs::CWD,
            &dir,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            let _ = std::fs::remove_dir_all(&tmp);
            cleanup_cg(cg);
            if e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY {
                return Err(Error::already_exists(d.id.as_str())
                    .with_op(op)
                    .with_detail("a durable command with this id exists (running, or ended and not collected); nothing was started"));
            }
            return Err(Error::io(op, e.into()).with_path(d.id.as_str()));
        }
        let fail = |e: Error, cg: Option<SpawnCgroup>| {
            // Nothing ran: the id is free again.
            let _ = std::fs::remove_dir_all(&dir);
            cleanup_cg(cg);
            e
        };
        let opened = (|| -> std::io::Result<_> {
            let record = std::fs::File::open(&dir)?;
            let fifo = if meta.piped {
                Some(
                    std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(dir.join(files::STDIN))?,
                )
            } else {
                None
            };
            Ok((record, fifo))
        })();
        let (record, fifo) = match opened {
            Ok(x) => x,
            Err(e) => return Err(fail(Error::io(op, e).with_path(d.id.as_str()), cg)),
        };
        let env = build_env(spec.env_base, &spec.env, &marker, false);
        let procs = cg.as_ref().and_then(SpawnCgroup::open_procs);
        let started = supervise::supervise(&supervise::Supervise {
            program: &program,
            args: &spec.args,
            env: &env,
            cwd: cwd.as_str(),
            record: record.as_fd(),
            stdout: out.as_fd(),
            stderr: err.as_fd(),
            stdin_fifo: fifo.as_ref().map(|f| f.as_fd()),
            cap: d.output_cap,
            cgroup_procs: procs.as_ref().map(|f| f.as_fd()),
            cgroup_dir: cg.as_ref().map(|c| c.dir.as_path()),
        });
        drop((record, fifo, out, err, procs));
        if let Err(e) = started {
            return Err(fail(spawn_error(&spec.program, e), cg));
        }
        let (info, meta) = self.info(&d.id)?;
        durable_child::attach(dir, info, meta, OutputOffsets::default()).map(|a| a.child)
    }
}
