//! The shell scripts of the shell commands. Each runs as `sh -c SCRIPT sh ARGS…` with
//! paths only as positional parameters. Exit codes 64–69 name an error kind (see
//! [`crate::shell`]); any other failure is classified from `strerror` text (`LC_ALL=C`).

/// `find -printf` format of one record: kind, mode, size, device, inode, mtime, ctime,
/// owner, group, link text, name; every field ends with NUL.
macro_rules! record_format {
    () => {
        r"%y\0%m\0%s\0%D\0%i\0%T@\0%C@\0%u\0%g\0%l\0%f\0"
    };
}

/// [`record_format!`] quoted for the shell.
macro_rules! fmt {
    () => {
        concat!("'", record_format!(), "'")
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

/// As the acting user: its uid, gid and groups, one per line.
pub(crate) const IDENTITY: &str = "id -u && id -g && exec id -G";

/// Removes `$1` and everything under it (as the acting user).
pub(crate) const REMOVE_TREE: &str = r#"exec rm -rf -- "$1""#;

/// Exit code of a holder that could not make itself unreachable by the user's other
/// processes (no `perl`, or the change of identity or the non-dumpable check failed).
pub(crate) const EXIT_UNPROTECTED: i32 = 71;

/// Exit code of a write holder told anything but `commit` (it removed its staging dir).
pub(crate) const EXIT_ABORTED: i32 = 75;

/// As root: runs a holder, `$1` ([`READ_HOLDER`] or [`WRITE_HOLDER`]) with the rest as
/// its arguments, in `perl` with an empty environment (no `PERL5LIB` or `PERL5OPT`
/// reaches root's interpreter), stderr on stdout.
pub(crate) const HOLDER_WRAPPER: &str = r#"command -v perl >/dev/null || { echo "perl: not found"; echo e71; exit 71; }
s=$1; shift
exec env -i LC_ALL=C perl -e "$s" -- "$@" 2>&1"#;

/// The start shared by both holders (perl; the first arguments are uid, gid, groups).
/// The root process forks; the child takes the acting user's gid, groups and uid (real,
/// effective and saved) without exec'ing anything, so the kernel keeps it non-dumpable:
/// no process of the user can ptrace it or open its `/proc` entries, hence none can
/// change what its descriptors are (it checks that its `/proc/PID/fd` is root's). The
/// root parent reaps the child only once the child said so on a private pipe (`done`),
/// which it does only when root no longer opens its descriptors: a child the user kills
/// stays a zombie, its pid is not reused and `/proc/PID/fd` is empty. The parent then
/// exits with the child's status. `fail` prints the cause, then `eCODE`.
macro_rules! holder_start {
    () => {
        r#"use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NOFOLLOW O_NONBLOCK O_NOCTTY F_GETFD F_SETFD FD_CLOEXEC);
my ($uid, $gid, $groups) = splice(@ARGV, 0, 3);
$| = 1;
pipe(my $pr, my $pw) or do { print "pipe: $!\ne1\n"; exit 1 };
my $pid = fork();
do { print "fork: $!\ne1\n"; exit 1 } unless defined $pid;
if ($pid) {
  close $pw; close STDIN;
  my $word = <$pr>;
  sleep 3600 while !defined $word;
  waitpid($pid, 0);
  exit($? & 127 ? 1 : $? >> 8);
}
close $pr;
my $said = 0;
sub done { return if $said; $said = 1; print $pw "r\n"; close $pw }
sub fail { my ($code, $msg) = @_; done(); print "$msg\n" if defined $msg; print "e$code\n"; exit $code }
$) = "$gid $groups"; $( = $gid; $> = $uid; $< = $uid;
fail(71, "cannot act as $uid:$gid") unless $< == $uid && $> == $uid && $( == $gid && $) == $gid;
my @pfd = stat("/proc/$$/fd");
fail(71, "the holder is reachable by the user (fs.suid_dumpable?)") unless @pfd && $pfd[4] == 0;
"#
    };
}

/// The read holder (arguments after the ids: path, limit). It opens the path once
/// (`O_NONBLOCK`: a FIFO never blocks it), refuses a directory (67) or anything not a
/// regular file (69), checks the size of the open file against the limit (68), prints
/// `ok PID FD SIZE` and keeps the file open until stdin ends; envd's root
/// `GET /files` reads `/proc/PID/fd/FD`, the file this user opened.
pub(crate) const READ_HOLDER: &str = concat!(
    holder_start!(),
    r#"my ($path, $limit) = @ARGV;
sysopen(my $fh, $path, O_RDONLY | O_NONBLOCK | O_NOCTTY) or fail(2, "$path: $!");
my @st = stat($fh) or fail(1, "$path: $!");
fail(67) if -d _;
fail(69) unless -f _;
fail(68) if length($limit) && $st[7] > $limit;
print "ok $$ ", fileno($fh), " $st[7]\n";
1 while defined(<STDIN>);
done();
exit 0;"#
);

/// The write holder (arguments after the ids: target, parent, staging dir, create
/// parents `1`/`0`, mode (octal, empty: the existing file's, else 644), `create`
/// (`1`: `create_if_absent`), the `find -printf` record format). As the user: 65 when
/// creating and anything is at the target; parent checks (made 0755 when asked);
/// target not a directory; the staging dir made 0700 and `data` in it created
/// (`O_EXCL`, no link followed); prints `ok PID FD` and waits for a line on stdin while
/// envd's root `POST /files` writes `/proc/PID/fd/FD`, the file this user created.
/// `commit`: a write gets the mode and is renamed over the target, then its record is
/// printed (through the held descriptor); a create gets 0644 and is hard-linked to the
/// target (65 when anything is there). Anything else: the staging dir is removed, 75.
pub(crate) const WRITE_HOLDER: &str = concat!(
    holder_start!(),
    r#"my ($t, $p, $s, $mkp, $mode, $create, $fmt) = @ARGV;
my $f = "$s/data";
sub clean {
  for (1 .. 3) {
    if (opendir(my $d, $s)) { unlink map { "$s/$_" } grep { $_ ne '.' && $_ ne '..' } readdir $d }
    return if rmdir $s;
  }
}
if ($create) { fail(65) if -e $t || -l $t }
unless (-d $p) {
  fail(66) if -e $p || -l $p;
  fail(64) unless $mkp;
  umask 022;
  my $acc = '';
  for my $c (grep { length } split m{/}, $p) {
    $acc .= "/$c";
    next if -d $acc;
    mkdir($acc, 0755) or -d $acc or fail(1, "mkdir $acc: $!");
  }
}
fail(67) if !$create && -d $t && !-l $t;
my $m = $create ? '644' : $mode;
if ($m eq '') {
  $m = '644';
  if (-f $t && !-l $t) { my @st = stat($t) or fail(1, "$t: $!"); $m = sprintf('%o', $st[2] & 07777) }
}
mkdir($s, 0700) or fail(1, "mkdir $s: $!");
sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600) or do { my $e = $!; clean(); fail(1, "$f: $e") };
print "ok $$ ", fileno($fh), "\n";
my $go = <STDIN>;
done();
$go = '' unless defined $go;
chomp $go;
if ($go ne 'commit') { clean(); exit 75 }
chmod(oct($m), $fh) or do { my $e = $!; clean(); fail(1, "chmod $t: $e") };
if ($create) {
  if (link($f, $t)) { clean(); exit 0 }
  my $e = $!;
  clean();
  fail(65) if -e $t || -l $t;
  fail(1, "link $t: $e");
}
rename($f, $t) or do { my $e = $!; clean(); fail(1, "rename $t: $e") };
clean();
my $fl = fcntl($fh, F_GETFD, 0);
fcntl($fh, F_SETFD, $fl & ~FD_CLOEXEC) if defined $fl;
exec('find', '-L', "/proc/$$/fd/" . fileno($fh), '-maxdepth', '0', '-printf', $fmt) or fail(1, "find: $!");"#
);

/// The `find -printf` record format as one argument (no shell quoting).
pub(crate) const RECORD_FORMAT: &str = record_format!();
