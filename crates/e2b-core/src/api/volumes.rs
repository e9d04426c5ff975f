//! Team volumes: `GET/POST /volumes`, `GET/DELETE /volumes/{id}` on the control plane, and
//! [`VolumeContent`] for the volume content API (`/volumecontent/{id}/…`, authorized by
//! the volume's token as a bearer, at `E2B_VOLUME_API_URL` or the control plane's URL).
//! A volume is mounted at sandbox create with
//! [`CreateOptions::volume_mount`](super::CreateOptions::volume_mount).
//!
//! Creating a volume is retried only after a failure that certainly did nothing; after an
//! ambiguous one the volume is looked up by its (unique) name before anything is resent.

use bytes::Bytes;

use super::{Client, seg};
use crate::config::Secret;
use crate::error::{Error, Surface};
use crate::http;
use crate::proto::volume::{NewVolume, Volume, VolumeAndToken, VolumeEntryStat};
use crate::retry::{Idempotence, RetryClass, classify};

impl Client {
    /// Create a volume (`name`: `[a-zA-Z0-9_-]+`, unique in the team).
    pub async fn create_volume(&self, name: &str) -> Result<VolumeAndToken, Error> {
        let body = NewVolume {
            name: name.to_owned(),
        };
        if !body.name_is_valid() {
            return Err(Error::Config(format!(
                "create volume {name:?}: a volume name is letters, digits, '_' and '-'"
            )));
        }
        match self
            .send_retrying(
                Idempotence::NotIfAmbiguous,
                reqwest::Method::POST,
                "/volumes",
                &[],
                Some(&body),
            )
            .await
        {
            Ok(resp) => self.json(resp).await,
            Err(e) if classify(&e) == RetryClass::Ambiguous => {
                // The answer was lost: the volume may exist. Names are unique, so look.
                let found = self
                    .list_volumes()
                    .await?
                    .into_iter()
                    .find(|v| v.name == name);
                match found {
                    Some(v) => self.get_volume(&v.volume_id).await,
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Every volume of the team.
    pub async fn list_volumes(&self) -> Result<Vec<Volume>, Error> {
        let resp = self
            .send_idempotent::<()>(reqwest::Method::GET, "/volumes", &[], None)
            .await?;
        self.json(resp).await
    }

    /// One volume with its content token; an unknown one is [`Error::VolumeNotFound`].
    pub async fn get_volume(&self, volume_id: &str) -> Result<VolumeAndToken, Error> {
        let path = format!("/volumes/{}", seg(volume_id));
        match self
            .send_idempotent::<()>(reqwest::Method::GET, &path, &[], None)
            .await
        {
            Ok(resp) => self.json(resp).await,
            Err(Error::SandboxNotFound { message, .. }) => Err(Error::VolumeNotFound { message }),
            Err(e) => Err(e),
        }
    }

    /// Delete a volume and its files: `true` when deleted, `false` when there was none.
    pub async fn delete_volume(&self, volume_id: &str) -> Result<bool, Error> {
        let path = format!("/volumes/{}", seg(volume_id));
        match self
            .send_idempotent::<()>(reqwest::Method::DELETE, &path, &[], None)
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::SandboxNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The content API of a volume (its token from [`Client::create_volume`] or
    /// [`Client::get_volume`]).
    pub fn volume_content(&self, volume: &VolumeAndToken) -> VolumeContent {
        let base = std::env::var("E2B_VOLUME_API_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| volume.domain.as_ref().map(|d| format!("https://api.{d}")))
            .unwrap_or_else(|| self.api_url().to_owned());
        VolumeContent {
            client: self.clone(),
            base: base.trim_end_matches('/').to_owned(),
            volume_id: volume.volume_id.clone(),
            token: Secret::new(volume.token.clone()),
        }
    }
}

/// Files of one volume through the volume content API.
///
/// ```no_run
/// # async fn demo(client: e2b_core::Client) -> Result<(), e2b_core::Error> {
/// let vol = client.create_volume("cache").await?;
/// let content = client.volume_content(&vol);
/// content.write_file("/hello.txt", b"hi".to_vec(), true).await?;
/// assert_eq!(&content.read_file("/hello.txt").await?[..], b"hi");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct VolumeContent {
    client: Client,
    base: String,
    volume_id: String,
    token: Secret,
}

impl VolumeContent {
    async fn send(
        &self,
        method: reqwest::Method,
        what: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::Response, Error> {
        let timeout = self.client.config().request_timeout;
        let url = format!(
            "{}/volumecontent/{}/{what}",
            self.base,
            seg(&self.volume_id)
        );
        let mut req = self
            .client
            .http()
            .request(method, url)
            .bearer_auth(self.token.expose())
            .query(query)
            .timeout(timeout);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(b);
        }
        let resp = req.send().await.map_err(|e| {
            Error::from_reqwest(Surface::Control, e, "volume content request", timeout)
        })?;
        if resp.status().is_success() {
            Ok(resp)
        } else if resp.status() == reqwest::StatusCode::NOT_FOUND {
            let body = http::read_bounded(resp, timeout).await;
            Err(Error::VolumeNotFound {
                message: crate::error::snippet(&body, &[&self.token]),
            })
        } else {
            Err(http::error_from(Surface::Control, resp, timeout, &[&self.token]).await)
        }
    }

    /// Read a file's bytes.
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Error> {
        let resp = self
            .send(
                reqwest::Method::GET,
                "file",
                &[("path", path.to_owned())],
                None,
            )
            .await?;
        let timeout = self.client.config().request_timeout;
        resp.bytes()
            .await
            .map_err(|e| Error::from_reqwest(Surface::Control, e, "volume file body", timeout))
    }

    /// Write a file (its parent must exist); an existing one is replaced only with `force`.
    pub async fn write_file(
        &self,
        path: &str,
        data: Vec<u8>,
        force: bool,
    ) -> Result<VolumeEntryStat, Error> {
        let q = [("path", path.to_owned()), ("force", force.to_string())];
        let resp = self
            .send(reqwest::Method::PUT, "file", &q, Some(data))
            .await?;
        self.client.json(resp).await
    }

    /// List a directory (`depth` levels, at least 1).
    pub async fn list(&self, path: &str, depth: u32) -> Result<Vec<VolumeEntryStat>, Error> {
        let q = [
            ("path", path.to_owned()),
            ("depth", depth.max(1).to_string()),
        ];
        let resp = self.send(reqwest::Method::GET, "dir", &q, None).await?;
        self.client.json(resp).await
    }

    /// Make a directory (with its parents when `force`).
    pub async fn make_dir(&self, path: &str, force: bool) -> Result<VolumeEntryStat, Error> {
        let q = [("path", path.to_owned()), ("force", force.to_string())];
        let resp = self.send(reqwest::Method::POST, "dir", &q, None).await?;
        self.client.json(resp).await
    }

    /// Stat an entry (a symlink is not followed).
    pub async fn stat(&self, path: &str) -> Result<VolumeEntryStat, Error> {
        let resp = self
            .send(
                reqwest::Method::GET,
                "path",
                &[("path", path.to_owned())],
                None,
            )
            .await?;
        self.client.json(resp).await
    }

    /// Remove a file, or a directory with everything in it.
    pub async fn remove(&self, path: &str) -> Result<(), Error> {
        self.send(
            reqwest::Method::DELETE,
            "path",
            &[("path", path.to_owned())],
            None,
        )
        .await
        .map(drop)
    }
}
