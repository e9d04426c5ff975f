//! Deterministic incompressible test data, generated chunk by chunk (never held whole),
//! and its SHA-256 for read-back checks.

use bytes::Bytes;
use futures::StreamExt as _;
use sha2::{Digest, Sha256};

use super::child::AnyError;

const CHUNK: usize = 256 * 1024;

/// `total` bytes of xorshift output in chunks of 256 KiB.
pub fn stream(total: u64) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut left = total;
    futures::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = (left as usize).min(CHUNK);
        let mut buf = Vec::with_capacity(n + 8);
        while buf.len() < n {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            buf.extend_from_slice(&state.to_le_bytes());
        }
        buf.truncate(n);
        left -= n as u64;
        std::task::Poll::Ready(Some(Bytes::from(buf)))
    })
}

/// The whole of [`stream`] in memory (for the small files and the APIs that take a slice).
pub async fn vec(total: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(total as usize);
    let mut s = Box::pin(stream(total));
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b);
    }
    out
}

/// SHA-256 of [`stream`]`(total)`.
pub async fn hash(total: u64) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut s = Box::pin(stream(total));
    while let Some(b) = s.next().await {
        h.update(&b);
    }
    h.finalize().to_vec()
}

/// SHA-256 of a byte stream with any error type.
pub async fn hash_of<S, E>(s: S) -> Result<Vec<u8>, AnyError>
where
    S: futures::Stream<Item = Result<Bytes, E>>,
    E: Into<AnyError>,
{
    let mut s = std::pin::pin!(s);
    let mut h = Sha256::new();
    while let Some(b) = s.next().await {
        h.update(&b.map_err(Into::into)?);
    }
    Ok(h.finalize().to_vec())
}

/// An error unless `got == want` (the read-back check).
pub fn same(what: &str, got: &[u8], want: &[u8]) -> Result<(), AnyError> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: the bytes read back differ from those written").into())
    }
}
