//! The `Content-Disposition` of a download, as Go's `mime.FormatMediaType` writes it.

/// Go's `mime.FormatMediaType("inline", {"filename": name})`: a token as is, printable
/// ASCII (and tab) quoted, anything else (control bytes such as `\n`, `\r`, ESC, DEL, or
/// non-ASCII) as an RFC 2231 `filename*=utf-8''…` percent-encoding, never raw.
pub(super) fn content_disposition(name: &str) -> String {
    let is_token = |c: char| c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?=".contains(c);
    if !name.is_empty() && name.chars().all(is_token) {
        return format!("inline; filename={name}");
    }
    // Go's `needsEncoding`: a byte outside ' '..='~' other than tab.
    let needs_encoding = name
        .bytes()
        .any(|b| !(b' '..=b'~').contains(&b) && b != b'\t');
    if !needs_encoding {
        let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
        return format!("inline; filename=\"{escaped}\"");
    }
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    format!(
        "inline; filename*=utf-8''{}",
        percent_encoding::utf8_percent_encode(name, SET)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispositions() {
        assert_eq!(content_disposition("a.txt"), "inline; filename=a.txt");
        assert_eq!(
            content_disposition("a b.txt"),
            "inline; filename=\"a b.txt\""
        );
        assert_eq!(
            content_disposition("a\nb\rc\u{1b}d"),
            "inline; filename*=utf-8''a%0Ab%0Dc%1Bd"
        );
        assert_eq!(
            content_disposition("tab\there"),
            "inline; filename=\"tab\there\""
        );
        for name in ["x\n", "x\r", "x\u{1b}", "x\u{7f}"] {
            assert!(
                axum::http::HeaderValue::from_str(&content_disposition(name)).is_ok(),
                "{name:?}"
            );
        }
    }
}
