//! read_file, stat and write_file. Reads and stats are small scripts run as the sandbox
//! user (its permissions, its view of symlinks): one envd `Start` each. A write uploads
//! the bytes as root to a root-only staging file (`/opt/capybara/upload/<random>`, the
//! parent 0700 root), then a root shell copies it into place as the sandbox user with
//! `runuser` (parents created as that user), so no link or swapped directory the user
//! controls can redirect the write past the user's permissions; under `/skills` root
//! writes with umask 022 and mode 0644 (the user cannot plant links there). Staging is
//! removed on success and failure: 1 `POST /files` + 1 `Start`.

use std::time::Duration;

use bytes::Bytes;
use e2b_core::trusted_shell::{TrustedShell, random_suffix};
use exec_world::sandbox::{FileContent, FileStat, SKILLS, SandboxError, validate};

use crate::errors::script_failed;
use crate::lease::{Leases, SANDBOX_USER};

/// Life a file operation needs left on the lease.
pub(crate) const FILE_OP_NEED: Duration = Duration::from_secs(120);
/// Room for a script's error text.
const STDERR_ROOM: usize = 64 * 1024;
/// Where uploads wait (root-only).
pub const UPLOAD_DIR: &str = "/opt/capybara/upload";

/// Exit 3: missing; 4: a directory; 5: not a regular file (a FIFO or socket the user
/// planted would block the reader, a device is not a file's content).
const READ_SH: &str = r#"[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4; [ -f "$1" ] || exit 5
exec head -c "$2" -- "$1""#;
const STAT_SH: &str = r#"[ -e "$1" ] || exit 3; s=$(stat -L -c %s -- "$1") || exit 1
if [ -d "$1" ]; then echo "d $s"; else echo "f $s"; fi"#;
const USER_WRITE_SH: &str = r#"s=1
runuser -u "$3" -- /bin/sh -c 'umask 022; set -e; mkdir -p -- "$(dirname -- "$1")"; cat > "$1"' sandbox-write "$1" < "$2" && s=0
rm -f -- "$2"; exit $s"#;
const SKILLS_WRITE_SH: &str = r#"umask 022; s=1
mkdir -p -- "$(dirname -- "$1")" && cat -- "$2" > "$1" && chmod 0644 -- "$1" && s=0
rm -f -- "$2"; exit $s"#;

fn user_shell(a: &crate::lease::Attached, max_output: usize) -> TrustedShell {
    TrustedShell::new(a.api.clone())
        .user(SANDBOX_USER)
        .max_output(max_output)
}

pub(crate) async fn read_file(
    leases: &Leases,
    id: &str,
    path: &str,
    max_bytes: u64,
) -> Result<Option<FileContent>, SandboxError> {
    const OP: &str = "read_file";
    validate::path(OP, path)?;
    let want = max_bytes.saturating_add(1);
    let room = usize::try_from(want).unwrap_or(usize::MAX).max(STDERR_ROOM);
    let want = want.to_string();
    let out = leases
        .with_envd(OP, id, Some(path), FILE_OP_NEED, |a| {
            let want = want.clone();
            async move { user_shell(&a, room).run(READ_SH, &[path, &want]).await }
        })
        .await?;
    match out.exit_code {
        0 => {}
        3 | 4 => return Ok(None),
        5 => {
            return Err(SandboxError::not_regular_file(OP, path));
        }
        _ => return Err(script_failed(OP, path, &out.stderr)),
    }
    Ok(Some(FileContent::capped(out.stdout, max_bytes)))
}

pub(crate) async fn stat(
    leases: &Leases,
    id: &str,
    path: &str,
) -> Result<Option<FileStat>, SandboxError> {
    const OP: &str = "stat";
    validate::path(OP, path)?;
    let out = leases
        .with_envd(OP, id, Some(path), FILE_OP_NEED, |a| async move {
            user_shell(&a, STDERR_ROOM).run(STAT_SH, &[path]).await
        })
        .await?;
    if out.exit_code == 3 {
        return Ok(None);
    }
    let text = out.stdout_text();
    let parsed = text.split_once(' ').and_then(|(kind, size)| {
        let size = size.parse::<u64>().ok()?;
        match kind {
            "d" => Some(FileStat { size, is_dir: true }),
            "f" => Some(FileStat {
                size,
                is_dir: false,
            }),
            _ => None,
        }
    });
    match (out.exit_code, parsed) {
        (0, Some(s)) => Ok(Some(s)),
        _ => Err(script_failed(OP, path, &out.stderr)),
    }
}

pub(crate) async fn write_file(
    leases: &Leases,
    id: &str,
    path: &str,
    data: &[u8],
) -> Result<(), SandboxError> {
    const OP: &str = "write_file";
    validate::path(OP, path)?;
    let skills = path == SKILLS || path.starts_with(&format!("{SKILLS}/"));
    let body = Bytes::copy_from_slice(data);
    let out = leases
        .with_envd(OP, id, Some(path), FILE_OP_NEED, |a| {
            let body = body.clone();
            async move {
                let staging = format!("{UPLOAD_DIR}/{}", random_suffix());
                let root = TrustedShell::new(a.api.clone()).max_output(STDERR_ROOM);
                if let Err(e) = a.api.upload_bytes(&staging, Some("root"), body).await {
                    // Best effort: a partial upload must not stay behind.
                    let _ = root.run(r#"rm -f -- "$1""#, &[&staging]).await;
                    return Err(e);
                }
                if skills {
                    root.run(SKILLS_WRITE_SH, &[path, &staging]).await
                } else {
                    root.run(USER_WRITE_SH, &[path, &staging, SANDBOX_USER])
                        .await
                }
            }
        })
        .await?;
    if out.exit_code != 0 {
        return Err(script_failed(OP, path, &out.stderr));
    }
    Ok(())
}
