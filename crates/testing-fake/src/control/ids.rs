//! Sandbox ids and envd access tokens.
//!
//! Ids are `i` + 20 characters of `[a-z0-9]`; path parameters go through E2B's `ShortID`
//! rules (a legacy `<id>-<clientID>` suffix is dropped; anything else outside `[a-z0-9]` is
//! `400 Invalid sandbox ID`). Access tokens are 64 lowercase hex: HMAC-SHA256 of the id with
//! a per-emulator secret.

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;

use super::error::ApiErr;

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A fresh sandbox id.
pub(crate) fn new_sandbox_id() -> String {
    let mut rng = rand::rng();
    let mut id = String::with_capacity(21);
    id.push('i');
    for _ in 0..20 {
        id.push(char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]));
    }
    id
}

/// A random secret for signing access tokens.
pub(crate) fn new_secret() -> [u8; 32] {
    let mut s = [0u8; 32];
    rand::rng().fill(&mut s);
    s
}

/// The envd access token of a sandbox.
pub(crate) fn access_token(secret: &[u8], sandbox_id: &str) -> String {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return hex::encode([0u8; 32]);
    };
    mac.update(sandbox_id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `true` when `s` is a non-empty `[a-z0-9]+`.
pub(crate) fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// E2B's `ShortID` on a path parameter.
pub(crate) fn short_id(raw: &str) -> Result<String, ApiErr> {
    let mut parts = raw.split('-');
    let id = parts.next().unwrap_or_default();
    let _client = parts.next();
    if parts.next().is_some() || !is_valid_id(id) {
        return Err(ApiErr::bad_request("Invalid sandbox ID"));
    }
    Ok(id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_e2b_shape() {
        let id = new_sandbox_id();
        assert_eq!(id.len(), 21);
        assert!(id.starts_with('i'));
        assert!(is_valid_id(&id));
    }

    #[test]
    fn short_id_rules() {
        assert_eq!(short_id("iabc").ok().as_deref(), Some("iabc"));
        assert_eq!(short_id("iabc-6532622b").ok().as_deref(), Some("iabc"));
        assert!(short_id("iabc-x-y").is_err());
        assert!(short_id("IABC").is_err());
        assert!(short_id("debug_sandbox_id").is_err());
    }

    #[test]
    fn tokens_are_64_hex() {
        let t = access_token(b"secret", "iabc");
        assert_eq!(t.len(), 64);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(t, access_token(b"secret", "iabc"));
        assert_ne!(t, access_token(b"other", "iabc"));
    }
}
