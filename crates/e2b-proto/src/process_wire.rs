//! The unary messages of `process.Process` in the binary codec (field numbers of envd's
//! `spec/process/process.proto`); the streaming calls stay protobuf-JSON.
//!
//! ```
//! use e2b_proto::process::{ProcessInput, ProcessSelector, SendInputRequest};
//! use e2b_proto::wire::ProtoMessage;
//!
//! let req = SendInputRequest {
//!     process: ProcessSelector::Pid(7),
//!     input: Some(ProcessInput::Stdin(b"hi".to_vec())),
//! };
//! let buf = req.encode_proto();
//! assert_eq!(buf, [0x0a, 0x02, 0x08, 0x07, 0x12, 0x04, 0x0a, 0x02, b'h', b'i']);
//! assert_eq!(SendInputRequest::decode_proto(&buf).unwrap(), req);
//! ```

use super::process::{
    CloseStdinRequest, Empty, ListResponse, ProcessConfig, ProcessInfo, ProcessInput,
    ProcessSelector, Pty, PtySize, SendInputRequest, SendSignalRequest, Signal, UpdateRequest,
};
use super::wire::{ProtoMessage, Value, WireError, Writer, each_field};

fn malformed(why: impl Into<String>) -> WireError {
    WireError::Malformed(why.into())
}

/// A `SendInput` of the concatenation of `parts` to stdin, encoded with one copy of
/// each part (what [`SendInputRequest::encode_proto`] gives for their joined bytes).
///
/// ```
/// use e2b_proto::process::{ProcessInput, ProcessSelector, SendInputRequest};
/// use e2b_proto::process_wire::encode_stdin_parts;
/// use e2b_proto::wire::ProtoMessage;
///
/// let sel = ProcessSelector::Pid(3);
/// let joined = SendInputRequest {
///     process: sel.clone(),
///     input: Some(ProcessInput::Stdin(b"line\ndata".to_vec())),
/// };
/// assert_eq!(encode_stdin_parts(&sel, &[b"line\n", b"data"]), joined.encode_proto());
/// ```
pub fn encode_stdin_parts(process: &ProcessSelector, parts: &[&[u8]]) -> Vec<u8> {
    encode_input(process, Some((1, parts)))
}

/// A `SendInput`: the selector, then the input (`ProcessInput`'s member number and the
/// parts of its bytes), whose bytes are copied once, straight into the message.
fn encode_input(process: &ProcessSelector, input: Option<(u32, &[&[u8]])>) -> Vec<u8> {
    let mut w = Writer::new();
    put_selector(&mut w, 1, process);
    if let Some((member, parts)) = input {
        w.message_with_bytes(2, member, parts);
    }
    w.into_bytes()
}

fn put_selector(w: &mut Writer, field: u32, sel: &ProcessSelector) {
    w.message(field, |m| match sel {
        ProcessSelector::Pid(pid) => m.varint(1, u64::from(*pid)),
        ProcessSelector::Tag(tag) => m.bytes(2, tag.as_bytes()),
    });
}

/// The selector (field 1) of a request `buf`, or [`WireError::NoSelector`] when it is
/// absent or names neither member; `other` gets every other field.
fn with_selector<'a>(
    buf: &'a [u8],
    mut other: impl FnMut(u32, Value<'a>) -> Result<(), WireError>,
) -> Result<ProcessSelector, WireError> {
    let mut sel = None;
    each_field(buf, |field, v| {
        if field != 1 {
            return other(field, v);
        }
        each_field(v.as_bytes("process")?, |f, v| {
            match f {
                1 => sel = Some(ProcessSelector::Pid(v.as_u32("selector.pid")?)),
                2 => sel = Some(ProcessSelector::Tag(v.as_string("selector.tag")?)),
                _ => {}
            }
            Ok(())
        })
    })?;
    sel.ok_or(WireError::NoSelector)
}

impl ProtoMessage for Empty {
    fn encode_proto(&self) -> Vec<u8> {
        Vec::new()
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        each_field(buf, |_, _| Ok(()))?;
        Ok(Empty {})
    }
}

impl ProtoMessage for SendInputRequest {
    /// The input's bytes are copied once, straight into the message (a nested
    /// [`Writer::message`] would copy them twice more).
    fn encode_proto(&self) -> Vec<u8> {
        let input = self.input.as_ref().map(|input| match input {
            ProcessInput::Stdin(b) => (1, b.as_slice()),
            ProcessInput::Pty(b) => (2, b.as_slice()),
        });
        match input {
            Some((member, data)) => encode_input(&self.process, Some((member, &[data]))),
            None => encode_input(&self.process, None),
        }
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        let mut input = None;
        let process = with_selector(buf, |field, v| {
            if field != 2 {
                return Ok(());
            }
            each_field(v.as_bytes("input")?, |f, v| {
                match f {
                    1 => input = Some(ProcessInput::Stdin(v.as_bytes("stdin")?.to_vec())),
                    2 => input = Some(ProcessInput::Pty(v.as_bytes("pty")?.to_vec())),
                    _ => {}
                }
                Ok(())
            })
        })?;
        Ok(SendInputRequest { process, input })
    }
}

impl ProtoMessage for SendSignalRequest {
    fn encode_proto(&self) -> Vec<u8> {
        let mut w = Writer::new();
        put_selector(&mut w, 1, &self.process);
        if self.signal != Signal::Unspecified {
            w.varint(2, self.signal.number() as u64);
        }
        w.into_bytes()
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        let mut signal = Signal::Unspecified;
        let process = with_selector(buf, |field, v| {
            if field == 2 {
                // An enum is an int32: a negative one is sign-extended to 64 bits.
                let n = i64::from(v.as_varint("signal")? as i32);
                signal = Signal::from_number(n)
                    .ok_or_else(|| malformed(format!("invalid Signal: {n}")))?;
            }
            Ok(())
        })?;
        Ok(SendSignalRequest { process, signal })
    }
}

impl ProtoMessage for UpdateRequest {
    fn encode_proto(&self) -> Vec<u8> {
        let mut w = Writer::new();
        put_selector(&mut w, 1, &self.process);
        if let Some(pty) = &self.pty {
            w.message(2, |m| {
                if let Some(size) = &pty.size {
                    m.message(1, |s| {
                        if size.cols != 0 {
                            s.varint(1, u64::from(size.cols));
                        }
                        if size.rows != 0 {
                            s.varint(2, u64::from(size.rows));
                        }
                    });
                }
            });
        }
        w.into_bytes()
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        let mut pty = None;
        let process = with_selector(buf, |field, v| {
            if field != 2 {
                return Ok(());
            }
            let mut p: Pty = pty.unwrap_or_default();
            each_field(v.as_bytes("pty")?, |f, v| {
                if f != 1 {
                    return Ok(());
                }
                let mut size: PtySize = p.size.unwrap_or_default();
                each_field(v.as_bytes("pty.size")?, |f, v| {
                    match f {
                        1 => size.cols = v.as_u32("pty.size.cols")?,
                        2 => size.rows = v.as_u32("pty.size.rows")?,
                        _ => {}
                    }
                    Ok(())
                })?;
                p.size = Some(size);
                Ok(())
            })?;
            pty = Some(p);
            Ok(())
        })?;
        Ok(UpdateRequest { process, pty })
    }
}

impl ProtoMessage for CloseStdinRequest {
    fn encode_proto(&self) -> Vec<u8> {
        let mut w = Writer::new();
        put_selector(&mut w, 1, &self.process);
        w.into_bytes()
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        let process = with_selector(buf, |_, _| Ok(()))?;
        Ok(CloseStdinRequest { process })
    }
}

fn put_config(w: &mut Writer, c: &ProcessConfig) {
    if !c.cmd.is_empty() {
        w.bytes(1, c.cmd.as_bytes());
    }
    for a in &c.args {
        w.bytes(2, a.as_bytes());
    }
    for (k, v) in &c.envs {
        w.message(3, |e| {
            e.bytes(1, k.as_bytes());
            e.bytes(2, v.as_bytes());
        });
    }
    if let Some(cwd) = &c.cwd {
        w.bytes(4, cwd.as_bytes());
    }
}

fn config(buf: &[u8]) -> Result<ProcessConfig, WireError> {
    let mut c = ProcessConfig::default();
    each_field(buf, |field, v| {
        match field {
            1 => c.cmd = v.as_string("config.cmd")?,
            2 => c.args.push(v.as_string("config.args")?),
            3 => {
                let (mut key, mut value) = (String::new(), String::new());
                each_field(v.as_bytes("config.envs")?, |f, v| {
                    match f {
                        1 => key = v.as_string("config.envs.key")?,
                        2 => value = v.as_string("config.envs.value")?,
                        _ => {}
                    }
                    Ok(())
                })?;
                c.envs.insert(key, value);
            }
            4 => c.cwd = Some(v.as_string("config.cwd")?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

impl ProtoMessage for ListResponse {
    fn encode_proto(&self) -> Vec<u8> {
        let mut w = Writer::new();
        for p in &self.processes {
            w.message(1, |m| {
                m.message(1, |c| put_config(c, &p.config));
                if p.pid != 0 {
                    m.varint(2, u64::from(p.pid));
                }
                if let Some(tag) = &p.tag {
                    m.bytes(3, tag.as_bytes());
                }
            });
        }
        w.into_bytes()
    }

    fn decode_proto(buf: &[u8]) -> Result<Self, WireError> {
        let mut out = ListResponse::default();
        each_field(buf, |field, v| {
            if field != 1 {
                return Ok(());
            }
            let mut info = ProcessInfo::default();
            each_field(v.as_bytes("processes")?, |f, v| {
                match f {
                    1 => info.config = config(v.as_bytes("config")?)?,
                    2 => info.pid = v.as_u32("pid")?,
                    3 => info.tag = Some(v.as_string("tag")?),
                    _ => {}
                }
                Ok(())
            })?;
            out.processes.push(info);
            Ok(())
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn every_unary_request_round_trips() {
        let tag = ProcessSelector::Tag("t1".into());
        let inputs = [
            SendInputRequest {
                process: tag.clone(),
                input: Some(ProcessInput::Pty(vec![0, 255, 10])),
            },
            SendInputRequest {
                process: ProcessSelector::Pid(0),
                input: None,
            },
        ];
        for req in inputs {
            assert_eq!(
                SendInputRequest::decode_proto(&req.encode_proto()).unwrap(),
                req
            );
        }
        let sig = SendSignalRequest {
            process: ProcessSelector::Pid(u32::MAX),
            signal: Signal::Sigkill,
        };
        assert_eq!(
            SendSignalRequest::decode_proto(&sig.encode_proto()).unwrap(),
            sig
        );
        let upd = UpdateRequest {
            process: tag.clone(),
            pty: Some(Pty {
                size: Some(PtySize { cols: 80, rows: 24 }),
            }),
        };
        assert_eq!(
            UpdateRequest::decode_proto(&upd.encode_proto()).unwrap(),
            upd
        );
        let close = CloseStdinRequest { process: tag };
        assert_eq!(
            CloseStdinRequest::decode_proto(&close.encode_proto()).unwrap(),
            close
        );
    }

    #[test]
    fn a_request_without_a_selector_says_so() {
        // `input` only, and an empty selector message.
        for buf in [&[0x12, 0x00][..], &[0x0a, 0x00, 0x12, 0x00][..], &[][..]] {
            assert_eq!(
                SendInputRequest::decode_proto(buf),
                Err(WireError::NoSelector)
            );
        }
        assert_eq!(
            SendSignalRequest::decode_proto(&[0x10, 0x09]),
            Err(WireError::NoSelector)
        );
    }

    #[test]
    fn an_unknown_signal_and_unknown_fields() {
        // signal 3 is not in envd's enum.
        assert!(matches!(
            SendSignalRequest::decode_proto(&[0x0a, 0x02, 0x08, 0x01, 0x10, 0x03]),
            Err(WireError::Malformed(_))
        ));
        // Field 9 (varint) and field 10 (bytes) are skipped.
        let req =
            SendInputRequest::decode_proto(&[0x48, 0x01, 0x0a, 0x02, 0x08, 0x05, 0x52, 0x01, 0x00])
                .unwrap();
        assert_eq!(req.process, ProcessSelector::Pid(5));
    }

    #[test]
    fn a_list_response_round_trips() {
        let resp = ListResponse {
            processes: vec![
                ProcessInfo {
                    config: ProcessConfig {
                        cmd: "/bin/sh".into(),
                        args: vec!["-c".into(), "sleep 1".into()],
                        envs: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "".into())]),
                        cwd: Some("/tmp".into()),
                    },
                    pid: 42,
                    tag: Some("x".into()),
                },
                ProcessInfo::default(),
            ],
        };
        assert_eq!(
            ListResponse::decode_proto(&resp.encode_proto()).unwrap(),
            resp
        );
        assert_eq!(
            ListResponse::decode_proto(&[]).unwrap(),
            ListResponse::default()
        );
    }
}
