//! The command-line grammar (clap derive): global connection and sandbox-selection flags,
//! and one struct per subcommand. Help texts here are what `e2bx --help` prints.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Where commands run:
  Without E2B_API_KEY (and without --api-url/--domain/--sandbox-url) e2bx starts an embedded
  E2B emulator in this process and says so on stderr; its sandboxes are local and end with the
  command. With E2B_API_KEY it talks to E2B (or to the control plane named by E2B_API_URL /
  --api-url, e.g. a running `e2bx serve`: export the three lines it prints).

Which sandbox:
  Without --sandbox, run/shell/cp/ls/cat/stat create a fresh sandbox (--template, default
  `base`) for the one command and kill it at the end. With --sandbox ID|NAME they reuse an
  existing sandbox (resuming it if paused) and leave it running; NAME is matched against the
  metadata key `e2bx.name` set by `e2bx sandbox create --name NAME`.

Paths:
  Relative sandbox paths and the default working directory are the sandbox user's home
  (/home/user on the `base` template). In `cp`, `sbx:PATH` or `:PATH` names a sandbox path.

Exit codes:
  run/shell pass the remote exit code through (killed by signal N: 128+N; interrupted by
  Ctrl-C: 130). Errors print one line on stderr and exit 1; usage errors exit 2.";

/// e2bx: run commands, shells and file copies in E2B sandboxes (or in a local emulator).
#[derive(Debug, Parser)]
#[command(name = "e2bx", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Connection and sandbox selection.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags accepted before or after the subcommand.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// Reuse this sandbox (ID, or a NAME given at `sandbox create --name`) instead of creating
    /// a fresh one that is killed when the command ends.
    #[arg(long, global = true, value_name = "ID|NAME")]
    pub sandbox: Option<String>,
    /// Template of fresh sandboxes (and of `sandbox create`).
    #[arg(long, global = true, default_value = "base", value_name = "T")]
    pub template: String,
    /// Control-plane URL (default `https://api.<domain>`).
    #[arg(long, global = true, env = "E2B_API_URL", hide_env_values = true)]
    pub api_url: Option<String>,
    /// E2B domain (default e2b.app).
    #[arg(long, global = true, env = "E2B_DOMAIN", hide_env_values = true)]
    pub domain: Option<String>,
    /// Send every envd request to this URL (self-hosted E2B, `e2bx serve`).
    #[arg(long, global = true, env = "E2B_SANDBOX_URL", hide_env_values = true)]
    pub sandbox_url: Option<String>,
    /// Machine-readable output: JSON on stdout for sandbox create/list, ls and stat; for
    /// run and shell a final JSON summary line on stderr.
    #[arg(long, global = true)]
    pub json: bool,
    /// No notices and no progress bars.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// The embedded emulator (no E2B_API_KEY) and `e2bx serve` only: template NAME's
    /// sandboxes get DIR, an unpacked image tree, as their root filesystem (read-only;
    /// writes stay in each sandbox) instead of the host's system directories. DIR must
    /// hold /bin/sh, /usr/bin/nice and /bin/sleep; repeat for more templates.
    #[arg(long = "template-root", global = true, value_name = "NAME=DIR")]
    pub template_root: Vec<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in the sandbox, streaming its output; its exit code is e2bx's.
    Run(RunArgs),
    /// An interactive login shell (bash) in the sandbox, on a PTY.
    Shell(ShellArgs),
    /// List the sandbox's detached commands (`run --detach`): running, or ended and not
    /// yet removed.
    Ps,
    /// Stream a detached command's output (from the start, or --from N) until it ends;
    /// e2bx exits with its code. Ctrl-C detaches and leaves it running.
    Attach(AttachArgs),
    /// Kill a detached command and everything it started (TERM, 2 s, KILL).
    Kill(KillArgs),
    /// Copy one file (or with -r a directory tree) up (local -> sbx:PATH) or down
    /// (sbx:PATH -> local), streamed.
    Cp(CpArgs),
    /// Print the changes under a sandbox directory as they happen, until Ctrl-C.
    Watch(WatchArgs),
    /// List a sandbox directory.
    Ls(PathArgs),
    /// Write a sandbox file's bytes to stdout.
    Cat(PathArgs),
    /// Show a sandbox path's metadata.
    Stat(PathArgs),
    /// Create, list, pause, resume and kill sandboxes.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Serve the E2B emulator for other clients (official SDKs included) until Ctrl-C.
    Serve(ServeArgs),
    /// Create, list and remove team volumes (directories that outlive sandboxes).
    #[command(subcommand)]
    Volume(crate::commands::volume::VolumeCommand),
    /// Serve the execution world to AI agents as an MCP server (stdio, or --http).
    Mcp(crate::commands::mcp::McpArgs),
}

/// `e2bx run`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example: e2bx run --cwd /tmp --env A=1 -- sh -c 'echo $A > a && cat a'\n\
The command gets its own process group (setsid); Ctrl-C kills that whole group in the\n\
sandbox and exits 130. No login profile is read; use `-- bash -lc '...'` for that.\n\
A piped stdin (not a terminal) is forwarded to the command.\n\
With --detach (and --sandbox) it prints the command's id and returns at once; the command\n\
keeps running: `e2bx --sandbox S ps`, `attach ID`, `kill ID`."
)]
pub struct RunArgs {
    /// Working directory in the sandbox (default: the user's home).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Environment variable for the command (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse_kv)]
    pub env: Vec<(String, String)>,
    /// Kill the command after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Run as this sandbox user (default: the template's user).
    #[arg(long)]
    pub user: Option<String>,
    /// Start it detached (needs --sandbox): print its id and return; it outlives e2bx,
    /// its output and exit status are kept in the sandbox for `attach`.
    #[arg(long)]
    pub detach: bool,
    /// The detached command's id (`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`; default random).
    /// An id in use is refused and nothing runs, so a retried start never runs twice.
    #[arg(long, value_name = "ID", requires = "detach")]
    pub id: Option<String>,
    /// The program and its arguments, passed as-is (no shell unless you name one).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `e2bx attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The command's id (as `run --detach` printed it).
    pub id: String,
    /// Start at this byte offset of its stdout (default: the first byte kept).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub from: u64,
    /// Start at this byte offset of its stderr.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub from_stderr: u64,
}

/// `e2bx kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// The command's id.
    pub id: String,
}

/// `e2bx shell`.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// Working directory in the sandbox (default: the user's home).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Run as this sandbox user (default: the template's user).
    #[arg(long)]
    pub user: Option<String>,
}

/// `e2bx cp`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  e2bx --sandbox dev cp ./data.csv sbx:data/\n  \
e2bx --sandbox dev cp :/home/user/out.tar.gz .\n  \
e2bx --sandbox dev cp -r ./repo sbx:/home/user/\n  \
e2bx --sandbox dev cp -r :build ./build-out\n\
A destination ending in / or naming a directory receives the source's file name.\n\
With -r the tree moves as one tar stream through one `tar` of the sandbox user; it appears\n\
whole at the destination (which must not exist, or be an empty directory) or not at all.\n\
Modes and symlinks are kept; FIFOs, sockets and devices are reported and skipped; an\n\
archive entry that would land outside the destination is refused."
)]
pub struct CpArgs {
    /// Copy a directory tree.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Source: a local file, or sbx:PATH / :PATH in the sandbox.
    pub src: String,
    /// Destination: sbx:PATH / :PATH in the sandbox, or a local path.
    pub dst: String,
}

/// `e2bx watch`.
#[derive(Debug, Args)]
#[command(
    after_help = "Prints one line per change: SEQ KIND PATH (KIND: created, written, removed,\n\
renamed, metadata, overflow; PATH relative to the watched directory). With --json, one\n\
object a line: {\"seq\":0,\"kind\":\"created\",\"path\":\"a.txt\"}. An `overflow` line means\n\
changes were lost: rescan. Example: e2bx --sandbox dev watch -r /home/user/project"
)]
pub struct WatchArgs {
    /// Sandbox directory (relative: the user's home); an `sbx:` or `:` prefix is accepted.
    #[arg(default_value = ".")]
    pub path: String,
    /// Watch subdirectories too.
    #[arg(short = 'r', long)]
    pub recursive: bool,
}

/// `e2bx ls|cat|stat`.
#[derive(Debug, Args)]
pub struct PathArgs {
    /// Sandbox path (relative: the user's home); an `sbx:` or `:` prefix is accepted.
    #[arg(default_value = ".")]
    pub path: String,
}

/// `e2bx sandbox …`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox that outlives this command; prints its ID. With the embedded
    /// emulator it ends with this command: use `e2bx serve` and export its lines first.
    Create(CreateArgs),
    /// List running and paused sandboxes.
    List,
    /// Pause a sandbox (processes stopped, memory and files kept).
    Pause(IdArgs),
    /// Resume a paused sandbox.
    Resume(IdArgs),
    /// Kill a sandbox.
    Kill(IdArgs),
    /// Print the URL of a port of a sandbox (`<port>-<id>.<domain>`): where a server that
    /// listens on that port inside the sandbox is reachable (a preview of what it serves).
    Url(PortArgs),
    /// Snapshot a running sandbox; prints the snapshot ID (`--template` it to create from it).
    Snapshot(crate::commands::snapshot::SnapshotArgs),
    /// List snapshots.
    Snapshots(crate::commands::snapshot::SnapshotsArgs),
    /// Fork a running sandbox; prints one new sandbox ID per line.
    Fork(crate::commands::snapshot::ForkArgs),
    /// Delete a snapshot.
    DeleteSnapshot(crate::commands::snapshot::DeleteSnapshotArgs),
}

/// `e2bx sandbox url`.
#[derive(Debug, Args)]
#[command(
    after_help = "On E2B the URL is https://<port>-<id>.<domain>. Against an emulator (E2B_SANDBOX_URL \
set to a loopback URL) it is http://<port>-<id>.localhost:<emulator port>: *.localhost names \
reach 127.0.0.1 in browsers and curl, and the emulator routes by that Host."
)]
pub struct PortArgs {
    /// Sandbox ID or name.
    #[arg(value_name = "ID|NAME")]
    pub id: String,
    /// The port a server listens on inside the sandbox.
    pub port: u16,
}

/// `e2bx sandbox create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Lifetime in seconds (E2B kills it afterwards unless extended).
    #[arg(long, value_name = "S", default_value_t = 300)]
    pub timeout: u64,
    /// A name to find it by (`--sandbox NAME`); stored as metadata `e2bx.name`.
    #[arg(long)]
    pub name: Option<String>,
    /// Metadata pair (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_kv)]
    pub metadata: Vec<(String, String)>,
    /// Mount a team volume at an absolute path (repeatable).
    #[arg(long, value_name = "NAME:/PATH", value_parser = crate::commands::volume::parse_mount)]
    pub volume: Vec<(String, String)>,
}

/// A sandbox named by ID or NAME.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// Sandbox ID or name.
    #[arg(value_name = "ID|NAME")]
    pub id: String,
}

/// `e2bx serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Prints E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY lines on stdout \
(`export` them, or `eval $(e2bx serve ...)` in another shell) and serves on 127.0.0.1 until \
Ctrl-C or SIGTERM. Sandboxes live as long as the server."
)]
pub struct ServeArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Directory for the sandboxes' files (default: a temporary directory removed at exit).
    #[arg(long)]
    pub root: Option<PathBuf>,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_keeps_argv_verbatim() {
        let cli = Cli::try_parse_from([
            "e2bx",
            "run",
            "--env",
            "A=1=2",
            "--",
            "sh",
            "-c",
            "echo \"$A\" 'x y'",
            "--flag",
        ])
        .unwrap();
        match cli.command {
            Command::Run(r) => {
                assert_eq!(r.env, [("A".to_owned(), "1=2".to_owned())]);
                assert_eq!(r.command, ["sh", "-c", "echo \"$A\" 'x y'", "--flag"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_kv("=x").is_err());
    }
}
