//! serde helpers for protobuf-JSON as connect-go and connect-es write it.
//!
//! int64 travels as a JSON string but numbers are accepted; `bytes` travel as standard
//! base64 with padding, and URL-safe or unpadded input is accepted.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serializer};

/// `true` when the value equals its type's default (used with `skip_serializing_if`).
pub fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Decode base64 in any of the alphabets protobuf-JSON parsers accept.
pub fn decode_base64(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let trimmed = s.trim_end_matches('=');
    if s.contains(['-', '_']) {
        URL_SAFE_NO_PAD
            .decode(trimmed)
            .or_else(|_| URL_SAFE.decode(s))
    } else {
        STANDARD
            .decode(s)
            .or_else(|_| STANDARD_NO_PAD.decode(trimmed))
    }
}

/// Encode bytes as standard base64 with padding.
pub fn encode_base64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// `bytes` fields: base64 strings on the wire, `Vec<u8>` in memory.
pub mod bytes_b64 {
    use super::*;

    /// Serialize as standard base64.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode_base64(v))
    }

    /// Deserialize from any accepted base64 alphabet.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        decode_base64(&s).map_err(serde::de::Error::custom)
    }
}

/// int64 fields: a JSON string on output, string or number accepted on input.
pub mod i64_string {
    use super::*;

    /// Serialize as a decimal string.
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    /// Deserialize from a string or a number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            N(i64),
            S(String),
        }
        match Either::deserialize(d)? {
            Either::N(n) => Ok(n),
            Either::S(s) => s.trim().parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Declares a protobuf enum that serializes by name and deserializes from name or number.
macro_rules! proto_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $num:literal => $wire:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }

        impl $name {
            /// The protobuf wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire),+ }
            }
            /// The protobuf number.
            pub fn number(self) -> i32 {
                match self { $(Self::$variant => $num),+ }
            }
            /// From a protobuf number.
            pub fn from_number(n: i64) -> Option<Self> {
                match n { $($num => Some(Self::$variant),)+ _ => None }
            }
            /// From a protobuf wire name.
            pub fn from_name(s: &str) -> Option<Self> {
                match s { $($wire => Some(Self::$variant),)+ _ => None }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = serde_json::Value::deserialize(d)?;
                let parsed = match &v {
                    serde_json::Value::String(s) => Self::from_name(s),
                    serde_json::Value::Number(n) => n.as_i64().and_then(Self::from_number),
                    _ => None,
                };
                parsed.ok_or_else(|| serde::de::Error::custom(format!(
                    concat!("invalid ", stringify!($name), ": {}"), v)))
            }
        }
    };
}
pub(crate) use proto_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_accepts_every_alphabet() {
        let raw = [0xfbu8, 0xff, 0x01];
        assert_eq!(decode_base64("+/8B").unwrap(), raw);
        assert_eq!(decode_base64("-_8B").unwrap(), raw);
        assert_eq!(decode_base64("aGkK").unwrap(), b"hi\n");
        assert_eq!(decode_base64("aGk").unwrap(), b"hi");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert!(decode_base64("a$b").is_err());
    }
}
