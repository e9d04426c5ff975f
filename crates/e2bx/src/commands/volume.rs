//! `e2bx volume create|list|rm`: team volumes, directories that outlive sandboxes; mount
//! one with `e2bx sandbox create --volume NAME:/PATH`.

use clap::{Args, Subcommand};
use serde_json::json;

use super::sandbox::say;
use crate::cli::Global;
use crate::error::{CliError, CliResult};
use crate::target::Backend;

/// `e2bx volume …`.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume; prints its ID.
    Create(VolumeName),
    /// List volumes.
    List,
    /// Delete a volume and its files.
    Rm(VolumeName),
}

/// A volume named by name (or, for `rm`, ID).
#[derive(Debug, Args)]
pub struct VolumeName {
    /// Volume name (`[a-zA-Z0-9_-]+`); `rm` also takes an ID.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `NAME:/PATH` of `--volume` (e.g. `cache:/mnt/cache`).
pub fn parse_mount(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((n, p)) if !n.is_empty() && p.starts_with('/') => Ok((n.to_owned(), p.to_owned())),
        _ => Err(format!("expected NAME:/ABSOLUTE/PATH, got {s:?}")),
    }
}

/// Run one `volume` subcommand.
pub async fn volume(backend: &Backend, g: &Global, cmd: &VolumeCommand) -> CliResult {
    let c = &backend.client;
    match cmd {
        VolumeCommand::Create(a) => {
            let v = c.create_volume(&a.name).await?;
            if g.json {
                println!("{}", json!({"volumeId": v.volume_id, "name": v.name}));
            } else {
                println!("{}", v.volume_id);
            }
        }
        VolumeCommand::List => {
            let all = c.list_volumes().await?;
            if g.json {
                let v: Vec<_> = all
                    .iter()
                    .map(|v| json!({"volumeId": v.volume_id, "name": v.name}))
                    .collect();
                println!("{}", serde_json::Value::Array(v));
            } else {
                println!("{:<38} NAME", "ID");
                for v in &all {
                    println!("{:<38} {}", v.volume_id, v.name);
                }
            }
        }
        VolumeCommand::Rm(a) => {
            let id = match c
                .list_volumes()
                .await?
                .into_iter()
                .find(|v| v.name == a.name)
            {
                Some(v) => v.volume_id,
                None => a.name.clone(),
            };
            if !c.delete_volume(&id).await? {
                return Err(CliError::msg(format!(
                    "no volume {}; see `e2bx volume list`",
                    a.name
                )));
            }
            say(g, &format!("deleted volume {}", a.name));
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_mount;

    #[test]
    fn mounts_are_name_colon_absolute_path() {
        assert_eq!(
            parse_mount("cache:/mnt/c"),
            Ok(("cache".into(), "/mnt/c".into()))
        );
        assert!(parse_mount("cache").is_err());
        assert!(parse_mount("cache:rel").is_err());
        assert!(parse_mount(":/x").is_err());
    }
}
