//! [`E2bFs`](crate::E2bFs)'s directory watch: envd's `Filesystem.WatchDir` stream.
//!
//! envd runs its watcher as root, so the acting user's view is checked first with a shell
//! command of that user: the directory must exist, be a directory, and be readable and
//! searchable by the user (else `NotFound`, `NotADirectory`, `PermissionDenied`). Events
//! are numbered here. When the stream breaks (envd's watcher overflowed, which envd
//! reports as an `internal` error ending the stream, or the connection was cut), an
//! overflow event is emitted and the watch is reopened, with the user check again; when
//! reopening fails, the stream ends with that error. Dropping the stream closes the
//! HTTP stream, and envd stops its watcher when the request's context ends.
//!
//! With `recursive`, envd (root) also reports changes in subdirectories the acting user
//! cannot list; those events are dropped here: before the first event below a
//! subdirectory goes out, one shell command of the user checks that it can enter and
//! read that subdirectory (so every directory on the way is searchable), and the answer
//! is kept until a mode change, rename or removal is seen anywhere in the watch (then
//! every answer is asked again). A dropped event takes no sequence number. What a user
//! can list only by name (read without search permission) is dropped too.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use e2b_core::envd::WatchStream as EnvdWatch;
use e2b_core::proto::filesystem::EventType;
use exec_world::watch::Sequencer;
use exec_world::{Error, WatchEventKind, WatchOptions, WatchStream, WorldPath};
use futures::StreamExt as _;

use crate::fs::E2bFs;
use crate::shell::{EXIT_NOT_DIR, EXIT_NOT_FOUND};

/// Exit code of [`CHECK`]: the user may not list the directory.
const EXIT_DENIED: i32 = 70;

/// The acting user's check of a directory to watch.
const CHECK: &str = r#"if [ ! -e "$1" ]; then exit 64; fi
if [ ! -d "$1" ]; then exit 66; fi
if [ ! -r "$1" ] || [ ! -x "$1" ]; then exit 70; fi
exit 0"#;

/// The acting user's check that it can list a subdirectory of the watch: exit 0 when it
/// can enter and read it.
const LISTABLE: &str = r#"cd -- "$1" 2>/dev/null && [ -r . ] && exit 0
exit 70"#;

/// Most subdirectory answers kept (beyond, they are all asked again).
const MAX_KNOWN_DIRS: usize = 4096;

/// Pause before reopening a broken watch.
const REOPEN_PAUSE: Duration = Duration::from_millis(50);

fn kind_of(t: EventType) -> Option<WatchEventKind> {
    Some(match t {
        EventType::Create => WatchEventKind::Created,
        EventType::Write => WatchEventKind::Written,
        EventType::Remove => WatchEventKind::Removed,
        EventType::Rename => WatchEventKind::Renamed,
        EventType::Chmod => WatchEventKind::MetadataChanged,
        _ => return None,
    })
}

/// Checks `abs` as the acting user, then opens envd's watch on it.
async fn open(fs: &E2bFs, abs: &WorldPath, recursive: bool) -> Result<EnvdWatch, Error> {
    let out = fs
        .shared
        .ctl
        .run(CHECK, &[abs.as_str()], abs, "watch")
        .await?;
    match out.exit_code {
        0 => {}
        EXIT_NOT_FOUND => return Err(Error::not_found(abs).with_op("watch")),
        EXIT_NOT_DIR => return Err(Error::not_a_directory(abs).with_op("watch")),
        EXIT_DENIED => {
            return Err(Error::permission_denied(abs)
                .with_op("watch")
                .with_detail("the user cannot list the directory"));
        }
        _ => return Err(crate::shell::classify(&out, abs, "watch")),
    }
    let opts = e2b_core::WatchOptions {
        recursive,
        user: fs.shared.user.clone(),
        ..Default::default()
    };
    fs.shared
        .api
        .watch_dir(abs.as_str(), opts)
        .await
        .map_err(|e| e.into_world("watch").with_path(abs))
}

/// One watch: envd's stream (reopened after a break), the numbering, decoded events.
struct State {
    fs: E2bFs,
    abs: WorldPath,
    recursive: bool,
    events: EnvdWatch,
    seq: Sequencer,
    pending: VecDeque<(WatchEventKind, String)>,
    /// A failed reopen: the stream's last item, after the pending events.
    failed: Option<Error>,
    /// Whether the user can list each subdirectory (relative path) seen so far.
    listable: HashMap<String, bool>,
}

impl State {
    /// Whether the user may see the event on `path` (relative): always at the top; below,
    /// when it can list the entry's directory (asked once, see the module docs).
    async fn visible(&mut self, kind: WatchEventKind, path: &str) -> Result<bool, Error> {
        if matches!(
            kind,
            WatchEventKind::MetadataChanged | WatchEventKind::Renamed | WatchEventKind::Removed
        ) {
            // A directory's mode or place may have changed: ask again.
            self.listable.clear();
        }
        let Some((dir, _)) = path.rsplit_once('/') else {
            return Ok(true);
        };
        if let Some(&ok) = self.listable.get(dir) {
            return Ok(ok);
        }
        let at = self.abs.join(dir)?;
        let out = self
            .fs
            .shared
            .ctl
            .run(LISTABLE, &[at.as_str()], &at, "watch")
            .await?;
        let ok = out.exit_code == 0;
        if self.listable.len() >= MAX_KNOWN_DIRS {
            self.listable.clear();
        }
        self.listable.insert(dir.to_owned(), ok);
        Ok(ok)
    }

    /// Fills `pending` from envd; `Err` ends the stream.
    async fn fill(&mut self) -> Result<(), Error> {
        match self.events.next().await {
            Some(Ok(ev)) => {
                if let Some(k) = kind_of(ev.event_type) {
                    self.pending.push_back((k, ev.name));
                }
                Ok(())
            }
            Some(Err(e)) => {
                tracing::debug!(path = %self.abs, error = %e, "watch broke; reopening");
                self.reopen().await
            }
            None => self.reopen().await,
        }
    }

    /// Reports the loss and reopens the watch.
    async fn reopen(&mut self) -> Result<(), Error> {
        self.pending
            .push_back((WatchEventKind::Overflow, String::new()));
        tokio::time::sleep(REOPEN_PAUSE).await;
        self.events = open(&self.fs, &self.abs, self.recursive).await?;
        Ok(())
    }
}

/// Starts watching `abs` (resolved) as the acting user.
pub(crate) async fn watch(
    fs: &E2bFs,
    abs: WorldPath,
    opts: WatchOptions,
) -> Result<WatchStream, Error> {
    let events = open(fs, &abs, opts.recursive).await?;
    let state = State {
        fs: fs.clone(),
        abs,
        recursive: opts.recursive,
        events,
        seq: Sequencer::default(),
        pending: VecDeque::new(),
        failed: None,
        listable: HashMap::new(),
    };
    let stream = futures::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        loop {
            if let Some((kind, path)) = st.pending.pop_front() {
                if kind != WatchEventKind::Overflow {
                    match st.visible(kind, &path).await {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => return Some((Err(e), None)),
                    }
                }
                let ev = st.seq.event(kind, path);
                return Some((Ok(ev), Some(st)));
            }
            if let Some(e) = st.failed.take() {
                return Some((Err(e), None));
            }
            if let Err(e) = st.fill().await {
                // The overflow event queued before the failed reopen goes out first.
                st.failed = Some(e);
            }
        }
    });
    Ok(WatchStream::new(stream))
}
