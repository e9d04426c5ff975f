//! Bounded capture of one output stream for the bash tool: keeps the first `cap` bytes,
//! counts the rest and discards it, and cuts at a UTF-8 boundary when the stream was
//! truncated (exec-world's `output::Prefix` and `utf8_complete_len`), as a serde type.

use exec_world::output::{Prefix, utf8_complete_len};
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

/// Accumulates a stream in bounded memory (exec-world's [`Prefix`]).
#[derive(Debug)]
pub(crate) struct Capture(Prefix);

impl Capture {
    /// A capture keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Capture {
        Capture(Prefix::new(cap))
    }

    /// Adds a chunk: the part that fits under the cap is kept, the rest only counted.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.0.push(chunk);
    }

    /// The result; cut back to a character boundary if truncated.
    pub(crate) fn finish(self) -> CapturedOutput {
        let (truncated, total_bytes) = (self.0.truncated(), self.0.total());
        let mut bytes = self.0.into_vec();
        if truncated {
            bytes.truncate(utf8_complete_len(&bytes));
        }
        CapturedOutput {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            truncated,
            total_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_only_incomplete_trailing_chars() {
        assert_eq!(utf8_complete_len(b"abc"), 3);
        assert_eq!(utf8_complete_len("aé".as_bytes()), 3);
        assert_eq!(utf8_complete_len(&"aé".as_bytes()[..2]), 1);
        assert_eq!(utf8_complete_len(&"a€".as_bytes()[..3]), 1);
        assert_eq!(utf8_complete_len(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(utf8_complete_len("a😀".as_bytes()), 5);
        assert_eq!(utf8_complete_len(b"ab\xff"), 3);
        assert_eq!(utf8_complete_len(b"ab\x80\x80"), 4);
        assert_eq!(utf8_complete_len(b""), 0);
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
