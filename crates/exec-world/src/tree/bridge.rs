//! Byte channels between the blocking tar code (a worker thread) and the async process
//! streams: a `Write` that sends chunks, a `Read` that receives them. Bounded, so memory
//! stays constant whatever the tree size.

use std::io::{Read, Write};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

/// Chunk size and channel depth: at most `DEPTH * CHUNK` bytes in flight.
pub(crate) const CHUNK: usize = 256 << 10;
pub(crate) const DEPTH: usize = 8;

/// A `Write` whose bytes arrive, in chunks, at the paired receiver.
pub(crate) struct ChanWriter {
    tx: mpsc::Sender<Bytes>,
    buf: BytesMut,
}

impl ChanWriter {
    pub(crate) fn new() -> (ChanWriter, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(DEPTH);
        (
            ChanWriter {
                tx,
                buf: BytesMut::with_capacity(CHUNK),
            },
            rx,
        )
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "receiver gone"))
    }
}

impl Write for ChanWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

impl Drop for ChanWriter {
    fn drop(&mut self) {
        let _ = self.send();
    }
}

/// A `Read` over chunks sent by an async task; an `Err` chunk fails the read, the
/// channel's end is EOF.
pub(crate) struct ChanReader {
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
    cur: Bytes,
}

impl ChanReader {
    pub(crate) fn new() -> (mpsc::Sender<std::io::Result<Bytes>>, ChanReader) {
        let (tx, rx) = mpsc::channel(DEPTH);
        (
            tx,
            ChanReader {
                rx,
                cur: Bytes::new(),
            },
        )
    }
}

impl Read for ChanReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}
