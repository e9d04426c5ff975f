//! HTTP dates (`Last-Modified`, `If-Modified-Since`) as unix seconds, through the
//! `httpdate` crate (hyper's date code) rather than a hand-written formatter and parser.

use std::time::{Duration, UNIX_EPOCH};

/// The last second an HTTP date can name (9999-12-31T23:59:59Z).
const LAST_SECOND: i64 = 253_402_300_799;

/// `secs` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`); empty when out of the
/// range HTTP dates cover (1970 to 9999).
pub(super) fn http_date(secs: i64) -> String {
    match u64::try_from(secs) {
        Ok(s) if secs <= LAST_SECOND => {
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s))
        }
        _ => String::new(),
    }
}

/// An HTTP date to unix seconds: IMF-fixdate, RFC 850 or asctime, the three forms Go's
/// `http.ParseTime` (so envd) accepts.
pub(super) fn parse_http_date(s: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(s).ok()?;
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date("Sun Nov  6 08:49:37 1994"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("yesterday"), None);
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(LAST_SECOND), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(http_date(-1), "");
        assert_eq!(http_date(LAST_SECOND + 1), "");
    }
}
