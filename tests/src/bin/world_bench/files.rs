//! The two file figures, shared by every Rust contender: `files_small` (`WB_SMALL_N`
//! write+read pairs of `WB_SMALL_BYTES`) and `files_large` (one pair of
//! `WB_LARGE_BYTES`), each read-back compared by SHA-256.

use bytes::Bytes;
use futures::StreamExt as _;

use super::child::{self, AnyError, Outcome};
use super::data;
use super::opts::var;

/// What to write: small payloads are generated once and shared, large ones streamed.
#[derive(Clone)]
pub enum Body {
    /// The whole payload.
    Mem(Bytes),
    /// A payload of this many bytes, generated while sent.
    Stream(u64),
}

impl Body {
    /// The payload as a stream of chunks.
    pub fn stream(&self) -> futures::stream::BoxStream<'static, Bytes> {
        match self {
            Body::Mem(b) => futures::stream::iter([b.clone()]).boxed(),
            Body::Stream(n) => data::stream(*n).boxed(),
        }
    }

    /// The payload in memory (for APIs taking a slice).
    pub async fn bytes(&self) -> Bytes {
        match self {
            Body::Mem(b) => b.clone(),
            Body::Stream(n) => Bytes::from(data::vec(*n).await),
        }
    }
}

/// Runs the file figure `figure` with `write(body)` then `read()` (returning the SHA-256
/// of what it read) per pair.
pub async fn run<W, WF, R, RF>(figure: &str, write: W, read: R) -> Result<Outcome, AnyError>
where
    W: Fn(Body) -> WF,
    WF: std::future::Future<Output = Result<(), AnyError>>,
    R: Fn() -> RF,
    RF: std::future::Future<Output = Result<Vec<u8>, AnyError>>,
{
    let (count, size, body) = match figure {
        "files_small" => {
            let size = var("WB_SMALL_BYTES");
            let b = Bytes::from(data::vec(size).await);
            (var("WB_SMALL_N"), size, Body::Mem(b))
        }
        "files_large" => {
            let size = var("WB_LARGE_BYTES");
            (1, size, Body::Stream(size))
        }
        other => return Err(format!("no file figure {other}").into()),
    };
    let want = data::hash(size).await;
    child::transfers(count, 2 * size, || async {
        write(body.clone()).await?;
        let got = read().await?;
        data::same(figure, &got, &want)
    })
    .await
}
