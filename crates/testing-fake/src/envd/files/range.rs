//! The `Range` header of a download, read like Go's `http.ServeContent`.

/// What a `Range` header asks for (a single range; several ranges are served whole).
pub(super) enum RangeSpec {
    Full,
    Unsatisfiable,
    Part(u64, u64),
}

/// Parse `bytes=a-b`, `bytes=a-`, `bytes=-n` like Go's `http.ServeContent`.
pub(super) fn parse_range(h: &str, size: u64) -> RangeSpec {
    let Some(spec) = h.strip_prefix("bytes=") else {
        return RangeSpec::Unsatisfiable;
    };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeSpec::Unsatisfiable;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return RangeSpec::Unsatisfiable;
        };
        if n == 0 || size == 0 {
            return RangeSpec::Unsatisfiable;
        }
        let n = n.min(size);
        return RangeSpec::Part(size - n, n);
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeSpec::Unsatisfiable;
    };
    if start >= size {
        return RangeSpec::Unsatisfiable;
    }
    let end = if b.is_empty() {
        size - 1
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e.min(size - 1),
            _ => return RangeSpec::Unsatisfiable,
        }
    };
    RangeSpec::Part(start, end - start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(matches!(
            parse_range("bytes=2-4", 10),
            RangeSpec::Part(2, 3)
        ));
        assert!(matches!(parse_range("bytes=-3", 10), RangeSpec::Part(7, 3)));
        assert!(matches!(parse_range("bytes=5-", 10), RangeSpec::Part(5, 5)));
        assert!(matches!(
            parse_range("bytes=10-", 10),
            RangeSpec::Unsatisfiable
        ));
        assert!(matches!(parse_range("bytes=0-1,3-4", 10), RangeSpec::Full));
    }
}
