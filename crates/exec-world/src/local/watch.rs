//! [`LocalFs`](crate::LocalFs)'s directory watch: one inotify instance per watch, read as
//! a tokio stream; recursive watches add a watch per subdirectory (never through a
//! symlink) and one for each directory created later, reporting what appeared in it
//! before its watch was added. The kernel's queue overflow becomes an overflow event.
//! Dropping the stream closes the inotify descriptor, which removes every watch.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use inotify::{EventMask, EventStream, Inotify, WatchMask, Watches};

use crate::error::Error;
use crate::path::WorldPath;
use crate::watch::{Sequencer, WatchEventKind, WatchOptions, WatchStream};

/// The changes a watch asks the kernel for.
const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::DELETE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::EXCL_UNLINK)
    .union(WatchMask::ONLYDIR);

/// Room for many events with their names.
const BUFFER: usize = 64 * 1024;

/// One watch: the inotify stream, the relative path of each watched directory, and the
/// events decoded but not yet handed out.
struct State {
    events: EventStream<Vec<u8>>,
    dirs: HashMap<i32, String>,
    root: PathBuf,
    recursive: bool,
    seq: Sequencer,
    pending: VecDeque<(WatchEventKind, String)>,
    ended: bool,
}

/// `dir/name` relative to the root (`name` alone below the root itself).
fn rel_join(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir == "." {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Watches `rel` (a directory below `root`) and, when `recursive`, its subdirectories;
/// pushes a `Created` event for each entry found when `report` (a directory that
/// appeared while watching: what was made in it before its watch is not lost).
fn add_tree(
    watches: &mut Watches,
    root: &Path,
    rel: &str,
    recursive: bool,
    dirs: &mut HashMap<i32, String>,
    report: Option<&mut VecDeque<(WatchEventKind, String)>>,
) -> std::io::Result<()> {
    let host = if rel == "." {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let wd = watches.add(&host, MASK)?;
    dirs.insert(wd.get_watch_descriptor_id(), rel.to_string());
    if !recursive {
        return Ok(());
    }
    let mut report = report;
    let Ok(rd) = std::fs::read_dir(&host) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let child = rel_join(rel, &name);
        if let Some(out) = report.as_deref_mut() {
            out.push_back((WatchEventKind::Created, child.clone()));
        }
        // `file_type` does not follow a symlink: a link to a directory is not descended.
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            let _ = add_tree(watches, root, &child, true, dirs, report.as_deref_mut());
        }
    }
    Ok(())
}

/// The kinds one inotify mask stands for.
fn kinds(mask: EventMask) -> Vec<WatchEventKind> {
    let mut out = Vec::new();
    if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
        out.push(WatchEventKind::Created);
    }
    if mask.contains(EventMask::MOVED_FROM) {
        out.push(WatchEventKind::Renamed);
    }
    if mask.contains(EventMask::ATTRIB) {
        out.push(WatchEventKind::MetadataChanged);
    }
    if mask.contains(EventMask::MODIFY) {
        out.push(WatchEventKind::Written);
    }
    if mask.contains(EventMask::DELETE) {
        out.push(WatchEventKind::Removed);
    }
    out
}

impl State {
    /// Decodes the next batch of kernel events into `pending`; false at the end.
    async fn fill(&mut self) -> Result<bool, Error> {
        if self.ended {
            return Ok(false);
        }
        let ev = match self.events.next().await {
            Some(Ok(ev)) => ev,
            Some(Err(e)) => return Err(Error::io("watch", e)),
            None => return Ok(false),
        };
        if ev.mask.contains(EventMask::Q_OVERFLOW) {
            self.pending
                .push_back((WatchEventKind::Overflow, String::new()));
            return Ok(true);
        }
        let wd = ev.wd.get_watch_descriptor_id();
        if ev.mask.contains(EventMask::IGNORED) {
            if self.dirs.remove(&wd).as_deref() == Some(".") {
                // The watched directory itself is gone: nothing more can come.
                self.ended = true;
            }
            return Ok(true);
        }
        if ev.mask.contains(EventMask::DELETE_SELF) {
            if self.dirs.get(&wd).map(String::as_str) == Some(".") {
                self.pending
                    .push_back((WatchEventKind::Removed, ".".to_string()));
            }
            return Ok(true);
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return Ok(true);
        };
        let name = ev.name.as_deref().map(OsStr::to_string_lossy);
        let rel = match name {
            Some(n) if !n.is_empty() => rel_join(&dir, &n),
            _ => dir.clone(),
        };
        for k in kinds(ev.mask) {
            self.pending.push_back((k, rel.clone()));
        }
        if self.recursive
            && ev.mask.contains(EventMask::ISDIR)
            && ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
        {
            let mut watches = self.events.watches();
            let _ = add_tree(
                &mut watches,
                &self.root,
                &rel,
                true,
                &mut self.dirs,
                Some(&mut self.pending),
            );
        }
        Ok(true)
    }
}

/// Starts watching the local directory `abs` (already resolved).
pub(crate) fn watch(abs: &WorldPath, opts: WatchOptions) -> Result<WatchStream, Error> {
    let root = PathBuf::from(abs.as_str());
    let fail = |e: std::io::Error| Error::from_io(abs, "watch", e);
    let md = std::fs::metadata(&root).map_err(fail)?;
    if !md.is_dir() {
        return Err(Error::not_a_directory(abs).with_op("watch"));
    }
    // The acting user must be able to list it (inotify itself only needs search rights).
    std::fs::read_dir(&root).map_err(fail)?;
    let inotify = Inotify::init().map_err(fail)?;
    let mut dirs = HashMap::new();
    add_tree(
        &mut inotify.watches(),
        &root,
        ".",
        opts.recursive,
        &mut dirs,
        None,
    )
    .map_err(fail)?;
    let events = inotify.into_event_stream(vec![0u8; BUFFER]).map_err(fail)?;
    let state = State {
        events,
        dirs,
        root,
        recursive: opts.recursive,
        seq: Sequencer::default(),
        pending: VecDeque::new(),
        ended: false,
    };
    let stream = futures::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        loop {
            if let Some((kind, path)) = st.pending.pop_front() {
                let ev = st.seq.event(kind, path);
                return Some((Ok(ev), Some(st)));
            }
            match st.fill().await {
                Ok(true) => continue,
                Ok(false) => return None,
                Err(e) => return Some((Err(e), None)),
            }
        }
    });
    Ok(WatchStream::new(stream))
}
