//! The shell scripts of the shell commands. Each runs as `sh -c SCRIPT sh ARGS…` with
//! paths only as positional parameters. Exit codes 64–69 name an error kind (see
//! [`crate::shell`]); any other failure is classified from `strerror` text (`LC_ALL=C`).

/// `find -printf` format of one record: kind, mode, size, device, inode, mtime, ctime,
/// link text, name; every field ends with NUL.
macro_rules! fmt {
    () => {
        r"'%y\0%m\0%s\0%D\0%i\0%T@\0%C@\0%l\0%f\0'"
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

/// Exit code of a reader that could not make itself unreachable by the user's other
/// processes (no `perl`, or the change of identity or the non-dumpable check failed).
pub(crate) const EXIT_UNPROTECTED: i32 = 71;

/// As root: the private upload directory `$1` (root's, 0711: the user can reach a file
/// in it by its random name but can neither list it nor create, replace or link anything
/// in it), so envd's `POST /files`, which writes as root and follows links, never meets
/// a path the user controls.
pub(crate) const UPLOAD_DIR: &str = r#"umask 077; exec mkdir -m 0711 -- "$1""#;

/// As the acting user: its uid, gid and groups, one per line.
pub(crate) const IDENTITY: &str = "id -u && id -g && exec id -G";

/// Removes `$1` and everything under it (as the acting user).
pub(crate) const REMOVE_TREE: &str = r#"exec rm -rf -- "$1""#;

/// As root, the reader: `$1` is [`READ_HOLDER`], the rest its arguments, run by `perl`
/// with an empty environment (no `PERL5LIB` or `PERL5OPT` reaches root's interpreter),
/// stderr on stdout.
pub(crate) const READ_WRAPPER: &str = r#"command -v perl >/dev/null || { echo "perl: not found"; echo e71; exit 71; }
s=$1; shift
exec env -i LC_ALL=C perl -e "$s" -- "$@" 2>&1"#;

/// The reader (perl, started as root; arguments: uid, gid, groups, path, limit). It
/// forks; the parent stays root and never reaps the child, so the child's pid is never
/// reused while the parent lives (a child the user kills stays a zombie, and
/// `/proc/PID/fd` is gone). The child takes the acting user's gid, groups and uid (all
/// of real, effective and saved) without exec'ing anything, so the kernel keeps it
/// non-dumpable: no process of the user can ptrace it or open its `/proc` entries, hence
/// none can make it hold another file (it checks that its `/proc/PID/fd` is root's). It
/// opens the path once (`O_NONBLOCK`: a FIFO never blocks it), refuses a directory (67)
/// or anything not a regular file (69), checks the size of the open file against the
/// limit (68), prints `ok PID FD SIZE` and keeps the file open until a line (or EOF) on
/// stdin; envd's root `GET /files` reads `/proc/PID/fd/FD`, the file this user opened.
/// Any failure prints the cause, then `eCODE`.
pub(crate) const READ_HOLDER: &str = r#"use Fcntl qw(O_RDONLY O_NONBLOCK O_NOCTTY);
my ($uid, $gid, $groups, $path, $limit) = @ARGV;
$| = 1;
sub fail { my ($code, $msg) = @_; print "$msg\n" if defined $msg; print "e$code\n"; exit $code }
my $pid = fork();
fail(1, "fork: $!") unless defined $pid;
if ($pid) { sleep 3600 while 1 }
$) = "$gid $groups"; $( = $gid; $> = $uid; $< = $uid;
fail(71, "cannot act as $uid:$gid") unless $< == $uid && $> == $uid && $( == $gid && $) == $gid;
my @fd = stat("/proc/$$/fd");
fail(71, "the reader is reachable by the user (fs.suid_dumpable?)") unless @fd && $fd[4] == 0;
sysopen(my $fh, $path, O_RDONLY | O_NONBLOCK | O_NOCTTY) or fail(2, "$path: $!");
my @st = stat($fh) or fail(1, "$path: $!");
fail(67) if -d _;
fail(69) unless -f _;
fail(68) if length($limit) && $st[7] > $limit;
print "ok $$ ", fileno($fh), " $st[7]\n";
my $go = <STDIN>;
exit 0;"#;

/// A write of `$1` (parent `$2`) in one process of the acting user: upload directory `$5`
/// checked, parent checks (created when `$4 = 1`), target not a directory, staging dir
/// `$3` created 0700, the mode chosen (`$7`, else the existing file's, else 644); prints
/// `ready` and waits for a line on stdin. `commit`: the upload `$6` (in root's upload
/// directory) is linked, or copied where a link cannot cross mounts, into the staging
/// dir, gets the mode, is renamed (`mv -T`) over `$1`, and the staging dir is removed;
/// prints the record of the renamed inode (through fd 3, so a later rename by someone
/// else cannot change what is reported). Anything else: the staging dir is removed,
/// exit 75.
pub(crate) const WRITE: &str = concat!(
    upload_dir_check!("$5"),
    r#"t=$1 p=$2 s=$3 u=$6 m=$7 f=$3/data
if [ ! -d "$p" ]; then
  if [ -e "$p" ] || [ -L "$p" ]; then exit 66; fi
  if [ "$4" = 1 ]; then umask 022; mkdir -p -- "$p" || exit 1; else exit 64; fi
fi
if [ -d "$t" ] && [ ! -L "$t" ]; then exit 67; fi
if [ -z "$m" ]; then
  m=644
  if [ -f "$t" ] && [ ! -L "$t" ]; then m=$(stat -c %a -- "$t") || exit 1; fi
fi
mkdir -m 0700 -- "$s" || exit 1
trap 'rm -rf -- "$s"' EXIT
echo ready
read -r go || go=
[ "$go" = commit ] || exit 75
{ ln -- "$u" "$f" 2>/dev/null || cat -- "$u" > "$f"; } || exit 1
exec 3<"$f" || exit 1
chmod -- "$m" "$f" || exit 1
mv -T -f -- "$f" "$t" || exit 1
trap - EXIT
rmdir -- "$s" 2>/dev/null
exec find -L "/proc/$$/fd/3" -maxdepth 0 -printf "#,
    fmt!()
);

/// `create_if_absent($1)` (parent `$2`) in one process of the acting user: upload
/// directory `$4` checked, 65 when anything is at `$1`, parent checks, staging dir `$3`
/// created 0700; prints `ready` and waits for a line on stdin. `commit`: the upload `$5`
/// is linked or copied into the staging dir, gets 0644 and is hard-linked to `$1` (fails
/// when anything is there: 65); the staging dir is removed in every case. Anything else:
/// exit 75.
pub(crate) const CREATE: &str = concat!(
    upload_dir_check!("$4"),
    r#"t=$1 p=$2 s=$3 u=$5 f=$3/data
if [ -e "$t" ] || [ -L "$t" ]; then exit 65; fi
if [ ! -d "$p" ]; then
  if [ -e "$p" ] || [ -L "$p" ]; then exit 66; fi
  exit 64
fi
mkdir -m 0700 -- "$s" || exit 1
trap 'rm -rf -- "$s"' EXIT
echo ready
read -r go || go=
[ "$go" = commit ] || exit 75
{ ln -- "$u" "$f" 2>/dev/null || cat -- "$u" > "$f"; } || exit 1
chmod 0644 -- "$f" || exit 1
if ln -T -- "$f" "$t" 2>"$s/err"; then exit 0; fi
if [ -e "$t" ] || [ -L "$t" ]; then exit 65; fi
cat -- "$s/err" >&2
exit 1"#
);
