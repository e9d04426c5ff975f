//! `LocalFs`: [`Fs`](crate::Fs) over this machine's file system (tokio::fs).

/// The local file system.
#[derive(Clone, Debug)]
pub struct LocalFs {}
