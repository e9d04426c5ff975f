//! Bounded capture of one output stream: keeps the first `cap` bytes, counts the rest and
//! discards it, and cuts at a UTF-8 boundary when the stream was truncated.

use serde::{Deserialize, Serialize};

/// One captured output stream (stdout or stderr) of a command.
///
/// `bytes` are exactly what the program wrote (up to the cap); `text` is the same bytes
/// decoded as UTF-8, invalid sequences replaced by U+FFFD. When the stream was longer than
/// the cap, the kept prefix ends at a UTF-8 character boundary (a multi-byte character cut
/// by the cap is dropped whole), so `bytes.len()` may be up to 3 bytes below the cap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedOutput {
    /// The kept output as text (lossy UTF-8).
    pub text: String,
    /// The kept output, raw (not serialized: `text` is the wire form).
    #[serde(skip)]
    pub bytes: Vec<u8>,
    /// True when the program wrote more than the cap.
    pub truncated: bool,
    /// How many bytes the program wrote in all (kept and discarded).
    pub total_bytes: u64,
}

/// Accumulates a stream in bounded memory.
#[derive(Debug)]
pub(crate) struct Capture {
    cap: usize,
    kept: Vec<u8>,
    total: u64,
}

impl Capture {
    /// A capture keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Capture {
        Capture {
            cap,
            kept: Vec::with_capacity(cap.min(64 * 1024)),
            total: 0,
        }
    }

    /// Adds a chunk: the part that fits under the cap is kept, the rest only counted.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = self.cap.saturating_sub(self.kept.len());
        let take = room.min(chunk.len());
        self.kept.extend_from_slice(&chunk[..take]);
    }

    /// The result; cut back to a character boundary if truncated.
    pub(crate) fn finish(self) -> CapturedOutput {
        let truncated = self.total > self.kept.len() as u64;
        let mut bytes = self.kept;
        if truncated {
            let keep = utf8_cut(&bytes);
            bytes.truncate(keep);
        }
        CapturedOutput {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            truncated,
            total_bytes: self.total,
        }
    }
}

/// The length of `buf` without a trailing *incomplete* UTF-8 character: if the last
/// (up to 4) bytes start a multi-byte sequence that is cut short, the cut is moved to
/// before its lead byte. Invalid bytes are not touched (they are data, shown as U+FFFD).
pub(crate) fn utf8_cut(buf: &[u8]) -> usize {
    let len = buf.len();
    // Look back over at most 3 continuation bytes for the lead byte.
    for back in 1..=len.min(4) {
        let i = len - back;
        let b = buf[i];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: keep looking for the lead
        }
        let need = match b {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return len, // not a lead byte: invalid data, keep as is
        };
        // Only a *valid prefix* is dropped: the continuation bytes seen so far must be
        // all the bytes after the lead.
        return if back < need { i } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_only_incomplete_trailing_chars() {
        assert_eq!(utf8_cut(b"abc"), 3);
        assert_eq!(utf8_cut("aé".as_bytes()), 3);
        assert_eq!(utf8_cut(&"aé".as_bytes()[..2]), 1);
        assert_eq!(utf8_cut(&"a€".as_bytes()[..3]), 1);
        assert_eq!(utf8_cut(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(utf8_cut("a😀".as_bytes()), 5);
        assert_eq!(utf8_cut(b"ab\xff"), 3);
        assert_eq!(utf8_cut(b"ab\x80\x80"), 4);
        assert_eq!(utf8_cut(b""), 0);
    }

    #[test]
    fn keeps_prefix_and_counts_all() {
        let mut c = Capture::new(4);
        c.push(b"ab");
        c.push("cé".as_bytes()); // c + 2-byte é: the cap falls inside é
        c.push(b"zzz");
        let out = c.finish();
        assert_eq!(out.bytes, b"abc");
        assert_eq!(out.text, "abc");
        assert!(out.truncated);
        assert_eq!(out.total_bytes, 8);
    }

    #[test]
    fn untruncated_keeps_everything_even_invalid() {
        let mut c = Capture::new(10);
        c.push(b"a\xffb\xc3");
        let out = c.finish();
        assert!(!out.truncated);
        assert_eq!(out.bytes, b"a\xffb\xc3");
        assert_eq!(out.text, "a\u{fffd}b\u{fffd}");
    }
}
