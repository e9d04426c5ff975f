//! `e2bx`: the command line a new user starts with. Runs commands, interactive shells and
//! file copies in E2B sandboxes, or, without `E2B_API_KEY`, in an E2B emulator embedded in
//! this process; manages sandboxes; serves the emulator for other clients.
//!
//! Layout: [`cli`] (grammar and help), [`target`] (backend and per-command sandbox),
//! [`commands`] (one module per subcommand; processes and terminals through
//! `subprocess-e2b`), [`tty`] (raw mode guard, size), [`signals`], [`progress`], [`error`].

mod cli;
mod commands;
mod error;
mod progress;
mod signals;
mod target;
mod tty;

use clap::Parser as _;

use crate::error::CliError;

fn main() {
    install_panic_hook();
    let cli = cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("e2bx: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = rt.block_on(async {
        let mut ints = signals::Interrupts::install()
            .map_err(|e| CliError::msg(format!("cannot install signal handlers: {e}")))?;
        commands::dispatch(&cli, &mut ints).await
    });
    // The shell's stdin reader may sit in a blocking read: do not wait for it.
    rt.shutdown_background();
    tty::restore();
    let code = match result {
        Ok(code) => code,
        Err(CliError::Exit(code)) => code,
        Err(CliError::Message(m)) => {
            eprintln!("e2bx: {m}");
            1
        }
    };
    std::process::exit(code);
}

/// Panics restore the terminal and print one line, unless `RUST_BACKTRACE` asks for more.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tty::restore();
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            default(info);
            return;
        }
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_owned());
        eprintln!("e2bx: internal error: {msg} (set RUST_BACKTRACE=1 for details)");
    }));
}
