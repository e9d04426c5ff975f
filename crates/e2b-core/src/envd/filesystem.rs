//! `filesystem.Filesystem` calls: Stat, ListDir, MakeDir, Move, Remove (unary) and
//! WatchDir (server stream).

use std::time::Duration;

use futures::StreamExt as _;

use super::conn::EnvdConn;
use super::stream::WatchStream;
use crate::error::{Error, Surface};
use crate::proto::filesystem::{
    EntryInfo, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
    WatchDirRequest, WatchDirResponse, paths,
};
use crate::proto::process::Empty;

/// Options of a directory watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Watch subdirectories too.
    pub recursive: bool,
    /// Attach entry info to create/write/chmod events.
    pub include_entry: bool,
    /// Allow watching network filesystems.
    pub allow_network_mounts: bool,
    /// Act as this user.
    pub user: Option<String>,
    /// `Connect-Timeout-Ms`: the watch ends with `deadline_exceeded` after it. Default none.
    pub deadline: Option<Duration>,
    /// Fail the stream when nothing arrives for this long (overrides the config).
    pub idle_timeout: Option<Duration>,
}

impl EnvdConn {
    pub(crate) async fn stat(&self, path: &str, user: Option<&str>) -> Result<EntryInfo, Error> {
        let r: EntryResponse = self
            .unary_idempotent(
                paths::STAT,
                &PathRequest { path: path.into() },
                self.effective_user(user),
            )
            .await?;
        Ok(r.entry)
    }

    pub(crate) async fn list_dir(
        &self,
        path: &str,
        depth: u32,
        user: Option<&str>,
    ) -> Result<Vec<EntryInfo>, Error> {
        let req = ListDirRequest {
            path: path.into(),
            depth: depth.max(1),
        };
        let r: ListDirResponse = self
            .unary_idempotent(paths::LIST_DIR, &req, self.effective_user(user))
            .await?;
        Ok(r.entries)
    }

    pub(crate) async fn make_dir(
        &self,
        path: &str,
        user: Option<&str>,
    ) -> Result<EntryInfo, Error> {
        let r: EntryResponse = self
            .unary(
                paths::MAKE_DIR,
                &PathRequest { path: path.into() },
                self.effective_user(user),
            )
            .await?;
        Ok(r.entry)
    }

    pub(crate) async fn rename(
        &self,
        source: &str,
        destination: &str,
        user: Option<&str>,
    ) -> Result<EntryInfo, Error> {
        let req = MoveRequest {
            source: source.into(),
            destination: destination.into(),
        };
        let r: EntryResponse = self
            .unary(paths::MOVE, &req, self.effective_user(user))
            .await?;
        Ok(r.entry)
    }

    pub(crate) async fn remove(&self, path: &str, user: Option<&str>) -> Result<(), Error> {
        let _: Empty = self
            .unary_idempotent(
                paths::REMOVE,
                &PathRequest { path: path.into() },
                self.effective_user(user),
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn watch_dir(
        &self,
        path: &str,
        opts: &WatchOptions,
    ) -> Result<WatchStream, Error> {
        let req = WatchDirRequest {
            path: path.into(),
            recursive: opts.recursive,
            include_entry: opts.include_entry,
            allow_network_mounts: opts.allow_network_mounts,
        };
        let mut events = self
            .server_stream::<_, WatchDirResponse>(
                paths::WATCH_DIR,
                &req,
                self.effective_user(opts.user.as_deref()),
                opts.deadline,
                opts.idle_timeout,
            )
            .await?;
        let first = tokio::time::timeout(self.request_timeout, events.next())
            .await
            .map_err(|_| Error::Timeout {
                what: "watch start event",
                after: self.request_timeout,
            })?;
        match first {
            Some(Ok(WatchDirResponse::Start(_))) => {}
            Some(Ok(other)) => {
                return Err(Error::protocol(
                    Surface::Envd,
                    format!("expected a watch start event, got {other:?}"),
                ));
            }
            Some(Err(e)) => return Err(e),
            None => {
                return Err(Error::protocol(
                    Surface::Envd,
                    "watch ended before its start event",
                ));
            }
        }
        let events = events.filter_map(|r| async move {
            match r {
                Ok(WatchDirResponse::Filesystem(ev)) => Some(Ok(ev)),
                Ok(WatchDirResponse::Start(_) | WatchDirResponse::Keepalive(_)) => None,
                Err(e) => Some(Err(e)),
            }
        });
        Ok(WatchStream::new(Box::pin(events)))
    }
}
