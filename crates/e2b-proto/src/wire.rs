//! The protobuf binary wire format, as much of it as envd's unary process calls need
//! (varints and length-delimited fields), for Connect's `application/proto` codec.
//!
//! connect-go serves every unary procedure in both codecs and answers in the one the
//! request came in; binary matters where bytes are carried: a `SendInput` of 1 MiB is
//! 1 MiB on the wire instead of 1.37 MB of base64 inside JSON, and nobody encodes it.
//!
//! ```
//! use e2b_proto::wire::{Reader, Value, Writer};
//!
//! let mut w = Writer::new();
//! w.varint(1, 42);
//! w.bytes(2, b"hi");
//! let buf = w.into_bytes();
//! let mut r = Reader::new(&buf);
//! assert_eq!(r.next_field().unwrap(), Some((1, Value::Varint(42))));
//! assert_eq!(r.next_field().unwrap(), Some((2, Value::Bytes(b"hi"))));
//! assert_eq!(r.next_field().unwrap(), None);
//! ```

use std::fmt;

/// Content type of a unary call in the binary codec.
pub const CONTENT_TYPE: &str = "application/proto";

/// Why a binary message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The bytes are not a valid encoding of the message.
    Malformed(String),
    /// The message names no process (its `ProcessSelector` is absent or empty).
    NoSelector,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Malformed(why) => write!(f, "{why}"),
            WireError::NoSelector => write!(f, "no process selector"),
        }
    }
}

impl std::error::Error for WireError {}

fn malformed(why: impl Into<String>) -> WireError {
    WireError::Malformed(why.into())
}

/// A message in the binary codec.
pub trait ProtoMessage: Sized {
    /// Its encoding.
    fn encode_proto(&self) -> Vec<u8>;
    /// Decodes one; fields it does not know are skipped, as protobuf does.
    fn decode_proto(buf: &[u8]) -> Result<Self, WireError>;
}

/// Builds one message, field by field.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Writer {
    /// An empty message.
    pub fn new() -> Writer {
        Writer::default()
    }

    fn tag(&mut self, field: u32, wire_type: u8) {
        put_varint(
            &mut self.buf,
            (u64::from(field) << 3) | u64::from(wire_type),
        );
    }

    /// A varint field (`uint32`, `uint64`, `bool`, an enum's number).
    pub fn varint(&mut self, field: u32, v: u64) {
        self.tag(field, 0);
        put_varint(&mut self.buf, v);
    }

    /// A length-delimited field (`bytes`, `string`, an encoded message).
    pub fn bytes(&mut self, field: u32, b: &[u8]) {
        self.tag(field, 2);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// A nested message, built by `body`.
    pub fn message(&mut self, field: u32, body: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::new();
        body(&mut inner);
        self.bytes(field, &inner.buf);
    }

    /// A nested message whose only field is the length-delimited `inner_field` holding
    /// the concatenation of `parts`, written without an intermediate buffer.
    pub fn message_with_bytes(&mut self, field: u32, inner_field: u32, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = Vec::with_capacity(12);
        put_varint(&mut head, (u64::from(inner_field) << 3) | 2);
        put_varint(&mut head, len as u64);
        self.tag(field, 2);
        put_varint(&mut self.buf, (head.len() + len) as u64);
        self.buf.reserve(head.len() + len);
        self.buf.extend_from_slice(&head);
        for part in parts {
            self.buf.extend_from_slice(part);
        }
    }

    /// The encoded message.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// One field's value as it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1 (8 bytes, little-endian).
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5 (4 bytes, little-endian).
    Fixed32(u32),
}

impl<'a> Value<'a> {
    /// The value of a varint field (`what` names the field in the error).
    pub fn as_varint(self, what: &str) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(malformed(format!("{what}: not a varint"))),
        }
    }

    /// The value of a length-delimited field.
    pub fn as_bytes(self, what: &str) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(malformed(format!("{what}: not length-delimited"))),
        }
    }

    /// A `uint32` field (the upper bits of a longer varint are dropped, as protobuf does).
    pub fn as_u32(self, what: &str) -> Result<u32, WireError> {
        Ok(self.as_varint(what)? as u32)
    }

    /// A `string` field, which must be UTF-8.
    pub fn as_string(self, what: &str) -> Result<String, WireError> {
        let b = self.as_bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{what}: invalid UTF-8")))
    }
}

/// Calls `each` with every field of the message `buf`, in order (the loop every decoder
/// needs; fields it does not know the callee skips).
pub fn each_field<'a>(
    buf: &'a [u8],
    mut each: impl FnMut(u32, Value<'a>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, v)) = r.next_field()? {
        each(field, v)?;
    }
    Ok(())
}

/// Reads the fields of one message in order.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, one whole message.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| malformed("unexpected end of a varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(malformed("a varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(malformed("a field runs past the end of the message"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field number and value; `None` at the end of the message.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| malformed("a field number too large"))?;
        if field == 0 {
            return Err(malformed("field number 0"));
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| malformed("a length too large"))?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            t => return Err(malformed(format!("wire type {t} is not supported"))),
        };
        Ok(Some((field, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut w = Writer::new();
            w.varint(7, v);
            let buf = w.into_bytes();
            let mut r = Reader::new(&buf);
            assert_eq!(r.next_field().unwrap(), Some((7, Value::Varint(v))));
            assert_eq!(r.next_field().unwrap(), None);
        }
        // 300 in field 1 is the protobuf documentation's example.
        let mut w = Writer::new();
        w.varint(1, 150);
        assert_eq!(w.into_bytes(), [0x08, 0x96, 0x01]);
    }

    #[test]
    fn broken_messages_are_errors_not_panics() {
        for bad in [
            &[0x08][..],             // a key without its varint
            &[0x0a, 0x05, 0x61][..], // a length past the end
            &[0x0b][..],             // wire type 3 (groups)
            &[0x00, 0x01][..],       // field 0
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ][..],
        ] {
            let mut r = Reader::new(bad);
            let mut last = Ok(None);
            for _ in 0..4 {
                last = r.next_field();
                if !matches!(last, Ok(Some(_))) {
                    break;
                }
            }
            assert!(matches!(last, Err(WireError::Malformed(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_message_with_bytes_is_the_nested_message() {
        for len in [0, 1, 127, 128, 70_000] {
            let data = vec![7u8; len];
            let mut nested = Writer::new();
            nested.message(2, |m| m.bytes(1, &data));
            let mut direct = Writer::new();
            let (a, b) = data.split_at(len / 3);
            direct.message_with_bytes(2, 1, &[a, b]);
            assert_eq!(direct.into_bytes(), nested.into_bytes(), "{len}");
        }
    }

    #[test]
    fn fixed_width_fields_are_read_and_skippable() {
        let buf = [0x09, 1, 0, 0, 0, 0, 0, 0, 0, 0x15, 2, 0, 0, 0];
        let mut r = Reader::new(&buf);
        assert_eq!(r.next_field().unwrap(), Some((1, Value::Fixed64(1))));
        assert_eq!(r.next_field().unwrap(), Some((2, Value::Fixed32(2))));
        assert_eq!(r.next_field().unwrap(), None);
    }
}
