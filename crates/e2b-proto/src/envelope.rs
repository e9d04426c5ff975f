//! Connect streaming envelopes: 1 flag byte, a 4-byte big-endian length, then the payload.
//!
//! [`FrameDecoder`] is incremental: feed it whatever chunks the transport delivers (a frame
//! split across chunks, several frames in one chunk) and pop complete frames. A stream that
//! stops in the middle of a frame, or before its end-of-stream frame, is reported by the
//! caller as an error, never as success.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::connect::ConnectErrorBody;

/// Flag bit: the payload is compressed (never used by E2B).
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Flag bit: this is the end-of-stream frame.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Length of the envelope prefix.
pub const PREFIX_LEN: usize = 5;

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The flag byte.
    pub flags: u8,
    /// The payload (JSON here).
    pub payload: Bytes,
}

impl Frame {
    /// True for the end-of-stream frame.
    pub fn is_end_stream(&self) -> bool {
        self.flags & FLAG_END_STREAM != 0
    }
}

/// Encode one envelope.
pub fn encode(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// Encode a data envelope holding `msg` as JSON.
pub fn encode_json<T: Serialize>(msg: &T) -> Result<Bytes, serde_json::Error> {
    Ok(encode(0, &serde_json::to_vec(msg)?))
}

/// Encode the end-of-stream envelope: `{}` on success or `{"error":{...}}`.
pub fn encode_end(error: Option<&ConnectErrorBody>) -> Bytes {
    let end = EndStream {
        error: error.cloned(),
        metadata: None,
    };
    // Serializing these plain structs cannot fail; fall back to `{}` defensively.
    let json = serde_json::to_vec(&end).unwrap_or_else(|_| b"{}".to_vec());
    encode(FLAG_END_STREAM, &json)
}

/// The JSON of an end-of-stream frame.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndStream {
    /// Present when the RPC failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectErrorBody>,
    /// Trailers; connect-go omits them when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Why a byte stream could not be decoded into frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// A frame announced a length above the decoder's limit.
    #[error("envelope of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// Configured limit.
        limit: usize,
    },
    /// A compressed frame arrived; E2B never compresses and we do not negotiate it.
    #[error("compressed envelope received but compression was not negotiated")]
    Compressed,
    /// The stream ended inside a frame.
    #[error("stream ended inside an envelope ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes left over.
        buffered: usize,
    },
}

/// Incremental envelope decoder.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(64 * 1024 * 1024)
    }
}

impl FrameDecoder {
    /// A decoder refusing frames larger than `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max_frame,
        }
    }

    /// Append bytes received from the transport.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Pop the next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, EnvelopeError> {
        if self.buf.len() < PREFIX_LEN {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > self.max_frame {
            return Err(EnvelopeError::TooLarge {
                len,
                limit: self.max_frame,
            });
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(EnvelopeError::Compressed);
        }
        if self.buf.len() < PREFIX_LEN + len {
            self.buf.reserve(PREFIX_LEN + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(PREFIX_LEN);
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(Frame { flags, payload }))
    }

    /// Call when the transport has ended: an error if a partial frame is left.
    pub fn finish(&self) -> Result<(), EnvelopeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(EnvelopeError::Truncated {
                buffered: self.buf.len(),
            })
        }
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::Code;

    fn frames_of(chunks: &[&[u8]]) -> (Vec<Frame>, Result<(), EnvelopeError>) {
        let mut d = FrameDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
        }
        (out, d.finish())
    }

    #[test]
    fn documented_bytes() {
        let end = encode_end(None);
        assert_eq!(&end[..], &[0x02, 0, 0, 0, 2, b'{', b'}']);
        let start = br#"{"event":{"start":{"pid":1234}}}"#;
        let f = encode(0, start);
        assert_eq!(&f[..5], &[0, 0, 0, 0, 0x20]);
    }

    #[test]
    fn split_merged_and_truncated() {
        let a = encode(0, b"{\"a\":1}");
        let b = encode_end(Some(&ConnectErrorBody::new(Code::NotFound, "gone")));
        let mut all = a.to_vec();
        all.extend_from_slice(&b);
        // merged: both frames in one chunk
        let (fs, fin) = frames_of(&[&all]);
        assert_eq!(fs.len(), 2);
        assert!(fin.is_ok());
        assert!(fs[1].is_end_stream());
        let end: EndStream = serde_json::from_slice(&fs[1].payload).unwrap();
        assert_eq!(end.error.unwrap().code, Code::NotFound);
        // split at every byte
        let singles: Vec<&[u8]> = all.chunks(1).collect();
        let (fs, fin) = frames_of(&singles);
        assert_eq!(fs.len(), 2);
        assert!(fin.is_ok());
        // truncated inside the second frame
        let (fs, fin) = frames_of(&[&all[..all.len() - 3]]);
        assert_eq!(fs.len(), 1);
        assert!(matches!(fin, Err(EnvelopeError::Truncated { .. })));
        // truncated inside the prefix
        let (fs, fin) = frames_of(&[&all[..2]]);
        assert!(fs.is_empty());
        assert!(fin.is_err());
    }

    #[test]
    fn oversized_and_compressed_frames_are_refused() {
        let mut d = FrameDecoder::new(4);
        d.push(&encode(0, b"12345"));
        assert!(matches!(
            d.next_frame(),
            Err(EnvelopeError::TooLarge { len: 5, limit: 4 })
        ));
        let mut d = FrameDecoder::default();
        d.push(&encode(FLAG_COMPRESSED, b"x"));
        assert_eq!(d.next_frame(), Err(EnvelopeError::Compressed));
    }
}

/// Property tests of the decoder (bounded: 128 cases each, a few hundred bytes).
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// Frames: flags 0 (data) or 2 (end of stream), payloads of 0–300 bytes.
    fn frames() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
        prop::collection::vec(
            (
                prop::sample::select(vec![0u8, FLAG_END_STREAM]),
                prop::collection::vec(any::<u8>(), 0..300),
            ),
            0..8,
        )
    }

    fn wire(frames: &[(u8, Vec<u8>)]) -> Vec<u8> {
        frames
            .iter()
            .flat_map(|(f, p)| encode(*f, p).to_vec())
            .collect()
    }

    /// Decodes `bytes` fed in chunks cut at `cuts` (positions taken modulo the length).
    fn decode(bytes: &[u8], cuts: &[usize]) -> (Vec<Frame>, Result<(), EnvelopeError>) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.push(0);
        points.push(bytes.len());
        points.sort_unstable();
        let mut d = FrameDecoder::new(1024);
        let mut out = Vec::new();
        for w in points.windows(2) {
            d.push(&bytes[w[0]..w[1]]);
            while let Ok(Some(f)) = d.next_frame() {
                out.push(f);
            }
        }
        (out, d.finish())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// However the transport splits the bytes, the frames come out whole and in order.
        #[test]
        fn any_split_yields_the_frames(fs in frames(), cuts in prop::collection::vec(any::<usize>(), 0..12)) {
            let bytes = wire(&fs);
            let (got, fin) = decode(&bytes, &cuts);
            prop_assert!(fin.is_ok());
            let got: Vec<(u8, Vec<u8>)> = got.into_iter().map(|f| (f.flags, f.payload.to_vec())).collect();
            prop_assert_eq!(got, fs);
        }

        /// A stream cut inside a frame is Truncated, after a prefix of the frames.
        #[test]
        fn a_cut_inside_a_frame_is_truncated(fs in frames(), at in any::<usize>()) {
            let bytes = wire(&fs);
            prop_assume!(!bytes.is_empty());
            let at = at % bytes.len();
            let mut bounds = vec![0usize];
            for (_, p) in &fs {
                let last = *bounds.last().unwrap_or(&0);
                bounds.push(last + PREFIX_LEN + p.len());
            }
            let (got, fin) = decode(&bytes[..at], &[]);
            let whole = bounds.iter().filter(|b| **b <= at).count() - 1;
            prop_assert_eq!(got.len(), whole);
            prop_assert_eq!(fin.is_err(), !bounds.contains(&at));
        }

        /// Arbitrary bytes never panic the decoder; every frame respects the limit and a
        /// compressed or oversized prefix is an error, never a frame.
        #[test]
        fn arbitrary_bytes_are_frames_or_errors(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut d = FrameDecoder::new(256);
            d.push(&bytes);
            let mut consumed = 0usize;
            while let Ok(Some(f)) = d.next_frame() {
                prop_assert!(f.payload.len() <= 256);
                prop_assert_eq!(f.flags & FLAG_COMPRESSED, 0);
                consumed += PREFIX_LEN + f.payload.len();
            }
            prop_assert_eq!(consumed + d.buffered(), bytes.len());
        }
    }
}
