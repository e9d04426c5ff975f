//! `GET /v2/sandboxes`: listing with metadata and state filters, one page at a time or as
//! a stream that follows `X-Next-Token` across pages.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;

use futures::Stream;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::Client;
use crate::error::Error;
use crate::proto::control::{ListedSandbox, SandboxState};
use crate::proto::headers;

/// Characters `encodeURIComponent` leaves alone.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// Filters of a listing. Default: running and paused sandboxes, server order, 100 a page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only sandboxes carrying all these metadata pairs.
    pub metadata: BTreeMap<String, String>,
    /// Only these states (empty = server default, both).
    pub states: Vec<SandboxState>,
    /// Page size (1..=100).
    pub limit: Option<u32>,
    /// Only sandboxes of this template (ID or alias, no `:tag`).
    pub template: Option<String>,
}

impl ListQuery {
    /// No filters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Require a metadata pair.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Only these states.
    pub fn states(mut self, states: impl IntoIterator<Item = SandboxState>) -> Self {
        self.states = states.into_iter().collect();
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only this template.
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }

    /// Query parameters (before URL encoding of the values): `metadata` is
    /// `k=v&k2=v2` with keys and values URI-encoded once here, the whole value is
    /// encoded again by the query serializer; `state` is comma-joined.
    pub fn to_params(&self, next_token: Option<&str>) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !self.metadata.is_empty() {
            let joined = self
                .metadata
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        utf8_percent_encode(k, URI_COMPONENT),
                        utf8_percent_encode(v, URI_COMPONENT)
                    )
                })
                .collect::<Vec<_>>()
                .join("&");
            out.push(("metadata", joined));
        }
        if !self.states.is_empty() {
            let s = self
                .states
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(",");
            out.push(("state", s));
        }
        if let Some(l) = self.limit {
            out.push(("limit", l.to_string()));
        }
        if let Some(t) = &self.template {
            out.push(("template", t.clone()));
        }
        if let Some(t) = next_token {
            out.push(("nextToken", t.to_owned()));
        }
        out
    }
}

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// The sandboxes of this page.
    pub sandboxes: Vec<ListedSandbox>,
    /// Cursor of the next page (`X-Next-Token`), `None` on the last page.
    pub next_token: Option<String>,
    /// `X-Total-Running`, when the server sent it.
    pub total_running: Option<u64>,
}

/// A stream of listed sandboxes across pages.
pub type SandboxStream = Pin<Box<dyn Stream<Item = Result<ListedSandbox, Error>> + Send>>;

impl Client {
    /// Fetch one page (`next_token` from the previous page, `None` for the first).
    pub async fn list_page(
        &self,
        query: &ListQuery,
        next_token: Option<&str>,
    ) -> Result<ListPage, Error> {
        let params = query.to_params(next_token);
        let resp = self
            .send_idempotent::<()>(reqwest::Method::GET, "/v2/sandboxes", &params, None)
            .await?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let next_token = header(headers::NEXT_TOKEN);
        let total_running = header(headers::TOTAL_RUNNING).and_then(|v| v.parse().ok());
        let sandboxes = self.json(resp).await?;
        Ok(ListPage {
            sandboxes,
            next_token,
            total_running,
        })
    }

    /// Every matching sandbox, following `X-Next-Token`; pages are fetched lazily.
    pub fn list(&self, query: ListQuery) -> SandboxStream {
        struct State {
            client: Client,
            query: ListQuery,
            buf: VecDeque<ListedSandbox>,
            next: Option<String>,
            first: bool,
            failed: bool,
        }
        let st = State {
            client: self.clone(),
            query,
            buf: VecDeque::new(),
            next: None,
            first: true,
            failed: false,
        };
        Box::pin(futures::stream::unfold(st, |mut st| async move {
            loop {
                if let Some(item) = st.buf.pop_front() {
                    return Some((Ok(item), st));
                }
                if st.failed || (!st.first && st.next.is_none()) {
                    return None;
                }
                st.first = false;
                match st.client.list_page(&st.query, st.next.as_deref()).await {
                    Ok(page) => {
                        // A server repeating the same cursor would loop forever.
                        if page.next_token.is_some() && page.next_token == st.next {
                            st.failed = true;
                            return Some((
                                Err(Error::protocol(
                                    crate::error::Surface::Control,
                                    "X-Next-Token repeated the previous cursor",
                                )),
                                st,
                            ));
                        }
                        st.next = page.next_token;
                        st.buf.extend(page.sandboxes);
                    }
                    Err(e) => {
                        st.failed = true;
                        return Some((Err(e), st));
                    }
                }
            }
        }))
    }

    /// Every matching sandbox, collected.
    pub async fn list_all(&self, query: ListQuery) -> Result<Vec<ListedSandbox>, Error> {
        use futures::TryStreamExt as _;
        self.list(query).try_collect().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_encoded_twice() {
        let q = ListQuery::new()
            .metadata("user", "abc")
            .metadata("app", "prod")
            .states([SandboxState::Running, SandboxState::Paused]);
        let params = q.to_params(None);
        assert_eq!(params[0], ("metadata", "app=prod&user=abc".to_owned()));
        assert_eq!(params[1], ("state", "running,paused".to_owned()));
        let mut url = url::Url::parse("http://x/v2/sandboxes").unwrap_or_else(|_| unreachable!());
        url.query_pairs_mut()
            .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        assert_eq!(
            url.query(),
            Some("metadata=app%3Dprod%26user%3Dabc&state=running%2Cpaused")
        );
        // keys and values with reserved characters are encoded once before
        let q = ListQuery::new().metadata("a b", "x&y=z");
        assert_eq!(q.to_params(Some("tok"))[0].1, "a%20b=x%26y%3Dz");
        assert_eq!(q.to_params(Some("tok"))[1], ("nextToken", "tok".to_owned()));
    }
}
