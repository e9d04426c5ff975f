//! An adapter's first piped spawn in one round trip: one root `Start` places the spawn
//! helper, probes the cgroup, looks the acting user up and then becomes the spawn itself
//! (`exec` of the native helper, same pid), where the usual path takes a setup command,
//! a user lookup and then the spawn's `Start` one after another.
//!
//! When the adapter was not told its user, envd's default user is found without a
//! request of its own: a second `Start`, sent at the same moment without a user (so envd
//! runs it as its default user), is a `sleep` carrying a random nonce in its environment;
//! the boot script, as root, finds the one process with that nonce whose parent is envd
//! (its own parent) and whose ids are all one uid, takes that uid and kills it. Two such
//! processes, or none after 800 looks 5 ms apart, and the boot declines; the client also
//! checks that the pid the script found is the one envd reported for that `Start`. The
//! boot places the helper first, so the probe has usually started by its first look.
//!
//! The boot prints a frame on stdout before it becomes the spawn: what it placed and
//! found (`dir`, `native`, `cgroup` lines as the setup prints them; `pw`, `path`,
//! `groups` for the user; `who` for the default user's pid), then `EXEC-WORLD-BOOT go`
//! or `EXEC-WORLD-BOOT decline`. After `go` the stream is the spawn's; after `decline`
//! (no native helper, no cgroup per spawn, the user not found) the script ends without
//! running anything and the usual path follows, with the placement the frame reported.

use std::sync::Arc;
use std::time::Duration;

use e2b_core::proto::process::{DataEvent, ProcessEvent};
use e2b_core::proto::process::{ProcessSelector, Signal as EnvdSignal};
use e2b_core::{ProcessStream, StartProcess};
use exec_world::Error;
use futures::StreamExt;

use crate::lease::LeaseHold;
use crate::session::{Launch, Session};
use crate::shell::{parse_setup, user_from};
use crate::world::{BootAsk, BootFail, Booted, WorldShared};

/// The boot script, run as root: `$1` the helper directory's name, `$2` the `sh`
/// helper, `$3` the acting user (empty: envd's default user, found by the nonce `$6`),
/// `$4` the spawn's cgroup name (the placement's cgroup probe, kept for the spawn to
/// reuse), `$5` the native helper as base64, `$7` the backstop in seconds, `$8` the host
/// lease's bound in seconds (both may be empty), then the helper's `MODE TERM` and the
/// rest of its positional arguments after `HOME SHELL USER PATH` (which the boot fills
/// in from the lookup).
const BOOT_SH: &str = concat!(
    crate::shell::place_fn!(),
    r#"um=$(umask)
exec 3>&2 2>/dev/null
decline() { printf 'EXEC-WORLD-BOOT decline\n'; exit 0; }
# The passwd entry whose field $1 (1 name, 3 uid) is $2, from /etc/passwd without a
# process (then the groups come from /etc/group too); else getent (other databases).
files=
pw_of() {
  [ -r /etc/passwd ] || return 1
  while IFS=: read -r n x u g c h sh; do
    case $1 in 1) [ "$n" = "$2" ] ;; *) [ "$u" = "$2" ] ;; esac || continue
    e=$n:$x:$u:$g:$c:$h:$sh; files=1; return 0
  done < /etc/passwd
  return 1
}
place "$1" "$2" "" "$4" "$5" keep || decline
[ -n "$native_ok" ] && [ -n "$cg_ok" ] || decline
name=$3
if [ -z "$name" ]; then
  [ -n "$6" ] || decline
  who=; wuid=; i=0
  while [ -z "$who" ]; do
    for f in $(timeout -s KILL 2 grep -lzxF -- "EXEC_WORLD_WHO=$6" /proc/[0-9]*/environ); do
      p=${f#/proc/}; p=${p%/environ}
      [ "$p" != "$$" ] || continue
      pp=; ua=; ub=; uc=; ue=
      while read -r k a b c e _; do
        case $k in PPid:) pp=$a ;; Uid:) ua=$a; ub=$b; uc=$c; ue=$e ;; esac
      done < "/proc/$p/status"
      [ -n "$ua" ] && [ "$pp" = "$PPID" ] && [ "$ua" = "$ub" ] && [ "$ua" = "$uc" ] &&
        [ "$ua" = "$ue" ] || continue
      [ -z "$who" ] || decline
      who=$p; wuid=$ua
    done
    if [ -z "$who" ]; then
      if [ "$i" = 0 ]; then
        # Nothing yet: a grep without -z (not GNU) would never find it.
        [ "$(printf 'a\0' | grep -zxF a | tr -d '\0')" = a ] || decline
      fi
      i=$((i + 1)); [ "$i" -lt 800 ] || decline
      sleep 0.005
    fi
  done
  kill -KILL "$who"
  printf 'who %s\n' "$who"
  pw_of 3 "$wuid" || e=$(getent passwd "$wuid") || decline
  name=${e%%:*}
else
  pw_of 1 "$name" || e=$(getent passwd "$name") || decline
fi
case $e in *:*:*:*:*:*:*) ;; *) decline ;; esac
IFS=: read -r _ _ pu pg _ ph psh <<PASSWD
$e
PASSWD
case $pu in ''|*[!0-9]*) decline ;; esac
case $pg in ''|*[!0-9]*) decline ;; esac
[ -n "$ph" ] || decline
[ -n "$psh" ] || psh=/bin/sh
gs=
if [ -n "$files" ]; then
  gs=$pg
  while IFS=: read -r gn _ gi gm; do
    case ",$gm," in *",$name,"*) [ "$gi" = "$pg" ] || gs=$gs,$gi ;; esac
  done < /etc/group
else
  for g in $(id -G -- "$name"); do gs=${gs:+$gs,}$g; done
fi
case $gs in ''|*[!0-9,]*) gs=$pg ;; esac
path=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
printf 'pw %s\npath %s\ngroups %s\n' "$e" "$path" "$gs"
if [ "$pu" = 0 ]; then uid=; gid=; groups=; else uid=$pu; gid=$pg; groups=$gs; fi
cg=$4; ka=$7; ls=$8
shift 8
mode=$1; term=$2
shift 2
set -- "$mode" "$term" "$ph" "$psh" "$name" "$path" "$@"
set -- --root "$mnt" "$cg" "$uid" "$gid" "$groups" "$@"
[ -z "$ls" ] || set -- --lease "$d/lease" "$ls" "$@"
[ -z "$ka" ] || set -- --kill-after "$ka" "$@"
umask "$um"
exec 2>&3 3>&-
printf 'EXEC-WORLD-BOOT go\n'
exec "$d/spawn" "$@""#
);

/// The line that ends the frame when the boot became the spawn.
const GO: &[u8] = b"EXEC-WORLD-BOOT go\n";
/// The line that ends the frame when the boot ran nothing.
const DECLINE: &[u8] = b"EXEC-WORLD-BOOT decline\n";
/// Most bytes a frame may take (a passwd entry, `PATH`, a few short lines).
const FRAME_MAX: usize = 64 << 10;
/// The variable that carries the nonce of the default user's `sleep`.
const WHO_VAR: &str = "EXEC_WORLD_WHO";
/// How long the default user's `sleep` lives at most (the boot looks for it for 4 s or
/// more and kills it once found; the client kills it when the boot did not; envd ends
/// it at this process timeout otherwise).
const WHO_WAIT: Duration = Duration::from_secs(15);

/// The spawn's stream when the boot became it; `None` when the spawn does not qualify
/// (terminal, durable, no program yet, no native helper, the setup known) or
/// the boot declined: the caller takes the usual path.
pub(crate) async fn first_spawn(
    world: &Arc<WorldShared>,
    session: &Session,
    launch: &Launch,
) -> Result<Option<(ProcessStream, Option<LeaseHold>)>, Error> {
    if launch.pty.is_some() || launch.durable.is_some() || launch.wrap.program.is_empty() {
        return Ok(None);
    }
    let cgroup = world.take_cgroup(false, session.group());
    match world.boot(|ask| run(world, launch, ask, &cgroup)).await {
        Ok(None) => {
            world.give_back_cgroup(false, session.group().map(str::to_owned), cgroup);
            Ok(None)
        }
        other => {
            session.set_cgroup_name(cgroup);
            other
        }
    }
}

/// The boot's two `Start`s and its frame.
async fn run(
    world: &Arc<WorldShared>,
    launch: &Launch,
    ask: BootAsk,
    cgroup: &str,
) -> Result<Booted<(ProcessStream, Option<LeaseHold>)>, BootFail> {
    let nonce = match ask.user {
        Some(_) => String::new(),
        None => e2b_core::trusted_shell::random_suffix(),
    };
    let mut user_args = launch.wrap.positional();
    let rest = user_args.split_off(6.min(user_args.len()));
    user_args.truncate(2);
    let mut argv: Vec<String> = vec!["-c".into(), BOOT_SH.into(), "sh".into()];
    argv.extend([
        ask.dir,
        crate::wrapper::helper_sh().to_owned(),
        ask.user.clone().unwrap_or_default(),
        cgroup.to_owned(),
        crate::native::helper_base64().to_owned(),
        nonce.clone(),
        crate::session::kill_after_secs(launch.kill_after).unwrap_or_default(),
        launch
            .lease
            .as_ref()
            .map(|l| l.secs().to_string())
            .unwrap_or_default(),
    ]);
    argv.extend(user_args);
    argv.extend(rest);
    let mut spec = StartProcess::new("/bin/sh")
        .args(argv)
        .stdin(launch.stdin)
        .user("root")
        .cwd(launch.cwd.clone());
    if let Some(t) = world.process_timeout {
        spec = spec.timeout(t);
    }
    let who = async {
        if nonce.is_empty() {
            return None;
        }
        let spec = StartProcess::new("/bin/sleep")
            .args(["10"])
            .env(WHO_VAR, nonce.clone())
            .cwd("/")
            .timeout(WHO_WAIT);
        Some(world.api.start_process(spec).await)
    };
    let (main, who) = tokio::join!(world.api.start_process(spec), who);
    let who_pid = match who {
        Some(Ok(s)) => {
            let pid = s.pid();
            tokio::spawn(drain(s));
            Some(pid)
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "the default user's probe did not start");
            None
        }
        None => None,
    };
    // Unless the boot found and killed it, the probe is ended as soon as it is of no use.
    let mut probe = Probe(who_pid.map(|p| (world.clone(), p)));
    let what = || format!("starting {} in {}", launch.wrap.program, launch.cwd);
    let mut stream = main.map_err(|e| BootFail::Failed(e.into_world(what())))?;
    let pid = stream.pid();
    let failed = move |e: Error| async move {
        kill(world, pid).await;
        BootFail::Failed(e.with_op(what()))
    };
    let mut text: Vec<u8> = Vec::new();
    let mut held: Vec<Result<ProcessEvent, e2b_core::Error>> = Vec::new();
    let go = loop {
        match stream.next().await {
            Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b)))) => {
                text.extend_from_slice(&b);
                if let Some(at) = find(&text, GO) {
                    let after = text.split_off(at + GO.len());
                    if !after.is_empty() {
                        held.push(Ok(ProcessEvent::Data(DataEvent::Stdout(after))));
                    }
                    break true;
                }
                if find(&text, DECLINE).is_some() {
                    break false;
                }
                if text.len() > FRAME_MAX {
                    return Err(failed(Error::other("the boot's frame is too long")).await);
                }
            }
            Some(Ok(ProcessEvent::End(_))) => break false,
            Some(Ok(ev)) => held.push(Ok(ev)),
            Some(Err(e)) => return Err(failed(e.into_world("the boot's stream")).await),
            None => {
                return Err(failed(Error::other("the boot's stream ended without an end")).await);
            }
        }
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
    };
    let user = line("pw").and_then(|entry| {
        let name = entry.split(':').next()?;
        user_from(
            name,
            entry,
            line("path").unwrap_or_default(),
            line("groups"),
        )
        .ok()
    });
    let found = line("who").and_then(|p| p.parse::<u32>().ok());
    if found.is_some() && found == who_pid {
        probe.0 = None;
    }
    if go && found.is_some() && found != who_pid {
        // The process the boot took for the default user's is not the one envd started.
        return Err(failed(Error::other(
            "the boot found another process than the default user's probe",
        ))
        .await);
    }
    let Some(placed) = parse_setup(&text) else {
        if go {
            return Err(failed(Error::other("the boot did not report its placement")).await);
        }
        return Err(BootFail::Declined);
    };
    if !go {
        // Nothing runs: read the script's end, so the connection goes back to the pool.
        tokio::spawn(drain(stream));
        return Ok(Booted {
            placed,
            user,
            value: None,
        });
    }
    // The script passed `--lease $d/lease SECS`: the renewals of that file start now.
    let hold = launch
        .lease
        .as_ref()
        .map(|l| l.hold(&world.api, &placed.dir).0);
    let events = futures::stream::iter(held).chain(stream);
    Ok(Booted {
        placed,
        user,
        value: Some((ProcessStream::new(pid, Box::pin(events)), hold)),
    })
}

/// The default user's probe while it may still run: dropped, it is killed (envd's
/// SIGKILL, off the critical path), so a boot that failed or declined leaves no `sleep`.
struct Probe(Option<(Arc<WorldShared>, u32)>);

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some((world, pid)) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move { kill(&world, pid).await });
        }
    }
}

/// Where `needle` starts in `hay`, if it does.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads a stream to its end (bounded by its process's own timeout), so its connection
/// is reused.
async fn drain(mut stream: ProcessStream) {
    while let Some(ev) = stream.next().await {
        if matches!(ev, Ok(ProcessEvent::End(_)) | Err(_)) {
            break;
        }
    }
}

/// Ends a process of the boot (envd's SIGKILL): the script, which is the spawn's
/// leader once it went, or the probe.
async fn kill(world: &WorldShared, pid: u32) {
    if let Err(e) = world
        .api
        .send_signal(ProcessSelector::Pid(pid), EnvdSignal::Sigkill)
        .await
        && !e.is_not_found()
    {
        tracing::warn!(pid, error = %e, "killing a process of a failed boot");
    }
}
