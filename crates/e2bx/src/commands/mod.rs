//! One module per subcommand, and [`dispatch`], which opens the backend and the sandbox a
//! command needs and always cleans them up (fresh sandbox killed, embedded emulator
//! stopped), including after Ctrl-C.

pub mod cp;
pub mod detached;
pub mod fs;
pub mod mcp;
pub mod run;
pub mod sandbox;
#[cfg(feature = "embedded")]
pub mod serve;
pub mod shell;
pub mod snapshot;
pub mod tree;
pub mod volume;
pub mod watch;

use std::future::Future;

use crate::cli::{Cli, Command};
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;
use crate::target::Backend;

/// Run the parsed command line; returns the exit code.
pub async fn dispatch(cli: &Cli, ints: &mut Interrupts) -> CliResult {
    let g = &cli.global;
    if let Command::Serve(a) = &cli.command {
        #[cfg(feature = "embedded")]
        return serve::serve(a, g, ints).await;
        #[cfg(not(feature = "embedded"))]
        {
            let _ = a;
            return Err(CliError::msg(
                "this e2bx was built without the embedded emulator (feature `embedded`); `e2bx serve` needs it",
            ));
        }
    }
    if let Command::Mcp(a) = &cli.command {
        return mcp::mcp(a, g, ints).await;
    }
    let backend = interruptible(ints, Backend::open(g)).await?;
    let r = with_backend(cli, &backend, ints).await;
    backend.close().await;
    r
}

async fn with_backend(cli: &Cli, backend: &Backend, ints: &mut Interrupts) -> CliResult {
    let g = &cli.global;
    if let Command::Sandbox(cmd) = &cli.command {
        return interruptible(ints, sandbox::sandbox(backend, g, cmd)).await;
    }
    if let Command::Volume(cmd) = &cli.command {
        return interruptible(ints, volume::volume(backend, g, cmd)).await;
    }
    detached::needs_sandbox(cli)?;
    let session = interruptible(ints, backend.session(g)).await?;
    let r = match &cli.command {
        Command::Run(a) if a.detach => {
            interruptible(ints, detached::start(&session, a, g.json)).await
        }
        Command::Run(a) => run::run(&session, a, g.json, ints).await,
        Command::Ps => interruptible(ints, detached::ps(&session, g.json)).await,
        Command::Attach(a) => detached::attach(&session, a, g.json, ints).await,
        Command::Kill(a) => interruptible(ints, detached::kill(&session, &a.id)).await,
        Command::Shell(a) => shell::shell(&session, a, g.json, ints).await,
        Command::Cp(a) => {
            if session.owned() && cp::remote_path(&a.src).is_none() && !g.quiet {
                eprintln!(
                    "e2bx: note: without --sandbox the file goes to a fresh sandbox that is killed when this command ends"
                );
            }
            interruptible(ints, async {
                if a.recursive {
                    let proc = session.subprocess(None).await?;
                    tree::cp_tree(&session.fs().await?, &proc, a, g.quiet).await
                } else {
                    cp::cp(&session.fs().await?, a, g.quiet).await
                }
            })
            .await
        }
        Command::Watch(a) => {
            interruptible(ints, async {
                watch::watch(&session.fs().await?, a, g.json).await
            })
            .await
        }
        Command::Ls(a) => {
            interruptible(ints, async {
                fs::ls(&session.fs().await?, &a.path, g.json).await
            })
            .await
        }
        Command::Cat(a) => {
            interruptible(ints, async { fs::cat(&session.fs().await?, &a.path).await }).await
        }
        Command::Stat(a) => {
            interruptible(ints, async {
                fs::stat(&session.fs().await?, &a.path, g.json).await
            })
            .await
        }
        Command::Sandbox(_) | Command::Serve(_) | Command::Volume(_) | Command::Mcp(_) => {
            Err(CliError::msg("unreachable command"))
        }
    };
    session.end().await;
    r
}

/// Run `fut` unless a termination signal comes first (then exit 128+N, quietly).
async fn interruptible<T>(
    ints: &mut Interrupts,
    fut: impl Future<Output = CliResult<T>>,
) -> CliResult<T> {
    tokio::select! {
        r = fut => r,
        sig = ints.recv() => Err(CliError::Exit(128 + sig)),
    }
}
