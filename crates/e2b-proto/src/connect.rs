//! Connect error codes, their HTTP statuses (connect-go v1.18) and the error body.

use serde::{Deserialize, Serialize};

/// A Connect error code as it travels in JSON (`"not_found"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// `canceled`: the client went away.
    Canceled,
    /// `unknown`.
    Unknown,
    /// `invalid_argument`.
    InvalidArgument,
    /// `deadline_exceeded`.
    DeadlineExceeded,
    /// `not_found`.
    NotFound,
    /// `already_exists`.
    AlreadyExists,
    /// `permission_denied`.
    PermissionDenied,
    /// `resource_exhausted`.
    ResourceExhausted,
    /// `failed_precondition`.
    FailedPrecondition,
    /// `aborted`.
    Aborted,
    /// `out_of_range`.
    OutOfRange,
    /// `unimplemented`.
    Unimplemented,
    /// `internal`.
    Internal,
    /// `unavailable`.
    Unavailable,
    /// `data_loss`.
    DataLoss,
    /// `unauthenticated`.
    Unauthenticated,
}

const ALL: [(Code, &str, u16); 16] = [
    (Code::Canceled, "canceled", 499),
    (Code::Unknown, "unknown", 500),
    (Code::InvalidArgument, "invalid_argument", 400),
    (Code::DeadlineExceeded, "deadline_exceeded", 504),
    (Code::NotFound, "not_found", 404),
    (Code::AlreadyExists, "already_exists", 409),
    (Code::PermissionDenied, "permission_denied", 403),
    (Code::ResourceExhausted, "resource_exhausted", 429),
    (Code::FailedPrecondition, "failed_precondition", 400),
    (Code::Aborted, "aborted", 409),
    (Code::OutOfRange, "out_of_range", 400),
    (Code::Unimplemented, "unimplemented", 501),
    (Code::Internal, "internal", 500),
    (Code::Unavailable, "unavailable", 503),
    (Code::DataLoss, "data_loss", 500),
    (Code::Unauthenticated, "unauthenticated", 401),
];

impl Code {
    /// Every code, in the order of the Connect specification.
    pub fn all() -> impl Iterator<Item = Code> {
        ALL.iter().map(|(c, _, _)| *c)
    }

    /// The JSON name (`"not_found"`).
    pub fn as_str(self) -> &'static str {
        ALL.iter()
            .find(|(c, _, _)| *c == self)
            .map_or("unknown", |(_, s, _)| s)
    }

    /// Parse a JSON name; `None` for anything that is not a Connect code.
    pub fn from_name(s: &str) -> Option<Self> {
        ALL.iter().find(|(_, n, _)| *n == s).map(|(c, _, _)| *c)
    }

    /// The HTTP status connect-go uses for a unary error with this code.
    pub fn http_status(self) -> u16 {
        ALL.iter()
            .find(|(c, _, _)| *c == self)
            .map_or(500, |(_, _, h)| *h)
    }

    /// The code a Connect client derives from an HTTP status when the body is not a
    /// Connect error (connect-es `protocol-connect/http-status.ts`).
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            408 => Code::DeadlineExceeded,
            409 => Code::Aborted,
            412 => Code::FailedPrecondition,
            413 | 431 => Code::ResourceExhausted,
            415 => Code::Internal,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Code::from_name(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown code {s}")))
    }
}

/// One entry of `details` in a Connect error (type URL + base64 `Any` value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Fully qualified protobuf type name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Base64 of the serialized message.
    pub value: String,
}

/// A Connect error body: the unary error response, or the `error` of an end-of-stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectErrorBody {
    /// The code.
    pub code: Code,
    /// Human-readable message; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Optional typed details.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
}

impl ConnectErrorBody {
    /// An error with a code and a message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_map_statuses() {
        for (code, name, status) in ALL {
            assert_eq!(Code::from_name(name), Some(code));
            assert_eq!(code.as_str(), name);
            assert_eq!(code.http_status(), status);
        }
        assert_eq!(Code::from_http_status(404), Code::Unimplemented);
        assert_eq!(Code::from_http_status(502), Code::Unavailable);
        assert_eq!(Code::from_name("NOT_FOUND"), None);
    }

    /// `ALL` (so [`Code::all`]) names every variant exactly once: a new variant fails to
    /// compile here until it is given a place.
    #[test]
    fn all_lists_every_code_once() {
        fn place(c: Code) -> usize {
            match c {
                Code::Canceled => 0,
                Code::Unknown => 1,
                Code::InvalidArgument => 2,
                Code::DeadlineExceeded => 3,
                Code::NotFound => 4,
                Code::AlreadyExists => 5,
                Code::PermissionDenied => 6,
                Code::ResourceExhausted => 7,
                Code::FailedPrecondition => 8,
                Code::Aborted => 9,
                Code::OutOfRange => 10,
                Code::Unimplemented => 11,
                Code::Internal => 12,
                Code::Unavailable => 13,
                Code::DataLoss => 14,
                Code::Unauthenticated => 15,
            }
        }
        let places: Vec<usize> = Code::all().map(place).collect();
        assert_eq!(places, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn error_body_omits_empty_fields() {
        let body = ConnectErrorBody::new(Code::NotFound, "");
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"code":"not_found"}"#
        );
        let parsed: ConnectErrorBody =
            serde_json::from_str(r#"{"code":"internal","message":"x","details":[]}"#).unwrap();
        assert_eq!(parsed.code, Code::Internal);
    }
}
