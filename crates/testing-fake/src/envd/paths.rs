//! Path resolution as envd does it: empty → workdir, `~` → home, `~other` → error,
//! relative → joined to the user's home and cleaned, absolute → as is.

use crate::template::TemplateUser;

/// Lexically clean an absolute path like Go's `filepath.Clean`.
pub(crate) fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    if rooted {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".into()
    } else {
        joined
    }
}

/// Go's `filepath.Join(a, b)`: joined and cleaned.
pub(crate) fn join(a: &str, b: &str) -> String {
    if b.is_empty() {
        return clean(a);
    }
    if a.is_empty() {
        return clean(b);
    }
    clean(&format!("{a}/{b}"))
}

/// Go's `filepath.Base`.
pub(crate) fn base(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() {
            ".".into()
        } else {
            "/".into()
        };
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_string()
}

/// Go's `filepath.Dir`.
pub(crate) fn dir(path: &str) -> String {
    match path.rfind('/') {
        Some(0) => "/".into(),
        Some(i) => clean(&path[..i]),
        None => ".".into(),
    }
}

/// Resolve a request path for `user`; the error is envd's message.
pub(crate) fn resolve(
    path: &str,
    user: &TemplateUser,
    workdir: Option<&str>,
) -> Result<String, String> {
    let path = if path.is_empty() {
        workdir.unwrap_or("").to_string()
    } else {
        path.to_string()
    };
    let expanded = if let Some(rest) = path.strip_prefix('~') {
        if !rest.is_empty() && !rest.starts_with('/') && !rest.starts_with('\\') {
            return Err(format!(
                "failed to expand path '{path}' for user '{}': cannot expand user-specific home dir",
                user.name
            ));
        }
        join(&user.home, rest)
    } else {
        path
    };
    if expanded.starts_with('/') {
        return Ok(expanded);
    }
    Ok(join(&user.home, &expanded))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> TemplateUser {
        TemplateUser {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            shell: "/bin/bash".into(),
        }
    }

    #[test]
    fn resolution_rules() {
        let u = user();
        assert_eq!(resolve("a.txt", &u, None).unwrap(), "/home/user/a.txt");
        assert_eq!(resolve("~/x", &u, None).unwrap(), "/home/user/x");
        assert_eq!(resolve("~", &u, None).unwrap(), "/home/user");
        assert!(resolve("~bob/x", &u, None).is_err());
        assert_eq!(resolve("", &u, None).unwrap(), "/home/user");
        assert_eq!(resolve("", &u, Some("/work")).unwrap(), "/work");
        assert_eq!(resolve("/a/../b", &u, None).unwrap(), "/a/../b");
        assert_eq!(resolve("../x", &u, None).unwrap(), "/home/x");
        assert_eq!(base("/a/b.txt"), "b.txt");
        assert_eq!(dir("/a/b.txt"), "/a");
        assert_eq!(dir("/a"), "/");
    }
}
