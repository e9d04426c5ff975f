//! Reading files as the acting user. A holder process of that user opens the file
//! (see [`crate::holder`]). A file of at most [`INLINE_READ_MAX`] bytes it copies to its
//! own output: the read is the one request that started it. A larger one it holds, and
//! envd (root) reads only through that open file, `/proc/PID/fd/FD`, never through a
//! path the user controls, at the speed of envd's `GET /files`. The holder opens the file with the user's rights (a root-only file is
//! `PermissionDenied`, a planted link reaches only what the user may read, a FIFO or
//! device is refused) and prints the size of the open file (`TooLarge` before a byte
//! moves). Once envd answered the download's headers (it has the file open), the
//! holder's stdin is closed: it lets go and its wrapper ends; that request fails when
//! the wrapper was gone, and the bytes are then discarded. Requests per read of a
//! larger file: the holder's start, the download, the stdin close.
//!
//! Memory stays bounded (the download is a stream; `read` keeps at most `max` bytes and
//! stops at `max + 1`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use exec_world::{ByteStream, Error, WorldPath};
use futures::StreamExt as _;

use crate::fs::Shared;
use crate::holder::{self, Holder};
use crate::scripts;

/// How long a failed read waits for its holder's status.
const STATUS_WAIT: Duration = Duration::from_secs(10);

/// Largest chunk `read_stream` yields.
pub(crate) const CHUNK: usize = 1 << 20;

/// Limits at or past this are sent as "no limit".
const NO_LIMIT_FROM: u64 = 1 << 62;

/// Most bytes of a `read_stream` download kept while its holder is being released.
const EARLY_MAX: usize = 16 << 20;

/// How long a `read_stream` holder may live (it is released once envd opened the file).
const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// Largest file a read holder answers on its own output (one request); a larger one
/// it holds for envd's download.
pub(crate) const INLINE_READ_MAX: u64 = 2 << 20;

/// What [`open`] got: the file's bytes from the holder itself, or a held file.
enum Opened {
    /// The holder answered inline: the bytes, and whether more came than were kept.
    Inline(Vec<u8>, bool),
    /// The size, envd's download of the holder's descriptor, and the holder, which
    /// [`release`] must let go before any byte is trusted.
    Held(u64, e2b_core::envd::Download, Holder),
}

/// Opens `abs` as the acting user with a read holder: a file of at most
/// [`INLINE_READ_MAX`] bytes comes back on the holder's output (at most `limit + 1`
/// bytes kept), a larger one is held and envd's download of its descriptor started.
async fn open(
    sh: &Shared,
    abs: &WorldPath,
    limit: Option<u64>,
    what: &'static str,
) -> Result<Opened, Error> {
    let limit_arg = match limit {
        Some(l) if l < NO_LIMIT_FROM => l.to_string(),
        _ => String::new(),
    };
    let lifetime = match limit {
        Some(_) => sh.command_timeout,
        None => STREAM_LIFETIME.max(sh.command_timeout),
    };
    let inline = INLINE_READ_MAX.to_string();
    let cap = limit
        .unwrap_or(u64::MAX)
        .min(INLINE_READ_MAX)
        .saturating_add(1);
    let started = holder::launch(
        sh,
        scripts::READ_HOLDER,
        holder::Mode::Split,
        "",
        &[abs.as_str(), &limit_arg, &inline],
        &[],
        lifetime,
        abs,
        what,
        usize::try_from(cap).unwrap_or(usize::MAX),
    )
    .await?;
    let held = match started {
        holder::Started::Held(held) => held,
        holder::Started::Failed(code, text) => {
            return Err(holder::failure(code, &text, abs, limit, what));
        }
        holder::Started::Ended { data, over } => return Ok(Opened::Inline(data, over)),
    };
    let size = held
        .rest
        .first()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            Error::other("the holder printed no size")
                .with_op(what)
                .with_path(abs)
        })?;
    let mut h = held.holder;
    match sh.api.download(&held.fd_path, sh.user()).await {
        Ok(dl) => Ok(Opened::Held(size, dl, h)),
        Err(e) => Err(why_not(&mut h, e.into_world(what).with_path(abs), abs, what).await),
    }
}

/// The error of a download that failed: `Interrupted` when the holder says it was
/// stopped or killed (its descriptor was gone, not the file), else `e`. The holder is
/// let go and its status read, bounded by [`STATUS_WAIT`].
async fn why_not(h: &mut Holder, e: Error, abs: &WorldPath, what: &str) -> Error {
    if h.release(abs, what).await.is_err() {
        return e;
    }
    match tokio::time::timeout(STATUS_WAIT, h.finish_ref(abs, what)).await {
        Ok(Ok(out)) if out.exit_code == scripts::EXIT_INTERRUPTED => Error::interrupted(what)
            .with_path(abs)
            .with_detail("the holder was stopped or killed before envd read its file")
            .with_source(e),
        _ => e,
    }
}

/// Lets the holder go once envd answered the download (it has the file open); fails
/// when the holder's wrapper was gone, so the download may not be the user's file.
async fn release(h: &mut Holder, abs: &WorldPath, what: &str) -> Result<(), Error> {
    h.release(abs, what).await.map_err(|e| {
        Error::other(format!(
            "the holder ended before its file was read: {}",
            e.detail().unwrap_or(e.kind().as_str())
        ))
        .with_op(what)
        .with_path(abs)
        .with_source(e)
    })
}

/// The whole file if it has at most `max` bytes: TooLarge from the size of the opened
/// file before any byte is sent, and again if it grew since (the download is cut).
pub(crate) async fn read_bounded(sh: &Shared, abs: &WorldPath, max: u64) -> Result<Bytes, Error> {
    if max <= INLINE_READ_MAX {
        let (limit, inline) = (max.to_string(), INLINE_READ_MAX.to_string());
        let args = [scripts::READ_USER_PL, abs.as_str(), &limit, &inline];
        if let Some(data) = on_warm(sh, &args, abs, Some(max), max, "read").await? {
            return Ok(data);
        }
    }
    let (size, mut dl, mut h) = match open(sh, abs, Some(max), "read").await? {
        Opened::Held(size, dl, h) => (size, dl, h),
        Opened::Inline(data, over) => {
            if over || data.len() as u64 > max {
                return Err(Error::too_large(abs, max).with_op("read"));
            }
            return Ok(Bytes::from(data));
        }
    };
    // The body is taken while the holder is released; it is returned only if the
    // release succeeded.
    let body = async {
        let mut buf = BytesMut::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
        while let Some(piece) = dl.next().await {
            let piece = piece.map_err(|e| e.into_world("read").with_path(abs))?;
            if (buf.len() as u64).saturating_add(piece.len() as u64) > max {
                return Err(Error::too_large(abs, max).with_op("read"));
            }
            buf.extend_from_slice(&piece);
        }
        Ok(buf.freeze())
    };
    let (released, body) = tokio::join!(release(&mut h, abs, "read"), body);
    released?;
    body
}

/// At most `max` bytes from the start of `abs`, in one request: a cat holder of the
/// acting user opens the file (a FIFO, socket or device is refused, never opened for
/// reading) and copies its head to its stdout; root never touches a path or a
/// descriptor of the user. A holder the user stops or kills is `Interrupted`.
pub(crate) async fn read_head(sh: &Shared, abs: &WorldPath, max: u64) -> Result<Bytes, Error> {
    const WHAT: &str = "read";
    if max <= INLINE_READ_MAX {
        let max_arg = max.to_string();
        let args = [scripts::CAT_USER_PL, abs.as_str(), &max_arg];
        if let Some(data) = on_warm(sh, &args, abs, None, max, WHAT).await? {
            return Ok(data);
        }
    }
    let [uid, gid, groups] = holder::who(sh).await?;
    let max_arg = max.to_string();
    let argv = [
        scripts::CAT_HOLDER,
        "split",
        &uid,
        &gid,
        &groups,
        "",
        abs.as_str(),
        &max_arg,
    ];
    let room = usize::try_from(max)
        .unwrap_or(usize::MAX)
        .saturating_add(1)
        .max(64 << 10);
    let out = e2b_core::trusted_shell::TrustedShell::new(sh.api.clone())
        .acting_user(Some("root".to_owned()))
        .env("LC_ALL", "C")
        .timeout(Some(sh.command_timeout))
        .max_output(room)
        .run(scripts::HOLDER_WRAPPER, &argv)
        .await
        .map_err(|e| e.into_world(WHAT).with_path(abs))?;
    if out.exit_code != 0 {
        return Err(holder::failure(out.exit_code, &out.stderr, abs, None, WHAT));
    }
    if out.truncated {
        return Err(
            Error::other("the holder printed more than it was asked for")
                .with_op(WHAT)
                .with_path(abs),
        );
    }
    Ok(Bytes::from(out.stdout))
}

/// A read of at most [`INLINE_READ_MAX`] bytes on the warm worker (`args` for
/// [`scripts::PERL_AS_USER`]: the perl program and its arguments), as the holder would
/// answer it inline: `None` when the worker was not used (or answered something a
/// holder would not: then the read is made the ordinary way; a read changes nothing).
async fn on_warm(
    sh: &Shared,
    args: &[&str],
    abs: &WorldPath,
    limit: Option<u64>,
    max: u64,
    what: &str,
) -> Result<Option<Bytes>, Error> {
    let Some(out) = sh.ctl.on_warm(scripts::PERL_AS_USER, args).await else {
        return Ok(None);
    };
    if out.exit_code != 0 {
        let cause = holder::strip_code(out.stderr);
        return Err(holder::failure(out.exit_code, &cause, abs, limit, what));
    }
    if !out.stderr.is_empty() || out.stdout.len() as u64 > max {
        return Ok(None);
    }
    Ok(Some(Bytes::from(out.stdout)))
}

/// Splits `b` into pieces of at most [`CHUNK`] bytes.
fn chunks(mut b: Bytes) -> Vec<Result<Bytes, Error>> {
    let mut parts = Vec::with_capacity(b.len() / CHUNK + 1);
    while b.len() > CHUNK {
        parts.push(Ok(b.split_to(CHUNK)));
    }
    if !b.is_empty() {
        parts.push(Ok(b));
    }
    parts
}

/// The file as a stream of chunks of at most [`CHUNK`] bytes.
pub(crate) async fn read_stream(sh: &Shared, abs: &WorldPath) -> Result<ByteStream, Error> {
    let (mut dl, mut h) = match open(sh, abs, None, "read_stream").await? {
        Opened::Held(_, dl, h) => (dl, h),
        Opened::Inline(data, over) => {
            if over {
                return Err(Error::other("the holder printed more than its file held")
                    .with_op("read_stream")
                    .with_path(abs));
            }
            return Ok(Box::pin(futures::stream::iter(chunks(Bytes::from(data)))));
        }
    };
    // The download is read (at most EARLY_MAX kept) while the holder is released: over
    // HTTP/2 both share one connection, and a download nobody reads fills its window, so
    // the release's answer could not come through. Nothing is yielded before it did.
    let mut early: Vec<Result<Bytes, Error>> = Vec::new();
    let mut kept = 0usize;
    let mut more = true;
    {
        let rel = release(&mut h, abs, "read_stream");
        tokio::pin!(rel);
        loop {
            tokio::select! {
                r = &mut rel => {
                    r?;
                    break;
                }
                piece = dl.next(), if more && kept < EARLY_MAX => match piece {
                    Some(Ok(b)) => {
                        kept += b.len();
                        early.extend(chunks(b));
                    }
                    Some(Err(e)) => {
                        early.push(Err(e.into_world("read_stream").with_path(abs)));
                        more = false;
                    }
                    None => more = false,
                },
            }
        }
    }
    let head = futures::stream::iter(early);
    let path = abs.clone();
    let s = futures::stream::unfold(more.then_some(dl), move |state| {
        let path = path.clone();
        async move {
            let mut dl = state?;
            match dl.next().await {
                Some(Ok(b)) => Some((futures::stream::iter(chunks(b)), Some(dl))),
                Some(Err(e)) => {
                    let e = e.into_world("read_stream").with_path(&path);
                    Some((futures::stream::iter(vec![Err(e)]), None))
                }
                None => None,
            }
        }
    })
    .flatten();
    Ok(Box::pin(head.chain(s)))
}
