//! LSP base-protocol framing: `Content-Length: N\r\n[other headers\r\n]\r\n<N bytes>`.
//! [`encode`] frames a body; [`FrameDecoder`] is an incremental parser that accepts bytes
//! in any split (headers cut across reads, several messages in one read).

use bytes::{Buf, Bytes, BytesMut};

/// Default largest body accepted: 64 MiB.
pub const DEFAULT_MAX_BODY: usize = 64 * 1024 * 1024;
/// Largest header block accepted (all header lines together).
pub const MAX_HEADER: usize = 8 * 1024;

/// A framing violation. After [`FrameError::TooLarge`] the decoder skips that body and
/// goes on with the next message; after the others the stream is out of sync and the
/// decoder stays failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A message announced a body larger than the limit; it is skipped.
    #[error("message body of {length} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// The announced `Content-Length`.
        length: usize,
        /// The decoder's limit.
        limit: usize,
    },
    /// The header block has no `Content-Length`, a malformed line, or is too long.
    #[error("bad header: {0}")]
    BadHeader(String),
}

/// Frames `body` with a `Content-Length` header.
///
/// ```
/// let f = agent_tools::lsp::framing::encode(br#"{"jsonrpc":"2.0"}"#);
/// assert_eq!(&f[..], &b"Content-Length: 17\r\n\r\n{\"jsonrpc\":\"2.0\"}"[..]);
/// ```
pub fn encode(body: &[u8]) -> Bytes {
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    let mut out = BytesMut::with_capacity(header.len() + body.len());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

/// Incremental decoder: [`FrameDecoder::push`] bytes as they arrive, then call
/// [`FrameDecoder::next_frame`] until it returns `Ok(None)`.
///
/// ```
/// use agent_tools::lsp::framing::FrameDecoder;
/// let mut d = FrameDecoder::new(1024);
/// d.push(b"Content-Len");
/// assert_eq!(d.next_frame(), Ok(None));
/// d.push(b"gth: 2\r\n\r\n{}Content-Length: 2\r\n\r\n[]");
/// assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b"{}"[..]));
/// assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b"[]"[..]));
/// assert_eq!(d.next_frame(), Ok(None));
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_body: usize,
    /// Body length of the current message once its header is parsed.
    body_len: Option<usize>,
    /// Bytes of an oversize body still to be discarded.
    skip: usize,
    /// A non-recoverable error, repeated on every call.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder refusing bodies larger than `max_body` bytes.
    pub fn new(max_body: usize) -> FrameDecoder {
        FrameDecoder {
            buf: BytesMut::new(),
            max_body,
            body_len: None,
            skip: 0,
            failed: None,
        }
    }

    /// Appends received bytes. Bytes of a skipped oversize body are dropped at once, so
    /// memory stays bounded by the limit plus one read.
    pub fn push(&mut self, data: &[u8]) {
        let mut data = data;
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete body, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.skip > 0 {
            // Still discarding an oversize body (push drops the bytes as they come).
            return Ok(None);
        }
        let len = match self.body_len {
            Some(len) => len,
            None => {
                let Some(end) = find_header_end(&self.buf) else {
                    if self.buf.len() > MAX_HEADER {
                        return Err(self.fail(FrameError::BadHeader(format!(
                            "no end of headers within {MAX_HEADER} bytes"
                        ))));
                    }
                    return Ok(None);
                };
                let header = self.buf.split_to(end + 4);
                let len = match parse_header(&header[..end]) {
                    Ok(len) => len,
                    Err(e) => return Err(self.fail(e)),
                };
                if len > self.max_body {
                    let have = self.buf.len().min(len);
                    self.buf.advance(have);
                    self.skip = len - have;
                    return Err(FrameError::TooLarge {
                        length: len,
                        limit: self.max_body,
                    });
                }
                self.body_len = Some(len);
                len
            }
        };
        if self.buf.len() < len {
            self.buf.reserve(len - self.buf.len());
            return Ok(None);
        }
        self.body_len = None;
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    fn fail(&mut self, e: FrameError) -> FrameError {
        self.failed = Some(e.clone());
        self.buf.clear();
        e
    }
}

fn find_header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The `Content-Length` of a header block (without the final empty line). Header names
/// are case-insensitive; `Content-Type` and unknown headers are ignored.
fn parse_header(block: &[u8]) -> Result<usize, FrameError> {
    let text = std::str::from_utf8(block)
        .map_err(|_| FrameError::BadHeader("header is not ASCII".into()))?;
    let mut length = None;
    for line in text.split("\r\n") {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| FrameError::BadHeader(format!("malformed line {line:?}")))?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            let n = value
                .trim()
                .parse::<usize>()
                .map_err(|_| FrameError::BadHeader(format!("bad Content-Length {value:?}")))?;
            length = Some(n);
        }
    }
    length.ok_or_else(|| FrameError::BadHeader("missing Content-Length".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(d: &mut FrameDecoder) -> Vec<Result<Bytes, FrameError>> {
        let mut out = Vec::new();
        loop {
            match d.next_frame() {
                Ok(Some(b)) => out.push(Ok(b)),
                Ok(None) => return out,
                Err(e) => {
                    let fatal = !matches!(e, FrameError::TooLarge { .. });
                    out.push(Err(e));
                    if fatal {
                        return out;
                    }
                }
            }
        }
    }

    #[test]
    fn every_split_of_two_messages_decodes_the_same() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&encode(br#"{"id":1}"#));
        wire.extend_from_slice(
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: 7\r\n\r\n\"h\xc3\xa9llo",
        );
        for cut1 in 0..wire.len() {
            for cut2 in cut1..wire.len() {
                let mut d = FrameDecoder::new(100);
                let mut got = Vec::new();
                for part in [&wire[..cut1], &wire[cut1..cut2], &wire[cut2..]] {
                    d.push(part);
                    got.extend(frames(&mut d));
                }
                let want: Vec<Result<Bytes, FrameError>> = vec![
                    Ok(Bytes::from_static(br#"{"id":1}"#)),
                    Ok(Bytes::from_static(b"\"h\xc3\xa9llo")),
                ];
                assert_eq!(got, want, "cuts at {cut1}, {cut2}");
            }
        }
    }

    #[test]
    fn merged_messages_in_one_read() {
        let mut d = FrameDecoder::new(100);
        let mut wire = Vec::new();
        for i in 0..5 {
            wire.extend_from_slice(&encode(format!("[{i}]").as_bytes()));
        }
        d.push(&wire);
        let got: Vec<_> = frames(&mut d).into_iter().map(|r| r.ok()).collect();
        assert_eq!(got.len(), 5);
        assert_eq!(got[4].as_deref(), Some(&b"[4]"[..]));
    }

    #[test]
    fn oversize_body_is_refused_and_skipped() {
        let mut d = FrameDecoder::new(10);
        let big = vec![b'x'; 25];
        d.push(&encode(&big)[..30]); // header + part of the body
        assert_eq!(
            d.next_frame(),
            Err(FrameError::TooLarge {
                length: 25,
                limit: 10
            })
        );
        assert_eq!(d.next_frame(), Ok(None));
        d.push(&encode(&big)[30..]); // the rest of the big body, dropped
        d.push(&encode(b"{}"));
        assert_eq!(d.next_frame(), Ok(Some(Bytes::from_static(b"{}"))));
        assert_eq!(d.next_frame(), Ok(None));
    }

    #[test]
    fn bad_headers_are_fatal() {
        let mut d = FrameDecoder::new(10);
        d.push(b"Content-Type: x\r\n\r\n{}");
        assert!(matches!(d.next_frame(), Err(FrameError::BadHeader(_))));
        d.push(&encode(b"{}"));
        assert!(matches!(d.next_frame(), Err(FrameError::BadHeader(_))));

        let mut d = FrameDecoder::new(10);
        d.push(b"Content-Length: -3\r\n\r\n");
        assert!(matches!(d.next_frame(), Err(FrameError::BadHeader(_))));

        let mut d = FrameDecoder::new(10);
        d.push(&vec![b'a'; MAX_HEADER + 1]);
        assert!(matches!(d.next_frame(), Err(FrameError::BadHeader(_))));
    }
}
