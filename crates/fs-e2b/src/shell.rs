//! Running the shell commands of [`crate::scripts`] as the acting user, and turning a
//! failed one into an [`Error`] of the right kind.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::EnvdApi;
use e2b_core::envd::ProcessStream;
use e2b_core::trusted_shell::TrustedShell;
use exec_world::{Error, WorldPath};

use crate::scripts;
use crate::warm::{Outcome, Warm};

/// Most bytes kept of each of a command's stdout and stderr (a listing of a very large
/// directory fails rather than growing without bound).
const MAX_OUTPUT: usize = 64 << 20;

/// Exit code: nothing at the path.
pub(crate) const EXIT_NOT_FOUND: i32 = 64;
/// Exit code: something is already at the path.
pub(crate) const EXIT_EXISTS: i32 = 65;
/// Exit code: a directory is needed and something else is there.
pub(crate) const EXIT_NOT_DIR: i32 = 66;
/// Exit code: a directory is in the way.
pub(crate) const EXIT_IS_DIR: i32 = 67;
/// Exit code: the file is larger than the limit given.
pub(crate) const EXIT_TOO_LARGE: i32 = 68;
/// Exit code: not a regular file (a FIFO, socket or device is never opened).
pub(crate) const EXIT_NOT_REGULAR: i32 = 69;

/// What a shell command produced.
#[derive(Debug)]
pub(crate) struct ShellOutput {
    /// Exit code (-1 when killed).
    pub exit_code: i32,
    /// stdout (bounded).
    pub stdout: Vec<u8>,
    /// stderr (bounded).
    pub stderr: Vec<u8>,
}

/// Runs shell commands as one user.
#[derive(Debug, Clone)]
pub(crate) struct Ctl {
    shell: TrustedShell,
    /// The warm worker (see [`crate::warm`]), when the adapter runs one.
    warm: Option<Arc<Warm>>,
}

impl Ctl {
    /// A runner over `api` acting as `user` (`None`: envd's default user).
    pub(crate) fn new(api: Arc<dyn EnvdApi>, user: Option<String>, timeout: Duration) -> Self {
        Ctl {
            shell: TrustedShell::new(api)
                .acting_user(user)
                .env("LC_ALL", "C")
                .timeout(Some(timeout))
                .max_output(MAX_OUTPUT),
            warm: None,
        }
    }

    /// This runner with a warm worker ([`Ctl::run_ok_read`], [`Ctl::run_once`],
    /// [`Ctl::warm_once`]).
    pub(crate) fn with_warm(mut self, timeout: Duration) -> Self {
        self.warm = Some(Arc::new(Warm::new(self.shell.clone(), timeout)));
        self
    }

    /// `script` on the warm worker when it is running and idle; `None`: make the call the
    /// ordinary way (for commands that change nothing only: a lost answer is `None` too).
    pub(crate) async fn on_warm(&self, script: &str, args: &[&str]) -> Option<ShellOutput> {
        match self.warm.as_ref()?.run(script, args, None).await {
            Outcome::Answered(out) => Some(out),
            Outcome::NotSent | Outcome::Lost(_) => None,
        }
    }

    /// [`Ctl::run_ok`] for a command that changes nothing: on the warm worker when it is
    /// running and idle, else (or when its answer was lost) the ordinary way.
    pub(crate) async fn run_ok_read(
        &self,
        script: &str,
        args: &[&str],
        path: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        match self.on_warm(script, args).await {
            Some(out) => succeeded(out, path, what),
            None => self.run_ok(script, args, path, what).await,
        }
    }

    /// [`Ctl::run`] for a command that changes something: on the warm worker when it is
    /// running and idle, else the ordinary way; an answer lost after the request may have
    /// reached the worker is [`ErrorKind::OutcomeUnknown`](exec_world::ErrorKind), never
    /// a second run.
    pub(crate) async fn run_once(
        &self,
        script: &str,
        args: &[&str],
        path: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        match self.warm_once(script, args, None, path, what).await? {
            Some(out) => Ok(out),
            None => self.run(script, args, path, what).await,
        }
    }

    /// `script` on the warm worker (with `stdin` for it) when it is running and idle:
    /// `Ok(None)` when it was not sent there (make the call the ordinary way), and
    /// [`ErrorKind::OutcomeUnknown`](exec_world::ErrorKind) when its answer was lost after
    /// the request may have reached the worker (a change is never made twice).
    pub(crate) async fn warm_once(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        path: &WorldPath,
        what: &str,
    ) -> Result<Option<ShellOutput>, Error> {
        let Some(w) = &self.warm else {
            return Ok(None);
        };
        match w.run(script, args, stdin).await {
            Outcome::Answered(out) => Ok(Some(out)),
            Outcome::NotSent => Ok(None),
            Outcome::Lost(why) => Err(Error::outcome_unknown(what, why).with_path(path)),
        }
    }

    /// [`Ctl::run_once`] requiring exit 0 (else the classified error).
    pub(crate) async fn run_ok_once(
        &self,
        script: &str,
        args: &[&str],
        path: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        succeeded(self.run_once(script, args, path, what).await?, path, what)
    }

    /// Runs `script` with `args`; `path` names the operation's path in errors. A non-zero
    /// exit is returned as data; output past [`MAX_OUTPUT`] is an error, never truncated
    /// data.
    pub(crate) async fn run(
        &self,
        script: &str,
        args: &[&str],
        path: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        let out = self
            .shell
            .run(script, args)
            .await
            .map_err(|e| e.into_world(what).with_path(path))?;
        if out.truncated {
            return Err(
                Error::other(format!("shell command output exceeds {MAX_OUTPUT} bytes"))
                    .with_op(what)
                    .with_path(path),
            );
        }
        Ok(ShellOutput {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    /// Starts `script` with `args` (and `envs` added to its environment) and returns
    /// its event stream (for processes driven while they run); `lifetime` replaces the
    /// command timeout (`None`: unbounded), `stdin` opens a stdin pipe.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        script: &str,
        args: &[&str],
        envs: &[(String, String)],
        lifetime: Option<Duration>,
        stdin: bool,
        path: &WorldPath,
        what: &str,
    ) -> Result<ProcessStream, Error> {
        let mut spec = self.shell.command(script, args);
        for (k, v) in envs {
            spec.envs.insert(k.clone(), v.clone());
        }
        spec.timeout = lifetime;
        spec.stdin = stdin;
        self.shell
            .api()
            .start_process(spec)
            .await
            .map_err(|e| e.into_world(what).with_path(path))
    }

    /// Runs `script` and requires exit 0 (else the classified error).
    pub(crate) async fn run_ok(
        &self,
        script: &str,
        args: &[&str],
        path: &WorldPath,
        what: &str,
    ) -> Result<ShellOutput, Error> {
        succeeded(self.run(script, args, path, what).await?, path, what)
    }
}

/// `out` when its command exited 0, else its classified error.
fn succeeded(out: ShellOutput, path: &WorldPath, what: &str) -> Result<ShellOutput, Error> {
    if out.exit_code != 0 {
        return Err(classify(&out, path, what));
    }
    Ok(out)
}

/// The error of a failed shell command, from its exit code only: ours (64–69, 76) and
/// `100 + errno` (see [`scripts::ERRNO_BASE`]); any other code is
/// [`ErrorKind::Other`] with the last line of stderr as its detail. The error names
/// `what` and `path`.
pub(crate) fn classify(out: &ShellOutput, path: &WorldPath, what: &str) -> Error {
    classify_kind(out, path).with_op(what)
}

/// [`classify`] without the operation.
fn classify_kind(out: &ShellOutput, path: &WorldPath) -> Error {
    match out.exit_code {
        EXIT_NOT_FOUND => return Error::not_found(path),
        EXIT_EXISTS => return Error::already_exists(path),
        EXIT_NOT_DIR => return Error::not_a_directory(path),
        EXIT_IS_DIR => return Error::is_a_directory(path),
        EXIT_NOT_REGULAR => {
            return Error::other("not a regular file (a FIFO, socket or device is never opened)")
                .with_path(path);
        }
        scripts::EXIT_INTERRUPTED => {
            return Error::interrupted("")
                .with_path(path)
                .with_detail(cause_line(&out.stderr));
        }
        c if c > scripts::ERRNO_BASE && c <= 255 => {
            let os = std::io::Error::from_raw_os_error(c - scripts::ERRNO_BASE);
            return Error::from_io(path, "", os);
        }
        _ => {}
    }
    // Any other code: the tool's own failure; its last line says it, in words only.
    Error::other(format!(
        "exit code {}: {}",
        out.exit_code,
        cause_line(&out.stderr)
    ))
    .with_path(path)
}

/// The last non-empty line of a holder's stderr before its `eCODE` line: the cause in
/// words, for the detail only (never for the kind).
fn cause_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !is_code_line(l))
        .unwrap_or("")
        .to_owned()
}

/// `eNN`.
fn is_code_line(l: &str) -> bool {
    l.len() > 1 && l.starts_with('e') && l[1..].bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use exec_world::ErrorKind;

    fn out(code: i32, stderr: &str) -> ShellOutput {
        ShellOutput {
            exit_code: code,
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn classifies_exit_codes_and_errnos_never_text() {
        let p = WorldPath::new("/a/b").expect("path");
        let k = |o: ShellOutput| classify(&o, &p, "test");
        assert_eq!(k(out(64, "")).kind(), ErrorKind::NotFound);
        assert_eq!(k(out(67, "")).kind(), ErrorKind::IsADirectory);
        assert_eq!(k(out(76, "x\ne76\n")).kind(), ErrorKind::Interrupted);
        // Linux errno numbers: ENOTEMPTY 39, ENOENT 2, EEXIST 17, EACCES 13, EPERM 1,
        // ENAMETOOLONG 36.
        let e = |n: i32| scripts::ERRNO_BASE + n;
        assert_eq!(k(out(e(39), "")).kind(), ErrorKind::NotEmpty);
        assert_eq!(k(out(e(2), "")).kind(), ErrorKind::NotFound);
        assert_eq!(k(out(e(17), "")).kind(), ErrorKind::AlreadyExists);
        assert_eq!(k(out(e(13), "")).kind(), ErrorKind::PermissionDenied);
        assert_eq!(k(out(e(1), "")).kind(), ErrorKind::PermissionDenied);
        // The text says "Permission denied", the code does not: the code wins.
        assert_eq!(
            k(out(1, "mv: cannot move 'x' to 'y': Permission denied")).kind(),
            ErrorKind::Other
        );
        let long = k(out(e(36), "find: '/a/b': File name too long"));
        assert_eq!(long.kind(), ErrorKind::InvalidPath);
        assert_eq!(
            long.to_string(),
            "test /a/b: invalid path: File name too long (os error 36)"
        );
    }
}
