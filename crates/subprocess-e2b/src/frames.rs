//! The record readers' answer (`helper/tail.rs`): frames on stdout, each a kind byte, a
//! little-endian `u32` length and the payload, cut anywhere by envd's chunks and put back
//! together here.

use bytes::{Buf, Bytes, BytesMut};

/// One frame: its kind (`m`, `p`, `i`, `s`, `o`, `e`, `g`, `x`, `u`, `n`, `r`, `R`, `c`)
/// and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) payload: Bytes,
}

/// Longest payload accepted (the helper sends at most 64 KiB of output, 1 MiB of meta).
const MAX_PAYLOAD: usize = 2 << 20;

/// An incremental frame reader.
#[derive(Default)]
pub(crate) struct Deframer {
    buf: BytesMut,
}

impl Deframer {
    /// Adds `data`; the complete frames so far, or an error for a malformed stream.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Vec<Frame>, String> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        while self.buf.len() >= 5 {
            let len =
                u32::from_le_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
            if len > MAX_PAYLOAD {
                return Err(format!("a record frame of {len} bytes"));
            }
            if self.buf.len() < 5 + len {
                break;
            }
            let kind = self.buf[0];
            self.buf.advance(5);
            let payload = self.buf.split_to(len).freeze();
            out.push(Frame { kind, payload });
        }
        Ok(out)
    }

    /// True when a frame was cut in the middle.
    pub(crate) fn partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, p: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
        v
    }

    #[test]
    fn frames_cut_anywhere_come_back_whole() {
        let mut all = frame(b'm', b"{\"a\":1}");
        all.extend(frame(b'o', b"hello"));
        all.extend(frame(b'x', b"exit 3"));
        for cut in 0..all.len() {
            let mut d = Deframer::default();
            let mut got = d.push(&all[..cut]).unwrap();
            got.extend(d.push(&all[cut..]).unwrap());
            assert!(!d.partial());
            let kinds: Vec<u8> = got.iter().map(|f| f.kind).collect();
            assert_eq!(kinds, b"mox");
            assert_eq!(&got[1].payload[..], b"hello");
        }
        let mut d = Deframer::default();
        assert!(d.push(&[b'o', 0xff, 0xff, 0xff, 0x7f]).is_err());
    }
}
