//! The socket under a blocking connection: TCP, a unix socket, or TLS over TCP (our own
//! rustls session, `tls_io`), connected within the connect timeout.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::errors::{Error, Result};
use crate::ffi;
use crate::proto::ReadBuf;
use crate::runtime;
use crate::transport::tls_io::{self, TlsIo};
use crate::transport::{Endpoint, Target};

pub(super) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TLS: the socket is only ever read and written without blocking, through the session;
    /// waits are `poll`s bounded by `read_timeout` (microseconds) or the write's deadline.
    Tls {
        tcp: TcpStream,
        tls: Box<TlsIo>,
        read_timeout: AtomicU64,
    },
}

impl Socket {
    /// Connect to the configured server by `deadline`; TLS runs its handshake too.
    pub(super) fn connect(config: &Endpoint, deadline: Instant) -> Result<Self> {
        let addr = &config.addr;
        let refused = |e: &std::io::Error| {
            Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
        };
        let timeout = config.response_timeout;
        match &config.target {
            Target::Tcp(host, port) => Ok(Socket::Tcp(tcp(host, *port, config, deadline)?)),
            Target::Tls { host, port, setup } => {
                let tcp = tcp(host, *port, config, deadline)?;
                let mut session = setup.session()?;
                tls_io::handshake_blocking(&mut session, tcp.as_raw_fd(), deadline).map_err(
                    |e| match e.kind() {
                        std::io::ErrorKind::TimedOut => Error::Connection(format!(
                            "Connection to Redis at {addr} timed out after {:?} (TLS handshake)",
                            config.connect_timeout
                        )),
                        _ => Error::Connection(format!(
                            "Connection to Redis at {addr} failed (TLS handshake): {e}"
                        )),
                    },
                )?;
                let tls = Box::new(TlsIo::new(tcp.as_raw_fd(), session));
                let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
                Ok(Socket::Tls { tcp, tls, read_timeout: AtomicU64::new(micros) })
            }
            Target::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(|e| refused(&e))?;
                stream.set_read_timeout(Some(timeout)).map_err(|e| refused(&e))?;
                stream.set_write_timeout(Some(timeout)).map_err(|e| refused(&e))?;
                Ok(Socket::Unix(stream))
            }
        }
    }

    pub(super) fn fd(&self) -> RawFd {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
            Socket::Tls { tcp, .. } => tcp.as_raw_fd(),
        }
    }

    // Writes go through a shared reference: the threads of a shared connection write while
    // its leader reads.

    /// `write_all`, but within one deadline for the whole buffer: the socket's write timeout
    /// bounds each write() call, so a server that reads a byte now and then would otherwise
    /// keep a large send going for ever. Only a write cut short pays for re-arming the timeout;
    /// `timeout` (the usual bound) is put back after that.
    pub(super) fn write_all_by(&self, buf: &[u8], timeout: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + timeout;
        if let Socket::Tls { tls, .. } = self {
            return tls.send_by(buf, deadline);
        }
        let mut rest = buf;
        let mut shortened = false;
        while !rest.is_empty() {
            let written = match self {
                Socket::Tcp(s) => (&*s).write(rest),
                Socket::Unix(s) => (&*s).write(rest),
                Socket::Tls { .. } => unreachable!("written above"),
            };
            match written {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if !rest.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                self.set_write_timeout(left)?;
                shortened = true;
            }
        }
        if shortened {
            self.set_write_timeout(timeout)?;
        }
        Ok(())
    }

    fn set_write_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(Some(timeout)),
            Socket::Unix(s) => s.set_write_timeout(Some(timeout)),
            // Each TLS write is bounded by its own deadline.
            Socket::Tls { .. } => Ok(()),
        }
    }

    pub(super) fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(Some(timeout)),
            Socket::Unix(s) => s.set_read_timeout(Some(timeout)),
            Socket::Tls { read_timeout, .. } => {
                read_timeout.store(u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX), Relaxed);
                Ok(())
            }
        }
    }

    /// Read into `buf`, waiting up to the read timeout; `Ok(0)` is the end of the stream.
    pub(super) fn read_into(&self, buf: &mut ReadBuf) -> std::io::Result<usize> {
        if let Socket::Tls { tls, read_timeout, .. } = self {
            return tls.recv_within(buf, Duration::from_micros(read_timeout.load(Relaxed)));
        }
        loop {
            let result = match self {
                Socket::Tcp(s) => (&*s).read(buf.room()),
                Socket::Unix(s) => (&*s).read(buf.room()),
                Socket::Tls { .. } => unreachable!("read above"),
            };
            // A signal handler ran: the socket is fine, read again.
            match result {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(n) => {
                    buf.advance(n);
                    return Ok(n);
                }
                other => return other,
            }
        }
    }

    /// Read into `buf` what is here, without waiting: `WouldBlock` if nothing is.
    pub(super) fn try_recv(&self, buf: &mut ReadBuf) -> std::io::Result<usize> {
        match self {
            Socket::Tls { tls, .. } => tls.recv(buf),
            _ => {
                let n = ffi::recv_nonblocking(self.fd(), buf.room())?;
                buf.advance(n);
                Ok(n)
            }
        }
    }

    /// Whether a socket that should be idle has something to say (see `ffi`).
    pub(super) fn has_pending_input(&self) -> bool {
        match self {
            Socket::Tls { tls, .. } => tls.has_pending_input(),
            _ => ffi::has_pending_input(self.fd()),
        }
    }

    /// Shut the socket down both ways, waking whoever waits on it.
    pub(super) fn shutdown(&self) {
        ffi::shutdown(self.fd());
    }
}

/// A TCP connection to `host:port` by `deadline`, with the response timeout on reads and
/// writes.
fn tcp(host: &str, port: u16, config: &Endpoint, deadline: Instant) -> Result<TcpStream> {
    let addr = &config.addr;
    let refused = |e: &std::io::Error| {
        Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
    };
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut last = None;
    let mut stream = None;
    for sockaddr in resolve(host, port, left(), addr)? {
        let left = left();
        if left.is_zero() {
            last = Some(std::io::ErrorKind::TimedOut.into());
            break;
        }
        match TcpStream::connect_timeout(&sockaddr, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some(e)) => return Err(refused(&e)),
        (None, None) => return Err(Error::Connection(format!("{addr} resolves to no address"))),
    };
    stream.set_nodelay(true).map_err(|e| refused(&e))?;
    stream.set_read_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
    stream.set_write_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
    Ok(stream)
}

/// The addresses of a host, found within `timeout` (the system resolver alone can block for
/// its own, much longer, timeout: it runs on the I/O runtime's blocking pool instead).
fn resolve(host: &str, port: u16, timeout: Duration, addr: &str) -> Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let target = format!("{host}:{port}");
    runtime::get()?.spawn(async move {
        let found = tokio::net::lookup_host(target).await.map(Iterator::collect::<Vec<_>>);
        // The caller may have given up: nobody to tell.
        let _ = tx.send(found);
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(Error::Connection(format!("Cannot resolve Redis host {addr}: {e}"))),
        Err(_) => Err(Error::Connection(format!(
            "Resolving Redis host {addr} took longer than the connect timeout ({timeout:?})"
        ))),
    }
}
