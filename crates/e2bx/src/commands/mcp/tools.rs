//! What each tool does, over one session's [`World`]: through the exec-world seams (the
//! agent-tools bash tool and terminal session, `Fs`) or through the `sandbox@1`
//! provider's operations. A failure is `Err(text)`: the server returns it as an MCP tool
//! error (`isError: true`) naming the operation, the path and the cause.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_tools::{BashOutput, BashRequest, TerminalError, TerminalSession};
use exec_world::sandbox::{ExecOutput, ExecSpec, WORKSPACE, utf8_cut};
use exec_world::{TermSize, TerminalSpec, WorldPath, WriteOptions, bytes_stream};
use serde_json::json;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::config::Settings;
use super::params as p;
use super::world::World;

/// Files larger than this are not read whole by read_file / edit_file.
const MAX_FILE: u64 = 16 << 20;
/// Default number of lines of read_file.
const DEFAULT_LINES: u64 = 2000;
/// Lines of matches `search` returns at most.
const SEARCH_LINES: usize = 1000;
/// The marker of grep's own exit status on the search command's stderr.
const STATUS: &str = "e2bx-search-status:";
/// Terminals one session may hold open.
const MAX_TERMINALS: usize = 16;
/// Grace between SIGTERM and SIGKILL when a terminal is closed.
const TERMINAL_GRACE: Duration = Duration::from_secs(1);

/// A tool's outcome: text for the agent, or the error text.
pub type ToolResult = Result<String, String>;

/// The terminals a session opened, by id.
#[derive(Default)]
pub struct Terminals {
    next: u64,
    open: HashMap<String, Arc<Mutex<TerminalSession>>>,
}

impl Terminals {
    /// Drops every terminal (each ends its processes).
    pub fn clear(&mut self) {
        self.open.clear();
    }
}

/// The tools of one session.
pub struct Tools<'a> {
    /// The world.
    pub world: &'a World,
    /// Limits.
    pub settings: &'a Settings,
    /// The session's terminals.
    pub terminals: &'a std::sync::Mutex<Terminals>,
}

fn wpath(op: &str, s: &str) -> Result<WorldPath, String> {
    WorldPath::new(s).map_err(|e| format!("{op} {s}: {e}"))
}

/// A provider path: relative ones are under the workspace.
fn sandbox_path(s: &str) -> String {
    if s.starts_with('/') {
        s.to_owned()
    } else {
        format!("{WORKSPACE}/{s}")
    }
}

/// `text` cut to at most `cap` bytes on a character boundary, with a note when cut.
fn capped(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    let mut cut = utf8_cut(&text.as_bytes()[..cap], true);
    cut.push_str(&format!("\n[output cut at {cap} of {total} bytes]"));
    cut
}

impl Tools<'_> {
    /// `bash`: runs the command; a non-zero exit, a timeout or a cancel is data.
    pub async fn bash(&self, a: p::Bash, ct: &CancellationToken) -> ToolResult {
        let limit = self.settings.timeout;
        let timeout = a
            .timeout
            .map_or(limit, |s| Duration::from_secs(s).min(limit));
        if timeout.is_zero() {
            return Err("bash: timeout must be at least 1 second".into());
        }
        let env = a.env.unwrap_or_default();
        match self.world {
            World::Seams { bash, .. } => {
                let mut req = BashRequest::new(a.command)
                    .timeout(timeout)
                    .max_output_bytes(self.settings.max_output)
                    .keep_background(self.settings.keep_background);
                if let Some(cwd) = a.cwd {
                    req = req.cwd(cwd);
                }
                for (k, v) in env {
                    req = req.env(k, v);
                }
                let out = bash
                    .run_cancellable(req, ct)
                    .await
                    .map_err(|e| format!("bash: {e}"))?;
                Ok(bash_json(&out))
            }
            World::Provider {
                provider,
                handle,
                tag,
                ..
            } => {
                let mut spec = ExecSpec::new(a.command)
                    .timeout(timeout)
                    .max_output_bytes(self.settings.max_output)
                    .tag(tag.clone())
                    .cancel(ct.clone());
                spec.env = env;
                if let Some(cwd) = a.cwd {
                    spec = spec.cwd(sandbox_path(&cwd));
                }
                let out = provider
                    .exec(handle, spec)
                    .await
                    .map_err(|e| format!("bash: {e}"))?;
                Ok(exec_json(&out, ct.is_cancelled()))
            }
        }
    }

    async fn read_text(&self, op: &str, path: &str) -> Result<String, String> {
        let bytes = match self.world {
            World::Seams { fs, .. } => fs
                .read(&wpath(op, path)?, MAX_FILE)
                .await
                .map_err(|e| format!("{op}: {e}"))?
                .to_vec(),
            World::Provider {
                provider, handle, ..
            } => {
                let sp = sandbox_path(path);
                let c = provider
                    .read_file(handle, &sp, MAX_FILE)
                    .await
                    .map_err(|e| format!("{op}: {e}"))?
                    .ok_or_else(|| format!("{op} {sp}: no such file (or a directory)"))?;
                if c.truncated {
                    return Err(format!("{op} {sp}: larger than {MAX_FILE} bytes"));
                }
                c.data
            }
        };
        String::from_utf8(bytes).map_err(|_| format!("{op} {path}: not UTF-8 text"))
    }

    async fn write_bytes(&self, op: &str, path: &str, data: Vec<u8>) -> Result<(), String> {
        match self.world {
            World::Seams { fs, .. } => fs
                .write(
                    &wpath(op, path)?,
                    bytes_stream(data),
                    WriteOptions::default().create_parents(true),
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("{op}: {e}")),
            World::Provider {
                provider, handle, ..
            } => provider
                .write_file(handle, &sandbox_path(path), &data)
                .await
                .map_err(|e| format!("{op}: {e}")),
        }
    }

    /// `read_file`: lines `offset..offset+limit`, numbered like `cat -n`.
    pub async fn read_file(&self, a: p::ReadFile) -> ToolResult {
        let text = self.read_text("read_file", &a.path).await?;
        let offset = a.offset.unwrap_or(1).max(1);
        let limit = a.limit.unwrap_or(DEFAULT_LINES);
        let total = text.lines().count() as u64;
        let mut out = String::new();
        for (i, line) in text.lines().enumerate().skip((offset - 1) as usize) {
            let n = i as u64 + 1;
            if n >= offset + limit {
                break;
            }
            out.push_str(&format!("{n:>6}\t{line}\n"));
        }
        let last = (offset + limit - 1).min(total);
        if last < total {
            out.push_str(&format!(
                "[lines {offset}-{last} of {total}; use offset {} for more]\n",
                last + 1
            ));
        }
        if total == 0 {
            out.push_str("[empty file]\n");
        }
        Ok(capped(out, self.settings.max_output))
    }

    /// `write_file`.
    pub async fn write_file(&self, a: p::WriteFile) -> ToolResult {
        let n = a.content.len();
        self.write_bytes("write_file", &a.path, a.content.into_bytes())
            .await?;
        Ok(format!("wrote {n} bytes to {}", a.path))
    }

    /// `edit_file`: replaces the one occurrence of `old_string`.
    pub async fn edit_file(&self, a: p::EditFile) -> ToolResult {
        if a.old_string.is_empty() {
            return Err(format!("edit_file {}: old_string is empty", a.path));
        }
        let text = self.read_text("edit_file", &a.path).await?;
        match text.matches(&a.old_string).count() {
            1 => {}
            0 => return Err(format!("edit_file {}: old_string not found", a.path)),
            n => {
                return Err(format!(
                    "edit_file {}: old_string occurs {n} times; give more context so it is unique",
                    a.path
                ));
            }
        }
        let new = text.replacen(&a.old_string, &a.new_string, 1);
        self.write_bytes("edit_file", &a.path, new.into_bytes())
            .await?;
        Ok(format!("edited {}", a.path))
    }

    /// `list_dir`: one entry a line, directories with a trailing `/`.
    pub async fn list_dir(&self, a: p::ListDir, ct: &CancellationToken) -> ToolResult {
        let path = a.path.unwrap_or_else(|| ".".into());
        match self.world {
            World::Seams { fs, .. } => {
                let mut entries = fs
                    .read_dir(&wpath("list_dir", &path)?)
                    .await
                    .map_err(|e| format!("list_dir: {e}"))?;
                entries.sort_by(|x, y| x.name.cmp(&y.name));
                let mut out = String::new();
                for e in entries {
                    let m = &e.metadata;
                    let line = if m.is_dir() {
                        format!("{}/\n", e.name)
                    } else if m.is_symlink() {
                        format!(
                            "{} -> {}\n",
                            e.name,
                            m.symlink_target.as_deref().unwrap_or("?")
                        )
                    } else {
                        format!("{}\t{} bytes\n", e.name, m.size)
                    };
                    out.push_str(&line);
                }
                if out.is_empty() {
                    out.push_str("[empty directory]\n");
                }
                Ok(capped(out, self.settings.max_output))
            }
            World::Provider { .. } => {
                let cmd = r#"ls -lA --color=never -- "$E2BX_PATH""#;
                let path = sandbox_path(&path);
                let (out, err, code) = self.helper("list_dir", cmd, &path, None, ct).await?;
                if code == Some(0) {
                    Ok(out)
                } else {
                    Err(format!("list_dir {path}: {}", err.trim()))
                }
            }
        }
    }

    /// `search`: `grep -rnI` through the world's processes.
    pub async fn search(&self, a: p::Search, ct: &CancellationToken) -> ToolResult {
        let path = a.path.unwrap_or_else(|| ".".into());
        let flags = if a.ignore_case { "-rnIEi" } else { "-rnIE" };
        // grep's own status goes to stderr (the pipeline's is head's): 0 matches, 1 none,
        // 141 cut by head (more than 1000 lines); anything else is grep's error.
        let cmd = format!(
            r#"{{ grep {flags} --color=never -e "$E2BX_PATTERN" -- "$E2BX_PATH"; echo "{STATUS}$?" >&2; }} | head -n {SEARCH_LINES}"#
        );
        let (path, root) = match self.world {
            World::Seams { local_root, .. } => match local_root {
                Some(root) => {
                    let virt = wpath("search", &path)?
                        .resolve(&WorldPath::root())
                        .normalize();
                    let real = format!("{}{}", root.trim_end_matches('/'), virt.as_str());
                    (real, Some(root.clone()))
                }
                None => (path, None),
            },
            World::Provider { .. } => (sandbox_path(&path), None),
        };
        // --local: the real root never shows, in matches or in errors.
        let virt = |text: &str| match &root {
            Some(root) => text.replace(root.trim_end_matches('/'), ""),
            None => text.to_owned(),
        };
        let (stdout, stderr, code) = self
            .helper("search", &cmd, &path, Some(&a.pattern), ct)
            .await
            .map_err(|e| virt(&e))?;
        let mut status = code;
        let mut errors = String::new();
        for line in stderr.lines() {
            match line.strip_prefix(STATUS) {
                Some(n) => status = n.trim().parse().ok(),
                None => {
                    errors.push_str(line);
                    errors.push('\n');
                }
            }
        }
        if !matches!(status, Some(0 | 1 | 141)) {
            return Err(virt(&format!("search {path}: {}", errors.trim())));
        }
        let out = virt(&stdout);
        Ok(if out.trim().is_empty() {
            "no matches".into()
        } else {
            out
        })
    }

    /// Runs a fixed helper command line with the path (and pattern) in the environment,
    /// never in the command text: stdout, stderr and the exit code.
    async fn helper(
        &self,
        op: &str,
        cmd: &str,
        path: &str,
        pattern: Option<&str>,
        ct: &CancellationToken,
    ) -> Result<(String, String, Option<i32>), String> {
        let mut env = std::collections::BTreeMap::new();
        env.insert("E2BX_PATH".to_owned(), path.to_owned());
        if let Some(pat) = pattern {
            env.insert("E2BX_PATTERN".to_owned(), pat.to_owned());
        }
        let (stdout, stderr, code) = match self.world {
            World::Seams { bash, .. } => {
                let mut req = BashRequest::new(cmd)
                    .timeout(self.settings.timeout)
                    .max_output_bytes(self.settings.max_output);
                req.env = env;
                let o = bash
                    .run_cancellable(req, ct)
                    .await
                    .map_err(|e| format!("{op}: {e}"))?;
                if o.timed_out || o.cancelled {
                    return Err(format!("{op} {path}: timed out or cancelled"));
                }
                (o.stdout.text, o.stderr.text, o.exit_code)
            }
            World::Provider {
                provider,
                handle,
                tag,
                ..
            } => {
                let mut spec = ExecSpec::new(cmd)
                    .timeout(self.settings.timeout)
                    .max_output_bytes(self.settings.max_output)
                    .tag(tag.clone())
                    .cancel(ct.clone());
                spec.env = env;
                let o = provider
                    .exec(handle, spec)
                    .await
                    .map_err(|e| format!("{op}: {e}"))?;
                if o.timed_out || ct.is_cancelled() {
                    return Err(format!("{op} {path}: timed out or cancelled"));
                }
                (o.stdout, o.stderr, o.exit_code)
            }
        };
        Ok((stdout, stderr, code))
    }

    fn terminal(&self, id: &str) -> Result<Arc<Mutex<TerminalSession>>, String> {
        let t = self
            .terminals
            .lock()
            .map_err(|_| "terminals: poisoned".to_owned())?;
        t.open
            .get(id)
            .cloned()
            .ok_or_else(|| format!("terminal {id}: no such terminal in this session"))
    }

    /// `terminal_start`: a program (default the shell) on a terminal; its id.
    pub async fn terminal_start(&self, a: p::TerminalStart) -> ToolResult {
        let World::Seams { proc, .. } = self.world else {
            return Err(
                "terminal_start: this world (a sandbox@1 provider) has no terminals; use bash"
                    .into(),
            );
        };
        if self.terminals.lock().map(|t| t.open.len()).unwrap_or(0) >= MAX_TERMINALS {
            return Err(format!(
                "terminal_start: {MAX_TERMINALS} terminals are open; close one first"
            ));
        }
        let mut spec = match a.command {
            Some(c) => TerminalSpec::new(c),
            None => TerminalSpec::shell(),
        };
        for arg in a.args {
            spec = spec.arg(arg);
        }
        if let Some(cwd) = a.cwd {
            spec = spec.cwd(wpath("terminal_start", &cwd)?);
        }
        spec = spec.size(TermSize {
            cols: a.cols.unwrap_or(120),
            rows: a.rows.unwrap_or(40),
        });
        let session = TerminalSession::spawn(proc.as_ref(), spec)
            .map_err(|e| format!("terminal_start: {e}"))?;
        let pid = session
            .started()
            .await
            .map_err(|e| format!("terminal_start: {e}"))?;
        let mut t = self
            .terminals
            .lock()
            .map_err(|_| "terminals: poisoned".to_owned())?;
        t.next += 1;
        let id = format!("t{}", t.next);
        t.open.insert(id.clone(), Arc::new(Mutex::new(session)));
        Ok(json!({ "id": id, "pid": pid }).to_string())
    }

    /// `terminal_write`.
    pub async fn terminal_write(&self, a: p::TerminalWrite) -> ToolResult {
        let term = self.terminal(&a.id)?;
        let mut data = a.input.into_bytes();
        if a.enter {
            data.push(b'\r');
        }
        let n = data.len();
        term.lock()
            .await
            .write(&data)
            .await
            .map_err(|e| format!("terminal_write {}: {e}", a.id))?;
        Ok(format!("wrote {n} bytes to terminal {}", a.id))
    }

    /// `terminal_read`: new output, after waiting for a pattern or for any output.
    pub async fn terminal_read(&self, a: p::TerminalRead, ct: &CancellationToken) -> ToolResult {
        let term = self.terminal(&a.id)?;
        let mut term = term.lock().await;
        let wait = Duration::from_millis(a.timeout_ms.unwrap_or(1000)).min(self.settings.timeout);
        let (output, found) = match &a.wait_for {
            Some(pat) => {
                let r = tokio::select! {
                    r = term.read_until(pat.as_bytes(), wait) => r,
                    () = ct.cancelled() => return Err(format!("terminal_read {}: cancelled", a.id)),
                };
                match r {
                    Ok(data) => (data, true),
                    Err(
                        TerminalError::Timeout { output, .. }
                        | TerminalError::Closed { output, .. },
                    ) => (output.into_bytes(), false),
                    Err(e) => return Err(format!("terminal_read {}: {e}", a.id)),
                }
            }
            None => {
                let deadline = tokio::time::Instant::now() + wait;
                let mut data = term.read_new();
                while data.is_empty() && !term.is_closed() && tokio::time::Instant::now() < deadline
                {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(20)) => {}
                        () = ct.cancelled() => return Err(format!("terminal_read {}: cancelled", a.id)),
                    }
                    data = term.read_new();
                }
                let found = !data.is_empty();
                (data, found)
            }
        };
        let cap = self.settings.max_output;
        let text = String::from_utf8_lossy(&output).into_owned();
        let cut = text.len() > cap;
        let text = if cut {
            // keep the most recent output
            let mut start = text.len() - cap;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            text[start..].to_owned()
        } else {
            text
        };
        Ok(json!({
            "output": text,
            "matched": found && a.wait_for.is_some(),
            "timed_out": !found,
            "truncated": cut,
            "closed": term.is_closed(),
        })
        .to_string())
    }

    /// `terminal_close`: ends every process of the terminal; the leader's exit.
    pub async fn terminal_close(&self, a: p::TerminalClose) -> ToolResult {
        let term = self
            .terminals
            .lock()
            .map_err(|_| "terminals: poisoned".to_owned())?
            .open
            .remove(&a.id)
            .ok_or_else(|| format!("terminal_close {}: no such terminal in this session", a.id))?;
        let session = match Arc::try_unwrap(term) {
            Ok(m) => m.into_inner(),
            // A read in flight holds it: dropping our reference ends it when that returns.
            Err(_) => return Ok(format!("terminal {} closing", a.id)),
        };
        let status = session
            .close(TERMINAL_GRACE)
            .await
            .map_err(|e| format!("terminal_close {}: {e}", a.id))?;
        Ok(json!({ "id": a.id, "exit_code": status.code, "signal": status.signal }).to_string())
    }
}

fn bash_json(o: &BashOutput) -> String {
    json!({
        "exit_code": o.exit_code,
        "signal": o.signal,
        "timed_out": o.timed_out,
        "cancelled": o.cancelled,
        "stdout": o.stdout.text,
        "stderr": o.stderr.text,
        "stdout_truncated": o.stdout.truncated,
        "stderr_truncated": o.stderr.truncated,
    })
    .to_string()
}

fn exec_json(o: &ExecOutput, cancelled: bool) -> String {
    json!({
        "exit_code": o.exit_code,
        "timed_out": o.timed_out,
        "cancelled": cancelled,
        "stdout": o.stdout,
        "stderr": o.stderr,
        "truncated": o.truncated,
    })
    .to_string()
}
