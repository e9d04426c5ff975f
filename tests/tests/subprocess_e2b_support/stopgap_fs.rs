//! A stopgap `Fs` over envd for the process suite until `fs_e2b::E2bFs` lands: only
//! `mkdir`, `write` (upload, then `chmod`), `read` are real; the rest is `Unsupported`.
//! Not atomic, not a product: tests only.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use e2b_core::{EnvdApi, StartProcess};
use exec_world::{
    ByteStream, Created, DirEntry, Fs, FsCapabilities, FsError, Metadata, Version, WorldPath,
    WriteOptions,
};
use futures::StreamExt;

#[derive(Clone, Debug)]
pub struct EnvdFs {
    api: Arc<dyn EnvdApi>,
    cwd: WorldPath,
}

impl EnvdFs {
    pub fn new(api: Arc<dyn EnvdApi>, cwd: WorldPath) -> EnvdFs {
        EnvdFs { api, cwd }
    }
}

fn unsupported(what: &str) -> FsError {
    FsError::Unsupported { what: what.into() }
}

fn other(p: &WorldPath, e: e2b_core::Error) -> FsError {
    if e.is_not_found() {
        return FsError::NotFound { path: p.clone() };
    }
    if e.is_already_exists() {
        return FsError::AlreadyExists { path: p.clone() };
    }
    FsError::other(format!("{p}: {e}"))
}

#[async_trait]
impl Fs for EnvdFs {
    fn cwd(&self) -> &WorldPath {
        &self.cwd
    }

    fn with_cwd(&self, cwd: &WorldPath) -> Box<dyn Fs> {
        Box::new(EnvdFs {
            api: self.api.clone(),
            cwd: cwd.resolve(&self.cwd),
        })
    }

    fn capabilities(&self) -> FsCapabilities {
        FsCapabilities {
            posix_modes: true,
            ..Default::default()
        }
    }

    async fn stat(&self, _p: &WorldPath) -> Result<Metadata, FsError> {
        Err(unsupported("stat"))
    }

    async fn lstat(&self, _p: &WorldPath) -> Result<Metadata, FsError> {
        Err(unsupported("lstat"))
    }

    async fn read_dir(&self, _p: &WorldPath) -> Result<Vec<DirEntry>, FsError> {
        Err(unsupported("read_dir"))
    }

    async fn read(&self, p: &WorldPath, max_bytes: u64) -> Result<Bytes, FsError> {
        let p = self.resolve(p);
        let data = self
            .api
            .download_bytes(p.as_str(), None, max_bytes as usize + 1)
            .await
            .map_err(|e| other(&p, e))?;
        if data.len() as u64 > max_bytes {
            return Err(FsError::TooLarge {
                path: p,
                limit: max_bytes,
            });
        }
        Ok(Bytes::from(data))
    }

    async fn read_stream(&self, _p: &WorldPath) -> Result<ByteStream, FsError> {
        Err(unsupported("read_stream"))
    }

    async fn write(
        &self,
        p: &WorldPath,
        mut data: ByteStream,
        opts: WriteOptions,
    ) -> Result<Version, FsError> {
        let p = self.resolve(p);
        let mut buf = BytesMut::new();
        while let Some(chunk) = data.next().await {
            buf.extend_from_slice(&chunk?);
        }
        let size = buf.len() as u64;
        self.api
            .upload_bytes(p.as_str(), None, buf.freeze())
            .await
            .map_err(|e| other(&p, e))?;
        let mode = format!("{:o}", opts.mode.unwrap_or(0o644));
        let out = self
            .api
            .run(StartProcess::new("chmod").args([mode.as_str(), p.as_str()]))
            .await
            .map_err(|e| other(&p, e))?;
        if out.end.exit_code != 0 {
            return Err(FsError::other(format!("chmod {p} failed")));
        }
        Ok(Version {
            size,
            mtime: None,
            token: String::new(),
        })
    }

    async fn create_if_absent(&self, _p: &WorldPath, _data: Bytes) -> Result<Created, FsError> {
        Err(unsupported("create_if_absent"))
    }

    async fn mkdir(&self, p: &WorldPath, recursive: bool) -> Result<(), FsError> {
        let p = self.resolve(p);
        match self.api.make_dir(p.as_str(), None).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() && recursive => Ok(()),
            Err(e) => Err(other(&p, e)),
        }
    }

    async fn remove(&self, _p: &WorldPath, _recursive: bool) -> Result<(), FsError> {
        Err(unsupported("remove"))
    }

    async fn rename(&self, _from: &WorldPath, _to: &WorldPath) -> Result<(), FsError> {
        Err(unsupported("rename"))
    }
}
