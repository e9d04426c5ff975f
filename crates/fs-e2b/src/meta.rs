//! Parsing the NUL-separated `find -printf` records of [`crate::scripts`] into
//! [`Metadata`] and [`Version`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use exec_world::{Error, FileKind, Metadata, Version};

/// Fields per record (see `scripts::fmt!`).
const FIELDS: usize = 11;

/// One entry as `find` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// `%y`: f, d, l, p, s, c, b.
    pub kind: String,
    /// `%m`: permission bits, octal.
    pub mode: String,
    /// `%s`: size.
    pub size: String,
    /// `%D`: device.
    pub dev: String,
    /// `%i`: inode.
    pub ino: String,
    /// `%T@`: mtime, seconds with fraction.
    pub mtime: String,
    /// `%C@`: ctime, seconds with fraction.
    pub ctime: String,
    /// `%u`: owner name (the uid when unnamed).
    pub owner: String,
    /// `%g`: group name (the gid when unnamed).
    pub group: String,
    /// `%l`: link text (empty unless a link).
    pub link: String,
    /// `%f`: base name.
    pub name: String,
}

/// Every record of `out` (records are eleven NUL-terminated fields).
pub(crate) fn parse_records(out: &[u8]) -> Result<Vec<Record>, Error> {
    let mut fields: Vec<String> = out
        .split(|&b| b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    // The output ends with NUL: the last split piece is empty.
    if fields.last().is_some_and(|f| f.is_empty()) {
        fields.pop();
    }
    if fields.len() % FIELDS != 0 {
        return Err(Error::other(format!(
            "unexpected find output: {} fields",
            fields.len()
        )));
    }
    Ok(fields
        .chunks_exact_mut(FIELDS)
        .map(|f| {
            let mut take = |i: usize| std::mem::take(&mut f[i]);
            Record {
                kind: take(0),
                mode: take(1),
                size: take(2),
                dev: take(3),
                ino: take(4),
                mtime: take(5),
                ctime: take(6),
                owner: take(7),
                group: take(8),
                link: take(9),
                name: take(10),
            }
        })
        .collect())
}

/// `secs.fraction` → time (fraction cut to nanoseconds); `None` if unparsable.
pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: u64 = secs.parse().ok()?;
    let mut digits: String = frac.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    let nanos: u32 = digits.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

impl Record {
    /// The kind of the entry.
    pub(crate) fn file_kind(&self) -> FileKind {
        match self.kind.as_str() {
            "f" => FileKind::File,
            "d" => FileKind::Dir,
            "l" => FileKind::Symlink,
            _ => FileKind::Other,
        }
    }

    /// The version token and sizes of this entry.
    pub(crate) fn version(&self) -> Version {
        let size = self.size.parse().unwrap_or(0);
        Version {
            size,
            mtime: parse_time(&self.mtime),
            token: format!(
                "{}:{}:{}:{}:{}",
                self.dev, self.ino, self.size, self.mtime, self.ctime
            ),
        }
    }

    /// The metadata this record describes.
    pub(crate) fn metadata(&self) -> Metadata {
        let kind = self.file_kind();
        let version = self.version();
        let target = (kind == FileKind::Symlink).then(|| self.link.clone());
        Metadata::new(
            kind,
            version.size,
            u32::from_str_radix(&self.mode, 8).ok().map(|m| m & 0o7777),
            version.mtime,
            target,
            version,
        )
        .with_owner(self.owner.clone(), self.group.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records() {
        let raw = b"f\x00644\x006\x0065024\x00123\x001796231997.9127950620\x001796231997.9127950621\x00user\x00user\x00\x00a b\x00\
l\x00777\x001\x0065024\x00124\x001.5\x002\x00root\x001001\x00f\x00lf\x00";
        let recs = parse_records(raw).expect("records");
        assert_eq!(recs.len(), 2);
        let m = recs[0].metadata();
        assert_eq!((m.kind, m.size, m.mode), (FileKind::File, 6, Some(0o644)));
        assert_eq!(recs[0].name, "a b");
        assert_eq!(
            m.mtime,
            UNIX_EPOCH.checked_add(Duration::new(1_796_231_997, 912_795_062))
        );
        assert_eq!(
            m.version.token,
            "65024:123:6:1796231997.9127950620:1796231997.9127950621"
        );
        assert_eq!(
            (m.owner.as_deref(), m.group.as_deref()),
            (Some("user"), Some("user"))
        );
        let l = recs[1].metadata();
        assert_eq!(l.kind, FileKind::Symlink);
        assert_eq!(l.group.as_deref(), Some("1001"));
        assert_eq!(l.symlink_target.as_deref(), Some("f"));
        assert!(parse_records(b"f\x00x\x00").is_err());
        assert!(parse_records(b"").expect("empty").is_empty());
    }
}
