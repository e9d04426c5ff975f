//! `e2bx sandbox create|list|pause|resume|kill|url`: sandbox lifecycle on the control plane
//! (`snapshot`, `snapshots`, `fork`, `delete-snapshot` are in [`super::snapshot`]).
//! `create` prints the new ID (or JSON) on stdout; `list` a table (or a JSON array); `url`
//! the URL of a sandbox port.

use std::time::Duration;

use e2b_core::proto::control::{ListedSandbox, SandboxState};
use e2b_core::{ConnectOptions, CreateOptions, ListQuery, PauseOptions};
use serde_json::{Value, json};

use crate::cli::{CreateArgs, Global, SandboxCommand};
use crate::error::{CliError, CliResult, for_sandbox};
use crate::target::{Backend, NAME_KEY};

/// Run one `sandbox` subcommand.
pub async fn sandbox(backend: &Backend, g: &Global, cmd: &SandboxCommand) -> CliResult {
    match cmd {
        SandboxCommand::Create(a) => create(backend, g, a).await,
        SandboxCommand::Snapshot(a) => super::snapshot::snapshot(backend, g, a).await,
        SandboxCommand::Snapshots(a) => super::snapshot::snapshots(backend, g, a).await,
        SandboxCommand::Fork(a) => super::snapshot::fork(backend, g, a).await,
        SandboxCommand::DeleteSnapshot(a) => super::snapshot::delete(backend, g, a).await,
        SandboxCommand::List => list(backend, g.json).await,
        SandboxCommand::Pause(a) => {
            let id = backend.resolve(&a.id).await?;
            match backend.client.pause(&id, PauseOptions::default()).await {
                Ok(()) => {}
                Err(e) if e.is_conflict() => {
                    return Err(CliError::msg(format!(
                        "sandbox {id} cannot be paused now (already paused?); see `e2bx sandbox list`"
                    )));
                }
                Err(e) => return Err(for_sandbox(&id)(e)),
            }
            say(g, &format!("paused {id}"));
            Ok(0)
        }
        SandboxCommand::Resume(a) => {
            let id = backend.resolve(&a.id).await?;
            let sb = backend
                .client
                .connect(&id, ConnectOptions::default())
                .await
                .map_err(for_sandbox(&id))?;
            say(
                g,
                &format!(
                    "{} {id}",
                    if sb.was_resumed() {
                        "resumed"
                    } else {
                        "already running:"
                    }
                ),
            );
            Ok(0)
        }
        SandboxCommand::Url(a) => {
            let id = backend.resolve(&a.id).await?;
            let detail = backend.client.get(&id).await.map_err(for_sandbox(&id))?;
            let url = port_url(
                backend.client.config(),
                &id,
                detail.domain.as_deref(),
                a.port,
            );
            if g.json {
                println!("{}", json!({"sandboxId": id, "port": a.port, "url": url}));
            } else {
                println!("{url}");
            }
            Ok(0)
        }
        SandboxCommand::Kill(a) => {
            let id = backend.resolve(&a.id).await?;
            if backend.client.kill(&id).await? {
                say(g, &format!("killed {id}"));
                Ok(0)
            } else {
                Err(for_sandbox(&id)(e2b_core::Error::SandboxNotFound {
                    surface: e2b_core::Surface::Control,
                    status: 404,
                    message: String::new(),
                }))
            }
        }
    }
}

/// The URL of `port` of sandbox `id`: `https://<port>-<id>.<domain>` on E2B; with a
/// loopback sandbox URL (an emulator) `http://<port>-<id>.localhost:<its port>`; with another
/// sandbox URL, that URL's host prefixed with `<port>-<id>.`.
fn port_url(cfg: &e2b_core::Config, id: &str, domain: Option<&str>, port: u16) -> String {
    let label = format!("{port}-{id}");
    let Some(base) = cfg.sandbox_url() else {
        let domain = domain.filter(|d| !d.is_empty()).unwrap_or(cfg.domain());
        return format!("https://{label}.{domain}");
    };
    match url::Url::parse(base) {
        Ok(u) => {
            let host = u.host_str().unwrap_or("localhost");
            let loopback = host == "localhost"
                || host
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            let host = if loopback { "localhost" } else { host };
            let port_part = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{label}.{host}{port_part}", u.scheme())
        }
        Err(_) => format!("http://{label}.localhost"),
    }
}

pub(crate) fn say(g: &Global, line: &str) {
    if !g.quiet {
        eprintln!("e2bx: {line}");
    }
}

async fn create(backend: &Backend, g: &Global, a: &CreateArgs) -> CliResult {
    let mut opts =
        CreateOptions::new(g.template.clone()).timeout(Duration::from_secs(a.timeout.max(1)));
    for (k, v) in &a.metadata {
        opts = opts.metadata(k.clone(), v.clone());
    }
    for (name, path) in &a.volume {
        opts = opts.volume_mount(name.clone(), path.clone());
    }
    if let Some(name) = &a.name {
        let taken = backend
            .client
            .list_all(ListQuery::new().metadata(NAME_KEY, name.clone()))
            .await?;
        if let Some(s) = taken.first() {
            return Err(CliError::msg(format!(
                "the name {name} is already used by sandbox {}; pick another or `e2bx sandbox kill {name}`",
                s.sandbox_id
            )));
        }
        opts = opts.metadata(NAME_KEY, name.clone());
    }
    let sb = backend.client.create(&opts).await.map_err(|e| match e {
        e2b_core::Error::TemplateNotFound { .. } => CliError::msg(format!(
            "template {} not found; check --template (default: base)",
            g.template
        )),
        e => e.into(),
    })?;
    if g.json {
        println!(
            "{}",
            json!({
                "sandboxId": sb.id(),
                "templateId": sb.template_id(),
                "name": a.name,
                "envdVersion": sb.envd_version(),
                "timeout": a.timeout,
            })
        );
    } else {
        println!("{}", sb.id());
    }
    if backend.is_embedded() && !g.quiet {
        eprintln!(
            "e2bx: note: this sandbox lives in the embedded emulator and ends with this command; run `e2bx serve` and export its lines to keep sandboxes between commands"
        );
    }
    Ok(0)
}

fn listed_json(s: &ListedSandbox) -> Value {
    let meta = s.metadata.clone().unwrap_or_default();
    json!({
        "sandboxId": s.sandbox_id,
        "state": s.state.as_str(),
        "templateId": s.template_id,
        "alias": s.alias,
        "name": meta.get(NAME_KEY),
        "metadata": meta,
        "startedAt": s.started_at,
        "endAt": s.end_at,
    })
}

async fn list(backend: &Backend, json_out: bool) -> CliResult {
    let mut all = backend
        .client
        .list_all(ListQuery::new().states([SandboxState::Running, SandboxState::Paused]))
        .await?;
    all.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    if json_out {
        let v: Vec<Value> = all.iter().map(listed_json).collect();
        println!("{}", Value::Array(v));
        return Ok(0);
    }
    println!(
        "{:<24} {:<8} {:<16} {:<16} {:<25} END",
        "ID", "STATE", "TEMPLATE", "NAME", "STARTED"
    );
    for s in &all {
        let name = s
            .metadata
            .as_ref()
            .and_then(|m| m.get(NAME_KEY))
            .map(String::as_str)
            .unwrap_or("-");
        println!(
            "{:<24} {:<8} {:<16} {:<16} {:<25} {}",
            s.sandbox_id,
            s.state.as_str(),
            s.alias.as_deref().unwrap_or(&s.template_id),
            name,
            s.started_at,
            s.end_at
        );
    }
    Ok(0)
}
