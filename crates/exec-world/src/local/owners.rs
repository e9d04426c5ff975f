//! Owner and group names of local files: uid/gid looked up in `/etc/passwd` and
//! `/etc/group` (the files `ls` reads on a machine without a directory service); an id
//! with no entry is shown as its number, as `ls -n` would.

/// The name of `id` in the colon-separated database `db` (field 0 the name, field 2 the id).
fn lookup(db: &str, id: u32) -> Option<String> {
    let wanted = id.to_string();
    std::fs::read_to_string(db).ok()?.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        (f.next()? == wanted).then(|| name.to_owned())
    })
}

/// The owner name of `uid` (its number when no entry names it).
pub(crate) fn user_name(uid: u32) -> String {
    lookup("/etc/passwd", uid).unwrap_or_else(|| uid.to_string())
}

/// The group name of `gid` (its number when no entry names it).
pub(crate) fn group_name(gid: u32) -> String {
    lookup("/etc/group", gid).unwrap_or_else(|| gid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_a_name_and_unknown_ids_are_numbers() {
        assert_eq!(user_name(0), "root");
        assert_eq!(group_name(0), "root");
        assert_eq!(user_name(4_000_000_000), "4000000000");
    }
}
