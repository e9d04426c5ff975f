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
use e2b_core::trusted_shell::random_suffix;
use exec_world::{ByteStream, Created, Error, Version, WorldPath, WriteOptions};
use futures::StreamExt as _;

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
    fn next_to(sh: &Arc<Shared>, target: &WorldPath, uploads: &WorldPath) -> Result<Stage, Error> {
        let parent = target
            .parent()
            .ok_or_else(|| Error::is_a_directory(target).with_op("write"))?;
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

    /// Runs one control step of a write (non-zero exit: the classified error); on any
    /// failure the stage is removed (it may exist when a step after its mkdir failed).
    async fn run_step(
        self,
        script: &str,
        args: &[&str],
        abs: &WorldPath,
    ) -> Result<(ShellOutput, Stage), Error> {
        match self.sh.ctl.run_ok(script, args, abs, "write").await {
            Ok(out) => Ok((out, self)),
            Err(e) => {
                self.cleanup().await;
                Err(e)
            }
        }
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

/// Root's upload directory of this handle, made on first use (or again, under a new
/// name, when `fresh`: a prepare step found the old one gone or writable by the user).
async fn upload_dir(sh: &Shared, fresh: bool) -> Result<WorldPath, Error> {
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

/// Runs a prepare script whose argument `upload_arg` is the upload directory, making the
/// directory first if needed and again once if the script finds it unsafe (exit 70).
/// Returns the output and the stage (nothing created yet when the exit is not 0).
async fn prepare(
    sh: &Arc<Shared>,
    script: &str,
    abs: &WorldPath,
    args: impl Fn(&Stage) -> Vec<String>,
    what: &str,
) -> Result<(ShellOutput, Stage), Error> {
    let mut fresh = false;
    loop {
        let uploads = upload_dir(sh, fresh).await?;
        let stage = Stage::next_to(sh, abs, &uploads)?;
        let argv = args(&stage);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        match sh.ctl.run(script, &argv, abs, what).await {
            Ok(o) if o.exit_code == scripts::EXIT_UPLOAD_DIR && !fresh => {
                stage.disarm();
                fresh = true;
            }
            Ok(o) => return Ok((o, stage)),
            Err(e) => {
                stage.cleanup().await;
                return Err(e);
            }
        }
    }
}

/// Uploads `data` to `file`; an error item of `data` is returned as itself.
async fn upload(
    sh: &Shared,
    target: &WorldPath,
    file: &WorldPath,
    data: ByteStream,
) -> Result<(), Error> {
    let failed: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
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
            Err(e.into_world("upload").with_path(target))
        }
    }
}

/// See [`exec_world::Fs::write`].
pub(crate) async fn write(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    opts: WriteOptions,
) -> Result<Version, Error> {
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let create_parents = if opts.create_parents { "1" } else { "0" };
    let (out, stage) = prepare(
        sh,
        scripts::WRITE_PREPARE,
        abs,
        |st| {
            vec![
                abs.to_string(),
                parent.to_string(),
                st.dir.to_string(),
                create_parents.to_owned(),
                st.upload
                    .parent()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
            ]
        },
        "write",
    )
    .await?;
    if out.exit_code != 0 {
        stage.cleanup().await;
        return Err(classify(&out, abs, "write"));
    }
    let dir = stage.dir.clone();
    let existing = String::from_utf8_lossy(&out.stdout);
    let existing = u32::from_str_radix(existing.trim(), 8).ok();
    let mode = opts.mode.or(existing).unwrap_or(0o644) & 0o7777;
    let file = stage.upload.clone();
    if let Err(e) = upload(sh, abs, &file, data).await {
        stage.cleanup().await;
        return Err(e);
    }
    let mode = format!("{mode:o}");
    let (out, stage) = stage
        .run_step(
            scripts::WRITE_COMMIT,
            &[file.as_str(), abs.as_str(), &mode, dir.as_str()],
            abs,
        )
        .await?;
    stage.finish().await;
    let rec = parse_records(&out.stdout)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::other("no record of the new file")
                .with_op("write")
                .with_path(abs)
        })?;
    Ok(rec.version())
}

/// See [`exec_world::Fs::create_if_absent`].
pub(crate) async fn create_if_absent(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: Bytes,
) -> Result<Created, Error> {
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let (o, stage) = prepare(
        sh,
        scripts::CREATE_PREPARE,
        abs,
        |st| {
            vec![
                abs.to_string(),
                parent.to_string(),
                st.dir.to_string(),
                st.upload
                    .parent()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
            ]
        },
        "create_if_absent",
    )
    .await?;
    match o.exit_code {
        0 => {}
        EXIT_EXISTS => {
            stage.disarm();
            return Ok(Created::AlreadyExisted);
        }
        _ => {
            stage.disarm();
            return Err(classify(&o, abs, "create_if_absent"));
        }
    }
    let file = stage.upload.clone();
    if let Err(e) = upload(sh, abs, &file, exec_world::bytes_stream(data)).await {
        stage.cleanup().await;
        return Err(e);
    }
    let out = sh
        .ctl
        .run(
            scripts::CREATE_COMMIT,
            &[file.as_str(), abs.as_str(), stage.dir.as_str()],
            abs,
            "create_if_absent",
        )
        .await;
    match out {
        Ok(o) if o.exit_code == 0 => {
            stage.finish().await;
            Ok(Created::Created)
        }
        Ok(o) if o.exit_code == EXIT_EXISTS => {
            stage.finish().await;
            Ok(Created::AlreadyExisted)
        }
        Ok(o) => {
            stage.finish().await;
            Err(classify(&o, abs, "create_if_absent"))
        }
        Err(e) => {
            stage.cleanup().await;
            Err(e)
        }
    }
}
