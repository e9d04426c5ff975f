//! The shell scripts of the shell commands. Each runs as `sh -c SCRIPT sh ARGS…` with
//! paths only as positional parameters. Exit codes 64–69 name an error kind (see
//! [`crate::shell`]); any other failure is classified from `strerror` text (`LC_ALL=C`).

/// `find -printf` format of one record: kind, mode, size, device, inode, mtime, ctime,
/// owner, group, link text, name; every field ends with NUL.
macro_rules! fmt {
    () => {
        r"'%y\0%m\0%s\0%D\0%i\0%T@\0%C@\0%u\0%g\0%l\0%f\0'"
    };
}

/// lstat of `$1`.
pub(crate) const LSTAT: &str = concat!(r#"exec find "$1" -maxdepth 0 -printf "#, fmt!());

/// stat of `$1`, following links (a dangling link prints kind `l`).
pub(crate) const STAT: &str = concat!(r#"exec find -L "$1" -maxdepth 0 -printf "#, fmt!());

/// One level of directory `$1` (lstat of each entry; `$1` itself may be a link).
pub(crate) const READ_DIR: &str = concat!(
    r#"if [ -e "$1" ] && [ ! -d "$1" ]; then exit 66; fi
exec find -H "$1" -mindepth 1 -maxdepth 1 -printf "#,
    fmt!()
);

/// `mkdir $1` (mode 0755).
pub(crate) const MKDIR: &str = r#"umask 022; exec mkdir -- "$1""#;

/// `mkdir -p $1` (mode 0755); an existing directory is success.
pub(crate) const MKDIR_P: &str = r#"umask 022; [ -d "$1" ] && exit 0; exec mkdir -p -- "$1""#;

/// Removes `$1`; a directory needs `$2 = 1` unless empty; a link is removed itself.
pub(crate) const REMOVE: &str = r#"if [ -d "$1" ] && [ ! -L "$1" ]; then
  if [ "$2" = 1 ]; then exec rm -rf -- "$1"; else exec rmdir -- "$1"; fi
fi
exec rm -- "$1""#;

/// `rename($1, $2)`.
pub(crate) const RENAME: &str = r#"exec mv -T -- "$1" "$2""#;

/// The check that opens WRITE_PREPARE and CREATE_PREPARE: the upload directory `$U` must
/// be a real directory the acting user cannot write to (root's, made by
/// [`UPLOAD_DIR`]), else exit 70 (it is made again under a new name).
macro_rules! upload_dir_check {
    ($var:literal) => {
        concat!(
            r#"if [ ! -d ""#,
            $var,
            r#"" ] || [ -L ""#,
            $var,
            r#"" ] || { [ -w ""#,
            $var,
            r#"" ] && [ ! -O / ]; }; then exit 70; fi
"#
        )
    };
}

/// Exit code: the upload directory is missing or writable by the acting user.
pub(crate) const EXIT_UPLOAD_DIR: i32 = 70;

/// As root: the private upload directory `$1` (root's, 0711: the user can reach a file in
/// it by its random name but can neither list it nor create, replace or link anything
/// in it), so envd's `POST /files`, which writes as root and follows links, never meets
/// a path the user controls.
pub(crate) const UPLOAD_DIR: &str = r#"umask 077; exec mkdir -m 0711 -- "$1""#;

/// Removes `$1` and everything under it (as the acting user).
pub(crate) const REMOVE_TREE: &str = r#"exec rm -rf -- "$1""#;

/// Before a write of `$1` (parent `$2`): upload directory `$5` checked, parent checks
/// (created when `$4 = 1`), target not a directory, staging dir `$3` created 0700;
/// prints the mode of an existing file.
pub(crate) const WRITE_PREPARE: &str = concat!(
    upload_dir_check!("$5"),
    r#"t=$1 p=$2 s=$3
if [ ! -d "$p" ]; then
  if [ -e "$p" ] || [ -L "$p" ]; then exit 66; fi
  if [ "$4" = 1 ]; then umask 022; mkdir -p -- "$p" || exit 1; else exit 64; fi
fi
if [ -d "$t" ] && [ ! -L "$t" ]; then exit 67; fi
mkdir -m 0700 -- "$s" || exit 1
if [ -f "$t" ] && [ ! -L "$t" ]; then exec stat -c %a -- "$t"; fi"#
);

/// Commits a write: the uploaded file `$1` (in root's upload directory) is linked, or
/// copied where a link cannot cross mounts, into the staging dir `$4` by the acting
/// user, gets mode `$3`, is renamed over `$2`, and `$4` is removed; prints the record of
/// the renamed inode (through fd 3, so a later rename by someone else cannot change what
/// is reported).
pub(crate) const WRITE_COMMIT: &str = concat!(
    r#"u=$1 t=$2 s=$4 f=$4/data
{ ln -- "$u" "$f" 2>/dev/null || cat -- "$u" > "$f"; } || exit 1
exec 3<"$f" || exit 1
chmod -- "$3" "$f" || exit 1
mv -T -f -- "$f" "$t" || exit 1
rmdir -- "$s" 2>/dev/null
exec find -L "/proc/$$/fd/3" -maxdepth 0 -printf "#,
    fmt!()
);

/// Before `create_if_absent($1)` (parent `$2`): upload directory `$4` checked, 65 when
/// anything is at `$1`, parent checks, staging dir `$3` created 0700.
pub(crate) const CREATE_PREPARE: &str = concat!(
    upload_dir_check!("$4"),
    r#"t=$1 p=$2 s=$3
if [ -e "$t" ] || [ -L "$t" ]; then exit 65; fi
if [ ! -d "$p" ]; then
  if [ -e "$p" ] || [ -L "$p" ]; then exit 66; fi
  exit 64
fi
mkdir -m 0700 -- "$s" || exit 1"#
);

/// Commits `create_if_absent`: the uploaded `$1` is linked or copied into staging dir
/// `$3`, gets 0644 and is hard-linked to `$2` (fails when anything is there: exit 65);
/// `$3` is removed in every case.
pub(crate) const CREATE_COMMIT: &str = r#"u=$1 t=$2 s=$3 f=$3/data
if ! { ln -- "$u" "$f" 2>/dev/null || cat -- "$u" > "$f"; }; then rm -rf -- "$s"; exit 1; fi
if ! chmod 0644 -- "$f"; then rm -rf -- "$s"; exit 1; fi
if ln -T -- "$f" "$t" 2>"$s/err"; then rm -rf -- "$s"; exit 0; fi
if [ -e "$t" ] || [ -L "$t" ]; then rm -rf -- "$s"; exit 65; fi
cat -- "$s/err" >&2
rm -rf -- "$s"
exit 1"#;

/// Reads `$1` as the acting user. Shell tests first (no process): a directory is 67, a
/// dangling link 64, anything that exists but is not a regular file 69 (so a FIFO is
/// never opened); then the file is opened once on fd 3 and everything after concerns that
/// open file: its kind again and its size (one `stat`; more than the limit `$2`: exit 68
/// before a byte is sent), then one line with the size and the content (at most `$2 + 1`
/// bytes when `$2` is set, so a file that grew is still cut just past the limit).
pub(crate) const READ: &str = r#"if [ -d "$1" ]; then exit 67; fi
if [ ! -e "$1" ] && [ -L "$1" ]; then exit 64; fi
if [ -e "$1" ] && [ ! -f "$1" ]; then exit 69; fi
exec 3<"$1" || exit 1
s=$(stat -L -c %F:%s "/proc/$$/fd/3") || exit 1
case $s in "regular file:"*|"regular empty file:"*) ;; directory:*) exit 67;; *) exit 69;; esac
s=${s##*:}
if [ -n "$2" ] && [ "$s" -gt "$2" ]; then exit 68; fi
printf '%s\n' "$s"
if [ -n "$2" ]; then exec head -c "$(($2 + 1))" <&3; fi
exec cat <&3"#;
