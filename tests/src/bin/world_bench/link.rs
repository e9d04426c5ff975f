//! A userspace network link for the latency mode: a TCP proxy on 127.0.0.1 in front of the
//! emulator that delivers every byte, in order, half a round trip after it was sent (after
//! its serialisation at the link's bandwidth, when one is set), in each direction.
//!
//! What it charges, as a real path would: a new connection's first bytes reach the server
//! no sooner than one round trip after the connect (the TCP handshake) plus half a round
//! trip; every request, response and streamed chunk (HTTP/2 `WINDOW_UPDATE`s included)
//! pays half a round trip each way; with a bandwidth, each direction is a FIFO link that
//! serialises bytes at that rate (a token bucket with no burst), then delays them. The
//! bytes a direction holds in flight are bounded ([`IN_FLIGHT`], a large TCP receive window),
//! so a sender is slowed by a receiver that does not read, as on a real link.
//!
//! Used instead of `netem` (the kernel here has no `sch_netem`); routing is unaffected, as
//! the emulator routes envd requests by the `E2b-Sandbox-Id` header, not by address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::child::AnyError;

/// Bytes one direction of one connection holds in flight (read, not yet delivered).
pub const IN_FLIGHT: usize = 16 << 20;

/// What the link does to the traffic.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Round trip added (half each way).
    pub rtt: Duration,
    /// Bytes per second in each direction; `None`: unlimited.
    pub bytes_per_sec: Option<f64>,
}

/// A running link: connect to [`Link::addr`] to reach the upstream through it.
pub struct Link {
    /// Where clients connect (`127.0.0.1:N`).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Listens on 127.0.0.1 and forwards every connection to `upstream` through `shape`.
    pub async fn start(upstream: SocketAddr, shape: Shape) -> Result<Link, AnyError> {
        if !upstream.ip().is_loopback() {
            return Err(format!("the link forwards to loopback only, not {upstream}").into());
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let accepted = Instant::now();
                tokio::spawn(async move {
                    if let Err(e) = carry(client, upstream, shape, accepted).await {
                        eprintln!("world-bench link: {e}");
                    }
                });
            }
        });
        Ok(Link { addr, task })
    }

    /// `http://127.0.0.1:N`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: both directions until both are done.
async fn carry(
    client: TcpStream,
    upstream: SocketAddr,
    shape: Shape,
    accepted: Instant,
) -> Result<(), AnyError> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    // The handshake: the client's first bytes leave one round trip after its connect.
    let up = direction(cr, sw, shape, accepted + shape.rtt);
    let down = direction(sr, cw, shape, accepted);
    let (a, b) = tokio::join!(up, down);
    a.and(b)
}

/// One chunk on the wire: its bytes (empty: end of stream) and when it arrives.
struct Chunk {
    data: Vec<u8>,
    at: Instant,
}

/// Reads `from`, delivers to `to` after the link's delay, in order; no byte leaves before
/// `not_before`.
async fn direction<R, W>(
    mut from: R,
    mut to: W,
    shape: Shape,
    not_before: Instant,
) -> Result<(), AnyError>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Chunk>();
    let window = Arc::new(Semaphore::new(IN_FLIGHT));
    let w = window.clone();
    let reader = tokio::spawn(async move {
        // When the link's last byte so far finishes serialising.
        let mut link_free = not_before;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // A read error ends this direction as an end of stream would.
            let n: usize = from.read(&mut buf).await.unwrap_or_default();
            if n > 0 {
                // A full window holds the sender back until the receiver has read.
                let Ok(permit) = w.acquire_many(n as u32).await else {
                    return;
                };
                permit.forget();
            }
            let start = link_free.max(Instant::now());
            let serial = match shape.bytes_per_sec {
                Some(bps) if n > 0 => Duration::from_secs_f64(n as f64 / bps),
                _ => Duration::ZERO,
            };
            link_free = start + serial;
            let at = link_free + shape.rtt / 2;
            if n == 0 {
                let _ = tx.send(Chunk {
                    data: Vec::new(),
                    at,
                });
                return;
            }
            if tx
                .send(Chunk {
                    data: buf[..n].to_vec(),
                    at,
                })
                .is_err()
            {
                return;
            }
        }
    });
    let mut result = Ok(());
    while let Some(c) = rx.recv().await {
        tokio::time::sleep_until(c.at).await;
        if c.data.is_empty() {
            let _ = to.shutdown().await;
            break;
        }
        if let Err(e) = to.write_all(&c.data).await {
            // The peer went away: stop reading this side too.
            if e.kind() != std::io::ErrorKind::BrokenPipe
                && e.kind() != std::io::ErrorKind::ConnectionReset
            {
                result = Err(e.into());
            }
            break;
        }
        window.add_permits(c.data.len());
    }
    reader.abort();
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// An echo server on loopback: every byte back, then EOF after the client's EOF.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn bytes_cross_in_order_and_whole_and_no_sooner_than_the_round_trips() {
        let shape = Shape {
            rtt: Duration::from_millis(20),
            bytes_per_sec: Some(50e6),
        };
        let link = Link::start(echo().await, shape).await.unwrap();
        let t0 = Instant::now();
        let s = TcpStream::connect(link.addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let data = sent.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got == sent, "{} bytes back of {}", got.len(), sent.len());
        // The link's floor (the handshake, then a round trip, and 3 MB each way at
        // 50 MB/s, both directions overlapping): a lower bound the link sets, not a speed.
        assert!(
            t0.elapsed() >= Duration::from_millis(40 + 60),
            "{:?}",
            t0.elapsed()
        );
    }

    #[tokio::test]
    async fn only_loopback_upstreams() {
        let shape = Shape {
            rtt: Duration::ZERO,
            bytes_per_sec: None,
        };
        let err = Link::start("192.0.2.1:80".parse().unwrap(), shape)
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("loopback only"), "{err}");
    }
}
