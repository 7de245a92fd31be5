//! The socket under a multiplexed connection: TCP, unix, or TLS over TCP (our own rustls
//! session, `tls_io`), driven by tokio; callers' threads read and write it without blocking
//! too (`send_now`, `recv_now`).

use std::os::fd::{AsRawFd, RawFd};

use redis::Value;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use crate::errors::{Error, Result};
use crate::ffi;
use crate::proto::handshake::Handshake;
use crate::proto::read_buf::unreadable;
use crate::proto::ReadBuf;
use crate::transport::tls_io::{self, TlsIo};
use crate::transport::{Endpoint, Target};

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(TcpStream, Box<TlsIo>),
}

impl Stream {
    /// Connect and run the handshake (no time limit: the caller bounds it). Return the
    /// stream, how many replies of a handshake sent without waiting are still to come, and
    /// the generation of the credentials it authenticated with (see `Handshake::start`).
    pub async fn open(config: &Endpoint, handshake: &Handshake) -> Result<(Self, usize, u64)> {
        let addr = &config.addr;
        handshake.first_async(config.connect_timeout).await?;
        let failed = |e: std::io::Error| {
            Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
        };
        let stream = match &config.target {
            Target::Tcp(host, port) => {
                let tcp = TcpStream::connect((host.as_str(), *port)).await.map_err(failed)?;
                tcp.set_nodelay(true).map_err(failed)?;
                Stream::Tcp(tcp)
            }
            Target::Tls { host, port, setup } => {
                let tcp = TcpStream::connect((host.as_str(), *port)).await.map_err(failed)?;
                tcp.set_nodelay(true).map_err(failed)?;
                let mut session = setup.session()?;
                tls_io::handshake_async(&mut session, &tcp).await.map_err(|e| {
                    Error::Connection(format!(
                        "Connection to Redis at {addr} failed (TLS handshake): {e}"
                    ))
                })?;
                let tls = Box::new(TlsIo::new(tcp.as_raw_fd(), session));
                Stream::Tls(tcp, tls)
            }
            Target::Unix(path) => Stream::Unix(UnixStream::connect(path).await.map_err(failed)?),
        };
        if handshake.is_empty() {
            return Ok((stream, 0, 0));
        }
        let mut tried = false;
        loop {
            let (packed, generation) = handshake.start()?;
            stream.write_all(&packed).await.map_err(failed)?;
            config.stats.sent(packed.len());
            if !handshake.needs_answer() {
                return Ok((stream, handshake.replies().count(), generation));
            }
            let replies = stream.read_replies(handshake.replies().count(), config).await?;
            match handshake.check(Value::Array(replies), addr) {
                Ok(()) => return Ok((stream, 0, generation)),
                // Rotated credentials the server already wants: ask for them, try once more.
                Err(err)
                    if !tried
                        && handshake
                            .refreshed_async(&err, generation, config.connect_timeout)
                            .await =>
                {
                    tried = true;
                }
                Err(err) => return Err(err),
            }
        }
    }

    pub async fn ready(&self, interest: Interest) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) | Stream::Tls(s, _) => s.ready(interest).await.map(|_| ()),
            Stream::Unix(s) => s.ready(interest).await.map(|_| ()),
        }
    }

    /// Read into `buf` what is here (the I/O runtime's reader): `WouldBlock` clears the
    /// socket's readiness.
    pub fn try_read_into(&self, buf: &mut ReadBuf) -> std::io::Result<usize> {
        let n = match self {
            Stream::Tcp(s) => s.try_read(buf.room())?,
            Stream::Unix(s) => s.try_read(buf.room())?,
            Stream::Tls(s, tls) => return s.try_io(Interest::READABLE, || tls.recv(buf)),
        };
        buf.advance(n);
        Ok(n)
    }

    /// What the socket takes of `buf` now (plain streams: `write_all` runs TLS on its own,
    /// through the session; the TLS arm is the same thing for completeness).
    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
            Stream::Tls(s, tls) => s.try_io(Interest::WRITABLE, || {
                let n = tls.send(buf);
                tls.flush().map(|()| n)
            }),
        }
    }

    /// From any thread: write what the socket takes now, and whether ciphertext is left
    /// unsent (TLS: the writer task must flush it).
    pub fn send_now(&self, buf: &[u8]) -> (usize, bool) {
        match self {
            Stream::Tls(_, tls) => (tls.send(buf), tls.unsent()),
            _ => (ffi::send_nonblocking(self.fd(), buf), false),
        }
    }

    /// From any thread: read into `buf` what is here. `Ok(0)` is the end of the stream.
    pub fn recv_now(&self, buf: &mut ReadBuf) -> std::io::Result<usize> {
        match self {
            Stream::Tls(_, tls) => tls.recv(buf),
            _ => {
                let n = ffi::recv_nonblocking(self.fd(), buf.room())?;
                buf.advance(n);
                Ok(n)
            }
        }
    }

    /// Whether an idle connection has something to say (see `ffi::has_pending_input`).
    pub fn has_pending_input(&self) -> bool {
        match self {
            Stream::Tls(_, tls) => tls.has_pending_input(),
            _ => ffi::has_pending_input(self.fd()),
        }
    }

    /// Whether TLS ciphertext waits for room in the socket.
    pub fn unsent(&self) -> bool {
        matches!(self, Stream::Tls(_, tls) if tls.unsent())
    }

    pub fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) | Stream::Tls(s, _) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Write all of `buf` (and, on TLS, whatever ciphertext waited before it).
    pub async fn write_all(&self, mut buf: &[u8]) -> std::io::Result<()> {
        if let Stream::Tls(s, tls) = self {
            tls.send(buf);
            while tls.unsent() {
                s.ready(Interest::WRITABLE).await?;
                match s.try_io(Interest::WRITABLE, || tls.flush()) {
                    Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(e),
                    _ => {}
                }
            }
            return Ok(());
        }
        while !buf.is_empty() {
            self.ready(Interest::WRITABLE).await?;
            match self.try_write(buf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read `count` replies (nothing else is in flight: the handshake's).
    async fn read_replies(&self, count: usize, config: &Endpoint) -> Result<Vec<Value>> {
        let addr = &*config.addr;
        let failed = |e: std::io::Error| {
            Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
        };
        let mut buf = ReadBuf::new(512);
        let mut replies = Vec::with_capacity(count);
        while replies.len() < count {
            if let Some(value) = buf.next_reply().map_err(|e| unreadable(addr, e))? {
                replies.push(value);
                continue;
            }
            self.ready(Interest::READABLE).await.map_err(failed)?;
            match self.try_read_into(&mut buf) {
                Ok(0) => return Err(failed(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => config.stats.received(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(replies)
    }
}
