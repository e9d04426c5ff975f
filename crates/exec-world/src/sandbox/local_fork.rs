//! [`LocalSandboxes`]' fork: the source's commands are stopped (SIGSTOP, as `suspend`
//! does) while its directory is copied with `cp -a --reflink=auto` (extents shared where
//! the filesystem has reflinks), then continued unless the source was suspended. The copy
//! is made under a staging name, moved to the new id, and only then named, so no listing
//! sees a half-made sandbox.

use std::path::Path;

use super::local::{NAME_FILE, SUSPENDED_FILE, io_err};
use super::{
    LocalSandboxes, SandboxError, SandboxHandle, SandboxProvider, failed, failed_by, invalid,
    validate,
};

/// Copy `src` to `dst` with `cp -a --reflink=auto`.
fn copy(op: &'static str, src: &Path, dst: &Path) -> Result<(), SandboxError> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--no-target-directory", "--"])
        .arg(src)
        .arg(dst)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| failed_by(op, None, e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(
            op,
            None,
            format!(
                "copying the sandbox failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ))
    }
}

/// Copy every entry of the sandbox directory `src` but its bookkeeping files into `dst`.
fn copy_entries(op: &'static str, src: &Path, dst: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir(dst).map_err(|e| io_err(op, dst, e))?;
    let rd = std::fs::read_dir(src).map_err(|e| io_err(op, src, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| io_err(op, src, e))?;
        let name = entry.file_name();
        if name == NAME_FILE || name == SUSPENDED_FILE {
            continue;
        }
        copy(op, &entry.path(), &dst.join(&name))?;
    }
    Ok(())
}

impl LocalSandboxes {
    /// [`SandboxProvider::fork`] of this provider.
    pub(super) async fn fork_dir(
        &self,
        h: &SandboxHandle,
        new_name: &str,
    ) -> Result<SandboxHandle, SandboxError> {
        const OP: &str = "fork";
        validate::name(OP, new_name)?;
        let src = self.live(OP, h)?;
        let src_name = std::fs::read_to_string(src.join(NAME_FILE)).unwrap_or_default();
        if src_name == new_name {
            return Err(invalid(
                OP,
                format!("name {new_name:?}"),
                "it is the source's own name (a fork would replace its source)",
            ));
        }
        self.destroy_by_name(new_name).await?;
        let new = SandboxHandle::new(format!(
            "{new_name}@{}",
            exec_world_sys::tree_script::new_marker()
        ));
        let dst = self.dir_of(&new);
        let staging = self.dir_of(&SandboxHandle::new(format!(
            ".forking-{}",
            exec_world_sys::tree_script::new_marker()
        )));
        let was_suspended = src.join(SUSPENDED_FILE).exists();
        // Held still for the copy: one instant of the files.
        self.signal(OP, h, "stop", None).await?;
        let copied = {
            let (s, t) = (src.clone(), staging.clone());
            tokio::task::spawn_blocking(move || copy_entries(OP, &s, &t))
                .await
                .map_err(|e| failed(OP, None, format!("copy task: {e}")))
                .and_then(|r| r)
        };
        if !was_suspended {
            self.signal(OP, h, "cont", None).await?;
        }
        let named = copied.and_then(|()| {
            std::fs::rename(&staging, &dst)
                .and_then(|()| std::fs::write(dst.join(NAME_FILE), new_name))
                .map_err(|e| io_err(OP, &dst, e))
        });
        if let Err(e) = named {
            let _ = std::fs::remove_dir_all(&staging);
            let _ = std::fs::remove_dir_all(&dst);
            return Err(e);
        }
        Ok(new)
    }
}
