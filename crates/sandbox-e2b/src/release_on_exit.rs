//! [`ReleaseOnExit`]: the exec child as exec-world's `run_capped` sees it, so that a
//! command that ended by itself gives its spawn cgroup back to subprocess-e2b for reuse.
//!
//! `run_capped` detaches a child whose exit it observed (background jobs the command
//! left keep running, as in a shell). subprocess-e2b kills nothing when a pipe child is
//! dropped after its observed exit either (its documented drop rule), but it keeps the
//! cgroup name of a *detached* spawn out of reuse: every exec created one more cgroup in
//! the sandbox and left it there for the sandbox's life (one `mkdir` per exec, thousands
//! of empty cgroups over a long conversation). Here a detach after an observed exit is a
//! plain drop: nothing is killed, and the name goes back. A later spawn never shares it
//! with a leftover: the spawn helper takes `NAME.<pid>` when the cgroup is not empty.
//! A detach before the exit was observed (no caller does that today) detaches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use exec_world::{Child, ChildBackend, Error, ExitStatus, InputSink, OutputStream, Signal};

/// A [`Child`] whose detach after its observed exit releases it instead.
pub(crate) struct ReleaseOnExit {
    /// `None` once detached or released.
    inner: Option<Child>,
    /// Set when [`ChildBackend::wait`] returned a status (the exit was observed).
    exited: AtomicBool,
}

impl ReleaseOnExit {
    /// Wraps `child`.
    pub(crate) fn wrap(child: Child) -> Child {
        Child::new(Box::new(ReleaseOnExit {
            inner: Some(child),
            exited: AtomicBool::new(false),
        }))
    }

    fn inner(&self) -> Result<&Child, Error> {
        self.inner
            .as_ref()
            .ok_or_else(|| Error::other("the command's handle was already given up"))
    }
}

#[async_trait]
impl ChildBackend for ReleaseOnExit {
    fn pid(&self) -> Option<u32> {
        self.inner.as_ref().and_then(Child::pid)
    }

    async fn started(&self) -> Result<u32, Error> {
        self.inner()?.started().await
    }

    fn take_stdin(&mut self) -> Option<InputSink> {
        self.inner.as_mut().and_then(Child::take_stdin)
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        self.inner.as_mut().and_then(Child::take_stdout)
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        self.inner.as_mut().and_then(Child::take_stderr)
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        let status = self.inner()?.wait().await?;
        self.exited.store(true, Ordering::SeqCst);
        Ok(status)
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        self.inner()?.signal(sig).await
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.inner()?.terminate(grace).await
    }

    fn detach(&mut self) {
        let Some(child) = self.inner.take() else {
            return;
        };
        if self.exited.load(Ordering::SeqCst) {
            // Released: after the observed exit the drop kills nothing.
            drop(child);
        } else {
            child.detach();
        }
    }
}
