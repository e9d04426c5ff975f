//! The environment rules: exec-world's credential scrub decision, byte for byte the same
//! list as `exec_world_sys::env_scrub` (the file is shared), and `NAME=VALUE` names.

use crate::mem::strip_prefix;

/// The credential scrub list shared with exec-world (`env_scrub.rs` includes the same file).
mod scrub_list {
    include!("../../exec-world-sys/src/env_scrub_list.rs");
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// exec-world's scrub decision (`exec_world_sys::env_scrub::is_scrubbed`) for `name=value`.
pub(crate) fn scrubbed(name: &[u8], value: &[u8]) -> bool {
    if scrub_list::NAME_FRAGMENTS
        .iter()
        .any(|f| contains(name, f.as_bytes()))
        || scrub_list::NAME_SUFFIXES.iter().any(|s| {
            name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
        })
        || scrub_list::INTERNAL_PREFIXES
            .iter()
            .any(|p| strip_prefix(name, p.as_bytes()).is_some())
    {
        return true;
    }
    // A URL with a password: `scheme://user:pw@host…` in any `://` segment.
    let mut rest = value;
    while let Some(i) = rest.windows(3).position(|w| w == b"://") {
        rest = &rest[i + 3..];
        let authority = &rest[..rest.iter().position(|&c| c == b'/').unwrap_or(rest.len())];
        if let Some(at) = authority.iter().rposition(|&c| c == b'@')
            && authority[..at].contains(&b':')
        {
            return true;
        }
    }
    false
}

/// The name of a `NAME=VALUE` entry (all of it without `=`).
pub(crate) fn name_of(entry: &[u8]) -> &[u8] {
    &entry[..entry.iter().position(|&c| c == b'=').unwrap_or(entry.len())]
}
