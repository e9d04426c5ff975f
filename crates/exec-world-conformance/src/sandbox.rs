//! The sandbox-provider conformance suite: one set of async tests every
//! [`SandboxProvider`] runs unchanged (`LocalSandboxes`, `E2bSandboxes` on the emulator,
//! and on real E2B when credentials are present).
//!
//! Each test creates its own sandbox(es) with [`SandboxWorld::name`] and destroys them.
//! Commands use relative paths (the cwd is the workspace) and file operations use
//! `/workspace/...`, so the same test runs where `/workspace` is a host directory.
//! Liveness of a pid is `/proc/<pid>` present and not a zombie. No wall-clock asserts.
//!
//! ```ignore
//! async fn world() -> exec_world_conformance::sandbox::SandboxWorld { /* two instances */ }
//! exec_world_conformance::sandbox_conformance_tests!(world);
//! ```

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use super::sandbox_durable::{
    sb_exec_attach_resumes, sb_exec_id_never_twice, sb_exec_other_replica, sb_exec_start_attach,
    sb_exec_survives_suspend, sb_exec_timeout_unattached,
};
pub use super::sandbox_fork::sb_fork;

use exec_world::ErrorKind;
use exec_world::sandbox::{
    CreateSpec, Egress, ExecOutput, ExecSpec, ResumeOutcome, SandboxError, SandboxHandle,
    SandboxLimits, SandboxProvider,
};

/// The contract's "invalid argument": kind `InvalidSpec`, for operation `op` when given.
fn is_invalid(e: &SandboxError, op: Option<&str>) -> bool {
    e.kind() == ErrorKind::InvalidSpec && op.is_none_or(|op| e.op() == Some(op))
}

/// What a sandbox test runs against: a provider, a second instance of it on the same
/// backend (another replica), and a name prefix unique to this run.
pub struct SandboxWorld {
    /// The provider under test.
    pub provider: Arc<dyn SandboxProvider>,
    /// A second instance on the same backend (shares no in-memory state with the first).
    pub second: Arc<dyn SandboxProvider>,
    /// Prefix of every sandbox name this run creates.
    pub prefix: String,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

impl SandboxWorld {
    /// A world over two instances of one provider.
    pub fn new(
        provider: Arc<dyn SandboxProvider>,
        second: Arc<dyn SandboxProvider>,
        prefix: impl Into<String>,
    ) -> SandboxWorld {
        SandboxWorld {
            provider,
            second,
            prefix: prefix.into(),
            _guard: None,
        }
    }

    /// Keeps `guard` alive as long as the world (an emulator, a temp dir).
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> SandboxWorld {
        self._guard = Some(Box::new(guard));
        self
    }

    /// A sandbox name unique to this run.
    pub fn name(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Creates a sandbox named [`SandboxWorld::name`]`(n)` with default limits.
    pub async fn create(&self, n: &str) -> SandboxHandle {
        self.provider
            .create(CreateSpec::new(self.name(n)))
            .await
            .expect("create sandbox")
    }
}

async fn sh(p: &dyn SandboxProvider, h: &SandboxHandle, cmd: &str) -> ExecOutput {
    p.exec(h, ExecSpec::new(cmd).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"))
}

/// The pids listed in `file` (relative to the workspace) that are still alive.
async fn alive(p: &dyn SandboxProvider, h: &SandboxHandle, file: &str) -> String {
    let script = format!(
        "for p in $(cat {file}); do if [ -e /proc/$p ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null; then echo $p; fi; done"
    );
    sh(p, h, &script).await.stdout
}

/// Waits (bounded) until `path` exists.
async fn wait_for(p: &dyn SandboxProvider, h: &SandboxHandle, path: &str) {
    for _ in 0..600 {
        if p.stat(h, path).await.expect("stat").is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never appeared");
}

/// exec: exit code, both streams, env defaults and extras, cwd, bad env names.
pub async fn sb_exec_basics(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("basics").await;
    let r = sh(p, &h, "echo out; echo err >&2; exit 3").await;
    assert_eq!(
        (r.exit_code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(3), "out\n", "err\n")
    );
    assert!(!r.truncated && !r.timed_out);
    let r = p
        .exec(
            &h,
            ExecSpec::new("pwd; echo \"$HOME\"; echo \"$LANG\"; echo \"$EXTRA\"")
                .env("EXTRA", "x y"),
        )
        .await
        .expect("exec");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{r:?}");
    assert!(
        lines[0].ends_with("/workspace") && lines[1].ends_with("/workspace"),
        "{r:?}"
    );
    assert_eq!(&lines[2..], ["C.UTF-8", "x y"]);
    sh(p, &h, "mkdir -p sub/dir").await;
    let r = p
        .exec(&h, ExecSpec::new("pwd").cwd("/workspace/sub/dir"))
        .await
        .expect("exec in cwd");
    assert!(r.stdout.trim_end().ends_with("/workspace/sub/dir"), "{r:?}");
    let e = p
        .exec(&h, ExecSpec::new("true").env("BAD-NAME", "1"))
        .await
        .expect_err("bad env name");
    assert!(is_invalid(&e, None), "{e}");
    assert!(e.to_string().contains("BAD-NAME"), "{e}");
    let r = p
        .exec(&h, ExecSpec::new("echo ok").timeout(Duration::MAX))
        .await
        .expect("an unbounded timeout");
    assert_eq!(r.stdout, "ok\n");
    let r = sh(p, &h, "kill -TERM $$").await;
    assert_eq!(
        r.exit_code,
        Some(143),
        "a signal we did not send is 128+n: {r:?}"
    );
    p.destroy(&h).await.expect("destroy");
}

/// read/write/stat round trip, parents, missing paths, directories, truncation, bad paths.
pub async fn sb_files(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("files").await;
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    p.write_file(&h, "/workspace/d/e/a.bin", &data)
        .await
        .expect("write");
    let got = p
        .read_file(&h, "/workspace/d/e/a.bin", 1 << 20)
        .await
        .expect("read")
        .expect("present");
    assert_eq!(
        (got.data.as_slice(), got.truncated),
        (data.as_slice(), false)
    );
    let head = p
        .read_file(&h, "/workspace/d/e/a.bin", 100)
        .await
        .expect("read head")
        .expect("present");
    assert_eq!((head.data.as_slice(), head.truncated), (&data[..100], true));
    let exact = p
        .read_file(&h, "/workspace/d/e/a.bin", 10_000)
        .await
        .expect("read exact")
        .expect("present");
    assert!(!exact.truncated);
    let r = sh(p, &h, "wc -c < d/e/a.bin").await;
    assert_eq!(r.stdout.trim(), "10000");
    p.write_file(&h, "/workspace/d/e/a.bin", b"short")
        .await
        .expect("overwrite");
    let st = p.stat(&h, "/workspace/d/e/a.bin").await.expect("stat");
    assert_eq!(st.map(|s| (s.size, s.is_dir)), Some((5, false)));
    let st = p.stat(&h, "/workspace/d").await.expect("stat dir");
    assert_eq!(st.map(|s| s.is_dir), Some(true));
    assert_eq!(p.stat(&h, "/workspace/nope").await.expect("stat"), None);
    assert_eq!(
        p.read_file(&h, "/workspace/nope", 10).await.expect("read"),
        None
    );
    assert_eq!(
        p.read_file(&h, "/workspace/d", 10).await.expect("read dir"),
        None
    );
    p.write_file(&h, "/workspace/empty", b"")
        .await
        .expect("write empty");
    let e = p
        .read_file(&h, "/workspace/empty", 10)
        .await
        .expect("read empty");
    assert_eq!(e.map(|c| (c.data.len(), c.truncated)), Some((0, false)));
    for bad in ["rel/a", "/workspace/../etc/passwd", "/workspace/a\0b"] {
        let e = p.read_file(&h, bad, 10).await.expect_err("bad path");
        assert!(is_invalid(&e, Some("read_file")), "{e}");
        let e = p.write_file(&h, bad, b"x").await.expect_err("bad path");
        assert!(is_invalid(&e, Some("write_file")), "{e}");
        let e = p.stat(&h, bad).await.expect_err("bad path");
        assert!(is_invalid(&e, Some("stat")), "{e}");
    }
    p.destroy(&h).await.expect("destroy");
}

/// A FIFO the agent planted is refused by `read_file`, never read: a reader would block
/// on the pipe.
pub async fn sb_read_refuses_fifos(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("fifo").await;
    let out = p
        .exec(&h, ExecSpec::new("mkfifo pipe && echo ok"))
        .await
        .expect("exec");
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    for path in ["/workspace/pipe"] {
        let read = tokio::time::timeout(Duration::from_secs(60), p.read_file(&h, path, 16))
            .await
            .unwrap_or_else(|_| panic!("read_file {path} must not block"));
        let e = read.expect_err("not a regular file");
        assert!(e.to_string().contains(path), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
    p.destroy(&h).await.expect("destroy");
}

/// Bounds every file operation on a hostile path: it must end, never block.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} must not block"))
}

/// Special files (FIFO, socket, a link to a device) planted, or swapped in for a regular
/// file while reads run, never block or slow a read or a write: a read is refused (or
/// finds nothing), a write replaces the special file with a regular one.
pub async fn sb_special_files_never_block(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("special").await;
    let out = sh(
        p,
        &h,
        "mkfifo pipe && ln -s pipe lpipe && ln -s /dev/zero zero && ln -s /dev/tty tty && \
         perl -MSocket -e 'socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die; \
           bind($s, pack_sockaddr_un(\"sock\")) or die' && echo ok",
    )
    .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    for name in ["pipe", "lpipe", "sock", "zero", "tty"] {
        let path = format!("/workspace/{name}");
        let r = bounded(&format!("read_file {path}"), p.read_file(&h, &path, 16)).await;
        match r {
            // A link to a device outside the provider's root resolves inside it: nothing.
            Ok(None) => assert!(matches!(name, "zero" | "tty"), "{path}: None"),
            Ok(Some(c)) => panic!("{path} was read: {c:?}"),
            Err(e) => {
                assert!(e.to_string().contains(&path), "{e}");
                assert!(e.to_string().contains("not a regular file"), "{e}");
            }
        }
        let st = bounded(&format!("stat {path}"), p.stat(&h, &path)).await;
        assert!(st.is_ok(), "{path}: {st:?}");
    }
    for name in ["pipe", "sock"] {
        let path = format!("/workspace/{name}");
        bounded(
            &format!("write_file {path}"),
            p.write_file(&h, &path, b"data"),
        )
        .await
        .unwrap_or_else(|e| panic!("write over {path}: {e}"));
        let c = p.read_file(&h, &path, 16).await.expect("read back");
        assert_eq!(c.map(|c| c.data), Some(b"data".to_vec()), "{path}");
    }
    // A file swapped between a regular file and a FIFO while reads run.
    let tag = "swapper";
    let swapper = p.exec(
        &h,
        ExecSpec::new("for i in $(seq 1 4000); do rm -f f; mkfifo f; rm -f f; echo x > f; done")
            .tag(tag)
            .timeout(Duration::from_secs(120)),
    );
    let reads = async {
        for _ in 0..30 {
            match bounded(
                "read_file of a swapped file",
                p.read_file(&h, "/workspace/f", 16),
            )
            .await
            {
                Ok(None) => {}
                Ok(Some(c)) => assert!(c.data.is_empty() || c.data == b"x\n", "{c:?}"),
                Err(e) => assert!(e.to_string().contains("/workspace/f"), "{e}"),
            }
        }
        w.second
            .kill_tagged(&h, &[tag.to_owned()])
            .await
            .expect("kill_tagged");
    };
    let (r, ()) = tokio::join!(swapper, reads);
    r.expect("swapper exec");
    p.destroy(&h).await.expect("destroy");
}

/// A write never leaves the sandbox through a link, dangling or not, absolute or
/// relative, final or in a parent: not onto this machine's files, not into another
/// sandbox. Where it lands instead is the provider's (inside the sandbox, or refused).
pub async fn sb_writes_stay_in_the_root(w: &SandboxWorld) {
    let p = &*w.provider;
    let a = w.create("root-a").await;
    let b = w.create("root-b").await;
    let unique = format!("sandbox-escape-{}-{}", std::process::id(), b.id.len());
    let host_etc = format!("/etc/{unique}");
    let host_tmp = std::env::temp_dir().join(&unique);
    let t = host_tmp.display().to_string();
    let cmd = format!(
        "ln -s {host_etc} dangling_abs && ln -s ../../../../../../../..{t} dangling_rel && \
         ln -s ../../{id}/workspace/owned other && ln -s ../../{id}/workspace other_dir && \
         ln -s /etc etc_dir && echo ok",
        id = b.id
    );
    let out = sh(p, &a, &cmd).await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    for path in [
        "/workspace/dangling_abs",
        "/workspace/dangling_rel",
        "/workspace/other",
        "/workspace/other_dir/owned2",
        &format!("/workspace/etc_dir/{unique}"),
    ] {
        // Refused or written inside the sandbox: both are fine, leaving is not.
        let _ = bounded(
            &format!("write_file {path}"),
            p.write_file(&a, path, b"evil"),
        )
        .await;
    }
    assert!(!std::path::Path::new(&host_etc).exists(), "{host_etc}");
    assert!(!host_tmp.exists(), "{t}");
    for path in ["/workspace/owned", "/workspace/owned2"] {
        assert_eq!(p.stat(&b, path).await.expect("stat"), None, "{path} in b");
    }
    p.destroy(&a).await.expect("destroy");
    p.destroy(&b).await.expect("destroy");
}

/// A directory that the agent keeps swapping (atomically) for a link to this machine's
/// files while writes and reads go through it: no write lands outside the sandbox and no read
/// returns what is there (the check-then-act window of a link resolution is closed, not
/// just narrow).
pub async fn sb_writes_stay_in_the_root_while_links_swap(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("swap").await;
    let unique = format!("sandbox-swap-{}-{}", std::process::id(), h.id.len());
    let host_dir = std::env::temp_dir().join(&unique);
    std::fs::create_dir_all(&host_dir).expect("host dir");
    std::fs::write(host_dir.join("secret.txt"), b"host secret").expect("host secret");
    let t = host_dir.display().to_string();
    let swapper = p.exec(
        &h,
        // renameat2(RENAME_EXCHANGE) (x86_64 syscall 316) swaps `d` and the link `e`
        // atomically, as fast as perl can loop.
        ExecSpec::new(format!(
            "mkdir d && ln -s {t} e && touch running && exec perl -e '$n = 0; my ($d, $e) = (\"d\", \"e\"); \
             until (-e \"stop\") {{ syscall(316, -100, $d, -100, $e, 2) == 0 \
             or die \"renameat2: $!\"; $n++ }} print $n'"
        ))
        .timeout(Duration::from_secs(120))
        .tag("swapper"),
    );
    let calls = async {
        wait_for(p, &h, "/workspace/running").await;
        for i in 0..300 {
            let path = format!("/workspace/d/f{i}");
            let _ = bounded(
                &format!("write_file {path}"),
                p.write_file(&h, &path, b"evil"),
            )
            .await;
            let r = bounded(
                "read_file through the swapped link",
                p.read_file(&h, "/workspace/d/secret.txt", 100),
            )
            .await;
            if let Ok(Some(c)) = r {
                assert_ne!(c.data, b"host secret", "read through the swapped link");
            }
        }
        p.write_file(&h, "/workspace/stop", b"")
            .await
            .expect("stop");
    };
    let (out, ()) = tokio::join!(swapper, calls);
    let out = out.expect("swapper");
    assert!(
        out.stdout.trim().parse::<u64>().is_ok_and(|n| n > 0),
        "{out:?}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&host_dir)
        .expect("host dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let _ = std::fs::remove_dir_all(&host_dir);
    assert_eq!(left, ["secret.txt"], "a write left the sandbox");
    p.destroy(&h).await.expect("destroy");
}

/// A timeout kills the whole tree (nohup'd and setsid'd children too) and returns the
/// output so far with no exit code.
pub async fn sb_timeout_kills_tree(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("timeout").await;
    let cmd = "nohup sleep 300 >/dev/null 2>&1 & echo $! > pids; \
               setsid sleep 300 >/dev/null 2>&1 & echo $! >> pids; \
               sleep 300 & echo $! >> pids; echo started; wait";
    let r = p
        .exec(&h, ExecSpec::new(cmd).timeout(Duration::from_secs(2)))
        .await
        .expect("exec");
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, None);
    assert_eq!(r.stdout, "started\n");
    let pids = sh(p, &h, "cat pids").await.stdout;
    assert_eq!(pids.lines().count(), 3, "{pids}");
    assert_eq!(
        alive(p, &h, "pids").await,
        "",
        "survivors after the timeout"
    );
    p.destroy(&h).await.expect("destroy");
}

/// Cancel after start: no exit code, not timed out, tree killed; already cancelled: error.
pub async fn sb_cancel(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("cancel").await;
    let token = CancellationToken::new();
    let run = p.exec(
        &h,
        ExecSpec::new(
            "echo before; echo $$ > pid; sleep 300 & echo $! >> pid; touch started; wait",
        )
        .timeout(Duration::from_secs(120))
        .cancel(token.clone()),
    );
    let trigger = async {
        wait_for(p, &h, "/workspace/started").await;
        token.cancel();
    };
    let (r, ()) = tokio::join!(run, trigger);
    let r = r.expect("cancelled exec returns a result");
    assert_eq!((r.exit_code, r.timed_out), (None, false), "{r:?}");
    assert_eq!(r.stdout, "before\n", "the output so far");
    assert_eq!(alive(p, &h, "pid").await, "", "survivors after cancel");
    let e = p
        .exec(&h, ExecSpec::new("touch ran").cancel(token))
        .await
        .expect_err("already cancelled");
    assert!(e.kind() == ErrorKind::Cancelled, "{e}");
    assert_eq!(p.stat(&h, "/workspace/ran").await.expect("stat"), None);
    p.destroy(&h).await.expect("destroy");
}

/// stdout + stderr together are capped; a cut multi-byte character is dropped whole.
pub async fn sb_output_cap(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("cap").await;
    let r = p
        .exec(
            &h,
            ExecSpec::new("printf 'ab\\342\\202\\254cd'").max_output_bytes(4),
        )
        .await
        .expect("exec");
    assert_eq!((r.stdout.as_str(), r.truncated), ("ab", true), "{r:?}");
    assert_eq!(r.exit_code, Some(0));
    let r = p
        .exec(
            &h,
            ExecSpec::new("printf 12345; printf 67890 >&2; head -c 1000000 /dev/zero")
                .max_output_bytes(7),
        )
        .await
        .expect("exec");
    assert!(r.truncated);
    assert_eq!(r.stdout.len() + r.stderr.len(), 7, "{r:?}");
    let r = p
        .exec(
            &h,
            ExecSpec::new("printf 'ab\\342\\202\\254'").max_output_bytes(5),
        )
        .await
        .expect("exec");
    assert_eq!((r.stdout.as_str(), r.truncated), ("ab€", false));
    p.destroy(&h).await.expect("destroy");
}

/// suspend keeps files (and, with `suspend_keeps_processes`, background processes);
/// exec on a suspended sandbox resumes it; suspend twice is fine; resume says Resumed.
pub async fn sb_suspend_resume(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("suspend").await;
    p.write_file(&h, "/workspace/keep.txt", b"kept")
        .await
        .expect("write");
    sh(p, &h, "nohup sleep 300 >/dev/null 2>&1 & echo $! > bg").await;
    p.suspend(&h).await.expect("suspend");
    p.suspend(&h).await.expect("suspend again");
    let r = sh(p, &h, "cat keep.txt").await;
    assert_eq!(r.stdout, "kept", "exec on a suspended sandbox resumes it");
    if p.capabilities().suspend_keeps_processes {
        let bg = sh(p, &h, "cat bg").await.stdout;
        assert_eq!(alive(p, &h, "bg").await, bg, "background process kept");
    }
    p.suspend(&h).await.expect("suspend");
    assert_eq!(p.resume(&h).await.expect("resume"), ResumeOutcome::Resumed);
    assert_eq!(
        p.resume(&h).await.expect("resume again"),
        ResumeOutcome::Resumed
    );
    let c = p
        .read_file(&h, "/workspace/keep.txt", 100)
        .await
        .expect("read");
    assert_eq!(c.map(|c| c.data), Some(b"kept".to_vec()));
    p.destroy(&h).await.expect("destroy");
}

/// After destroy: resume is Gone, operations are Gone errors, destroy again is fine.
pub async fn sb_destroy_gone(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("gone").await;
    p.destroy(&h).await.expect("destroy");
    assert_eq!(p.resume(&h).await.expect("resume"), ResumeOutcome::Gone);
    let e = p.exec(&h, ExecSpec::new("true")).await.expect_err("exec");
    assert!(e.is_gone(), "{e}");
    let e = p.read_file(&h, "/workspace/a", 1).await.expect_err("read");
    assert!(e.is_gone(), "{e}");
    let e = p
        .write_file(&h, "/workspace/a", b"x")
        .await
        .expect_err("write");
    assert!(e.is_gone(), "{e}");
    let e = w.second.stat(&h, "/workspace/a").await.expect_err("stat");
    assert!(e.is_gone(), "{e}");
    p.destroy(&h).await.expect("destroy again");
    p.suspend(&h).await.expect("suspend of a missing one");
}

/// create replaces a sandbox of the same name; destroy_by_name removes it.
pub async fn sb_same_name(w: &SandboxWorld) {
    let p = &*w.provider;
    let a = w.create("same").await;
    p.write_file(&a, "/workspace/old", b"1")
        .await
        .expect("write");
    let b = w.create("same").await;
    assert_ne!(a, b);
    assert_eq!(p.resume(&a).await.expect("resume old"), ResumeOutcome::Gone);
    assert_eq!(p.stat(&b, "/workspace/old").await.expect("stat"), None);
    w.second
        .destroy_by_name(&w.name("same"))
        .await
        .expect("destroy by name");
    assert_eq!(p.resume(&b).await.expect("resume new"), ResumeOutcome::Gone);
}

/// kill_tagged from a second instance ends only that tag's commands; kill_all the rest.
pub async fn sb_kill_tagged(w: &SandboxWorld) {
    let p = &*w.provider;
    let h = w.create("tags").await;
    let long = |tag: &str, file: &str| {
        ExecSpec::new(format!("sleep 300 & echo $! > {file}; wait"))
            .tag(tag)
            .timeout(Duration::from_secs(120))
    };
    let a = p.exec(&h, long("holder-a", "a.pid"));
    let b = p.exec(&h, long("holder-b", "b.pid"));
    let control = async {
        wait_for(p, &h, "/workspace/a.pid").await;
        wait_for(p, &h, "/workspace/b.pid").await;
        let a_pid = sh(p, &h, "cat a.pid").await.stdout;
        w.second
            .kill_tagged(&h, &["holder-a".to_owned()])
            .await
            .expect("kill_tagged");
        assert_eq!(alive(p, &h, "a.pid").await, "", "tag a killed");
        assert!(!a_pid.is_empty());
        let b_pid = sh(p, &h, "cat b.pid").await.stdout;
        assert_eq!(alive(p, &h, "b.pid").await, b_pid, "tag b untouched");
        w.second.kill_all(&h).await.expect("kill_all");
        assert_eq!(alive(p, &h, "b.pid").await, "", "kill_all");
    };
    let (ra, rb, ()) = tokio::join!(a, b, control);
    let (ra, rb) = (ra.expect("exec a"), rb.expect("exec b"));
    assert!(!ra.timed_out && !rb.timed_out, "{ra:?} {rb:?}");
    let e = p
        .kill_tagged(&h, &["bad tag".to_owned()])
        .await
        .expect_err("bad tag");
    assert!(is_invalid(&e, None), "{e}");
    let e = p
        .exec(&h, ExecSpec::new("true").tag("bad/tag"))
        .await
        .expect_err("bad tag");
    assert!(is_invalid(&e, None), "{e}");
    p.destroy(&h).await.expect("destroy");
}

/// `kill_tagged` and `kill_all` from another instance reach what a running tagged
/// command started after clearing its environment and leaving its session (`env -i
/// setsid`, a double fork: no parent chain, no variables), where the provider says it
/// can ([`SandboxCapabilities::kill_reaches_escapes`](exec_world::sandbox::SandboxCapabilities)).
pub async fn sb_kill_reaches_double_forks(w: &SandboxWorld) {
    let p = &*w.provider;
    if !p.capabilities().kill_reaches_escapes {
        return crate::skip("sb_kill_reaches_double_forks", "kill_reaches_escapes");
    }
    let h = w.create("dfork").await;
    let start = |tag: &'static str, file: &'static str| {
        p.exec(
            &h,
            ExecSpec::new(format!(
                "env -i /usr/bin/setsid /bin/sh -c '/bin/sleep 300 & echo $! > {file}' </dev/null >/dev/null 2>&1 & \
                 /bin/sleep 300"
            ))
            .tag(tag)
            .timeout(Duration::from_secs(120)),
        )
    };
    let a = start("dfork-a", "a.pid");
    let b = start("dfork-b", "b.pid");
    let control = async {
        wait_for(p, &h, "/workspace/a.pid").await;
        wait_for(p, &h, "/workspace/b.pid").await;
        let a_pid = alive(p, &h, "a.pid").await;
        assert!(!a_pid.is_empty(), "the escapee runs");
        w.second
            .kill_tagged(&h, &["dfork-a".to_owned()])
            .await
            .expect("kill_tagged");
        assert_eq!(
            alive(p, &h, "a.pid").await,
            "",
            "kill_tagged reached the double fork"
        );
        let b_pid = alive(p, &h, "b.pid").await;
        assert!(!b_pid.is_empty(), "another tag's escapee is untouched");
        w.second.kill_all(&h).await.expect("kill_all");
        assert_eq!(
            alive(p, &h, "b.pid").await,
            "",
            "kill_all reached the double fork"
        );
    };
    let (ra, rb, ()) = tokio::join!(a, b, control);
    let (ra, rb) = (ra.expect("exec a"), rb.expect("exec b"));
    assert!(!ra.timed_out && !rb.timed_out, "{ra:?} {rb:?}");
    p.destroy(&h).await.expect("destroy");
}

/// `kill_tagged` and `kill_all` from another instance still reach an `env -i setsid`
/// double fork after the tagged command that started it has ended (nothing tagged is
/// left to find it by: only its spawn's cgroup, labeled with the exec's group), where
/// the provider says it can; another tag's escapee and another sandbox's are untouched.
pub async fn sb_kill_reaches_escapes_after_their_command_ended(w: &SandboxWorld) {
    let p = &*w.provider;
    if !p.capabilities().kill_reaches_escapes {
        return crate::skip(
            "sb_kill_reaches_escapes_after_their_command_ended",
            "kill_reaches_escapes",
        );
    }
    let h = w.create("ended-a").await;
    let other = w.create("ended-b").await;
    let leave = |h: &SandboxHandle, tag: &'static str, file: &'static str| {
        let h = h.clone();
        async move {
            let r = p
                .exec(
                    &h,
                    ExecSpec::new(format!(
                        "env -i /usr/bin/setsid /bin/sh -c '/bin/sleep 300 & echo $! > {file}' </dev/null >/dev/null 2>&1 &"
                    ))
                    .tag(tag)
                    .timeout(Duration::from_secs(60)),
                )
                .await
                .expect("exec");
            assert_eq!(r.exit_code, Some(0), "{r:?}");
            wait_for(p, &h, &format!("/workspace/{file}")).await;
            let pid = alive(p, &h, file).await;
            assert!(!pid.trim().is_empty(), "the escapee of {tag} runs");
        }
    };
    leave(&h, "left-a", "a.pid").await;
    leave(&h, "left-b", "b.pid").await;
    leave(&other, "left-a", "a.pid").await;
    w.second
        .kill_tagged(&h, &["left-a".to_owned()])
        .await
        .expect("kill_tagged");
    assert_eq!(
        alive(p, &h, "a.pid").await,
        "",
        "kill_tagged reached the escapee of an ended command"
    );
    assert!(
        !alive(p, &h, "b.pid").await.trim().is_empty(),
        "another tag's escapee is untouched"
    );
    assert!(
        !alive(p, &other, "a.pid").await.trim().is_empty(),
        "the same tag in another sandbox is untouched"
    );
    w.second.kill_all(&h).await.expect("kill_all");
    assert_eq!(
        alive(p, &h, "b.pid").await,
        "",
        "kill_all reached the escapee of an ended command"
    );
    assert!(
        !alive(p, &other, "a.pid").await.trim().is_empty(),
        "kill_all of one sandbox leaves another's"
    );
    p.destroy(&h).await.expect("destroy");
    p.destroy(&other).await.expect("destroy");
}

/// Parallel execs and file operations from two instances on one sandbox.
pub async fn sb_concurrent(w: &SandboxWorld) {
    let h = w.create("concurrent").await;
    assert!(w.provider.capabilities().concurrent_exec);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let p = if i % 2 == 0 {
            w.provider.clone()
        } else {
            w.second.clone()
        };
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let path = format!("/workspace/c{i}.txt");
            p.write_file(&h, &path, format!("v{i}").as_bytes())
                .await
                .expect("write");
            let r = p
                .exec(&h, ExecSpec::new(format!("cat c{i}.txt; echo -n {i} >&2")))
                .await
                .expect("exec");
            assert_eq!((r.stdout, r.stderr), (format!("v{i}"), i.to_string()));
            let c = p.read_file(&h, &path, 10).await.expect("read");
            assert_eq!(c.map(|c| c.data), Some(format!("v{i}").into_bytes()));
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    w.provider.destroy(&h).await.expect("destroy");
}

/// Invalid names, limits and hosts are refused before anything is created.
pub async fn sb_invalid_create(w: &SandboxWorld) {
    let p = &*w.provider;
    for bad in ["", "-x", "a/b", &"a".repeat(102)] {
        let e = p.create(CreateSpec::new(bad)).await.expect_err("bad name");
        assert!(is_invalid(&e, Some("create")), "{e}");
    }
    let limits = SandboxLimits {
        memory_mb: 0,
        ..SandboxLimits::default()
    };
    let e = p
        .create(CreateSpec::new(w.name("lim")).limits(limits))
        .await
        .expect_err("bad limits");
    assert!(e.to_string().contains("positive"), "{e}");
    let limits = SandboxLimits {
        egress: Egress::Allowlist(vec!["not a host".into()]),
        ..SandboxLimits::default()
    };
    let e = p
        .create(CreateSpec::new(w.name("host")).limits(limits))
        .await
        .expect_err("bad host");
    assert!(e.to_string().contains("not a host"), "{e}");
}

/// The sandbox tests, by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandbox_test_names {
    ($cb:ident!($($pre:tt)*)) => {
        $crate::$cb! { $($pre)* [
            sb_exec_basics,
            sb_files,
            sb_read_refuses_fifos,
            sb_special_files_never_block,
            sb_writes_stay_in_the_root,
            sb_writes_stay_in_the_root_while_links_swap,
            sb_timeout_kills_tree,
            sb_cancel,
            sb_output_cap,
            sb_suspend_resume,
            sb_destroy_gone,
            sb_same_name,
            sb_kill_tagged,
            sb_kill_reaches_double_forks,
            sb_kill_reaches_escapes_after_their_command_ended,
            sb_concurrent,
            sb_invalid_create,
            sb_fork,
            sb_exec_start_attach,
            sb_exec_other_replica,
            sb_exec_attach_resumes,
            sb_exec_id_never_twice,
            sb_exec_timeout_unattached,
            sb_exec_survives_suspend,
        ] }
    };
}

/// Declares one `#[tokio::test]` per sandbox test. Internal.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandbox_tests {
    ($make:path, [$($name:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let world = $make().await;
                $crate::sandbox::$name(&world).await;
            }
        )*
    };
}

/// One `#[tokio::test]` per sandbox conformance test; `$make` is an
/// `async fn() -> SandboxWorld`.
#[macro_export]
macro_rules! sandbox_conformance_tests {
    ($make:path) => {
        $crate::__sandbox_test_names!(__sandbox_tests!($make,));
    };
}

/// A sandbox test as a function pointer.
pub type SandboxTestFn = for<'a> fn(&'a SandboxWorld) -> futures::future::BoxFuture<'a, ()>;

/// Builds the `(name, fn)` list. Internal.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandbox_list {
    ([$($name:ident),* $(,)?]) => {{
        $(
            fn $name(w: &$crate::sandbox::SandboxWorld) -> ::futures::future::BoxFuture<'_, ()> {
                Box::pin($crate::sandbox::$name(w))
            }
        )*
        vec![$((stringify!($name), $name as $crate::sandbox::SandboxTestFn)),*]
    }};
}

/// The sandbox tests as `(name, fn)`, for runners that share one world (live E2B).
pub fn sandbox_tests() -> Vec<(&'static str, SandboxTestFn)> {
    crate::__sandbox_test_names!(__sandbox_list!())
}
