//! Decoding one message of a server stream, with a cheap path for process output.
//!
//! Output dominates a process stream: `{"event":{"data":{"stdout":"<base64>"}}}`, one per
//! chunk of up to 32 KiB. Through serde that is a scan of the JSON string for escapes, an
//! owned copy of the base64 text, then the decode. [`StreamMessage::decode`] for
//! [`EventResponse`] recognises exactly that shape (any JSON whitespace between tokens, as
//! Go's protojson may add) and decodes the base64 straight from the frame. Anything else
//! (other events, escapes, another alphabet, unknown fields) goes through serde unchanged,
//! so the result is always what serde would give.

use base64::Engine as _;
use serde::de::DeserializeOwned;

use crate::proto::filesystem::WatchDirResponse;
use crate::proto::process::{DataEvent, EventResponse, ProcessEvent};

/// A message type carried by a server-streaming call.
pub(crate) trait StreamMessage: DeserializeOwned + Send + 'static {
    /// Decodes one frame's JSON payload.
    fn decode(payload: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(payload)
    }
}

impl StreamMessage for WatchDirResponse {}

impl StreamMessage for EventResponse {
    fn decode(payload: &[u8]) -> Result<Self, serde_json::Error> {
        if let Some(ev) = output_event(payload) {
            return Ok(EventResponse {
                event: ProcessEvent::Data(ev),
            });
        }
        serde_json::from_slice(payload)
    }
}

/// A cursor over JSON text that only knows the few tokens of an output event.
struct Cursor<'a> {
    s: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while let [b' ' | b'\t' | b'\n' | b'\r', rest @ ..] = self.s {
            self.s = rest;
        }
    }

    /// Skips whitespace, then consumes `tok` (exactly).
    fn eat(&mut self, tok: &[u8]) -> Option<()> {
        self.ws();
        self.s = self.s.strip_prefix(tok)?;
        Some(())
    }

    /// The raw bytes of a JSON string without escapes (`None` on a backslash).
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b"\"")?;
        let end = self.s.iter().position(|&b| b == b'"' || b == b'\\')?;
        if self.s[end] != b'"' {
            return None;
        }
        let (text, rest) = self.s.split_at(end);
        self.s = &rest[1..];
        Some(text)
    }
}

/// `{"event":{"data":{"stdout"|"stderr"|"pty":"<standard base64>"}}}` decoded without
/// serde; `None` for any other message (the caller falls back to serde).
fn output_event(payload: &[u8]) -> Option<DataEvent> {
    let mut c = Cursor { s: payload };
    c.eat(b"{")?;
    c.eat(b"\"event\"")?;
    c.eat(b":")?;
    c.eat(b"{")?;
    c.eat(b"\"data\"")?;
    c.eat(b":")?;
    c.eat(b"{")?;
    let wrap: fn(Vec<u8>) -> DataEvent = match c.plain_string()? {
        b"stdout" => DataEvent::Stdout,
        b"stderr" => DataEvent::Stderr,
        b"pty" => DataEvent::Pty,
        _ => return None,
    };
    c.eat(b":")?;
    c.eat(b"\"")?;
    // The value runs to the closing quote before the final `}}}`, found from the end (a
    // scan from the front would touch every byte once more). A quote or backslash inside
    // is not base64, so such a message fails the decode below and goes through serde.
    let mut rest = c.s;
    for close in [b'}', b'}', b'}', b'"'] {
        rest = rest.trim_ascii_end().strip_suffix(&[close])?;
    }
    let text = rest;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    Some(wrap(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_way(p: &str) -> EventResponse {
        serde_json::from_str(p).unwrap()
    }

    #[test]
    fn output_events_decode_as_serde_does() {
        for p in [
            r#"{"event":{"data":{"stdout":"aGkK"}}}"#,
            r#"{"event":{"data":{"stderr":"AAEC/w=="}}}"#,
            r#"{"event":{"data":{"pty":""}}}"#,
            " {\"event\" : {\"data\":\t{\"stdout\": \"aGkK\"} }\n}\r\n",
        ] {
            assert!(output_event(p.as_bytes()).is_some(), "fast path for {p}");
            assert_eq!(
                EventResponse::decode(p.as_bytes()).unwrap(),
                serde_way(p),
                "{p}"
            );
        }
    }

    #[test]
    fn anything_else_goes_through_serde() {
        for p in [
            // Another alphabet, no padding, an escape, an extra field, other events.
            r#"{"event":{"data":{"stdout":"-_8B"}}}"#,
            r#"{"event":{"data":{"stdout":"aGk"}}}"#,
            r#"{"event":{"data":{"stdout":"aGk\u004b"}}}"#,
            r#"{"event":{"data":{"stdout":"aGkK"}},"x":1}"#,
            r#"{"event":{"start":{"pid":7}}}"#,
            r#"{"event":{"end":{"exitCode":3,"exited":true}}}"#,
            r#"{"event":{"keepalive":{}}}"#,
        ] {
            assert!(output_event(p.as_bytes()).is_none(), "no fast path for {p}");
            assert_eq!(EventResponse::decode(p.as_bytes()).unwrap(), serde_way(p));
        }
    }

    #[test]
    fn malformed_output_is_still_an_error() {
        for p in [
            r#"{"event":{"data":{"stdout":"a*Kk"}}}"#,
            r#"{"event":{"data":{"stdout":"aGkK"}}"#,
            r#"{"event":{"data":{"stdout":"aGkK"}}}}"#,
        ] {
            assert!(EventResponse::decode(p.as_bytes()).is_err(), "{p}");
        }
    }

    #[test]
    fn a_large_chunk_round_trips() {
        let raw: Vec<u8> = (0..48 * 1024u32).map(|i| (i * 7 + 3) as u8).collect();
        let msg = EventResponse {
            event: ProcessEvent::Data(DataEvent::Stdout(raw.clone())),
        };
        let json = serde_json::to_vec(&msg).unwrap();
        assert_eq!(output_event(&json), Some(DataEvent::Stdout(raw)));
    }
}
