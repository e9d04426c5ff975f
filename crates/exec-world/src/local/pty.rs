//! Local terminals: a program on a pseudo-terminal ([`crate::pty`]), in its own session
//! with the pty as controlling terminal; `terminate` ends every process group of the
//! session plus tracked descendants (see `tree.rs`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rustix::termios::tcgetpgrp;
use tokio::sync::mpsc;

use super::proc::{
    LocalSubprocess, Reaped, absolute_program, build_env, ensure_runtime, spawn_error,
};
use super::tree::{new_marker, send};
use crate::error::Error;
use crate::proc::{ExitStatus, OutputStream, Signal};
use crate::terminal::{TermSize, Terminal, TerminalBackend, TerminalSpec};
use exec_world_sys::cgroup::{SpawnCgroup, spawn_joined};

struct LocalTerminal {
    reaped: Reaped,
    master: Arc<OwnedFd>,
    writer: Arc<Mutex<File>>,
    output: Mutex<Option<OutputStream>>,
}

/// Starts `spec` on a new pty.
pub(crate) fn spawn(sub: &LocalSubprocess, spec: TerminalSpec) -> Result<Terminal, Error> {
    ensure_runtime()?;
    let cwd = sub.resolve_cwd(spec.cwd.as_ref())?;
    let marker = new_marker();
    let env = build_env(spec.env_base, &spec.env, &marker, true);
    let program = match &spec.program {
        Some(p) if !p.is_empty() => p.clone(),
        Some(_) => {
            return Err(Error::invalid_spec("empty program"));
        }
        None => std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/bin/sh".into()),
    };

    let pty = exec_world_sys::pty::open(spec.size.cols, spec.size.rows)
        .map_err(|e| Error::io("open pty", e))?;
    let master = pty.master;
    let slave = File::from(pty.slave);
    let stdio = |f: &File| -> Result<Stdio, Error> {
        Ok(Stdio::from(
            f.try_clone().map_err(|e| Error::io("dup pty", e))?,
        ))
    };

    let mut cmd = tokio::process::Command::new(absolute_program(&program, &cwd));
    cmd.args(&spec.args)
        .env_clear()
        .envs(&env)
        .current_dir(cwd.as_str())
        .stdin(stdio(&slave)?)
        .stdout(stdio(&slave)?)
        .stderr(stdio(&slave)?)
        .kill_on_drop(false);
    let cg = SpawnCgroup::create(&marker);
    // SAFETY: setsid(2) and ioctl(TIOCSCTTY) are async-signal-safe raw syscalls.
    let (child, cg) =
        unsafe { spawn_joined(&mut cmd, cg, exec_world_sys::pty::make_controlling_terminal) }
            .map_err(|e| spawn_error(&program, e))?;
    drop(cmd); // closes the parent's copies of the slave, so EOF (EIO) comes at the end
    drop(slave);
    let reaped = Reaped::start(child, marker, cg)?;

    let master = Arc::new(master);
    let reader: File = File::from(
        master
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("dup pty", e))?,
    );
    let writer: File = File::from(
        master
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("dup pty", e))?,
    );
    let (tx, rx) = mpsc::channel::<Result<Bytes, Error>>(64);
    std::thread::Builder::new()
        .name("exec-world-pty".into())
        .spawn(move || pump(reader, tx))
        .map_err(|e| Error::io("start pty reader", e))?;
    let output: OutputStream = Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    Ok(Terminal::new(Box::new(LocalTerminal {
        reaped,
        master,
        writer: Arc::new(Mutex::new(writer)),
        output: Mutex::new(Some(output)),
    })))
}

/// Copies pty output to `tx` until EIO (every slave holder gone). When nobody listens any
/// more it keeps draining, so the session never blocks on a full pty.
fn pump(mut reader: File, tx: mpsc::Sender<Result<Bytes, Error>>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut listening = true;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if listening
                    && tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                {
                    listening = false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // EIO: the session closed the terminal; that is the normal end.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => {
                if listening {
                    let _ = tx.blocking_send(Err(Error::io("read pty", e)));
                }
                break;
            }
        }
    }
}

#[async_trait]
impl TerminalBackend for LocalTerminal {
    fn pid(&self) -> Option<u32> {
        Some(self.reaped.pid)
    }

    async fn started(&self) -> Result<u32, Error> {
        Ok(self.reaped.pid)
    }

    async fn write(&self, data: &[u8]) -> Result<(), Error> {
        let writer = self.writer.clone();
        let data = data.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut w = writer
                .lock()
                .map_err(|_| Error::other("pty writer poisoned"))?;
            w.write_all(&data)
                .and_then(|_| w.flush())
                .map_err(|e| Error::io("write pty", e))
        })
        .await
        .map_err(|e| Error::other(format!("pty write task: {e}")))?
    }

    fn take_output(&mut self) -> Option<OutputStream> {
        self.output.get_mut().ok()?.take()
    }

    async fn resize(&self, size: TermSize) -> Result<(), Error> {
        exec_world_sys::pty::set_size(self.master.as_fd(), size.cols, size.rows)
            .map_err(|e| Error::io("resize pty", e))
    }

    async fn signal(&self, sig: Signal) -> Result<(), Error> {
        // The foreground group, as the keyboard would; the leader's group as a fallback.
        let target = match tcgetpgrp(self.master.as_fd()) {
            Ok(pgrp) => pgrp.as_raw_nonzero().get(),
            Err(_) => self.reaped.pid as i32,
        };
        if !send(-target, sig.number()) {
            self.reaped.signal(sig);
        }
        Ok(())
    }

    async fn terminate(&self, grace: Duration) -> Result<ExitStatus, Error> {
        self.reaped.terminate(grace, true).await
    }

    async fn wait(&self) -> Result<ExitStatus, Error> {
        self.reaped.wait().await
    }
}

impl Drop for LocalTerminal {
    fn drop(&mut self) {
        self.reaped.tree.kill_on_drop();
    }
}
