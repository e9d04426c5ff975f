//! What every process of one adapter shares: the envd API, the trusted shell, the
//! settings, values found once per user and cached (the user lookup, the spawn helper's
//! placement with the cgroup probe, the private state directory for terminal spec files)
//! and the names of the spawn cgroups free for reuse. The caches live in a registry
//! shared by every handle built from one adapter, so changing a setting (or switching
//! users and back) never repeats a lookup.
//!
//! The placement and the user lookups are also shared by every adapter of this host
//! process on the same sandbox (a [`Placement`], found by sandbox id): a harness that
//! connects again for each turn pays the setup once, not once per connection. A placed
//! helper directory is removed [`LINGER`] after its last adapter went, so the next
//! connection within that time finds it; one placed under `/tmp` (no sealed `/run`) is
//! shared only while an adapter holds it and removed with the last one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::Duration;

use e2b_core::EnvdApi;
use exec_world::Error;
use tokio::sync::OnceCell;

use crate::shell::{CgroupSetup, DropIds, Placed, Shell, UserInfo};

/// How long a placement outlives its last adapter (for the next connection to the same
/// sandbox from this process).
pub(crate) const LINGER: Duration = Duration::from_secs(60);

/// Where the spawn helper is and how spawns get their cgroup.
#[derive(Clone, Debug)]
pub(crate) struct SpawnSetup {
    /// The helper's directory (root-owned, 0755): the helper file and, in contained
    /// mode, the terminal spec files.
    pub(crate) dir: String,
    /// The `sh` helper file.
    pub(crate) helper: String,
    /// The native helper file, when it was placed and runs in this sandbox (piped spawns
    /// start it directly; terminals keep the `sh` helper).
    pub(crate) native: Option<String>,
    /// `Some` when every spawn runs in a cgroup of its own.
    pub(crate) cgroup: Option<CgroupSetup>,
    /// The directory's parent is root's alone (`/run`): a directory that went cannot be
    /// made again there by the sandbox user, so the placement may outlive its adapters.
    pub(crate) sealed: bool,
}

impl SpawnSetup {
    /// The setup a placement reported (the setup command's or the boot's).
    fn from_placed(placed: Placed) -> SpawnSetup {
        let dir = placed.dir;
        SpawnSetup {
            sealed: dir.starts_with("/run/"),
            helper: format!("{dir}/{}", crate::wrapper::HELPER_FILE),
            native: placed
                .native
                .then(|| format!("{dir}/{}", crate::native::NATIVE_FILE)),
            dir,
            cgroup: placed.cgroup,
        }
    }
}

/// A fresh name for a helper directory (`.exec-world-spawn-<random>`).
fn helper_dir_name() -> String {
    format!(
        ".exec-world-spawn-{}",
        e2b_core::trusted_shell::random_suffix()
    )
}

/// What the first spawn's boot is given (`WorldShared::boot`).
pub(crate) struct BootAsk {
    /// The helper directory's name (not yet made).
    pub(crate) dir: String,
    /// The acting user's name, when known (else envd's default user).
    pub(crate) user: Option<String>,
}

/// What a boot that placed the helper reports.
pub(crate) struct Booted<T> {
    /// What the setup placed and found.
    pub(crate) placed: Placed,
    /// The acting user, when the boot looked it up.
    pub(crate) user: Option<(UserInfo, DropIds)>,
    /// The boot's own result (`None`: it placed the helper but did not spawn).
    pub(crate) value: Option<T>,
}

/// Why a boot placed nothing.
pub(crate) enum BootFail {
    /// Nothing ran that matters: the usual path may follow.
    Declined,
    /// The spawn may have started: report this, do not start again.
    Failed(Error),
}

/// The cached lookups of one user.
#[derive(Default)]
struct UserCache {
    info: OnceCell<UserInfo>,
    state_dir: OnceCell<String>,
    /// The uid and gid a contained spawn drops to (from the lookup or the setup).
    ids: OnceCell<DropIds>,
}

/// A spawn cgroup's kind for reuse: terminal or not, and its group label.
type CgroupKind = (bool, Option<String>);

/// A sandbox's placement as this process knows it: the spawn helper's directory with
/// the cgroup probe, and each user's lookups. Shared by the adapters of one sandbox
/// (same native-helper choice); the helper directory goes when the last holder does.
struct Placement {
    shell: Shell,
    users: Mutex<HashMap<Option<String>, Arc<UserCache>>>,
    /// The spawn helper's placement and the cgroup probe (once per placement).
    setup: OnceCell<SpawnSetup>,
    /// Whether to place and use the native helper.
    native_helper: bool,
}

/// Key of a placement: the sandbox and whether its adapters use the native helper.
type PlacementKey = (String, bool);

/// The live placements of this process, by sandbox.
static PLACEMENTS: LazyLock<Mutex<HashMap<PlacementKey, Weak<Placement>>>> =
    LazyLock::new(Mutex::default);

impl Placement {
    /// The live placement of `api`'s sandbox, or a new one (registered).
    fn of(api: &Arc<dyn EnvdApi>, native_helper: bool) -> Arc<Placement> {
        let key = (api.sandbox_id().to_owned(), native_helper);
        let mut all = PLACEMENTS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|_, w| w.strong_count() > 0);
        if let Some(p) = all.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        let p = Arc::new(Placement {
            shell: Shell::new(api.clone()),
            users: Mutex::new(HashMap::new()),
            setup: OnceCell::new(),
            native_helper,
        });
        all.insert(key, Arc::downgrade(&p));
        p
    }

    /// Forgets `me` as its sandbox's placement (adapters made later set up afresh).
    fn evict(me: &Arc<Placement>, api: &Arc<dyn EnvdApi>) {
        let key = (api.sandbox_id().to_owned(), me.native_helper);
        let mut all = PLACEMENTS.lock().unwrap_or_else(PoisonError::into_inner);
        if all
            .get(&key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(me)))
        {
            all.remove(&key);
        }
    }

    /// `user`'s caches, made on first use.
    fn cache_of(&self, user: &Option<String>) -> Arc<UserCache> {
        self.users
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(user.clone())
            .or_default()
            .clone()
    }
}

impl Drop for Placement {
    /// Removes the helper directory in the background (best effort: only within a
    /// runtime).
    fn drop(&mut self) {
        let Some(setup) = self.setup.get() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shell = self.shell.clone();
        let dir = setup.dir.clone();
        handle.spawn(async move { shell.cleanup("", "", &dir).await });
    }
}

/// What every handle of one adapter shares: the sandbox's placement and the spawn
/// cgroup names.
struct Adapter {
    placement: Arc<Placement>,
    /// Prefix of this adapter's cgroup names (`exec-world-<random>-`).
    cgroup_prefix: String,
    next_cgroup: AtomicU64,
    /// Names of spawn cgroups whose spawn is over, per kind (pipes, terminals) and group
    /// label: reused while empty (the helper checks) by a spawn of the same kind and
    /// group (the name carries the label), removed when the adapter goes.
    free_cgroups: Mutex<HashMap<CgroupKind, Vec<String>>>,
}

impl Drop for Adapter {
    /// Removes the adapter's empty cgroups in the background (best effort: only within a
    /// runtime, and cgroups a leftover process still lives in stay) and keeps its
    /// placement [`LINGER`] longer when the helper directory is sealed.
    fn drop(&mut self) {
        let Some(setup) = self.placement.setup.get() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let placement = self.placement.clone();
        let linger = setup.sealed;
        let mount = setup.cgroup.as_ref().map(|c| c.mount.clone());
        let prefix = self.cgroup_prefix.clone();
        handle.spawn(async move {
            if let Some(mount) = mount {
                placement.shell.cleanup(&mount, &prefix, "").await;
            }
            if linger {
                tokio::time::sleep(LINGER).await;
            }
            drop(placement);
        });
    }
}

/// Shared by an [`E2bSubprocess`](crate::E2bSubprocess) and its processes.
pub(crate) struct WorldShared {
    pub(crate) api: Arc<dyn EnvdApi>,
    pub(crate) shell: Shell,
    pub(crate) user: Option<String>,
    pub(crate) output_buffer: usize,
    pub(crate) process_timeout: Option<Duration>,
    cache: Arc<UserCache>,
    adapter: Arc<Adapter>,
}

impl std::fmt::Debug for WorldShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorldShared")
            .field("sandbox", &self.api.sandbox_id())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl WorldShared {
    pub(crate) fn new(
        api: Arc<dyn EnvdApi>,
        user: Option<String>,
        output_buffer: usize,
        process_timeout: Option<Duration>,
        native_helper: bool,
    ) -> WorldShared {
        let placement = Placement::of(&api, native_helper && crate::native::available());
        let adapter = Arc::new(Adapter {
            placement,
            cgroup_prefix: format!("exec-world-{}-", e2b_core::trusted_shell::random_suffix()),
            next_cgroup: AtomicU64::new(0),
            free_cgroups: Mutex::new(HashMap::new()),
        });
        WorldShared {
            shell: adapter.placement.shell.clone(),
            api,
            cache: adapter.placement.cache_of(&user),
            user,
            output_buffer,
            process_timeout,
            adapter,
        }
    }

    /// The same world with other settings; the caches (of every user) are shared.
    pub(crate) fn with_settings(
        &self,
        user: Option<String>,
        output_buffer: usize,
        process_timeout: Option<Duration>,
    ) -> WorldShared {
        WorldShared {
            api: self.api.clone(),
            shell: self.shell.clone(),
            cache: self.adapter.placement.cache_of(&user),
            user,
            output_buffer,
            process_timeout,
            adapter: self.adapter.clone(),
        }
    }

    /// The spawn helper's placement and the cgroup probe (first call of the adapter: one
    /// trusted command, which also finds `info`'s uid and gid; then cached; a failure is
    /// retried by the next call).
    pub(crate) async fn spawn_setup(&self, info: &UserInfo) -> Result<SpawnSetup, Error> {
        self.setup_with(&info.name, false).await.map(|(s, _)| s)
    }

    /// The user lookup and the spawn helper's placement, what a spawn needs. When
    /// neither is known yet (an adapter's first spawn), both take one round trip: the
    /// setup prints the user database too, and the default user's name (when the
    /// adapter was not told a user) is asked at the same time.
    pub(crate) async fn ready(&self) -> Result<(UserInfo, SpawnSetup), Error> {
        if let (Some(info), Some(setup)) =
            (self.cache.info.get(), self.adapter.placement.setup.get())
        {
            return Ok((info.clone(), setup.clone()));
        }
        if self.cache.info.initialized() || self.adapter.placement.setup.initialized() {
            let info = self.user_info().await?;
            let setup = self.spawn_setup(&info).await?;
            return Ok((info, setup));
        }
        let name = async {
            match &self.user {
                Some(u) => Ok(u.clone()),
                None => self.shell.default_user_name().await,
            }
        };
        let given = self.user.clone().unwrap_or_default();
        let (name, (setup, db)) = tokio::try_join!(name, self.setup_with(&given, true))?;
        if let Some(found) = db
            .as_deref()
            .and_then(|t| crate::shell::lookup_in(t, &name))
        {
            let (info, ids) = found?;
            let _ = self.cache.ids.set(ids);
            let _ = self.cache.info.set(info);
        }
        let info = self.user_info().await?;
        Ok((info, setup))
    }

    /// [`WorldShared::spawn_setup`] for the user `name` (empty: not known yet, its ids
    /// come from the lookup); with the user database's text when this call ran the
    /// setup and `db` asked for it.
    async fn setup_with(
        &self,
        user: &str,
        db: bool,
    ) -> Result<(SpawnSetup, Option<String>), Error> {
        let mut text = None;
        let setup = self
            .adapter
            .placement
            .setup
            .get_or_try_init(|| async {
                let name = helper_dir_name();
                let probe = format!("{}probe", self.adapter.cgroup_prefix);
                let native = if self.adapter.placement.native_helper {
                    crate::native::helper_base64()
                } else {
                    ""
                };
                let (placed, out) = self
                    .shell
                    .setup(&name, crate::wrapper::helper_sh(), user, &probe, native, db)
                    .await?;
                if db {
                    text = Some(out);
                }
                if let Some(cg) = &placed.cgroup
                    && !user.is_empty()
                {
                    let _ = self.cache.ids.set(cg.ids.clone());
                }
                Ok::<_, Error>(SpawnSetup::from_placed(placed))
            })
            .await?
            .clone();
        Ok((setup, text))
    }

    /// The first spawn's boot (`boot.rs`): when the placement is neither known nor under
    /// way and the native helper is wanted, runs `boot` as the placement's setup with
    /// what it needs, and caches the setup and the user it reports. `None` when there is nothing to boot (the setup is known, or another
    /// spawn set it up meanwhile) or the boot declined; the caller then takes the usual
    /// path, which finds what the boot placed.
    pub(crate) async fn boot<T, F, Fut>(&self, boot: F) -> Result<Option<T>, Error>
    where
        F: FnOnce(BootAsk) -> Fut,
        Fut: std::future::Future<Output = Result<Booted<T>, BootFail>>,
    {
        let placement = &self.adapter.placement;
        if placement.setup.initialized() || !placement.native_helper {
            return Ok(None);
        }
        let user = self
            .user
            .clone()
            .or_else(|| self.cache.info.get().map(|i| i.name.clone()));
        let mut out = None;
        let got = placement
            .setup
            .get_or_try_init(|| async {
                let ask = BootAsk {
                    dir: helper_dir_name(),
                    user,
                };
                let booted = boot(ask).await?;
                let placed = booted.placed;
                if let Some((info, ids)) = booted.user {
                    let _ = self.cache.ids.set(ids);
                    let _ = self.cache.info.set(info);
                }
                out = booted.value;
                Ok::<_, BootFail>(SpawnSetup::from_placed(placed))
            })
            .await;
        match got {
            Ok(_) => Ok(out),
            Err(BootFail::Declined) => Ok(None),
            Err(BootFail::Failed(e)) => Err(e),
        }
    }

    /// A spawn's `Start` failed: adapters made later do not take this placement (its
    /// directory may be gone); this adapter keeps it.
    pub(crate) fn start_failed(&self) {
        Placement::evict(&self.adapter.placement, &self.api);
    }

    /// True when piped spawns may use the native helper: the adapter wants it, this
    /// build has it and (once the setup ran) the sandbox runs it.
    pub(crate) fn native_helper(&self) -> bool {
        match self.adapter.placement.setup.get() {
            Some(s) => s.native.is_some(),
            None => self.adapter.placement.native_helper,
        }
    }

    /// The cgroup2 mount spawns' cgroups live in, once the setup found one.
    pub(crate) fn setup_mount(&self) -> Option<&String> {
        self.adapter
            .placement
            .setup
            .get()?
            .cgroup
            .as_ref()
            .map(|c| &c.mount)
    }

    /// True once the setup found that spawns get a cgroup of their own.
    pub(crate) fn contained(&self) -> bool {
        self.adapter
            .placement
            .setup
            .get()
            .is_some_and(|s| s.cgroup.is_some())
    }

    /// A cgroup name for a new spawn: a free one of the same kind and group, else a
    /// fresh one (`<prefix><n>`, with `--<group>` for a labeled spawn).
    pub(crate) fn take_cgroup(&self, terminal: bool, group: Option<&str>) -> String {
        let key = (terminal, group.map(str::to_owned));
        let reused = self
            .adapter
            .free_cgroups
            .lock()
            .ok()
            .and_then(|mut f| f.get_mut(&key).and_then(Vec::pop));
        reused.unwrap_or_else(|| {
            let n = self.adapter.next_cgroup.fetch_add(1, Ordering::Relaxed);
            match group {
                Some(g) => format!(
                    "{}{n}{}{g}",
                    self.adapter.cgroup_prefix,
                    exec_world_sys::cgroup::GROUP_SEPARATOR
                ),
                None => format!("{}{n}", self.adapter.cgroup_prefix),
            }
        })
    }

    /// Gives back the cgroup name of a spawn that is over (nothing of it is killed
    /// through that name any more).
    pub(crate) fn give_back_cgroup(&self, terminal: bool, group: Option<String>, name: String) {
        if let Ok(mut f) = self.adapter.free_cgroups.lock() {
            f.entry((terminal, group)).or_default().push(name);
        }
    }

    /// Fills the user lookup with known facts (the template's); no-op once looked up.
    pub(crate) fn preset_user(&self, info: UserInfo) {
        let _ = self.cache.info.set(info);
    }

    /// The user lookup (first call: one or two shell commands; then cached; a failed
    /// lookup is retried by the next call).
    pub(crate) async fn user_info(&self) -> Result<UserInfo, Error> {
        self.cache
            .info
            .get_or_try_init(|| async {
                let name = match &self.user {
                    Some(u) => u.clone(),
                    None => self.shell.default_user_name().await?,
                };
                let (info, ids) = self.shell.lookup(&name).await?;
                let _ = self.cache.ids.set(ids);
                Ok(info)
            })
            .await
            .cloned()
    }

    /// The uid and gid a contained spawn of `info`'s user drops to: known from the
    /// lookup or the setup, else looked up (one trusted command, cached).
    pub(crate) async fn drop_ids(&self, info: &UserInfo) -> Result<DropIds, Error> {
        self.cache
            .ids
            .get_or_try_init(|| async { Ok(self.shell.lookup(&info.name).await?.1) })
            .await
            .cloned()
    }

    /// The private state directory (`/tmp/.exec-world-proc-<random>`, 0700, owned by
    /// the user), created on first use (terminal spec files without a cgroup per spawn).
    pub(crate) async fn state_dir(&self, info: &UserInfo) -> Result<String, Error> {
        self.cache
            .state_dir
            .get_or_try_init(|| async {
                let dir = format!(
                    "/tmp/.exec-world-proc-{}",
                    e2b_core::trusted_shell::random_suffix()
                );
                self.shell.make_state_dir(&dir, &info.name).await?;
                Ok(dir)
            })
            .await
            .cloned()
    }
}
