//! `e2b-local`: serve the E2B emulator on loopback.
//!
//! Prints, one per line and ready to `export`, `E2B_API_URL=…`, `E2B_SANDBOX_URL=…` and
//! `E2B_API_KEY=…`, then serves until SIGINT or SIGTERM, and cleans up (every sandbox's
//! processes killed, the temporary root removed). Logs go to stderr and never contain the
//! key. Counters and fault rules are reachable at `/_emulator/counters` and
//! `/_emulator/faults` with the same `X-API-KEY`.
//!
//! Every sandbox is a boundary (user, PID, mount and network namespaces, an allowlisted
//! root filesystem, internet access only through pasta; see the crate's README): a sandbox
//! whose boundary cannot be built is not created. `--no-isolation` (or `E2B_LOCAL_NO_ISOLATION=1`) runs sandboxes as plain host
//! processes instead, and is announced on stderr at every start.
//!
//! `--template-root NAME=DIR` builds the root filesystem of template NAME's sandboxes from
//! DIR (an unpacked image tree) instead of the host's allowlisted system directories; every
//! such flag is checked before anything is served, and a bad one refuses the start.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use testing_fake::{Emulator, EmulatorConfig, TemplateRoot};

/// Serve an offline E2B (control plane + envd) on loopback.
#[derive(Parser)]
#[command(name = "e2b-local", version)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Directory for the sandboxes' trees (default: a temporary directory removed on exit).
    #[arg(long)]
    root: Option<PathBuf>,
    /// API key clients must send (default: a random `e2b_<40 hex>`).
    #[arg(long, env = "E2B_LOCAL_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Run sandboxes WITHOUT the boundary, as plain host processes with this process's
    /// rights (same as `E2B_LOCAL_NO_ISOLATION=1`). Only for code you trust.
    #[arg(long)]
    no_isolation: bool,
    /// Network namespace (a path such as `/run/netns/NAME` or `/proc/PID/ns/net`) whose
    /// default route carries the internet traffic of sandboxes (pasta runs there; same as
    /// `E2B_LOCAL_UPLINK_NETNS`). Default: the host's own network.
    #[arg(long, value_name = "PATH")]
    uplink_netns: Option<PathBuf>,
    /// Build the root filesystem of template NAME's sandboxes (an alias such as `base`, or
    /// a template id) from DIR, an unpacked image tree (`docker export IMAGE | tar -x`,
    /// debootstrap), instead of the host's allowlisted system directories. Repeatable, one
    /// per template.
    ///
    /// DIR is a read-only lower layer: each sandbox writes to its own upper layer, DIR is
    /// never changed. Files of DIR owned by host uid 0 are root's inside (DIR is idmapped
    /// like the host's root; its filesystem must take idmapped mounts: ext4, xfs, btrfs,
    /// tmpfs on Linux 6.3+). The template's own paths (/home, /root, /tmp, ...) and its
    /// /etc/passwd, group, shadow and sudoers.d entry are laid over DIR as for the host's
    /// root. Mounts below DIR are not part of it. DIR must hold /bin/sh, /usr/bin/nice and
    /// /bin/sleep (resolved inside DIR); `sudo`, `bash` and the rest work when DIR provides
    /// them. Checked at start: an unknown NAME, a missing DIR, a DIR that is no directory
    /// or lacks one of those programs, a flag without `=`, or --no-isolation refuse the
    /// start.
    #[arg(long, value_name = "NAME=DIR")]
    template_root: Vec<TemplateRoot>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.no_isolation {
        // SAFETY: no other thread exists yet (the runtime is built below).
        unsafe { std::env::set_var("E2B_LOCAL_NO_ISOLATION", "1") };
    }
    if let Some(ns) = &args.uplink_netns {
        // SAFETY: no other thread exists yet (the runtime is built below).
        unsafe { std::env::set_var("E2B_LOCAL_UPLINK_NETNS", ns) };
    }
    if testing_fake::envd::isolation_opted_out() {
        eprintln!("{}", testing_fake::envd::NO_ISOLATION_BANNER);
        if !args.template_root.is_empty() {
            eprintln!(
                "e2b-local: --template-root: {}",
                testing_fake::TemplateRootError::NeedsIsolation
            );
            return ExitCode::FAILURE;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("e2b-local: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cfg = EmulatorConfig {
        bind: SocketAddr::new(args.bind, args.port),
        api_key: args.api_key,
        root: args.root,
        template_roots: args.template_root,
        ..EmulatorConfig::default()
    };
    let emu = match Emulator::start(cfg).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("e2b-local: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        if out.write_all(emu.env_lines().as_bytes()).is_err() || out.flush().is_err() {
            eprintln!("e2b-local: cannot write to stdout");
        }
    }
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("e2b-local: cannot install a SIGTERM handler: {e}");
            emu.shutdown().await;
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
    }
    emu.shutdown().await;
    ExitCode::SUCCESS
}
