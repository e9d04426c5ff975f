//! Atomic `write` and no-replace `create_if_absent`. envd's `POST /files` writes as root
//! and follows links, so it only ever writes into root's private upload directory
//! (`/tmp/.e2b-upload-…`, 0711, made once per handle): the user can neither plant a link
//! there nor swap anything in it. A process running as the acting user then links (or
//! copies) the upload into a random sibling staging directory of the target (created
//! 0700 by that user) and renames (`mv -T`) or hard-links (`ln -T`) it into place, so the
//! target is reached with the user's permissions only. The staging directory and the
//! upload are removed on every failure path, and from a background task when the future
//! is dropped midway.

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::proto::process::{DataEvent, ProcessEvent, ProcessInput, ProcessSelector, Signal};
use e2b_core::trusted_shell::random_suffix;
use exec_world::{ByteStream, Created, FsError, Version, WorldPath, WriteOptions};
use futures::StreamExt as _;

use crate::error::map_error;
use crate::fs::Shared;
use crate::meta::parse_records;
use crate::scripts;
use crate::shell::{EXIT_EXISTS, ShellOutput, classify};

/// A staging directory (the user's) and an upload (in root's directory) that are removed
/// unless disarmed: awaited by [`Stage::cleanup`], or from a spawned task when dropped
/// armed.
struct Stage {
    sh: Arc<Shared>,
    dir: WorldPath,
    upload: WorldPath,
    armed: bool,
}

/// Removes the staging directory (as the acting user: root never follows the user's
/// path) and the upload (envd `Remove`, inside root's own directory).
async fn remove_stage(sh: &Shared, dir: &WorldPath, upload: &WorldPath) {
    if let Err(e) = sh
        .ctl
        .run_ok(
            scripts::REMOVE_TREE,
            &[dir.as_str()],
            dir,
            "remove staging dir",
        )
        .await
    {
        tracing::warn!(dir = %dir, error = %e, "removing a staging directory failed");
    }
    if let Err(e) = sh.api.remove(upload.as_str(), Some("root")).await {
        tracing::warn!(file = %upload, error = %e, "removing an upload failed");
    }
}

impl Stage {
    /// A new (not yet created) staging directory next to `target`, and an upload name
    /// in root's upload directory `uploads`.
    fn next_to(
        sh: &Arc<Shared>,
        target: &WorldPath,
        uploads: &WorldPath,
    ) -> Result<Stage, FsError> {
        let parent = target.parent().ok_or_else(|| FsError::IsADirectory {
            path: target.clone(),
        })?;
        let dir = parent.join(&format!("{}{}", sh.staging_prefix, random_suffix()))?;
        Ok(Stage {
            sh: sh.clone(),
            dir,
            upload: uploads.join(&random_suffix())?,
            armed: true,
        })
    }

    /// Removes both now (best effort) and disarms.
    async fn cleanup(mut self) {
        self.armed = false;
        remove_stage(&self.sh, &self.dir, &self.upload).await;
    }

    /// Nothing was created (a prepare step refused): nothing to remove.
    fn disarm(mut self) {
        self.armed = false;
    }

    /// The staging directory is gone already: only the upload is removed.
    async fn finish(mut self) {
        self.armed = false;
        if let Err(e) = self.sh.api.remove(self.upload.as_str(), Some("root")).await {
            tracing::warn!(file = %self.upload, error = %e, "removing an upload failed");
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.armed || !self.sh.background_cleanup {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(dir = %self.dir, "staging directory left behind (no runtime)");
            return;
        };
        let sh = self.sh.clone();
        let (dir, upload) = (self.dir.clone(), self.upload.clone());
        handle.spawn(async move {
            // Twice: an upload still being handled could recreate the file.
            for delay in [0u64, 1000] {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                remove_stage(&sh, &dir, &upload).await;
            }
        });
    }
}

/// Root's upload directory of this handle, made on first
/// use (or again, under a new name, when `fresh`: a write found the old one gone or
/// writable by the user).
pub(crate) async fn upload_dir(sh: &Shared, fresh: bool) -> Result<WorldPath, FsError> {
    if !fresh && let Some(d) = sh.upload_dir.lock().ok().and_then(|g| g.clone()) {
        return Ok(d);
    }
    let dir = WorldPath::new(format!("/tmp/.e2b-upload-{}", random_suffix()))?;
    sh.root_ctl
        .run_ok(
            scripts::UPLOAD_DIR,
            &[dir.as_str()],
            &dir,
            "make upload dir",
        )
        .await?;
    if let Ok(mut g) = sh.upload_dir.lock() {
        *g = Some(dir.clone());
    }
    Ok(dir)
}

/// One process of the acting user driving a write ([`scripts::WRITE`] or
/// [`scripts::CREATE`]): it prepares, says `ready`, waits for `commit` while the upload
/// happens, then moves the upload into place.
struct Holder {
    events: ProcessStream,
    api: Arc<dyn EnvdApi>,
    pid: u32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Most bytes kept of each of a holder's stdout and stderr.
const MAX_HOLDER_OUTPUT: usize = 64 << 10;

/// How long a write holder may live (the upload happens while it waits).
const HOLDER_LIFETIME: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a holder did next.
enum Said {
    /// It printed `ready`.
    Ready,
    /// It exited with this code (output kept in the holder).
    Exited(i32),
}

impl Holder {
    /// Runs until `ready` (when `until_ready`) or the exit.
    async fn next(
        &mut self,
        until_ready: bool,
        abs: &WorldPath,
        what: &str,
    ) -> Result<Said, FsError> {
        loop {
            if until_ready && self.stdout.ends_with(b"ready\n") {
                self.stdout.clear();
                return Ok(Said::Ready);
            }
            match self.events.next().await {
                Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b)))) => keep(&mut self.stdout, &b),
                Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b) | DataEvent::Pty(b)))) => {
                    keep(&mut self.stderr, &b)
                }
                Some(Ok(ProcessEvent::End(end))) => return Ok(Said::Exited(end.exit_code)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(map_error(e, abs, what)),
                None => {
                    return Err(FsError::other(format!(
                        "{what} {abs}: the writer's stream ended without its exit status"
                    )));
                }
            }
        }
    }

    /// Tells the holder `line` (`commit` or `abort`).
    fn tell(
        &self,
        line: &str,
        abs: &WorldPath,
        what: &str,
    ) -> impl Future<Output = Result<(), FsError>> + Send + 'static {
        let (api, pid) = (self.api.clone(), self.pid);
        let input = ProcessInput::Stdin(format!("{line}\n").into_bytes());
        let (abs, what) = (abs.clone(), what.to_owned());
        async move {
            api.send_input(ProcessSelector::Pid(pid), input)
                .await
                .map_err(|e| map_error(e, &abs, &what))
        }
    }

    /// SIGKILL to the holder (best effort).
    fn kill(&self) -> impl Future<Output = ()> + Send + 'static {
        let (api, pid) = (self.api.clone(), self.pid);
        async move {
            if let Err(e) = api
                .send_signal(ProcessSelector::Pid(pid), Signal::Sigkill)
                .await
            {
                tracing::debug!(error = %e, "killing a write holder failed");
            }
        }
    }

    /// The output so far, with `code`.
    fn output(&self, code: i32) -> ShellOutput {
        ShellOutput {
            exit_code: code,
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
        }
    }
}

/// Appends `b` to `out` up to [`MAX_HOLDER_OUTPUT`].
fn keep(out: &mut Vec<u8>, b: &[u8]) {
    let room = MAX_HOLDER_OUTPUT.saturating_sub(out.len());
    out.extend_from_slice(&b[..room.min(b.len())]);
}

/// Starts the holder `script` (its arguments from the stage) and waits for `ready`,
/// making the upload directory first if needed and again once if the script finds it
/// unsafe (exit 70). `Err(output)` when the holder exited before `ready` (nothing of the
/// stage was created).
async fn start_holder(
    sh: &Arc<Shared>,
    script: &str,
    abs: &WorldPath,
    args: impl Fn(&Stage) -> Vec<String>,
    what: &str,
) -> Result<Result<(Holder, Stage), ShellOutput>, FsError> {
    let mut fresh = false;
    loop {
        let uploads = upload_dir(sh, fresh).await?;
        let stage = Stage::next_to(sh, abs, &uploads)?;
        let argv = args(&stage);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let events = sh
            .ctl
            .start(
                script,
                &argv,
                Some(HOLDER_LIFETIME.max(sh.command_timeout)),
                true,
                abs,
                what,
            )
            .await;
        let events = match events {
            Ok(ev) => ev,
            Err(e) => {
                stage.disarm();
                return Err(e);
            }
        };
        let pid = events.pid();
        let mut h = Holder {
            events,
            api: sh.api.clone(),
            pid,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        let said = tokio::time::timeout(sh.command_timeout, h.next(true, abs, what))
            .await
            .map_err(|_| FsError::Timeout {
                context: format!(
                    "{what} {abs}: the writer's ready after {:?}",
                    sh.command_timeout
                ),
            });
        match said {
            Ok(Ok(Said::Ready)) => return Ok(Ok((h, stage))),
            Ok(Ok(Said::Exited(code))) if code == scripts::EXIT_UPLOAD_DIR && !fresh => {
                stage.disarm();
                fresh = true;
            }
            Ok(Ok(Said::Exited(code))) => {
                stage.disarm();
                return Ok(Err(h.output(code)));
            }
            Ok(Err(e)) | Err(e) => {
                h.kill().await;
                stage.cleanup().await;
                return Err(e);
            }
        }
    }
}

/// Uploads `data` into the stage's upload file, then tells the holder to commit and
/// waits for its exit; on an upload failure the holder is told to abort (it removes the
/// staging dir) and the upload is removed.
async fn upload_and_commit(
    sh: &Arc<Shared>,
    mut h: Holder,
    stage: Stage,
    abs: &WorldPath,
    data: ByteStream,
    what: &str,
) -> Result<ShellOutput, FsError> {
    if let Err(e) = upload(sh, abs, &stage.upload, data).await {
        if h.tell("abort", abs, what).await.is_err()
            || !matches!(h.next(false, abs, what).await, Ok(Said::Exited(_)))
        {
            h.kill().await;
            stage.cleanup().await;
        } else {
            stage.finish().await;
        }
        return Err(e);
    }
    let done = async {
        h.tell("commit", abs, what).await?;
        h.next(false, abs, what).await
    };
    match done.await {
        Ok(Said::Exited(code)) => {
            stage.finish().await;
            Ok(h.output(code))
        }
        Ok(Said::Ready) | Err(_) => {
            h.kill().await;
            stage.cleanup().await;
            Err(FsError::other(format!(
                "{what} {abs}: the writer did not finish"
            )))
        }
    }
}

/// Uploads `data` to `file`; an error item of `data` is returned as itself.
async fn upload(
    sh: &Shared,
    target: &WorldPath,
    file: &WorldPath,
    data: ByteStream,
) -> Result<(), FsError> {
    let failed: Arc<Mutex<Option<FsError>>> = Arc::new(Mutex::new(None));
    let slot = failed.clone();
    let body = data.map(move |item| {
        item.map_err(|e| {
            let msg = e.to_string();
            if let Ok(mut s) = slot.lock() {
                s.get_or_insert(e);
            }
            io::Error::other(msg)
        })
    });
    let r = sh
        .api
        .upload(file.as_str(), sh.user(), Box::pin(body))
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) => {
            if let Some(src) = failed.lock().ok().and_then(|mut s| s.take()) {
                return Err(src);
            }
            Err(map_error(e, target, "upload"))
        }
    }
}

/// The upload directory argument of a stage.
fn uploads_of(st: &Stage) -> String {
    st.upload
        .parent()
        .map(|p| p.to_string())
        .unwrap_or_default()
}

/// See [`exec_world::Fs::write`].
pub(crate) async fn write(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    opts: WriteOptions,
) -> Result<Version, FsError> {
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let create_parents = if opts.create_parents { "1" } else { "0" };
    let mode = opts
        .mode
        .map(|m| format!("{:o}", m & 0o7777))
        .unwrap_or_default();
    let started = start_holder(
        sh,
        scripts::WRITE,
        abs,
        |st| {
            vec![
                abs.to_string(),
                parent.to_string(),
                st.dir.to_string(),
                create_parents.to_owned(),
                uploads_of(st),
                st.upload.to_string(),
                mode.clone(),
            ]
        },
        "write",
    )
    .await?;
    let (h, stage) = match started {
        Ok(hs) => hs,
        Err(out) => return Err(classify(&out, abs, "write")),
    };
    let out = upload_and_commit(sh, h, stage, abs, data, "write").await?;
    if out.exit_code != 0 {
        return Err(classify(&out, abs, "write"));
    }
    let rec = parse_records(&out.stdout)?
        .into_iter()
        .next()
        .ok_or_else(|| FsError::other(format!("write {abs}: no record of the new file")))?;
    Ok(rec.version())
}

/// See [`exec_world::Fs::create_if_absent`].
pub(crate) async fn create_if_absent(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: Bytes,
) -> Result<Created, FsError> {
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let started = start_holder(
        sh,
        scripts::CREATE,
        abs,
        |st| {
            vec![
                abs.to_string(),
                parent.to_string(),
                st.dir.to_string(),
                uploads_of(st),
                st.upload.to_string(),
            ]
        },
        "create_if_absent",
    )
    .await?;
    let (h, stage) = match started {
        Ok(hs) => hs,
        Err(out) if out.exit_code == EXIT_EXISTS => return Ok(Created::AlreadyExisted),
        Err(out) => return Err(classify(&out, abs, "create_if_absent")),
    };
    let data = exec_world::bytes_stream(data);
    let out = upload_and_commit(sh, h, stage, abs, data, "create_if_absent").await?;
    match out.exit_code {
        0 => Ok(Created::Created),
        EXIT_EXISTS => Ok(Created::AlreadyExisted),
        _ => Err(classify(&out, abs, "create_if_absent")),
    }
}
