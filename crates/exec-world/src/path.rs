//! POSIX paths of the execution world ([`WorldPath`]) and canonical targets ([`Target`]).
//!
//! Paths in the world are POSIX paths held as UTF-8 text (the E2B wire protocol carries
//! paths as JSON strings, so non-UTF-8 names are out of scope). Resolution is *lexical*:
//! a relative path is joined to a cwd, then `.`, `..` and repeated `/` are removed by
//! POSIX rules without looking at the file system (no symlink is followed), so it is
//! cheap, synchronous and gives the same answer locally and remotely.

use std::fmt;
use std::str::FromStr;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::error::Error;

/// A POSIX path in the execution world, absolute (`/a/b`) or relative (`a/b`).
///
/// Never empty and never contains a NUL byte. Relative paths are resolved against a cwd
/// with [`WorldPath::resolve`] (every [`Fs`](crate::Fs) does this against its own
/// [`cwd`](crate::Fs::cwd)).
///
/// ```
/// use exec_world::WorldPath;
/// let cwd = WorldPath::new("/home/user")?;
/// let p = WorldPath::new("../other/./x.txt")?;
/// assert_eq!(p.resolve(&cwd).as_str(), "/home/other/x.txt");
/// # Ok::<(), exec_world::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorldPath(String);

impl WorldPath {
    /// A path from text; [`ErrorKind::InvalidPath`](crate::ErrorKind::InvalidPath) if it is empty or contains NUL.
    pub fn new(path: impl Into<String>) -> Result<Self, Error> {
        let path = path.into();
        if path.is_empty() {
            return Err(Error::invalid_path(path, "empty path"));
        }
        if path.contains('\0') {
            return Err(Error::invalid_path(path, "contains a NUL byte"));
        }
        Ok(Self(path))
    }

    /// The root directory `/`.
    pub fn root() -> Self {
        Self("/".into())
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when the path starts with `/`.
    pub fn is_absolute(&self) -> bool {
        self.0.starts_with('/')
    }

    /// `self` followed by `rel`; if `rel` is absolute it replaces `self` (like
    /// `std::path::Path::join`). Not normalized.
    pub fn join(&self, rel: &str) -> Result<WorldPath, Error> {
        if rel.starts_with('/') {
            return WorldPath::new(rel);
        }
        if rel.is_empty() {
            return Ok(self.clone());
        }
        let sep = if self.0.ends_with('/') { "" } else { "/" };
        WorldPath::new(format!("{}{sep}{rel}", self.0))
    }

    /// Lexically normalized: repeated `/` and `.` removed, `..` applied to the preceding
    /// component (at the root `..` stays at the root; a relative path keeps leading `..`).
    /// A trailing `/` is dropped. A relative path that normalizes to nothing is `.`.
    pub fn normalize(&self) -> WorldPath {
        let absolute = self.is_absolute();
        let mut parts: Vec<&str> = Vec::new();
        for c in self.0.split('/') {
            match c {
                "" | "." => {}
                ".." => match parts.last() {
                    Some(&last) if last != ".." => {
                        parts.pop();
                    }
                    _ if absolute => {}
                    _ => parts.push(".."),
                },
                other => parts.push(other),
            }
        }
        let joined = parts.join("/");
        if absolute {
            WorldPath(format!("/{joined}"))
        } else if joined.is_empty() {
            WorldPath(".".into())
        } else {
            WorldPath(joined)
        }
    }

    /// The absolute, normalized path this names when the current directory is `cwd`.
    ///
    /// An absolute `self` ignores `cwd`. A relative `cwd` is taken relative to `/`.
    pub fn resolve(&self, cwd: &WorldPath) -> WorldPath {
        if self.is_absolute() {
            self.normalize()
        } else {
            let base = if cwd.is_absolute() {
                cwd.0.clone()
            } else {
                format!("/{}", cwd.0)
            };
            WorldPath(format!("{base}/{}", self.0)).normalize()
        }
    }

    /// The normalized parent directory; `None` for `/` and for a single relative component.
    pub fn parent(&self) -> Option<WorldPath> {
        let n = self.normalize();
        if n.0 == "/" || n.0 == "." {
            return None;
        }
        match n.0.rfind('/') {
            Some(0) => Some(WorldPath::root()),
            Some(i) => Some(WorldPath(n.0[..i].to_string())),
            None => None,
        }
    }

    /// The last normalized component, if it is a name (not `/`, `.` or `..`).
    pub fn file_name(&self) -> Option<String> {
        let n = self.normalize();
        let last = n.0.rsplit('/').next()?;
        match last {
            "" | "." | ".." => None,
            name => Some(name.to_string()),
        }
    }

    /// The non-empty components of the path, as written (not normalized).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }
}

impl fmt::Display for WorldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WorldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for WorldPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        WorldPath::new(s)
    }
}

impl TryFrom<&str> for WorldPath {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self, Error> {
        WorldPath::new(s)
    }
}

impl TryFrom<String> for WorldPath {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        WorldPath::new(s)
    }
}

impl AsRef<str> for WorldPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Characters left as they are in a `file:` URI path: RFC 3986 unreserved and `/`.
/// Everything else (space, `%`, `#`, `?`, non-ASCII bytes of UTF-8…) is percent-encoded.
const URI_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// A canonical name for a place in the world: an absolute, lexically normalized POSIX path.
///
/// Two targets are equal exactly when they name the same path lexically (symlinks are
/// not followed, see the module docs). Used for containment checks (is this file inside
/// the workspace?) and as the identity handed to tools such as language servers.
///
/// ```
/// use exec_world::{Target, WorldPath};
/// let ws = Target::from_absolute(&WorldPath::new("/home/user/my project")?)?;
/// assert_eq!(ws.uri(), "file:///home/user/my%20project");
/// let f = Target::from_uri("file:///home/user/my%20project/src/../a.rs")?;
/// assert_eq!(f.path().as_str(), "/home/user/my project/a.rs");
/// assert!(ws.contains(&f));
/// assert!(!f.contains(&ws));
/// # Ok::<(), exec_world::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Target {
    path: WorldPath,
}

impl Target {
    /// The target of `path` as seen from `cwd` (see [`WorldPath::resolve`]).
    pub fn new(path: &WorldPath, cwd: &WorldPath) -> Target {
        Target {
            path: path.resolve(cwd),
        }
    }

    /// The target of an absolute path; [`ErrorKind::InvalidPath`](crate::ErrorKind::InvalidPath) if it is relative.
    pub fn from_absolute(path: &WorldPath) -> Result<Target, Error> {
        if !path.is_absolute() {
            return Err(Error::invalid_path(path, "not an absolute path"));
        }
        Ok(Target {
            path: path.normalize(),
        })
    }

    /// Parses a `file:` URI (`file:///p` or `file://localhost/p`), percent-decoding it.
    pub fn from_uri(uri: &str) -> Result<Target, Error> {
        let invalid = |reason: &str| Error::invalid_path(uri, reason);
        let rest = uri
            .strip_prefix("file://")
            .ok_or_else(|| invalid("not a file:// URI"))?;
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        if !rest.starts_with('/') {
            return Err(invalid("file URI with a remote host or no path"));
        }
        let decoded = percent_decode_str(rest)
            .decode_utf8()
            .map_err(|_| invalid("percent-encoded bytes are not UTF-8"))?;
        let path = WorldPath::new(decoded.into_owned())?;
        Target::from_absolute(&path)
    }

    /// The absolute, normalized path.
    pub fn path(&self) -> &WorldPath {
        &self.path
    }

    /// The `file:` URI: `file://` followed by the percent-encoded path (everything but
    /// `A-Z a-z 0-9 - . _ ~ /` is encoded, UTF-8 byte by byte).
    pub fn uri(&self) -> String {
        format!(
            "file://{}",
            utf8_percent_encode(self.path.as_str(), URI_PATH)
        )
    }

    /// True when `other` is `self` or lies beneath it (component-wise: `/a` contains
    /// `/a/b` but not `/ab`).
    pub fn contains(&self, other: &Target) -> bool {
        let me = self.path.as_str();
        let them = other.path.as_str();
        if me == "/" {
            return true;
        }
        them == me || (them.starts_with(me) && them.as_bytes().get(me.len()) == Some(&b'/'))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn p(s: &str) -> WorldPath {
        WorldPath::new(s).expect("valid path")
    }

    #[test]
    fn normalizes_by_posix_rules() {
        assert_eq!(p("/a//b/./c/../d/").normalize().as_str(), "/a/b/d");
        assert_eq!(p("/../..").normalize().as_str(), "/");
        assert_eq!(p("../a/../../b").normalize().as_str(), "../../b");
        assert_eq!(p("./.").normalize().as_str(), ".");
        assert_eq!(p("x").resolve(&p("/w")).as_str(), "/w/x");
        assert_eq!(p("/x").resolve(&p("/w")).as_str(), "/x");
        assert_eq!(p("../../..").resolve(&p("/w/v")).as_str(), "/");
    }

    #[test]
    fn parent_and_name() {
        assert_eq!(p("/a/b").parent(), Some(p("/a")));
        assert_eq!(p("/a").parent(), Some(p("/")));
        assert_eq!(p("/").parent(), None);
        assert_eq!(p("/a/b/").file_name().as_deref(), Some("b"));
        assert_eq!(p("/").file_name(), None);
    }

    #[test]
    fn rejects_bad_paths() {
        assert!(matches!(
            WorldPath::new(""),
            Err(e) if e.kind() == ErrorKind::InvalidPath
        ));
        assert!(matches!(
            WorldPath::new("a\0b"),
            Err(e) if e.kind() == ErrorKind::InvalidPath
        ));
    }

    #[test]
    fn uri_round_trip() {
        let t = Target::from_absolute(&p("/d/é #%?x")).expect("absolute");
        assert_eq!(t.uri(), "file:///d/%C3%A9%20%23%25%3Fx");
        assert_eq!(Target::from_uri(&t.uri()).expect("uri"), t);
        assert!(Target::from_uri("http://x/y").is_err());
        assert!(Target::from_uri("file://host/y").is_err());
    }

    #[test]
    fn containment_is_component_wise() {
        let a = Target::from_absolute(&p("/a")).expect("abs");
        let ab = Target::from_absolute(&p("/a/b")).expect("abs");
        let aab = Target::from_absolute(&p("/ab")).expect("abs");
        let root = Target::from_absolute(&p("/")).expect("abs");
        assert!(a.contains(&a) && a.contains(&ab) && !a.contains(&aab));
        assert!(root.contains(&aab) && !ab.contains(&a));
    }
}

/// Property tests of path validation and normalization (bounded: 256 cases each).
#[cfg(test)]
mod proptests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;

    /// Paths made of tricky components: empty (`//`), `.`, `..`, names with spaces or
    /// percent signs, optionally absolute and with a trailing `/`.
    fn path_text() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            prop::collection::vec(
                prop::sample::select(vec!["", ".", "..", "a", "b c", "%2F", "é", "..."]),
                1..8,
            ),
            any::<bool>(),
        )
            .prop_map(|(abs, parts, trailing)| {
                let mut s = if abs { "/".to_string() } else { String::new() };
                s.push_str(&parts.join("/"));
                if trailing {
                    s.push('/');
                }
                s
            })
            .prop_filter("non-empty", |s| !s.is_empty())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Validation: empty and NUL are refused, anything else is kept as written.
        #[test]
        fn validation(s in prop::collection::vec(any::<char>(), 0..20)) {
            let s: String = s.into_iter().collect();
            match WorldPath::new(s.clone()) {
                Ok(p) => {
                    prop_assert!(!s.is_empty() && !s.contains('\0'));
                    prop_assert_eq!(p.as_str(), s.as_str());
                }
                Err(e) if e.kind() == ErrorKind::InvalidPath => {
                    prop_assert!(s.is_empty() || s.contains('\0'));
                    prop_assert_eq!(e.path(), Some(s.as_str()));
                }
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }

        /// Normalizing is idempotent and leaves no empty, `.` or (absolute) `..` component.
        #[test]
        fn normalize_is_idempotent_and_clean(s in path_text()) {
            let p = WorldPath::new(s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let n = p.normalize();
            prop_assert_eq!(n.normalize(), n.clone());
            prop_assert_eq!(n.is_absolute(), p.is_absolute());
            if n.as_str() != "/" && n.as_str() != "." {
                prop_assert!(!n.as_str().ends_with('/'));
                let comps: Vec<&str> = n.as_str().split('/').skip(usize::from(n.is_absolute())).collect();
                prop_assert!(comps.iter().all(|c| !c.is_empty() && *c != "."));
                if n.is_absolute() {
                    prop_assert!(comps.iter().all(|c| *c != ".."));
                }
            }
        }

        /// Resolving against any cwd gives an absolute normalized path that an absolute
        /// path ignores the cwd for, and that never climbs above `/`.
        #[test]
        fn resolve_is_absolute_and_normalized(s in path_text(), cwd in path_text()) {
            let p = WorldPath::new(s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let c = WorldPath::new(cwd).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let r = p.resolve(&c);
            prop_assert!(r.is_absolute());
            prop_assert_eq!(r.normalize(), r.clone());
            if p.is_absolute() {
                prop_assert_eq!(r, p.normalize());
            }
        }

        /// The parent of `dir/name` is `dir` (normalized), and its file name is `name`.
        #[test]
        fn join_parent_and_file_name_agree(s in path_text(), name in prop::sample::select(vec!["x", "b c", "é", "..."])) {
            let dir = WorldPath::new(s).map_err(|e| TestCaseError::fail(e.to_string()))?.resolve(&WorldPath::root());
            let child = dir.join(name).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(child.parent(), Some(dir.clone()));
            prop_assert_eq!(child.file_name(), Some(name.to_string()));
        }
    }
}
