//! `e2bx serve`: run the emulator for other clients. Prints exactly the emulator's env
//! lines (`E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_API_KEY`) on stdout, then serves on
//! 127.0.0.1 until SIGINT, SIGTERM or SIGHUP, and shuts down (every sandbox process ends).

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use testing_fake::{Emulator, EmulatorConfig};

use crate::cli::{Global, ServeArgs};
use crate::error::{CliError, CliResult};
use crate::signals::Interrupts;

/// Serve until a termination signal; returns 0.
pub async fn serve(args: &ServeArgs, g: &Global, interrupts: &mut Interrupts) -> CliResult {
    let quiet = g.quiet;
    let cfg = EmulatorConfig {
        bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port),
        root: args.root.clone(),
        template_roots: crate::target::template_roots(&g.template_root)?,
        ..EmulatorConfig::default()
    };
    let emu = Emulator::start(cfg).await.map_err(|e| {
        CliError::msg(format!(
            "cannot start the emulator: {e}; try another --port"
        ))
    })?;
    {
        let mut out = std::io::stdout().lock();
        out.write_all(emu.env_lines().as_bytes())?;
        out.flush()?;
    }
    if !quiet {
        eprintln!(
            "e2bx: serving the E2B emulator on {}; export the lines above in another shell (official SDKs work too); Ctrl-C to stop",
            emu.api_url()
        );
    }
    let sig = interrupts.recv().await;
    emu.shutdown().await;
    if !quiet {
        eprintln!("e2bx: emulator stopped (signal {sig})");
    }
    Ok(0)
}
