//! read_file, stat and write_file, all through fs-e2b acting as the sandbox user (its
//! permissions, its view of links): `read_file` is one holder start that copies the
//! head of the file it opened ([`E2bFs::read_head`]), `stat` one `find` as the user,
//! `write_file` one holder start that carries the bytes and writes them into place as
//! the user ([`E2bFs::write_file`]; past 1 MiB a root upload into the root-only staging
//! directory, [`UPLOAD_DIR`], comes first). Under `/skills` the same adapter acts as root
//! (mode 0644, parents 0755; the user cannot plant links there). Requests: read 1, stat
//! 1, write 1 (2 past 1 MiB).

use std::time::Duration;

use bytes::Bytes;
use exec_world::sandbox::{FileContent, FileStat, SKILLS, SandboxError, failed_by, validate};
use exec_world::{Error, ErrorKind, Fs as _, WorldPath};
use fs_e2b::E2bFs;

use e2b_core::lifecycle::Leases;

use crate::conversation::{Attached, check_id, contract};

/// Life a file operation needs left on the lease.
pub(crate) const FILE_OP_NEED: Duration = Duration::from_secs(120);
/// Where uploads wait (root-only: `/opt/capybara` is root 0700).
pub const UPLOAD_DIR: &str = "/opt/capybara/upload";

/// The path as a world path (validated first: absolute, no `..`, no NUL).
fn world(op: &'static str, id: &str, path: &str) -> Result<WorldPath, SandboxError> {
    check_id(op, id)?;
    validate::path(op, path)?;
    WorldPath::new(path).map_err(|e| failed_by(op, Some(path), e))
}

/// The error of `op` on `path` (fs-e2b's kind kept).
fn fail(op: &'static str, path: &str, e: Error) -> SandboxError {
    failed_by(op, Some(path), e)
}

pub(crate) async fn read_file(
    leases: &Leases<Attached>,
    id: &str,
    path: &str,
    max_bytes: u64,
) -> Result<Option<FileContent>, SandboxError> {
    const OP: &str = "read_file";
    let p = world(OP, id, path)?;
    let want = max_bytes.saturating_add(1);
    let r = leases
        .run(OP, id, FILE_OP_NEED, |a: Attached| {
            let p = p.clone();
            async move { a.fs.read_head(&p, want).await }
        })
        .await
        .map_err(|e| contract(OP, id, e));
    match r {
        Ok(b) => Ok(Some(FileContent::capped(b.to_vec(), max_bytes))),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::IsADirectory) => Ok(None),
        Err(e) => Err(fail(OP, path, e)),
    }
}

pub(crate) async fn stat(
    leases: &Leases<Attached>,
    id: &str,
    path: &str,
) -> Result<Option<FileStat>, SandboxError> {
    const OP: &str = "stat";
    let p = world(OP, id, path)?;
    let r = leases
        .run(OP, id, FILE_OP_NEED, |a: Attached| {
            let p = p.clone();
            async move { a.fs.stat(&p).await }
        })
        .await
        .map_err(|e| contract(OP, id, e));
    match r {
        Ok(m) => Ok(Some(FileStat {
            size: m.size,
            is_dir: m.is_dir(),
        })),
        // Missing, or in a directory the user cannot search: invisible to the user.
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => Ok(None),
        Err(e) => Err(fail(OP, path, e)),
    }
}

pub(crate) async fn write_file(
    leases: &Leases<Attached>,
    id: &str,
    path: &str,
    data: &[u8],
) -> Result<(), SandboxError> {
    const OP: &str = "write_file";
    let p = world(OP, id, path)?;
    let skills = path == SKILLS || path.starts_with(&format!("{SKILLS}/"));
    let body = Bytes::copy_from_slice(data);
    leases
        .run(OP, id, FILE_OP_NEED, |a: Attached| {
            let p = p.clone();
            let body = body.clone();
            async move {
                let (fs, mode): (&E2bFs, Option<u32>) = if skills {
                    (&a.root_fs, Some(0o644))
                } else {
                    (&a.fs, None)
                };
                fs.write_file(&p, body, mode).await.map(|_| ())
            }
        })
        .await
        .map_err(|e| fail(OP, path, contract(OP, id, e)))
}
