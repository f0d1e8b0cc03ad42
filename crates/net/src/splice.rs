//! A tunnel's bytes from one socket to the other through a pipe with `splice(2)`: the kernel
//! moves them (no copy through user space), a pipe's worth at a time, and the caller counts
//! what the destination took. Readiness comes from tokio's reactor, so a waiting direction
//! holds no thread.

use rustix::pipe::{PipeFlags, SpliceFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::Interest;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The pipe's size asked for (the kernel may give less: `/proc/sys/fs/pipe-max-size`).
const PIPE_CAPACITY: usize = 1024 * 1024;

/// One direction's pipe; closed when dropped.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// A non-blocking pipe, as large as the kernel allows up to [`PIPE_CAPACITY`].
    pub(crate) fn new() -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A larger pipe moves more per call; the default (64 KiB) when the kernel refuses.
        let capacity = rustix::pipe::fcntl_setpipe_size(&write, PIPE_CAPACITY)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))
            .unwrap_or(4096)
            .max(4096);
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Moves bytes from `from` to `to` until `from` ends or either fails; `count` grows by
    /// what `to` took. Does not shut `to` down.
    pub(crate) async fn carry(
        &self,
        from: &mut OwnedReadHalf,
        to: &mut OwnedWriteHalf,
        count: &AtomicU64,
    ) {
        // Bytes in the pipe, not yet taken by `to`.
        let mut held = 0usize;
        let mut ended = false;
        loop {
            if held == 0 {
                if ended {
                    return;
                }
                if from.readable().await.is_err() {
                    return;
                }
                let source: &tokio::net::TcpStream = from.as_ref();
                let moved = source.try_io(Interest::READABLE, || {
                    splice(source.as_fd(), self.write.as_fd(), self.capacity)
                });
                match moved {
                    Ok(0) => ended = true,
                    Ok(n) => held = n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            } else {
                if to.writable().await.is_err() {
                    return;
                }
                let sink: &tokio::net::TcpStream = to.as_ref();
                let moved = sink.try_io(Interest::WRITABLE, || {
                    splice(self.read.as_fd(), sink.as_fd(), held)
                });
                match moved {
                    Ok(0) => return,
                    Ok(n) => {
                        held -= n;
                        count.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    Ok(rustix::pipe::splice(
        from,
        None,
        to,
        None,
        len,
        SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
    )?)
}
