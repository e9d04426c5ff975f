//! What every process of one adapter shares: the envd API, the trusted shell, the
//! settings, and two values found once per user and cached (the user lookup and the
//! private state directory for terminal spec files). The caches live in a registry shared
//! by every handle built from one adapter, so changing a setting (or switching users and
//! back) never repeats a lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use e2b_core::EnvdApi;
use exec_world::Error;
use tokio::sync::OnceCell;

use crate::shell::{Shell, UserInfo};

/// The cached lookups of one user.
#[derive(Default)]
struct UserCache {
    info: OnceCell<UserInfo>,
    state_dir: OnceCell<String>,
}

/// Every user's caches, shared by the handles of one adapter.
type Users = Mutex<HashMap<Option<String>, Arc<UserCache>>>;

/// Shared by an [`E2bSubprocess`](crate::E2bSubprocess) and its processes.
pub(crate) struct WorldShared {
    pub(crate) api: Arc<dyn EnvdApi>,
    pub(crate) shell: Shell,
    pub(crate) user: Option<String>,
    pub(crate) output_buffer: usize,
    pub(crate) process_timeout: Option<Duration>,
    cache: Arc<UserCache>,
    users: Arc<Users>,
}

impl std::fmt::Debug for WorldShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorldShared")
            .field("sandbox", &self.api.sandbox_id())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// `user`'s caches in `users`, made on first use.
fn cache_of(users: &Users, user: &Option<String>) -> Arc<UserCache> {
    users
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(user.clone())
        .or_default()
        .clone()
}

impl WorldShared {
    pub(crate) fn new(
        api: Arc<dyn EnvdApi>,
        user: Option<String>,
        output_buffer: usize,
        process_timeout: Option<Duration>,
    ) -> WorldShared {
        let users = Arc::new(Users::default());
        WorldShared {
            shell: Shell::new(api.clone()),
            api,
            cache: cache_of(&users, &user),
            user,
            output_buffer,
            process_timeout,
            users,
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
            cache: cache_of(&self.users, &user),
            user,
            output_buffer,
            process_timeout,
            users: self.users.clone(),
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
                self.shell.lookup(&name).await
            })
            .await
            .cloned()
    }

    /// The private state directory (`/tmp/.e2bx-proc-<random>`, 0700, owned by the
    /// user), created on first use.
    pub(crate) async fn state_dir(&self, info: &UserInfo) -> Result<String, Error> {
        self.cache
            .state_dir
            .get_or_try_init(|| async {
                let dir = format!(
                    "/tmp/.e2bx-proc-{}",
                    e2b_core::trusted_shell::random_suffix()
                );
                self.shell.make_state_dir(&dir, &info.name).await?;
                Ok(dir)
            })
            .await
            .cloned()
    }
}
