//! `LocalSubprocess`: [`Subprocess`](crate::Subprocess) over tokio::process.

/// Local processes.
#[derive(Clone, Debug)]
pub struct LocalSubprocess {}
