//! The sandbox lifecycle owner, its shared handle, bring-your-own sandboxes, reconnect by
//! id or logical name, and opt-in keep-alive.
//!
//! * [`SandboxOwner`]: one owner per sandbox. [`SandboxOwner::create`] creates it,
//!   [`SandboxOwner::connect`] / [`SandboxOwner::connect_by_name`] find it again,
//!   [`SandboxOwner::attach_id`] / [`SandboxOwner::attach_api`] wrap one brought by the
//!   caller (never deleted). Setup (workdir + private state dir, symlink-checked) runs in
//!   the background; [`SandboxOwner::handle`] waits for it; [`SandboxOwner::shutdown`]
//!   refuses new handles, waits for setup, then deletes (owned only).
//! * [`OwnedHandle`]: the one shared `Arc<dyn EnvdApi>` the fs and subprocess adapters
//!   take, plus the workdir, state dir and keep-alive.
//! * [`Leases`]: many sandboxes from stateless replicas (a conversation-sandbox provider):
//!   per sandbox the end of life its last connect granted and a world built on it; a
//!   connect only when an operation needs more life, or once when the proxy cannot route.
//! * [`KeepAlive`]: opt-in top-up of the sandbox timeout driven by activity
//!   ([`KeepAlive::activity`], [`KeepAlive::touch`], or every call through
//!   [`LeasedApi`]); see [`keepalive`] for the rules.
//!
//! The API key only configures the host-side [`Client`](crate::Client); nothing here puts
//! it into the sandbox, its environment or a log.

mod byo;
pub mod error;
pub mod keepalive;
pub mod lease;
pub mod leases;
pub mod owner;
pub mod reconnect;
pub mod setup;

pub use error::{LifecycleError, PathKind};
pub use keepalive::{
    ActivityGuard, KeepAlive, KeepAliveConfig, KeepAliveStats, Plan, Renewal, StopReason,
};
pub use lease::LeasedApi;
pub use leases::Leases;
pub use owner::{
    NAME_METADATA_KEY, OwnedHandle, OwnerOptions, Ownership, SandboxOwner, ShutdownOutcome,
};
pub use reconnect::find_by_name;
pub use setup::{
    DEFAULT_STATE_DIR, DEFAULT_WORKDIR, Prepared, check_state_dir_name, normalize_workdir,
};
