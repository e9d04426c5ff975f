//! The sandbox registry and every lifecycle transition: create, pause (with or without
//! memory), resume / connect (thaw or cold boot), timeout changes, expiry, kill.
//!
//! Each sandbox has a short-lived `std` lock over its state (read on every envd request) and
//! an async lock that serializes transitions, so a pause and a connect never interleave.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use e2b_proto::control::{NetworkConfig, SandboxState};
use time::OffsetDateTime;

use crate::envd::{Envd, EnvdConfig};
use crate::template::Template;

use super::error::ApiErr;
use super::ids;

/// Mutable state of one sandbox.
pub(crate) struct Life {
    /// Running or paused.
    pub state: SandboxState,
    /// When the sandbox times out (running), or when it was paused (paused).
    pub end_at: OffsetDateTime,
    /// Whether the last pause kept memory (frozen processes) or only files.
    pub paused_with_memory: bool,
    /// The current envd (replaced on a cold boot).
    pub envd: Arc<Envd>,
    /// `envd.router()`, built once per boot.
    pub router: axum::Router,
    /// Killed: every later lookup fails.
    pub gone: bool,
}

/// One sandbox.
pub(crate) struct SandboxRecord {
    pub id: String,
    pub template: Template,
    pub metadata: BTreeMap<String, String>,
    pub env_vars: BTreeMap<String, String>,
    pub started_at: OffsetDateTime,
    pub access_token: Option<String>,
    pub auto_pause: bool,
    pub auto_pause_memory: bool,
    pub auto_resume: bool,
    pub root: PathBuf,
    /// Volumes bound into the sandbox: (sandbox path, host directory).
    pub volumes: Vec<(PathBuf, PathBuf)>,
    /// The `volumeMounts` of the create, as reported back.
    pub volume_mounts: Vec<e2b_proto::volume::VolumeMount>,
    /// Emulator directories the sandbox must not see (snapshots, volumes).
    hidden: Vec<PathBuf>,
    /// `allow_internet_access` and `network` (replaced by `PUT /sandboxes/{id}/network`).
    net: Mutex<(Option<bool>, Option<NetworkConfig>)>,
    life: Mutex<Life>,
    op: tokio::sync::Mutex<()>,
    /// Cancelled when the sandbox is killed or paused (then replaced): the proxy cuts every
    /// response body still streaming from it, as E2B's proxy loses its connections to a VM
    /// that is destroyed or snapshotted.
    cut: Mutex<tokio_util::sync::CancellationToken>,
    /// Metrics samples (one at boot, then every [`METRICS_INTERVAL`] while running),
    /// oldest first; `GET /sandboxes/{id}/metrics` filters them by range.
    samples: Mutex<Vec<Sample>>,
}

impl SandboxRecord {
    /// The state, locked briefly.
    pub fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `allow_internet_access` and the network settings.
    pub fn net(&self) -> (Option<bool>, Option<NetworkConfig>) {
        self.net
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace `allow_internet_access` and the network settings.
    pub fn set_net(&self, allow_internet_access: Option<bool>, network: Option<NetworkConfig>) {
        *self.net.lock().unwrap_or_else(PoisonError::into_inner) = (allow_internet_access, network);
    }

    /// The token the proxy watches for responses and connections of this sandbox's current
    /// run.
    pub fn cut_token(&self) -> tokio_util::sync::CancellationToken {
        self.cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Cut every response and connection of the current run; later ones get a fresh token.
    fn cut_streams(&self) {
        let old = std::mem::take(&mut *self.cut.lock().unwrap_or_else(PoisonError::into_inner));
        old.cancel();
    }

    /// The metrics samples taken within `[start, end]` (unix seconds, both inclusive).
    pub fn samples_between(&self, start: i64, end: i64) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|t| (start..=end).contains(&t.at.unix_timestamp()))
            .copied()
            .collect()
    }

    /// The newest metrics sample.
    pub fn last_sample(&self) -> Option<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last()
            .copied()
    }

    /// Record a sample (the series keeps the newest [`METRICS_KEPT`]).
    fn push_sample(&self, sample: Sample) {
        let mut s = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        s.push(sample);
        if s.len() > METRICS_KEPT {
            let extra = s.len() - METRICS_KEPT;
            s.drain(..extra);
        }
    }

    fn envd_config(&self) -> EnvdConfig {
        EnvdConfig {
            sandbox_id: self.id.clone(),
            template: self.template.clone(),
            root: self.root.clone(),
            access_token: self.access_token.clone(),
            env_vars: self.env_vars.clone(),
            allow_internet: internet_allowed(&self.net()),
            volumes: self.volumes.clone(),
            hidden: self.hidden.clone(),
        }
    }
}

/// How often a running sandbox's metrics are sampled (E2B's orchestrator: every 5 s).
pub(crate) const METRICS_INTERVAL: Duration = Duration::from_secs(5);

/// One metrics sample of a sandbox: when, its memory then (see [`Envd::memory_sample`])
/// and its CPU use since the sample before ([`Envd::cpu_sample`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub at: OffsetDateTime,
    pub mem_used: u64,
    pub mem_cache: u64,
    /// Percent of the sandbox's CPUs used since the previous sample.
    pub cpu_used_pct: f64,
}

impl Sample {
    /// A sample of `envd`'s sandbox taken now.
    fn of(envd: &Envd) -> Sample {
        let (mem_used, mem_cache) = envd.memory_sample();
        Sample {
            at: OffsetDateTime::now_utc(),
            mem_used,
            mem_cache,
            cpu_used_pct: envd.cpu_sample(),
        }
    }
}
/// Most samples kept per sandbox (a day at [`METRICS_INTERVAL`]).
const METRICS_KEPT: usize = 24 * 3600 / 5;

/// False for `allowInternetAccess: false`, or a `denyOut` of `0.0.0.0/0` with no
/// `allowOut`: such a sandbox gets a network namespace with only loopback.
fn internet_allowed((allow, network): &(Option<bool>, Option<NetworkConfig>)) -> bool {
    if *allow == Some(false) {
        return false;
    }
    let Some(n) = network else { return true };
    let deny_all = n
        .deny_out
        .as_ref()
        .is_some_and(|d| d.iter().any(|c| c == "0.0.0.0/0"));
    let allows = n.allow_out.as_ref().is_some_and(|a| !a.is_empty());
    !deny_all || allows
}

/// What `create` needs after validation.
pub(crate) struct CreateParams {
    pub template: Template,
    pub timeout: Duration,
    pub secure: bool,
    pub auto_pause: bool,
    pub auto_pause_memory: bool,
    pub auto_resume: bool,
    pub allow_internet_access: Option<bool>,
    pub network: Option<NetworkConfig>,
    pub metadata: BTreeMap<String, String>,
    pub env_vars: BTreeMap<String, String>,
    /// A snapshot's state to lay into the new root before it boots, and whether it may be
    /// moved instead of copied (nobody else uses it).
    pub seed: Option<(PathBuf, bool)>,
    /// Volumes to bind: (sandbox path, host directory).
    pub volumes: Vec<(PathBuf, PathBuf)>,
    /// The `volumeMounts` of the create, as reported back.
    pub volume_mounts: Vec<e2b_proto::volume::VolumeMount>,
}

/// Outcome of a resume / connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resumed {
    /// It was running (200).
    AlreadyRunning,
    /// It was paused and now runs (201).
    Resumed,
}

/// All sandboxes of one emulator.
pub(crate) struct Store {
    secret: [u8; 32],
    root: PathBuf,
    pub max_timeout: Duration,
    sandboxes: Mutex<HashMap<String, Arc<SandboxRecord>>>,
    /// `Idempotency-Key` of a v2 create → the sandbox it created.
    idempotency: Mutex<HashMap<String, String>>,
    /// Snapshots taken of sandboxes.
    pub snapshots: super::snapshot_store::Snapshots,
    /// Team volumes (kept on disk across restarts).
    pub volumes: super::volume_store::Volumes,
    /// Template id → the tree its sandboxes' root filesystem is built from.
    template_roots: HashMap<String, PathBuf>,
    /// Sandboxes prepared ahead of the next create.
    spares: Arc<crate::envd::spare::Spares>,
}

fn later(now: OffsetDateTime, d: Duration) -> OffsetDateTime {
    now + time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

impl Store {
    pub fn new(
        root: PathBuf,
        max_timeout: Duration,
        template_roots: HashMap<String, PathBuf>,
    ) -> Self {
        Store {
            template_roots,
            secret: ids::new_secret(),
            snapshots: super::snapshot_store::Snapshots::new(&root),
            spares: crate::envd::spare::Spares::new(root.join("sandboxes")),
            volumes: super::volume_store::Volumes::load(&root),
            root,
            max_timeout,
            sandboxes: Mutex::new(HashMap::new()),
            idempotency: Mutex::new(HashMap::new()),
        }
    }

    /// The template `name` (see [`Template::lookup`]) with the root filesystem this
    /// emulator gives it.
    pub fn template(&self, name: &str) -> Option<Template> {
        let mut t = Template::lookup(name)?;
        t.root_fs = self.template_roots.get(&t.id).cloned();
        Some(t)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<SandboxRecord>>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A live (not killed) sandbox.
    pub fn get(&self, id: &str) -> Option<Arc<SandboxRecord>> {
        self.map().get(id).cloned()
    }

    /// The live sandbox an earlier create with this `Idempotency-Key` made.
    pub fn by_idempotency_key(&self, key: &str) -> Option<Arc<SandboxRecord>> {
        let id = self
            .idempotency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()?;
        self.get(&id)
    }

    /// Remember which sandbox a create with this `Idempotency-Key` made.
    pub fn remember_idempotency_key(&self, key: String, sandbox_id: &str) {
        self.idempotency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, sandbox_id.to_owned());
    }

    /// Every live sandbox.
    pub fn all(&self) -> Vec<Arc<SandboxRecord>> {
        self.map().values().cloned().collect()
    }

    /// Boot a new sandbox.
    pub async fn create(&self, p: CreateParams) -> Result<Arc<SandboxRecord>, ApiErr> {
        let id = loop {
            let id = ids::new_sandbox_id();
            if !self.map().contains_key(&id) {
                break id;
            }
        };
        let access_token = p.secure.then(|| ids::access_token(&self.secret, &id));
        let root = self.root.join("sandboxes").join(&id);
        let hidden = vec![
            self.snapshots.dir().to_path_buf(),
            self.volumes.dir().to_path_buf(),
        ];
        if let Some((seed, take)) = &p.seed {
            let (seed, take, dst) = (seed.clone(), *take, root.clone());
            let laid = tokio::task::spawn_blocking(move || {
                super::snapshot_store::seed(&seed, &dst, take).inspect_err(|_| {
                    let _ = std::fs::remove_dir_all(&dst);
                })
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
            laid.map_err(|e| ApiErr::internal(format!("Failed to create sandbox: {e}")))?;
        }
        let now = OffsetDateTime::now_utc();
        let cfg = EnvdConfig {
            sandbox_id: id.clone(),
            template: p.template.clone(),
            root: root.clone(),
            access_token: access_token.clone(),
            env_vars: p.env_vars.clone(),
            allow_internet: internet_allowed(&(p.allow_internet_access, p.network.clone())),
            volumes: p.volumes.clone(),
            hidden: hidden.clone(),
        };
        // A sandbox laid out from a snapshot is its own: no spare.
        let spare = match p.seed {
            None => self.spares.take(&cfg).await,
            Some(_) => None,
        };
        let spare_cfg = p.seed.is_none().then(|| cfg.clone());
        let envd = Envd::boot_from(cfg, spare)
            .await
            .map_err(|e| ApiErr::internal(format!("Failed to create sandbox: {e}")))?;
        if let Some(cfg) = &spare_cfg {
            // The next spare is made once this sandbox's first command ended, so the two
            // do not share the cores (or a short while after the create without one).
            envd.on_first_end(self.spares.refill(cfg));
        }
        let router = envd.router();
        let first = Sample {
            at: now,
            ..Sample::of(&envd)
        };
        let rec = Arc::new(SandboxRecord {
            id: id.clone(),
            template: p.template,
            metadata: p.metadata,
            env_vars: p.env_vars,
            started_at: now,
            access_token,
            auto_pause: p.auto_pause,
            auto_pause_memory: p.auto_pause_memory,
            auto_resume: p.auto_resume,
            root,
            volumes: p.volumes,
            volume_mounts: p.volume_mounts,
            hidden,
            net: Mutex::new((p.allow_internet_access, p.network)),
            life: Mutex::new(Life {
                state: SandboxState::Running,
                end_at: later(now, p.timeout),
                paused_with_memory: true,
                envd,
                router,
                gone: false,
            }),
            op: tokio::sync::Mutex::new(()),
            cut: Mutex::new(tokio_util::sync::CancellationToken::new()),
            samples: Mutex::new(vec![first]),
        });
        self.map().insert(id, rec.clone());
        tracing::info!(sandbox = %rec.id, template = %rec.template.alias, "sandbox created");
        Ok(rec)
    }

    /// Kill: remove the sandbox and everything it ran. False when unknown.
    pub async fn kill(&self, id: &str) -> bool {
        let Some(rec) = self.map().remove(id) else {
            return false;
        };
        // Streams are cut before any process dies, so no client sees a clean end event.
        rec.cut_streams();
        let _op = rec.op.lock().await;
        let envd = {
            let mut life = rec.life();
            life.gone = true;
            life.envd.clone()
        };
        envd.destroy().await;
        tracing::info!(sandbox = %id, "sandbox killed");
        true
    }

    /// Pause a running sandbox: freeze its processes (memory) or end them (files only).
    pub async fn pause(&self, rec: &SandboxRecord, memory: bool) -> Result<(), ApiErr> {
        let _op = rec.op.lock().await;
        let envd = {
            let mut life = rec.life();
            if life.gone {
                return Err(ApiErr::sandbox_not_found(&rec.id));
            }
            if life.state == SandboxState::Paused {
                return Err(ApiErr::conflict(format!(
                    "Error pausing sandbox - sandbox '{}' is already paused",
                    rec.id
                )));
            }
            life.state = SandboxState::Paused;
            life.end_at = OffsetDateTime::now_utc();
            life.paused_with_memory = memory;
            life.envd.clone()
        };
        // The VM goes away: its connections drop before its processes stop.
        rec.cut_streams();
        if memory {
            envd.freeze().await;
        } else {
            envd.stop_all().await;
        }
        tracing::info!(sandbox = %rec.id, memory, "sandbox paused");
        Ok(())
    }

    /// Connect / resume: a running sandbox only gets a later end time; a paused one is
    /// thawed (memory) or cold-booted (`memory == Some(false)`, or it was paused without
    /// memory): every process ends, files stay.
    pub async fn resume(
        &self,
        rec: &SandboxRecord,
        timeout: Duration,
        memory: Option<bool>,
    ) -> Result<Resumed, ApiErr> {
        let _op = rec.op.lock().await;
        let now = OffsetDateTime::now_utc();
        let (envd, with_memory) = {
            let mut life = rec.life();
            if life.gone {
                return Err(ApiErr::sandbox_not_found(&rec.id));
            }
            if life.state == SandboxState::Running {
                let end = later(now, timeout);
                if end > life.end_at {
                    life.end_at = end;
                }
                return Ok(Resumed::AlreadyRunning);
            }
            (life.envd.clone(), life.paused_with_memory)
        };
        if memory != Some(false) && with_memory {
            envd.thaw().await;
        } else {
            // Cold boot: whatever still exists of the old processes ends; the tree stays.
            envd.stop_all().await;
            let fresh = Envd::boot(rec.envd_config())
                .await
                .map_err(|e| ApiErr::internal(format!("Failed to resume sandbox: {e}")))?;
            let router = fresh.router();
            let mut life = rec.life();
            life.envd = fresh;
            life.router = router;
        }
        let mut life = rec.life();
        life.state = SandboxState::Running;
        life.end_at = later(OffsetDateTime::now_utc(), timeout);
        tracing::info!(sandbox = %rec.id, cold = memory == Some(false) || !with_memory, "sandbox resumed");
        Ok(Resumed::Resumed)
    }

    /// Copy a running sandbox's filesystem state to `dst` with its processes frozen for
    /// the copy (one instant), then let them run on. A paused sandbox is refused with
    /// `paused` (each caller words its own answer).
    pub async fn capture(
        &self,
        rec: &SandboxRecord,
        dst: &std::path::Path,
        paused: ApiErr,
    ) -> Result<(), ApiErr> {
        let _op = rec.op.lock().await;
        let envd = {
            let life = rec.life();
            if life.gone {
                return Err(ApiErr::sandbox_not_found(&rec.id));
            }
            if life.state != SandboxState::Running {
                return Err(paused);
            }
            life.envd.clone()
        };
        envd.freeze().await;
        let (src, to) = (rec.root.clone(), dst.to_path_buf());
        let copied = tokio::task::spawn_blocking(move || {
            super::snapshot_store::capture(&src, &to).inspect_err(|_| {
                let _ = std::fs::remove_dir_all(&to);
            })
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        envd.thaw().await;
        copied.map_err(|e| {
            tracing::warn!(sandbox = %rec.id, error = %e, "snapshot copy failed");
            ApiErr::internal("Error creating snapshot template")
        })
    }

    /// `POST /sandboxes/{id}/timeout`: end time = now + timeout (may shorten).
    pub fn set_timeout(&self, rec: &SandboxRecord, timeout: Duration) -> Result<(), ApiErr> {
        let mut life = rec.life();
        if life.gone || life.state != SandboxState::Running {
            return Err(ApiErr::sandbox_not_found(&rec.id));
        }
        life.end_at = later(OffsetDateTime::now_utc(), timeout);
        Ok(())
    }

    /// `POST /sandboxes/{id}/refreshes`: extends only.
    pub fn refresh(&self, rec: &SandboxRecord, duration: Duration) -> Result<(), ApiErr> {
        let mut life = rec.life();
        if life.gone || life.state != SandboxState::Running {
            return Err(ApiErr::sandbox_not_found(&rec.id));
        }
        let end = later(OffsetDateTime::now_utc(), duration);
        if end > life.end_at {
            life.end_at = end;
        }
        Ok(())
    }

    /// Sample the metrics of every running sandbox whose last sample is
    /// [`METRICS_INTERVAL`] old.
    pub fn sample_metrics(&self) {
        let now = OffsetDateTime::now_utc();
        for rec in self.all() {
            let running = {
                let life = rec.life();
                (!life.gone && life.state == SandboxState::Running).then(|| life.envd.clone())
            };
            let due = rec.last_sample().is_none_or(|t| {
                now - t.at
                    >= time::Duration::try_from(METRICS_INTERVAL).unwrap_or(time::Duration::ZERO)
            });
            if let (Some(envd), true) = (running, due) {
                rec.push_sample(Sample {
                    at: now,
                    ..Sample::of(&envd)
                });
            }
        }
    }

    /// Pause (autoPause) or kill every running sandbox whose end time has passed.
    pub async fn expire_due(&self) {
        let now = OffsetDateTime::now_utc();
        let due: Vec<Arc<SandboxRecord>> = self
            .all()
            .into_iter()
            .filter(|r| {
                let life = r.life();
                !life.gone && life.state == SandboxState::Running && life.end_at <= now
            })
            .collect();
        for rec in due {
            // Re-check: a timeout change may have raced with this scan.
            let still_due = {
                let life = rec.life();
                life.state == SandboxState::Running
                    && life.end_at <= OffsetDateTime::now_utc()
                    && !life.gone
            };
            if !still_due {
                continue;
            }
            tracing::info!(sandbox = %rec.id, auto_pause = rec.auto_pause, "sandbox timed out");
            if rec.auto_pause {
                // A conflicting transition in between only means someone else won.
                let _ = self.pause(&rec, rec.auto_pause_memory).await;
            } else {
                self.kill(&rec.id).await;
            }
        }
    }

    /// Kill every sandbox (shutdown).
    pub async fn kill_all(&self) {
        self.spares.close().await;
        let ids: Vec<String> = self.map().keys().cloned().collect();
        for id in ids {
            self.kill(&id).await;
        }
    }
}
