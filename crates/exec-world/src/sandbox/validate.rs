//! Checks shared by every provider: sandbox names, tags, environment names, paths,
//! limits and allowlist hosts. Each returns [`ErrorKind::InvalidSpec`](crate::ErrorKind::InvalidSpec) naming the
//! operation, the value and the rule.

use super::{Egress, ExecSpec, SandboxError, SandboxLimits};

/// Longest path accepted (bytes).
pub const MAX_PATH_BYTES: usize = 4096;

fn ascii_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`.
///
/// ```
/// assert!(exec_world::sandbox::validate::name("create", "conv-1.a_b").is_ok());
/// assert!(exec_world::sandbox::validate::name("create", "-x").is_err());
/// ```
pub fn name(op: &'static str, name: &str) -> Result<(), SandboxError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 101
        && ascii_alnum(b[0])
        && b[1..]
            .iter()
            .all(|&c| ascii_alnum(c) || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(super::invalid(
            op,
            format!("sandbox name {name:?}"),
            "it must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$",
        ))
    }
}

/// A holder tag: `^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`.
pub fn tag(op: &'static str, tag: &str) -> Result<(), SandboxError> {
    let b = tag.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && ascii_alnum(b[0])
        && b[1..]
            .iter()
            .all(|&c| ascii_alnum(c) || matches!(c, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(super::invalid(
            op,
            format!("tag {tag:?}"),
            "it must match ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$",
        ))
    }
}

/// An environment variable name: `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn env_name(op: &'static str, key: &str) -> Result<(), SandboxError> {
    let b = key.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_');
    if ok {
        Ok(())
    } else {
        Err(super::invalid(
            op,
            format!("environment variable name {key:?}"),
            "it must match ^[A-Za-z_][A-Za-z0-9_]*$",
        ))
    }
}

/// What every provider checks before an exec, before any request: not cancelled already,
/// every env name, the tag, the exec id when there is one.
pub fn exec_spec(op: &'static str, spec: &ExecSpec) -> Result<(), SandboxError> {
    if spec.cancel.is_cancelled() {
        return Err(crate::Error::cancelled(op).with_detail("cancelled before it started"));
    }
    for k in spec.env.keys() {
        env_name(op, k)?;
    }
    if let Some(t) = &spec.tag {
        tag(op, t)?;
    }
    if spec.id.is_some() {
        super::exec_id(op, spec)?;
    }
    Ok(())
}

/// A sandbox path: absolute, no NUL, no `..` segment, at most [`MAX_PATH_BYTES`].
///
/// ```
/// use exec_world::sandbox::validate::path;
/// assert!(path("read_file", "/workspace/a.txt").is_ok());
/// assert!(path("read_file", "a.txt").is_err());
/// assert!(path("read_file", "/workspace/../etc/passwd").is_err());
/// ```
pub fn path(op: &'static str, p: &str) -> Result<(), SandboxError> {
    let bad = |reason: &str| {
        Err(super::invalid(
            op,
            format!("path {:?}", p.chars().take(200).collect::<String>()),
            reason,
        ))
    };
    if !p.starts_with('/') {
        return bad("it must be absolute");
    }
    if p.contains('\0') {
        return bad("it contains a NUL byte");
    }
    if p.len() > MAX_PATH_BYTES {
        return bad("it is longer than 4096 bytes");
    }
    if p.split('/').any(|s| s == "..") {
        return bad("it contains a '..' segment");
    }
    Ok(())
}

/// A valid DNS hostname label sequence (letters, digits, hyphens; 1..=63 per label;
/// at least two labels; at most 253 bytes), lowercase when `lowercase`.
pub fn hostname(host: &str, lowercase: bool) -> bool {
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    let labels: Vec<&str> = host.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
                && b.iter().all(|&c| {
                    (c.is_ascii_alphanumeric() && (!lowercase || !c.is_ascii_uppercase()))
                        || c == b'-'
                })
        })
}

/// An allowlist entry: a hostname, or `*.` + hostname (its subdomains only).
pub fn allow_host(op: &'static str, host: &str) -> Result<(), SandboxError> {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if hostname(&bare.to_ascii_lowercase(), true) {
        Ok(())
    } else {
        Err(super::invalid(
            op,
            format!("allowlist host {host:?}"),
            "it must be a hostname such as example.com, or *.example.com for its subdomains",
        ))
    }
}

/// True when `host` is allowed by `entry` (`*.example.com` matches subdomains only).
///
/// ```
/// use exec_world::sandbox::validate::host_matches;
/// assert!(host_matches("*.example.com", "a.example.com"));
/// assert!(!host_matches("*.example.com", "example.com"));
/// assert!(host_matches("example.com", "EXAMPLE.com"));
/// ```
pub fn host_matches(entry: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let entry = entry.to_ascii_lowercase();
    match entry.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => host == entry,
    }
}

/// Limits: cpu, memory and disk positive (and finite); allowlist hosts valid.
pub fn limits(op: &'static str, l: &SandboxLimits) -> Result<(), SandboxError> {
    if !(l.cpu.is_finite() && l.cpu > 0.0) || l.memory_mb == 0 || l.disk_mb == 0 {
        return Err(super::invalid(
            op,
            format!(
                "limits (cpu {}, memory_mb {}, disk_mb {})",
                l.cpu, l.memory_mb, l.disk_mb
            ),
            "cpu, memory_mb and disk_mb must be positive",
        ));
    }
    if let Egress::Allowlist(hosts) = &l.egress {
        for h in hosts {
            allow_host(op, h)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_tags_envs() {
        assert!(name("t", "a").is_ok());
        assert!(name("t", &"a".repeat(101)).is_ok());
        assert!(name("t", &"a".repeat(102)).is_err());
        assert!(name("t", "a/b").is_err());
        assert!(name("t", "").is_err());
        assert!(tag("t", "holder-1_x").is_ok());
        assert!(tag("t", "a b").is_err());
        assert!(tag("t", "a.b").is_err());
        assert!(env_name("t", "_X1").is_ok());
        assert!(env_name("t", "1X").is_err());
        assert!(env_name("t", "A-B").is_err());
    }

    #[test]
    fn paths() {
        assert!(path("t", "/").is_ok());
        assert!(path("t", "/a/..b").is_ok());
        assert!(path("t", "/a/../b").is_err());
        assert!(path("t", "/a\0").is_err());
        assert!(path("t", &format!("/{}", "a".repeat(4096))).is_err());
        let e = path("read_file", "rel").expect_err("relative");
        assert_eq!(
            e.to_string(),
            "read_file: invalid spec: path \"rel\": it must be absolute"
        );
    }

    #[test]
    fn hosts_and_limits() {
        assert!(allow_host("t", "pypi.org").is_ok());
        assert!(allow_host("t", "*.github.com").is_ok());
        assert!(allow_host("t", "localhost").is_err());
        assert!(allow_host("t", "a..b").is_err());
        assert!(allow_host("t", "*.*.b.c").is_err());
        assert!(hostname("e2b.app", true));
        assert!(!hostname("E2B.app", true));
        let mut l = SandboxLimits::default();
        assert!(limits("t", &l).is_ok());
        l.cpu = 0.0;
        assert!(limits("t", &l).is_err());
        l.cpu = f64::NAN;
        assert!(limits("t", &l).is_err());
        let l = SandboxLimits {
            egress: Egress::Allowlist(vec!["bad host".into()]),
            ..SandboxLimits::default()
        };
        assert!(limits("t", &l).is_err());
    }
}
