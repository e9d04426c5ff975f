//! Finding and ending everything a local spawn started.
//!
//! Every local spawn runs in its own session and process group (`setsid` before exec, so
//! session id = process group id = the child's pid) and carries a unique marker variable
//! `EXEC_WORLD_SPAWN=<id>` in its environment. The members of a spawn are the live
//! (non-zombie) processes that
//! 1. are in its process group or session (children, grandchildren, `nohup`'d ones,
//!    background jobs of an interactive shell, which get their own groups in the session),
//! 2. descend from it by parent chain (as seen in `/proc` at each scan), or
//! 3. have the marker in `/proc/<pid>/environ` (descendants that left with `setsid` and were
//!    orphaned, so neither 1 nor 2 finds them).
//!
//! 4. are in its cgroup (`cgroup.rs`), where this process can give each spawn one: then
//!    even a process that left the session, cleared its environment and lost its parent
//!    chain is found, and `cgroup.kill` ends them all at once.
//!
//! When the leader is verified in its cgroup (`contained`: its `/proc/<pid>/cgroup` names
//! the spawn's cgroup before it was reaped), every process it ever starts is in that cgroup
//! too, so the cgroup's `cgroup.procs` alone is the member list: the scan reads one file
//! instead of all of `/proc` (the whole cost of a `Drop` on the hot path). Otherwise the
//! `/proc` scan (1-3) finds the members, and `Drop` runs it on a thread of its own so the
//! dropping task does not wait for it.
//!
//! Without a cgroup, only a process that both left the session *and* cleared its
//! environment, after its parent chain to us was broken, escapes. Reading other users'
//! `environ` needs root or the same user. This process and its ancestors are never
//! members.
//!
//! Ending: SIGTERM (and SIGHUP for terminals) to every member, SIGCONT so stopped ones see
//! it, rescans during `grace` until none is left, then SIGKILL rounds (scan, kill) until a
//! scan finds no member, so processes forked meanwhile are caught by the next round.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use exec_world_sys::cgroup;

pub(crate) use exec_world_sys::tree_script::{MARKER_VAR, new_marker};

#[derive(Clone, Copy, Debug)]
struct ProcStat {
    ppid: u32,
    pgrp: u32,
    session: u32,
    zombie: bool,
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?;
    let ppid = it.next()?.parse().ok()?;
    let pgrp = it.next()?.parse().ok()?;
    let session = it.next()?.parse().ok()?;
    Some(ProcStat {
        ppid,
        pgrp,
        session,
        zombie: state == "Z" || state == "X",
    })
}

fn has_marker(pid: u32, needle: &[u8]) -> bool {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) => env.split(|b| *b == 0).any(|var| var == needle),
        Err(_) => false,
    }
}

/// This process and its ancestors: never signalled.
fn protected() -> HashSet<u32> {
    let mut out = HashSet::new();
    let mut pid = std::process::id();
    while pid > 1 && out.insert(pid) {
        match read_stat(pid) {
            Some(s) => pid = s.ppid,
            None => break,
        }
    }
    out.insert(1);
    out
}

/// One spawn's identity: its leader pid (= pgid = sid) and marker value.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    leader: u32,
    marker: String,
    /// The spawn's own cgroup, when it got one.
    cgroup: Option<PathBuf>,
    /// The leader was seen in `cgroup` (so all its descendants are there).
    contained: bool,
    /// `cgroup` was handed back (empty) and may serve another spawn now: never read,
    /// signalled or removed through this tree again. Shared by the tree's clones.
    released: Arc<AtomicBool>,
    /// `cgroup.kill` was written to `cgroup`: it is removed, never kept as a spare (the
    /// kernel SIGKILLs every child later born into a killed cgroup with
    /// `CLONE_INTO_CGROUP`, seen on Linux 6.18). Shared by the tree's clones.
    killed: Arc<AtomicBool>,
}

impl Tree {
    /// The tree of the spawn `leader` (not reaped yet: its cgroup membership is checked).
    pub(crate) fn new(leader: u32, marker: String, cgroup: Option<PathBuf>) -> Tree {
        let contained = cgroup.as_deref().is_some_and(|d| cgroup::holds(d, leader));
        Tree {
            leader,
            marker,
            cgroup,
            contained,
            released: Arc::new(AtomicBool::new(false)),
            killed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The tree of the spawn `leader` that the kernel started inside `cgroup`
    /// (`CLONE_INTO_CGROUP`): contained from its first instruction, nothing to check.
    pub(crate) fn born_in(leader: u32, marker: String, cgroup: Option<PathBuf>) -> Tree {
        Tree {
            leader,
            marker,
            contained: cgroup.is_some(),
            cgroup,
            released: Arc::new(AtomicBool::new(false)),
            killed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The spawn's cgroup while this tree still owns it.
    fn own_cgroup(&self) -> Option<&Path> {
        if self.released.load(Ordering::Acquire) {
            return None;
        }
        self.cgroup.as_deref()
    }

    /// The live members of a contained tree: its cgroup's processes (never this process
    /// or its ancestors, which are outside it), with their process group.
    fn cgroup_members(&self, dir: &Path) -> Vec<(u32, u32)> {
        cgroup::members(dir)
            .into_iter()
            .filter_map(|pid| read_stat(pid).filter(|s| !s.zombie).map(|s| (pid, s.pgrp)))
            .collect()
    }

    /// `cgroup.kill` of the spawn's cgroup (no-op without one).
    fn kill_cgroup(&self) {
        if let Some(dir) = self.own_cgroup() {
            self.killed.store(true, Ordering::Release);
            cgroup::kill(dir);
        }
    }

    /// Hands the spawn's cgroup back once nothing is left in it (once per tree).
    fn done(&self) {
        if let Some(dir) = self.own_cgroup()
            && !self.released.swap(true, Ordering::AcqRel)
        {
            if self.killed.load(Ordering::Acquire) {
                cgroup::discard(dir);
            } else {
                cgroup::remove(dir);
            }
        }
    }

    /// The live members (see the module docs) with their process group.
    fn scan(&self) -> Vec<(u32, u32)> {
        if self.contained {
            // Released: it was empty then, and every member of a contained tree is born
            // in it, so none is left.
            return match self.own_cgroup() {
                Some(dir) => self.cgroup_members(dir),
                None => Vec::new(),
            };
        }
        let needle = format!("{MARKER_VAR}={}", self.marker).into_bytes();
        let protected = protected();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut stats: HashMap<u32, ProcStat> = HashMap::new();
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(st) = read_stat(pid) {
                stats.insert(pid, st);
            }
        }
        let mut members: HashMap<u32, u32> = HashMap::new();
        if let Some(dir) = self.own_cgroup() {
            for pid in cgroup::members(dir) {
                if let Some(st) = stats.get(&pid)
                    && !st.zombie
                    && !protected.contains(&pid)
                {
                    members.insert(pid, st.pgrp);
                }
            }
        }
        for (&pid, st) in &stats {
            if st.zombie || protected.contains(&pid) {
                continue;
            }
            // A pid is never reused while it names a live group or session, so these
            // two tests cannot hit a stranger even after the leader was reaped.
            if st.pgrp == self.leader || st.session == self.leader {
                members.insert(pid, st.pgrp);
                continue;
            }
            // Parent chain up to the leader.
            let mut cur = st.ppid;
            let mut hops = 0;
            while cur > 1 && hops < 4096 {
                if cur == self.leader {
                    members.insert(pid, st.pgrp);
                    break;
                }
                match stats.get(&cur) {
                    Some(s) => cur = s.ppid,
                    None => break,
                }
                hops += 1;
            }
            if !members.contains_key(&pid) && has_marker(pid, &needle) {
                members.insert(pid, st.pgrp);
            }
        }
        members.into_iter().collect()
    }

    /// Sends `sig` to every member in `found`, and to the leader's group when a member
    /// shows it still exists (so a reused pid is never signalled as a group).
    fn signal_all(&self, found: &[(u32, u32)], sig: i32) {
        if found.iter().any(|&(_, pgrp)| pgrp == self.leader) {
            send(-(self.leader as i32), sig);
        }
        for &(p, _) in found {
            send(p as i32, sig);
        }
    }

    /// SIGKILL rounds until a scan finds no member (bounded). Synchronous.
    fn kill_now(&self) {
        for _ in 0..200 {
            let m = self.scan();
            if m.is_empty() {
                self.done();
                return;
            }
            self.kill_cgroup();
            self.signal_all(&m, libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(2));
        }
        tracing::warn!(
            leader = self.leader,
            "processes survived 200 SIGKILL rounds"
        );
    }

    /// Ends the tree when its handle is dropped: at once when contained (`cgroup.kill`,
    /// then the one-file scan), else the `/proc` scan and kill rounds on a thread of their
    /// own (inline when no thread can be started).
    pub(crate) fn kill_on_drop(&self) {
        if self.contained {
            self.kill_now();
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("exec-world-reap".into())
            .spawn(move || me.kill_now());
        if spawned.is_err() {
            self.kill_now();
        }
    }

    /// `scan` off the async workers (it reads a few files per process in `/proc`).
    async fn scan_async(&self) -> Vec<(u32, u32)> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.scan())
            .await
            .unwrap_or_else(|_| self.scan())
    }

    /// Polite then forceful end of every member; returns when a scan finds none.
    pub(crate) async fn terminate(&self, grace: Duration, hangup: bool) {
        let first = self.scan_async().await;
        if first.is_empty() {
            self.done();
            return;
        }
        if hangup {
            self.signal_all(&first, libc::SIGHUP);
        }
        self.signal_all(&first, libc::SIGTERM);
        self.signal_all(&first, libc::SIGCONT);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            if self.scan_async().await.is_empty() {
                self.done();
                return;
            }
            tokio::time::sleep(Duration::from_millis(10).min(deadline - now)).await;
        }
        for _ in 0..500 {
            let m = self.scan_async().await;
            if m.is_empty() {
                self.done();
                return;
            }
            self.kill_cgroup();
            self.signal_all(&m, libc::SIGKILL);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::warn!(
            leader = self.leader,
            "processes survived 500 SIGKILL rounds"
        );
    }
}

/// `kill(pid, sig)`, ignoring errors (ESRCH: already gone).
pub(crate) fn send(pid: i32, sig: i32) -> bool {
    if pid == 0 || pid == -1 {
        return false; // never "our own group" or "everyone"
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}
