//! The upload side on the host: walk a local directory (never through a symlink) and write
//! it as a tar stream. A first walk counts entries and bytes against the limits before a
//! byte moves; the second writes the archive, re-checking as it goes (a tree that grew in
//! between is still held to the limits). Memory stays constant: nothing is listed whole.

use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use tar::{EntryType, Header};

use super::{Meter, SkipReason, TreeSummary};
use crate::error::Error;

/// What one walk step found.
enum Kind {
    Dir,
    File,
    Symlink,
    Special,
}

fn kind_of(md: &Metadata) -> Kind {
    let ft = md.file_type();
    if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else {
        Kind::Special
    }
}

/// Calls `f(rel, abs, metadata)` for `root` (rel `""`) and everything below it, depth
/// first, each directory before its entries, names sorted; never follows a symlink.
fn walk(
    root: &Path,
    f: &mut dyn FnMut(&str, &Path, &Metadata) -> Result<(), Error>,
) -> Result<(), Error> {
    let io = |p: &Path, e: std::io::Error| Error::io(format!("reading {}", p.display()), e);
    let md = std::fs::metadata(root).map_err(|e| io(root, e))?;
    if !md.is_dir() {
        return Err(Error::not_a_directory(root.display().to_string()).with_op("upload"));
    }
    f("", root, &md)?;
    let mut stack: Vec<(String, std::vec::IntoIter<String>)> = Vec::new();
    let names = |dir: &Path| -> Result<std::vec::IntoIter<String>, Error> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let e = e.map_err(|e| io(dir, e))?;
            let name = e.file_name().into_string().map_err(|n| {
                Error::invalid_path(dir.join(n).display().to_string(), "the name is not UTF-8")
            })?;
            v.push(name);
        }
        v.sort();
        Ok(v.into_iter())
    };
    stack.push((String::new(), names(root)?));
    while let Some((dir, it)) = stack.last_mut() {
        let Some(name) = it.next() else {
            stack.pop();
            continue;
        };
        let rel = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        let abs = root.join(&rel);
        let md = std::fs::symlink_metadata(&abs).map_err(|e| io(&abs, e))?;
        f(&rel, &abs, &md)?;
        if md.is_dir() {
            let next = names(&abs)?;
            stack.push((rel, next));
        }
    }
    Ok(())
}

/// Counts the tree at `root` against the limits: `(entries, content bytes)`.
pub(crate) fn survey(root: &Path, meter: &mut Meter) -> Result<(u64, u64), Error> {
    let mut n = 0u64;
    let mut bytes = 0u64;
    walk(root, &mut |rel, _, md| {
        let size = if md.is_file() { md.len() } else { 0 };
        meter.admit(rel_or_dot(rel), size)?;
        n += 1;
        bytes += size;
        Ok(())
    })?;
    Ok((n, bytes))
}

fn rel_or_dot(rel: &str) -> &str {
    if rel.is_empty() { "." } else { rel }
}

/// A reader of exactly `len` bytes of `file` (zeros when it shrank), counting into `meter`.
struct Exact<'a, R> {
    inner: R,
    left: u64,
    meter: &'a mut Meter,
}

impl<R: Read> Read for Exact<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = out
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut out[..want])?;
        if n == 0 {
            out[..want].fill(0);
            n = want;
        }
        self.left -= n as u64;
        self.meter.bytes(n as u64);
        Ok(n)
    }
}

/// Writes the tree at `root` as a tar stream into `out`.
pub(crate) fn pack(root: &Path, out: impl Write, meter: &mut Meter) -> Result<TreeSummary, Error> {
    let mut b = tar::Builder::new(out);
    let mut sum = TreeSummary::default();
    let werr = |rel: &str, e: std::io::Error| Error::io(format!("archiving {rel}"), e);
    walk(root, &mut |rel, abs, md| {
        let name = if rel.is_empty() { "./" } else { rel };
        let mut h = Header::new_gnu();
        h.set_mode(md.mode() & 0o7777);
        h.set_mtime(u64::try_from(md.mtime()).unwrap_or(0));
        h.set_uid(0);
        h.set_gid(0);
        match kind_of(md) {
            Kind::Dir => {
                meter.admit(rel_or_dot(rel), 0)?;
                h.set_entry_type(EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, name, std::io::empty())
                    .map_err(|e| werr(name, e))?;
                sum.dirs += 1;
            }
            Kind::File => {
                let len = md.len();
                meter.admit(rel, len)?;
                if md.blocks().saturating_mul(512) < len {
                    sum.sparse.push(rel.to_string());
                }
                let file = File::options()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(abs)
                    .map_err(|e| werr(rel, e))?;
                h.set_entry_type(EntryType::Regular);
                h.set_size(len);
                let data = Exact {
                    inner: file,
                    left: len,
                    meter: &mut *meter,
                };
                b.append_data(&mut h, name, data)
                    .map_err(|e| werr(rel, e))?;
                sum.files += 1;
                sum.bytes += len;
            }
            Kind::Symlink => {
                meter.admit(rel, 0)?;
                let target = std::fs::read_link(abs).map_err(|e| werr(rel, e))?;
                h.set_entry_type(EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, name, &target)
                    .map_err(|e| werr(rel, e))?;
                sum.symlinks += 1;
            }
            Kind::Special => {
                meter.admit(rel, 0)?;
                sum.skipped.push((rel.to_string(), SkipReason::Special));
                return Ok(());
            }
        }
        meter.entry();
        Ok(())
    })?;
    b.into_inner()
        .and_then(|mut w| w.flush())
        .map_err(|e| Error::io("finishing the archive", e))?;
    Ok(sum)
}
