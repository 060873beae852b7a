//! TCP: [`TcpListener`], [`TcpStream`] and a stream's two halves.
//!
//! **Blocking receive.** While one stream carries the traffic and nothing else is to be
//! done, the executor waits for that stream's next bytes in a blocking `recv` on it rather
//! than in `epoll_wait` (a ping-pong then costs what one over blocking sockets does, about
//! a microsecond less per side; [`crate::wait_stats`] counts these waits). What a user of
//! this module sees of it:
//! - the stream waited on has `O_NONBLOCK` cleared and a 10 ms `SO_RCVTIMEO`, and every
//!   operation here passes `MSG_DONTWAIT`: I/O of one's own on a stream's descriptor
//!   ([`AsFd`]) must pass it too;
//! - every other registered socket has `O_ASYNC` set while the executor blocks, so that
//!   its input interrupts the wait with `SIGURG` (directed at the executor's thread, whose
//!   handler is installed once per process); a blocking system call of one's own on that
//!   thread may then return `EINTR` (the standard library retries);
//! - when interrupts come often (several busy streams) the executor goes back to epoll
//!   alone for 100 ms at a time.

use std::io;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::rc::{Rc, Weak};

use crate::reactor::{Dir, IoState};

/// A source registered with the reactor of the executor that made it; deregistered from
/// that reactor when dropped (whichever executor is current then, if any).
pub(crate) struct Registered<S: mio::event::Source> {
    pub(crate) io: S,
    token: mio::Token,
    pub(crate) state: Rc<IoState>,
    core: Weak<crate::Core>,
}

impl<S: mio::event::Source> Registered<S> {
    /// `stream`: `io` is a stream, which the executor may wait on in a blocking receive
    /// (`reactor::blocking`).
    pub(crate) fn new(mut io: S, stream: bool) -> io::Result<Self>
    where
        S: AsRawFd,
    {
        let core = crate::core();
        let fd = io.as_raw_fd();
        let (token, state) = core.reactor.register(&mut io, fd, stream)?;
        Ok(Registered {
            io,
            token,
            state,
            core: Rc::downgrade(&core),
        })
    }
}

impl<S: mio::event::Source> Drop for Registered<S> {
    fn drop(&mut self) {
        // Once the executor is gone its poller is closed with it: nothing to undo.
        if let Some(core) = self.core.upgrade() {
            core.reactor.deregister(self.token, &mut self.io);
        }
    }
}

type Stream = Registered<mio::net::TcpStream>;

impl Stream {
    /// One non-blocking receive into `dst` (up to `len` bytes), after what a blocking
    /// receive stashed. `MSG_DONTWAIT`: the reactor may have made the socket blocking.
    /// A receive shorter than asked found the socket empty: the readiness is spent now,
    /// which spares the next read a system call that would only say `WouldBlock` (the
    /// poller reports the next edge). A zero-length read is the peer's end and stays
    /// ready. (A read from the stash spends it only where that is safe: see
    /// `IoState::unstash`.)
    fn recv_now(&self, dst: *mut u8, len: usize) -> io::Result<usize> {
        if let Some(r) = self.state.unstash(len, |b| {
            let n = b.len().min(len);
            // SAFETY: `dst` has room for `len` bytes (the caller's buffer).
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst, n) };
            n
        }) {
            return r;
        }
        // SAFETY: `recv(2)` writes at most `len` bytes to `dst`, which has room for them.
        let n = unsafe { libc::recv(self.io.as_raw_fd(), dst.cast(), len, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n > 0 {
            self.state.active();
            if n < len {
                self.state.clear(Dir::Read);
            }
        }
        Ok(n)
    }

    /// One non-blocking send (`MSG_NOSIGNAL`: a closed peer is an error, not a signal).
    fn send_now(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `send(2)` reads `buf.len()` bytes of `buf`.
        let n = unsafe {
            libc::send(
                self.io.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n > 0 {
            self.state.active();
        }
        Ok(n as usize)
    }

    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        std::future::poll_fn(|cx| {
            self.state
                .poll_io(Dir::Read, cx, || self.recv_now(buf.as_mut_ptr(), buf.len()))
        })
        .await
    }

    /// A write shorter than asked found the socket full: the readiness is spent now (as
    /// for a short receive, see `recv_now`).
    fn drained(&self, r: &io::Result<usize>, want: usize) {
        if let Ok(n) = r {
            if *n > 0 && *n < want {
                self.state.clear(Dir::Write);
            }
        }
    }

    /// Reads into the spare capacity of `buf` (at least one byte unless the peer closed).
    async fn read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        if buf.capacity() == buf.len() {
            buf.reserve(4096);
        }
        std::future::poll_fn(|cx| {
            self.state.poll_io(Dir::Read, cx, || {
                if let Some(n) = self.state.unstash_into(buf, buf.capacity()) {
                    return Ok(n);
                }
                let spare = buf.spare_capacity_mut();
                // (Filling the spare room with zeros first would cost a memset of up to
                // 64 KiB per read, more than the read itself.)
                let n = self.recv_now(spare.as_mut_ptr().cast(), spare.len())?;
                // SAFETY: `recv_now` wrote `n` bytes at the start of the spare capacity.
                unsafe { buf.set_len(buf.len() + n) };
                Ok(n)
            })
        })
        .await
    }

    async fn read_exact(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.read(&mut buf[done..]).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(done)
    }

    async fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let r = std::future::poll_fn(|cx| {
                self.state
                    .poll_io(Dir::Write, cx, || self.send_now(&buf[done..]))
            })
            .await;
            self.drained(&r, buf.len() - done);
            let n = r?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n;
        }
        Ok(())
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let r = self.send_now(buf);
        match &r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.state.clear(Dir::Write),
            _ => self.drained(&r, buf.len()),
        }
        r
    }

    async fn writable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.state.poll_ready(Dir::Write, cx)).await;
        Ok(())
    }
}

/// A TCP connection.
pub struct TcpStream {
    inner: Rc<Stream>,
}

/// Resolves `addr` (a blocking lookup for a name; addresses parse at once).
fn resolve(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let all: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if all.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        ));
    }
    Ok(all)
}

impl TcpStream {
    /// Connects to the first address of `addr` that accepts.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let mut last = None;
        for a in resolve(addr)? {
            match Self::connect_one(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one address"))
    }

    async fn connect_one(addr: SocketAddr) -> io::Result<TcpStream> {
        let s = TcpStream::wrap(mio::net::TcpStream::connect(addr)?)?;
        // Writable means the handshake ended: in a connection, or in an error.
        loop {
            std::future::poll_fn(|cx| s.inner.state.poll_ready(Dir::Write, cx)).await;
            if let Some(e) = s.inner.io.take_error()? {
                return Err(e);
            }
            match s.inner.io.peer_addr() {
                Ok(_) => return Ok(s),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    s.inner.state.clear(Dir::Write)
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn wrap(io: mio::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: Rc::new(Registered::new(io, true)?),
        })
    }

    /// Takes over a connected standard stream (made non-blocking here).
    pub fn from_std(s: std::net::TcpStream) -> io::Result<TcpStream> {
        s.set_nonblocking(true)?;
        TcpStream::wrap(mio::net::TcpStream::from_std(s))
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.inner.io.set_nodelay(on)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.io.peer_addr()
    }

    /// This end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.io.local_addr()
    }

    /// Reads what has arrived (waiting for something); 0 when the peer closed.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).await
    }

    /// Fills `buf`, or fails with `UnexpectedEof` if the peer closes first.
    pub async fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_exact(buf).await
    }

    /// Appends what has arrived to `buf`.
    pub async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        self.inner.read_buf(buf).await
    }

    /// Appends everything until the peer closes to `buf`; returns how much.
    pub async fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let start = buf.len();
        while self.inner.read_buf(buf).await? > 0 {}
        Ok(buf.len() - start)
    }

    /// Writes all of `buf`.
    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf).await
    }

    /// Splits into a read half and a write half, each owned; dropping the write half
    /// shuts the connection's sending side down.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        (
            OwnedReadHalf {
                inner: self.inner.clone(),
            },
            OwnedWriteHalf { inner: self.inner },
        )
    }
}

/// The reading half of a [`TcpStream`].
pub struct OwnedReadHalf {
    inner: Rc<Stream>,
}

impl OwnedReadHalf {
    /// See [`TcpStream::read_buf`] (what the soft RNIC's readers call).
    pub async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        self.inner.read_buf(buf).await
    }
}

/// The writing half of a [`TcpStream`]; dropping it shuts the sending side down.
pub struct OwnedWriteHalf {
    inner: Rc<Stream>,
}

impl OwnedWriteHalf {
    /// Writes what the socket takes now, without waiting (`WouldBlock` if nothing).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.try_write(buf)
    }

    /// Waits until the socket (probably) has room.
    pub async fn writable(&self) -> io::Result<()> {
        self.inner.writable().await
    }

    /// Shuts the connection down in both directions: the peer sees its end, and a read on
    /// the other half returns the end (0) at once. Ends a connection whose read half
    /// another task owns.
    pub fn shutdown_both(&self) -> io::Result<()> {
        self.inner.io.shutdown(Shutdown::Both)
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        let _ = self.inner.io.shutdown(Shutdown::Write);
    }
}

impl AsFd for TcpStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.io.as_fd()
    }
}
impl AsFd for OwnedWriteHalf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.io.as_fd()
    }
}

/// A listening TCP socket.
pub struct TcpListener {
    inner: Registered<mio::net::TcpListener>,
}

impl TcpListener {
    /// Binds to the first address of `addr` that can be bound (with `SO_REUSEADDR`).
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let mut last = None;
        for a in resolve(addr)? {
            match mio::net::TcpListener::bind(a) {
                Ok(l) => {
                    return Ok(TcpListener {
                        inner: Registered::new(l, false)?,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one address"))
    }

    /// Waits for a connection.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let r = &self.inner;
        let (s, a) =
            std::future::poll_fn(|cx| r.state.poll_io(Dir::Read, cx, || r.io.accept())).await?;
        Ok((TcpStream::wrap(s)?, a))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.io.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_carries_bytes_both_ways_and_closes() {
        crate::block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let server = crate::spawn_local(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut b = [0u8; 5];
                s.read_exact(&mut b).await.unwrap();
                s.write_all(&b).await.unwrap();
                // A large write the peer reads slowly: the socket fills and waits.
                let big = vec![7u8; 8 << 20];
                s.write_all(&big).await.unwrap();
            });
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.set_nodelay(true).unwrap();
            c.write_all(b"hello").await.unwrap();
            let mut b = [0u8; 5];
            c.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"hello");
            // The rest through the read half, as the soft RNIC's readers take it.
            let (mut r, _w) = c.into_split();
            let mut got = Vec::with_capacity(1 << 16);
            let mut n = 0;
            loop {
                got.clear();
                match r.read_buf(&mut got).await.unwrap() {
                    0 => break,
                    k => {
                        assert!(got.iter().all(|&x| x == 7));
                        n += k;
                    }
                }
            }
            assert_eq!(n, 8 << 20);
            server.await.unwrap();
        });
    }

    /// A task waiting to write is counted while it waits (the executor then never waits
    /// in a blocking receive, which a socket's room to write would not end), and no
    /// longer once the socket drained and it wrote.
    #[test]
    fn a_task_waiting_to_write_is_counted_while_it_waits() {
        crate::block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (mut peer, _) = l.accept().unwrap();
            assert!(!crate::writers_waiting());
            const BYTES: usize = 32 << 20;
            let writer = crate::spawn_local(async move {
                c.write_all(&vec![1u8; BYTES]).await.unwrap();
                c
            });
            // The peer reads nothing yet: the writer fills the socket and waits.
            let mut turns = 0;
            while !crate::writers_waiting() {
                turns += 1;
                assert!(turns < 1_000_000, "the writer never waited");
                crate::yield_now().await;
            }
            let reader = std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0;
                while n < BYTES {
                    n += peer.read(&mut buf).unwrap();
                }
                peer
            });
            let c = writer.await.unwrap();
            assert!(!crate::writers_waiting());
            drop(c);
            drop(reader.join().unwrap());
        });
    }

    /// A writer waker left on a source that outlives its executor (the stream kept, the
    /// write abandoned) counts in that executor only: the next executor of the thread
    /// still waits in blocking receives.
    #[test]
    fn a_writer_left_by_an_earlier_executor_does_not_count_in_the_next() {
        let kept = crate::block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (peer, _) = l.accept().unwrap();
            let (r, w) = c.into_split();
            let chunk = vec![1u8; 1 << 16];
            let mut turns = 0;
            while w.try_write(&chunk).is_ok() {
                turns += 1;
                assert!(turns < 100_000, "the socket never filled");
            }
            // One look at the full socket sets the writer waker; the wait is abandoned.
            std::future::poll_fn(|cx| {
                let f = std::pin::pin!(w.writable());
                assert!(
                    std::future::Future::poll(f, cx).is_pending(),
                    "a full socket is not writable"
                );
                std::task::Poll::Ready(())
            })
            .await;
            assert!(crate::writers_waiting());
            (r, w, peer)
        });
        crate::block_on(async {
            assert!(!crate::writers_waiting());
        });
        drop(kept);
    }

    #[test]
    fn a_refused_connection_is_an_error() {
        crate::block_on(async {
            // Bind, learn the port, close: nothing listens there now.
            let addr = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap();
            let e = TcpStream::connect(addr).await.err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        });
    }
}
