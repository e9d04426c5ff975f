//! Watch latency: fs-e2b watches a directory; one `perl` in the sandbox makes a file
//! every 20 ms, named after the wall-clock microsecond just before its `open`; the host
//! takes the time its `Created` event arrives. The emulator's sandboxes share the host's
//! clock, so the difference is the whole path: inotify in the sandbox, envd's watcher,
//! the stream, fs-e2b. (The name is taken before the `open`, so the figure is an upper
//! bound by the `open` itself.)

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use exec_world::{Fs as _, SpawnSpec, Subprocess as _, WatchEventKind, WatchOptions, WorldPath};
use fs_e2b::{E2bFs, E2bFsOptions};
use futures::StreamExt as _;
use subprocess_e2b::{E2bSubprocess, E2bSubprocessOptions};

use super::super::child::{self, AnyError, Outcome};
use super::super::opts::var;
use super::super::sandbox_env;
use super::ours::sandbox_sh;

const DIR: &str = "/home/user/wbwatch";

/// Makes `$ARGV[1]` files in `$ARGV[0]`, 20 ms apart, `e<i>-<microseconds>`.
const MAKER: &str = r#"my ($d, $n) = @ARGV;
for my $i (0 .. $n - 1) {
  my $t = int(Time::HiRes::time() * 1e6);
  open(my $f, '>', "$d/e$i-$t") or die "$d/e$i-$t: $!";
  close($f);
  Time::HiRes::sleep(0.02);
}
"#;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// fs-e2b on `op_watch`.
pub async fn run() -> Result<Outcome, AnyError> {
    let (client, sandbox, api) = sandbox_env::sandbox().await?;
    let r = async {
        let fs = E2bFs::new(api.clone(), E2bFsOptions::new("/home/user"))?;
        let proc = E2bSubprocess::new(api.clone(), E2bSubprocessOptions::new("/home/user"))?;
        sandbox_sh(&proc, "mkdir -p \"$1\"", &[DIR]).await?;
        let dir = WorldPath::new(DIR)?;
        let mut events = fs.watch(&dir, WatchOptions::default()).await?;
        // Untimed: the watch is live once a first file's event arrives.
        sandbox_sh(&proc, ": > \"$1/warm\"", &[DIR]).await?;
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(30), events.next())
                .await
                .map_err(|_| "watch: no event for the warm-up file in 30 s")?
                .ok_or("watch: the stream ended")??;
            if ev.path == "warm" {
                break;
            }
        }
        let n = var("WB_WATCH_N");
        child::mark("start");
        let t0 = std::time::Instant::now();
        let maker = proc.spawn(
            SpawnSpec::new("perl")
                .arg("-MTime::HiRes")
                .arg("-e")
                .arg(MAKER)
                .arg(DIR)
                .arg(n.to_string()),
        )?;
        let mut seen = HashSet::new();
        let mut samples = Vec::new();
        while (seen.len() as u64) < n {
            let ev = tokio::time::timeout(Duration::from_secs(30), events.next())
                .await
                .map_err(|_| format!("watch: {} of {n} events, then none for 30 s", seen.len()))?
                .ok_or("watch: the stream ended")??;
            let at = now_us();
            if ev.kind == WatchEventKind::Overflow {
                return Err("watch: an overflow event in the timed part".into());
            }
            if ev.kind != WatchEventKind::Created {
                continue;
            }
            let Some((_, t)) = ev.path.strip_prefix('e').and_then(|p| p.split_once('-')) else {
                continue;
            };
            let Ok(t) = t.parse::<u64>() else { continue };
            if seen.insert(ev.path.clone()) {
                samples.push(at.saturating_sub(t) as f64 / 1000.0);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let st = maker.wait().await?;
        child::mark("end");
        if !st.success() {
            return Err(format!("the file maker in the sandbox: {st:?}").into());
        }
        Ok(Outcome {
            samples_ms: samples,
            ops: n,
            secs,
            ..Outcome::default()
        })
    }
    .await;
    let _ = client.kill(sandbox.id()).await;
    r
}
