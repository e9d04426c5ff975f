//! The shell scripts of the shell commands. Each runs as `sh -c SCRIPT sh ARGS…` with
//! paths only as positional parameters. Exit codes 64–69 name an error kind, 76 an
//! interrupted holder, `100 + errno` the `errno` of the call that failed (see
//! [`crate::shell`]); the kind never comes from a tool's text.

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

/// `find` with the arguments after the first (`$1`: the call to redo, `stat`, `lstat`
/// or `opendir`, and then the path, `$3`… in `find`'s order): on failure the call is
/// redone in perl and the script exits `100 + errno` (see [`ERRNO_BASE`]); when the call
/// works by then (the path changed in between), `find` runs again, 3 times at most.
/// The kind comes from the number, never from the tool's text.
macro_rules! find_or_errno {
    ($call:literal, $find:expr) => {
        concat!(
            "i=0\nwhile :; do\n  ",
            $find,
            " && exit 0\n  ",
            r#"perl -e 'my ($o, $p) = @ARGV; my $ok = $o eq "stat" ? stat($p) : $o eq "lstat" ? lstat($p) : opendir(my $d, $p); exit 3 if $ok; my $n = $! + 0; exit($n > 0 && $n < 156 ? 100 + $n : 1)' -- "#,
            $call,
            r#" "$1"
  s=$?; [ $s = 3 ] && [ $i -lt 3 ] || exit $s; i=$((i + 1))
done"#
        )
    };
}

/// lstat of `$1`.
pub(crate) const LSTAT: &str = find_or_errno!(
    "lstat",
    concat!(r#"find "$1" -maxdepth 0 -printf "#, fmt!())
);

/// stat of `$1`, following links (a dangling link prints kind `l`).
pub(crate) const STAT: &str = find_or_errno!(
    "stat",
    concat!(r#"find -L "$1" -maxdepth 0 -printf "#, fmt!())
);

/// One level of directory `$1` (lstat of each entry; `$1` itself may be a link).
pub(crate) const READ_DIR: &str = concat!(
    r#"if [ -e "$1" ] && [ ! -d "$1" ]; then exit 66; fi
"#,
    find_or_errno!(
        "opendir",
        concat!(r#"find -H "$1" -mindepth 1 -maxdepth 1 -printf "#, fmt!())
    )
);

/// The perl of the changes below: each call that fails exits `100 + errno`.
macro_rules! errno_perl {
    ($body:literal) => {
        concat!(
            r#"exec perl -e 'sub fl { my $n = $! + 0; exit($n > 0 && $n < 156 ? 100 + $n : 1) } umask 022; "#,
            $body,
            r#"' -- "$@""#
        )
    };
}

/// `mkdir $1` (mode 0755).
pub(crate) const MKDIR: &str = errno_perl!(r#"mkdir($ARGV[0], 0755) or fl();"#);

/// `mkdir -p $1` (mode 0755); an existing directory is success.
pub(crate) const MKDIR_P: &str = errno_perl!(
    r#"my $p = $ARGV[0]; exit 0 if -d $p; my $acc = ""; for my $c (grep { length } split m{/}, $p) { $acc .= "/$c"; next if -d $acc; mkdir($acc, 0755) or -d $acc or fl() }"#
);

/// Removes `$1`; a directory needs `$2 = 1` unless empty; a link is removed itself.
pub(crate) const REMOVE: &str = errno_perl!(
    r#"sub rm_r { my $p = shift; if (-d $p && !-l $p) { opendir(my $d, $p) or fl(); for my $e (grep { $_ ne "." && $_ ne ".." } readdir $d) { rm_r("$p/$e") } closedir $d; rmdir($p) or fl() } else { unlink($p) or fl() } } my ($p, $r) = @ARGV; lstat($p) or fl(); if (-d _) { if ($r eq "1") { rm_r($p) } else { rmdir($p) or fl() } } else { unlink($p) or fl() }"#
);

/// `rename($1, $2)`; across file systems (`EXDEV`) `mv -T` copies.
pub(crate) const RENAME: &str = r#"perl -e 'rename($ARGV[0], $ARGV[1]) and exit 0; my $n = $! + 0; exit 2 if $n == 18; exit($n > 0 && $n < 156 ? 100 + $n : 1)' -- "$1" "$2"
s=$?; [ $s = 2 ] || exit $s
exec mv -T -- "$1" "$2""#;

/// As the acting user: its uid, gid and groups, one per line.
pub(crate) const IDENTITY: &str = "id -u && id -g && exec id -G";

/// Removes `$1` and everything under it (as the acting user).
pub(crate) const REMOVE_TREE: &str = r#"exec rm -rf -- "$1""#;

/// Exit code of a holder that could not make itself unreachable by the user's other
/// processes (no `perl`, or the change of identity or the non-dumpable check failed).
pub(crate) const EXIT_UNPROTECTED: i32 = 71;

/// Exit code of a write holder told anything but `commit` (it removed its staging dir).
pub(crate) const EXIT_ABORTED: i32 = 75;

/// As root: runs a holder, `$1` ([`READ_HOLDER`], [`WRITE_HOLDER`] or [`CAT_HOLDER`])
/// with the rest after `$2` as its arguments, in `perl` with an empty environment (no
/// `PERL5LIB` or `PERL5OPT` reaches root's interpreter). `$2` = `merge`: stderr on
/// stdout (the status protocol of [`crate::holder`]); `split`: stdout carries the data
/// of a [`CAT_HOLDER`] or of a [`READ_HOLDER`] that answers inline, stderr its status;
/// `inline`: as `merge`, with stdin the uuencoded bytes of an inline write, from the
/// start request's variables `FS_E2B_D0` … `FS_E2B_D15` (a here-document: a pipe, never
/// an argument any process of the sandbox could read; the environment of a root
/// process is root's only).
pub(crate) const HOLDER_WRAPPER: &str = r#"command -v perl >/dev/null || { echo "perl: not found" >&2; echo e71 >&2; exit 71; }
s=$1; m=$2; shift 2
[ "$m" = split ] && exec env -i LC_ALL=C perl -e "$s" -- "$@"
[ "$m" = inline ] && exec env -i LC_ALL=C perl -e "$s" -- "$@" 2>&1 <<EOF
${FS_E2B_D0}${FS_E2B_D1}${FS_E2B_D2}${FS_E2B_D3}${FS_E2B_D4}${FS_E2B_D5}${FS_E2B_D6}${FS_E2B_D7}${FS_E2B_D8}${FS_E2B_D9}${FS_E2B_D10}${FS_E2B_D11}${FS_E2B_D12}${FS_E2B_D13}${FS_E2B_D14}${FS_E2B_D15}
EOF
exec env -i LC_ALL=C perl -e "$s" -- "$@" 2>&1"#;

/// Exit code of a holder that was stopped or killed (by the user) before it was done:
/// the operation was interrupted.
pub(crate) const EXIT_INTERRUPTED: i32 = 76;

/// Exit codes from `ERRNO_BASE + 1` name the `errno` of the failed call (`101` EPERM,
/// `102` ENOENT, `113` EACCES, …): kinds come from numbers, never from text.
pub(crate) const ERRNO_BASE: i32 = 100;

/// The start shared by the holders (perl; the first arguments are the acting user (a
/// name, or uid, gid and groups) and a root staging file or empty). The root process
/// resolves a user name itself (no extra request), opens and unlinks the root staging
/// file when one is given (a path under a root-only directory: the user never controls
/// it), then forks; the child takes the acting user's gid, groups and uid (real,
/// effective and saved) without exec'ing anything, so the kernel keeps it non-dumpable:
/// no process of the user can ptrace it or open its `/proc` entries, hence none can
/// change what its descriptors are (it checks that its `/proc/PID/fd` is root's). The
/// root parent reaps the child only once the child said so on a private pipe (`done`),
/// which it does only when root no longer opens its descriptors: a child the user kills
/// stays a zombie, its pid is not reused and `/proc/PID/fd` is empty. The parent watches
/// the child: one the user stopped is killed, and a child that was stopped or killed
/// makes the parent print `e76` (interrupted) at once; before `done` it then waits for
/// a line or EOF on stdin (the caller let go of the descriptor) before reaping. `fail`
/// prints the cause, then `eCODE`, on stderr; `failno` makes the code from `errno`.
/// Only `Fcntl` is loaded (`POSIX` alone costs more than the rest of a holder's
/// start): `waitpid`'s `WUNTRACED` is Linux's 2, and a stopped child's status has 0x7f
/// in its low byte.
macro_rules! holder_start {
    () => {
        r#"use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NOFOLLOW O_NONBLOCK O_NOCTTY F_GETFD F_SETFD FD_CLOEXEC);
my ($uid, $gid, $groups, $src_path) = splice(@ARGV, 0, 4);
$| = 1;
sub early { print STDERR "$_[1]\ne$_[0]\n"; exit $_[0] }
if ($uid !~ /^[0-9]+$/) {
  my $name = $uid;
  my @pw = getpwnam($name) or early(1, "unknown user $name");
  ($uid, $gid) = ($pw[2], $pw[3]);
  my @g = ($gid);
  setgrent();
  while (my @gr = getgrent()) { push @g, $gr[2] if grep { $_ eq $name } split / /, $gr[3] }
  endgrent();
  $groups = join ' ', @g;
}
my ($SRC, $INLINE);
if ($src_path =~ /^-([0-9]+)$/) {
  my $len = $1;
  my $enc = do { local $/; <STDIN> };
  $INLINE = unpack('u', defined $enc ? $enc : '');
  $INLINE = '' unless defined $INLINE;
  early(1, "inline data: " . length($INLINE) . " bytes, not $len") unless length($INLINE) == $len;
  open(STDIN, '<', '/dev/null') or early(1, "stdin: $!");
} elsif (length $src_path) {
  sysopen($SRC, $src_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) or early(1, "staged data: $!");
  unlink $src_path;
  my @sst = stat($SRC);
  early(1, "staged data: not a root file") unless @sst && -f _ && $sst[4] == 0;
}
pipe(my $pr, my $pw) or early(1, "pipe: $!");
my $pid = fork();
early(1, "fork: $!") unless defined $pid;
if ($pid) {
  close $pw; close $SRC if $SRC;
  my $hit = 0;
  my $stopped = sub {
    open(my $st, '<', "/proc/$pid/stat") or return 0;
    my $l = <$st> // '';
    return $l =~ /\) [Tt] / ? 1 : 0;
  };
  my $rin = ''; vec($rin, fileno($pr), 1) = 1;
  until (select(my $r = $rin, undef, undef, 0.1) > 0) {
    if ($stopped->()) { kill 'KILL', $pid; $hit = 1 }
  }
  my $word = <$pr>;
  if (!defined $word) {
    print STDERR "the holder was stopped or killed before it was done: interrupted\ne76\n";
    my $x = <STDIN>;
    waitpid($pid, 0);
    exit 76;
  }
  close STDIN;
  while (1) {
    my $w = waitpid($pid, 2);
    last if $w != $pid || (${^CHILD_ERROR_NATIVE} & 0xff) != 0x7f;
    kill 'KILL', $pid; $hit = 1;
  }
  if ($hit || ($? & 127)) { print STDERR "the holder was stopped or killed: interrupted\ne76\n"; exit 76 }
  exit($? >> 8);
}
close $pr;
my $said = 0;
sub done { return if $said; $said = 1; print $pw "r\n"; close $pw }
sub fail { my ($code, $msg) = @_; done(); print STDERR "$msg\n" if defined $msg; print STDERR "e$code\n"; exit $code }
sub failno { my ($msg) = @_; my $n = $! + 0; my $t = "$!"; fail($n > 0 && $n < 156 ? 100 + $n : 1, "$msg: $t") }
$) = "$gid $groups"; $( = $gid; $> = $uid; $< = $uid;
fail(71, "cannot act as $uid:$gid") unless $< == $uid && $> == $uid && $( == $gid && $) == $gid;
my @pfd = stat("/proc/$$/fd");
fail(71, "the holder is reachable by the user (fs.suid_dumpable?)") unless @pfd && $pfd[4] == 0;
"#
    };
}

/// `copy_out(FH, PATH, CAP)`: copies at most CAP bytes (-1: all) of FH to stdout and
/// returns how many; a failed read is `failno(PATH)`, a failed write exits 1.
macro_rules! copy_out {
    () => {
        r#"sub copy_out {
  my ($fh, $path, $cap) = @_;
  binmode STDOUT;
  my $got = 0;
  while ($cap < 0 || $got < $cap) {
    my $want = 65536;
    $want = $cap - $got if $cap >= 0 && $cap - $got < $want;
    my $n = sysread($fh, my $buf, $want);
    failno($path) unless defined $n;
    last if $n == 0;
    my $off = 0;
    while ($off < $n) {
      my $w = syswrite(STDOUT, $buf, $n - $off, $off);
      exit 1 unless defined $w;
      $off += $w;
    }
    $got += $n;
  }
  return $got;
}
"#
    };
}

/// The read holder's work once it acts as the user (see [`READ_HOLDER`]).
macro_rules! read_body {
    () => {
        concat!(
            copy_out!(),
            r#"my ($path, $limit, $inline) = @ARGV;
sysopen(my $fh, $path, O_RDONLY | O_NONBLOCK | O_NOCTTY) or do {
  my $n = $! + 0;
  fail(69) if -e $path && !-f _;
  $! = $n; failno($path);
};
my @st = stat($fh) or failno($path);
fail(67) if -d _;
fail(69) unless -f _;
fail(68) if length($limit) && $st[7] > $limit;
if (length($inline) && $st[7] <= $inline) {
  done();
  my $got = copy_out($fh, $path, length($limit) ? $limit + 1 : -1);
  fail(68) if length($limit) && $got > $limit;
  exit 0;
}
print STDERR "ok $$ ", fileno($fh), " $st[7]\n";
1 while defined(<STDIN>);
done();
exit 0;"#
        )
    };
}

/// The cat holder's work once it acts as the user (see [`CAT_HOLDER`]).
macro_rules! cat_body {
    () => {
        concat!(
            copy_out!(),
            r#"my ($path, $max) = @ARGV;
sysopen(my $fh, $path, O_RDONLY | O_NONBLOCK | O_NOCTTY) or do {
  my $n = $! + 0;
  fail(64) unless -e $path;
  fail(69) unless -f _;
  $! = $n; failno($path);
};
stat($fh) or failno($path);
fail(67) if -d _;
fail(69) unless -f _;
done();
copy_out($fh, $path, $max);
exit 0;"#
        )
    };
}

/// What a holder's work needs when it runs as the user already (forked by the warm
/// worker, see [`crate::warm`]): `done` does nothing (no root parent to tell), `fail`
/// and `failno` print the cause and `eCODE` on stderr and exit with the code, as in
/// [`holder_start`].
macro_rules! user_start {
    () => {
        r#"use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NOFOLLOW O_NONBLOCK O_NOCTTY F_GETFD F_SETFD FD_CLOEXEC);
$| = 1;
sub done {}
sub fail { my ($code, $msg) = @_; print STDERR "$msg\n" if defined $msg; print STDERR "e$code\n"; exit $code }
sub failno { my ($msg) = @_; my $n = $! + 0; my $t = "$!"; fail($n > 0 && $n < 156 ? 100 + $n : 1, "$msg: $t") }
"#
    };
}

/// A holder's work as the user, for the warm worker, run with `sh -c`: `$1` the perl
/// program ([`READ_USER_PL`], [`CAT_USER_PL`], [`WRITE_USER_PL`]), then its arguments.
pub(crate) const PERL_AS_USER: &str = r#"p=$1; shift; exec env -i LC_ALL=C perl -e "$p" -- "$@""#;

/// The perl program of a [`PERL_AS_USER`] read.
pub(crate) const READ_USER_PL: &str = concat!(user_start!(), read_body!());

/// The perl program of a head read on the warm worker ([`CAT_HOLDER`]'s work as the
/// user; path and max bytes), run by [`PERL_AS_USER`].
pub(crate) const CAT_USER_PL: &str = concat!(user_start!(), cat_body!());

/// The read holder (arguments after the ids: path, limit, inline limit; run `split`).
/// It opens the path once (`O_NONBLOCK`: a FIFO never blocks it), refuses a directory
/// (67) or anything not a regular file (69), checks the size of the open file against
/// the limit (68). A file of at most the inline limit it answers itself: it says `done`
/// (root never touches its descriptors) and copies the open file to stdout (at most
/// limit + 1 bytes: 68 when it grew past the limit), so the read is the one request that
/// started it. A larger one: it prints `ok PID FD SIZE` on stderr and keeps the file
/// open until stdin ends; envd's root `GET /files` reads `/proc/PID/fd/FD`, the file
/// this user opened.
pub(crate) const READ_HOLDER: &str = concat!(holder_start!(), read_body!());

/// The write holder's work once it acts as the user (see [`WRITE_HOLDER`]); `$SRC` or
/// `$INLINE` hold the data when it is already there.
macro_rules! write_body {
    () => {
        r#"my ($t, $p, $s, $mkp, $mode, $create, $fmt, $follow) = @ARGV;
if ($follow) {
  my $n = 0;
  while (-l $t) {
    $! = 40; failno($t) if ++$n > 40;
    my $l = readlink($t);
    defined $l or failno("readlink $t");
    if ($l =~ m{^/}) { $t = $l } else { (my $d = $t) =~ s{[^/]*$}{}; $t = $d . $l }
  }
  ($p = $t) =~ s{/+[^/]*$}{};
  $p = '/' if $p eq '';
  (my $b = $s) =~ s{.*/}{};
  $s = ($p eq '/' ? '' : $p) . "/$b";
}
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
    mkdir($acc, 0755) or -d $acc or failno("mkdir $acc");
  }
}
fail(67) if !$create && -d $t && !-l $t;
my $m = $create ? '644' : $mode;
if ($m eq '') {
  $m = '644';
  if (-f $t && !-l $t) { my @st = stat($t) or failno($t); $m = sprintf('%o', $st[2] & 07777) }
}
mkdir($s, 0700) or failno("mkdir $s");
sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600) or do { my $e = $! + 0; clean(); $! = $e; failno($f) };
print "ok $$ ", fileno($fh), "\n";
my $go;
if ($SRC) {
  while (1) {
    my $n = sysread($SRC, my $buf, 1 << 16);
    if (!defined $n) { my $e = $! + 0; clean(); $! = $e; failno("read staged data") }
    last if $n == 0;
    my $off = 0;
    while ($off < $n) {
      my $w = syswrite($fh, $buf, $n - $off, $off);
      if (!defined $w) { my $e = $! + 0; clean(); $! = $e; failno($t) }
      $off += $w;
    }
  }
  close $SRC;
  $go = 'commit';
} elsif (defined $INLINE) {
  my ($off, $n) = (0, length $INLINE);
  while ($off < $n) {
    my $w = syswrite($fh, $INLINE, $n - $off, $off);
    if (!defined $w) { my $e = $! + 0; clean(); $! = $e; failno($t) }
    $off += $w;
  }
  undef $INLINE;
  $go = 'commit';
} else {
  $go = <STDIN>;
}
done();
$go = '' unless defined $go;
chomp $go;
if ($go ne 'commit') { clean(); exit 75 }
chmod(oct($m), $fh) or do { my $e = $! + 0; clean(); $! = $e; failno("chmod $t") };
if ($create) {
  if (link($f, $t)) { clean(); exit 0 }
  my $e = $! + 0;
  clean();
  fail(65) if -e $t || -l $t;
  $! = $e; failno("link $t");
}
rename($f, $t) or do { my $e = $! + 0; clean(); $! = $e; failno("rename $t") };
clean();
my $fl = fcntl($fh, F_GETFD, 0);
fcntl($fh, F_SETFD, $fl & ~FD_CLOEXEC) if defined $fl;
exec('find', '-L', "/proc/$$/fd/" . fileno($fh), '-maxdepth', '0', '-printf', $fmt) or failno("find");"#
    };
}

/// The write holder (arguments after the ids and the root staging file: target,
/// parent, staging dir, create parents `1`/`0`, mode (octal, empty: the existing
/// file's, else 644), `create` (`1`: `create_if_absent`), the `find -printf` record
/// format, follow (`1`: a final link is followed, with the user's rights, and the
/// staging dir goes next to what it names)). As the user: 65 when creating and anything
/// is at the target; parent checks (made 0755 when asked); target not a directory; the
/// staging dir made 0700 and `data` in it created (`O_EXCL`, no link followed); prints
/// `ok PID FD`. With a root staging file, its bytes are copied in and the holder goes
/// on at once (no `/proc` path is ever used by root). Without, it waits for a line on
/// stdin while envd's root `POST /files` writes `/proc/PID/fd/FD`, the file this user
/// created. `commit`: a write gets the mode and is renamed over the target, then its
/// record is printed (through the held descriptor); a create gets 0644 and is
/// hard-linked to the target (65 when anything is there). Anything else: the staging
/// dir is removed, 75. Failed calls exit with `100 + errno`.
pub(crate) const WRITE_HOLDER: &str = concat!(holder_start!(), write_body!());

/// The perl program of a write on the warm worker ([`WRITE_HOLDER`]'s work as the user),
/// run by [`PERL_AS_USER`] with the data on stdin: its arguments are the data's length
/// (stdin ending short of it is a failure, never a shorter file), then the write
/// holder's. It prints `ok PID FD` on stdout before the record, as the holder does.
/// The worker's fork hands it the bytes as `$INPUT` (a reference) as well, which it
/// takes instead of reading stdin.
pub(crate) const WRITE_USER_PL: &str = concat!(
    user_start!(),
    r#"my $want = shift @ARGV;
my $SRC;
binmode STDIN;
our $INPUT;
my $INLINE = ref $INPUT ? $$INPUT : do { local $/; <STDIN> };
$INLINE = '' unless defined $INLINE;
fail(1, "inline data: " . length($INLINE) . " bytes, not $want") unless length($INLINE) == $want;
"#,
    write_body!()
);

/// The cat holder (arguments after the ids and an empty staging argument: path, the
/// most bytes to copy). It opens the path once (`O_NONBLOCK`: a FIFO never blocks it;
/// nothing at the path, or a path in a directory the user cannot search, is 64: what
/// the user cannot see does not exist for it; a file it sees but may not read is
/// EACCES), refuses a directory (67)
/// or anything not a regular file (69), says `done` (root never touches its
/// descriptors) and copies at most that many bytes of the open file to stdout; its
/// status goes to stderr. One request reads a file's head as the user: the
/// provider's `read_file`.
pub(crate) const CAT_HOLDER: &str = concat!(holder_start!(), cat_body!());

/// The `find -printf` record format as one argument (no shell quoting).
pub(crate) const RECORD_FORMAT: &str = record_format!();

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    /// Runs [`WRITE_USER_PL`] on this host (as this user) writing `dir/t`, announcing
    /// `want` bytes and feeding `data`; returns the exit code and stderr.
    fn write_as_user(dir: &std::path::Path, want: usize, data: &[u8]) -> (i32, String) {
        let d = dir.to_str().expect("utf-8 path");
        let mut child = Command::new("perl")
            .args(["-e", WRITE_USER_PL, "--", &want.to_string()])
            .args([&format!("{d}/t"), d, &format!("{d}/.stage"), "0", "", "0"])
            .args([RECORD_FORMAT, "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("perl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(data)
            .expect("feed");
        let out = child.wait_with_output().expect("wait");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn every_perl_program_compiles() {
        for (name, prog) in [
            ("READ_HOLDER", READ_HOLDER),
            ("WRITE_HOLDER", WRITE_HOLDER),
            ("CAT_HOLDER", CAT_HOLDER),
            ("READ_USER_PL", READ_USER_PL),
            ("CAT_USER_PL", CAT_USER_PL),
            ("WRITE_USER_PL", WRITE_USER_PL),
        ] {
            let out = Command::new("perl")
                .args(["-c", "-e", prog])
                .output()
                .expect("perl");
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn a_warm_write_fed_short_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("fs-e2b-short-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("t"), b"old").expect("seed");
        let (code, err) = write_as_user(&dir, 10, b"abc");
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("3 bytes, not 10"), "{err}");
        assert_eq!(std::fs::read(dir.join("t")).expect("read"), b"old");
        let (code, err) = write_as_user(&dir, 3, b"abc");
        assert_eq!(code, 0, "{err}");
        assert_eq!(std::fs::read(dir.join("t")).expect("read"), b"abc");
        let left: Vec<_> = std::fs::read_dir(&dir).expect("list").collect();
        assert_eq!(left.len(), 1, "no staging dir left");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
