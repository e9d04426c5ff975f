//! Atomic `write` and no-replace `create_if_absent`: upload into a random sibling staging
//! directory (created 0700 by the acting user), then rename (`mv -T`) or hard-link
//! (`ln -T`) into place. The staging directory is removed on every failure path, and from
//! a background task when the future is dropped midway.

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use e2b_core::control_shell::random_suffix;
use exec_world::{ByteStream, Created, FsError, Version, WorldPath, WriteOptions};
use futures::StreamExt as _;

use crate::ctl::{CtlOutput, EXIT_EXISTS, classify};
use crate::error::map_error;
use crate::fs::Shared;
use crate::meta::parse_records;
use crate::scripts;

/// A staging directory that is removed unless disarmed: awaited by [`Stage::cleanup`],
/// or from a spawned task when dropped armed.
struct Stage {
    sh: Arc<Shared>,
    dir: WorldPath,
    armed: bool,
}

impl Stage {
    /// A new (not yet created) staging directory next to `target`.
    fn next_to(sh: &Arc<Shared>, target: &WorldPath) -> Result<Stage, FsError> {
        let parent = target.parent().ok_or_else(|| FsError::IsADirectory {
            path: target.clone(),
        })?;
        let dir = parent.join(&format!("{}{}", sh.staging_prefix, random_suffix()))?;
        Ok(Stage {
            sh: sh.clone(),
            dir,
            armed: true,
        })
    }

    /// The file uploaded into the staging directory.
    fn file(&self) -> Result<WorldPath, FsError> {
        self.dir.join("data")
    }

    /// Removes the directory now (best effort) and disarms.
    async fn cleanup(mut self) {
        self.armed = false;
        if let Err(e) = self.sh.api.remove(self.dir.as_str(), self.sh.user()).await {
            tracing::warn!(dir = %self.dir, error = %e, "removing a staging directory failed");
        }
    }

    /// Runs one control step of a write (non-zero exit: the classified error); on any
    /// failure the stage is removed (it may exist when a step after its mkdir failed).
    async fn run_step(
        self,
        script: &str,
        args: &[&str],
        abs: &WorldPath,
    ) -> Result<(CtlOutput, Stage), FsError> {
        match self.sh.ctl.run_ok(script, args, abs, "write").await {
            Ok(out) => Ok((out, self)),
            Err(e) => {
                self.cleanup().await;
                Err(e)
            }
        }
    }

    /// Leaves the directory alone (it is gone already).
    fn disarm(mut self) {
        self.armed = false;
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
        let dir = self.dir.clone();
        handle.spawn(async move {
            // Twice: an upload still being handled could recreate the directory.
            for delay in [0u64, 1000] {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                if let Err(e) = sh.api.remove(dir.as_str(), sh.user()).await {
                    tracing::warn!(dir = %dir, error = %e, "removing a staging directory failed");
                }
            }
        });
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

/// See [`exec_world::Fs::write`].
pub(crate) async fn write(
    sh: &Arc<Shared>,
    abs: &WorldPath,
    data: ByteStream,
    opts: WriteOptions,
) -> Result<Version, FsError> {
    let stage = Stage::next_to(sh, abs)?;
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let dir = stage.dir.clone();
    let (out, stage) = stage
        .run_step(
            scripts::WRITE_PREPARE,
            &[
                abs.as_str(),
                parent.as_str(),
                dir.as_str(),
                if opts.create_parents { "1" } else { "0" },
            ],
            abs,
        )
        .await?;
    let existing = String::from_utf8_lossy(&out.stdout);
    let existing = u32::from_str_radix(existing.trim(), 8).ok();
    let mode = opts.mode.or(existing).unwrap_or(0o644) & 0o7777;
    let file = stage.file()?;
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
    stage.disarm();
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
    let stage = Stage::next_to(sh, abs)?;
    let parent = abs.parent().unwrap_or_else(WorldPath::root);
    let out = sh
        .ctl
        .run(
            scripts::CREATE_PREPARE,
            &[abs.as_str(), parent.as_str(), stage.dir.as_str()],
            abs,
            "create_if_absent",
        )
        .await;
    match out {
        Ok(o) if o.exit_code == 0 => {}
        Ok(o) if o.exit_code == EXIT_EXISTS => {
            stage.disarm();
            return Ok(Created::AlreadyExisted);
        }
        Ok(o) => {
            stage.disarm();
            return Err(classify(&o, abs, "create_if_absent"));
        }
        Err(e) => {
            stage.cleanup().await;
            return Err(e);
        }
    }
    let file = stage.file()?;
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
            stage.disarm();
            Ok(Created::Created)
        }
        Ok(o) if o.exit_code == EXIT_EXISTS => {
            stage.disarm();
            Ok(Created::AlreadyExisted)
        }
        Ok(o) => {
            stage.disarm();
            Err(classify(&o, abs, "create_if_absent"))
        }
        Err(e) => {
            stage.cleanup().await;
            Err(e)
        }
    }
}
