//! The tree the tree figures move: `Sizes::small_n` files of `small_bytes` in directories
//! of 100 (`s000/f000`, …) and `large_n` files of `large_bytes` (`big/b00`, …), each of
//! deterministic incompressible bytes, made once on the host; its archive (for the
//! download figure's untimed setup); and its digest, the same shell pipeline on both sides.

use std::io::Write as _;
use std::path::Path;

use super::super::child::AnyError;
use super::Sizes;

/// The shell pipeline whose output names a tree's content: every regular file's SHA-256
/// by relative path, sorted, hashed. `$1` is the tree's directory.
pub const DIGEST: &str = "cd \"$1\" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1";

fn fill(seed: u64, len: u64, f: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut buf = Vec::with_capacity(64 << 10);
    let mut left = len;
    while left > 0 {
        buf.clear();
        let n = left.min(64 << 10) as usize;
        while buf.len() < n {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            buf.extend_from_slice(&state.to_le_bytes());
        }
        buf.truncate(n);
        f.write_all(&buf)?;
        left -= n as u64;
    }
    Ok(())
}

/// Makes the tree of `sizes` under `root` (which must not exist).
pub fn make(root: &Path, sizes: &Sizes) -> Result<(), AnyError> {
    std::fs::create_dir_all(root)?;
    for i in 0..sizes.small_n {
        let dir = root.join(format!("s{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let mut f = std::fs::File::create(dir.join(format!("f{:03}", i % 100)))?;
        fill(i + 1, sizes.small_bytes, &mut f)?;
    }
    let big = root.join("big");
    std::fs::create_dir_all(&big)?;
    for i in 0..sizes.large_n {
        let mut f = std::io::BufWriter::new(std::fs::File::create(big.join(format!("b{i:02}")))?);
        fill(1_000_000 + i, sizes.large_bytes, &mut f)?;
        f.flush()?;
    }
    Ok(())
}

/// Runs `sh -c SCRIPT sh ARGS…` on the host; its stdout, trimmed, or an error.
pub fn host_sh(script: &str, args: &[&str]) -> Result<String, AnyError> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "`{script}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The digest of the tree at `dir` ([`DIGEST`] on the host).
pub fn digest(dir: &Path) -> Result<String, AnyError> {
    host_sh(DIGEST, &[&dir.display().to_string()])
}

/// `tar -c` of `src` into `tar` (host tar).
pub fn archive(src: &Path, tar: &Path) -> Result<(), AnyError> {
    host_sh(
        "tar -c -f \"$1\" -C \"$2\" .",
        &[&tar.display().to_string(), &src.display().to_string()],
    )?;
    Ok(())
}
