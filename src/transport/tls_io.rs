//! TLS on our own sockets: one rustls session over a socket it does not own, read and written
//! without blocking from whichever thread has the connection's turn (a caller's, the I/O
//! runtime's), so the blocking line, the shared line and the async mux run TLS exactly as they
//! run plain TCP: the same handshake, pipelining and timeouts.
//!
//! Two rules keep it from stalling. A read drains everything the socket has and everything
//! rustls has decrypted into the caller's buffer (nothing is left behind in rustls for a
//! readiness that never comes). A write that leaves ciphertext unsent says so (`unsent`), and
//! whoever wrote sees it flushed (the writer task, or the blocking caller waiting for room).

use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::ClientConnection;

use crate::ffi;
use crate::proto::ReadBuf;

fn lock(m: &Mutex<ClientConnection>) -> MutexGuard<'_, ClientConnection> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The socket, read and written without blocking (the descriptor is borrowed).
struct Fd(RawFd);

impl Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        ffi::recv_nonblocking(self.0, buf)
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        ffi::send_some(self.0, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn invalid(err: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

/// A TLS session whose handshake is done, over the socket `fd` (owned by the connection).
pub struct TlsIo {
    fd: RawFd,
    session: Mutex<ClientConnection>,
}

impl TlsIo {
    pub fn new(fd: RawFd, session: ClientConnection) -> Self {
        TlsIo { fd, session: Mutex::new(session) }
    }

    /// Take `plain` (all of it) and write what the socket takes of its ciphertext now; see
    /// `unsent` for the rest. An error of the socket is left for the reader to meet.
    pub fn send(&self, plain: &[u8]) -> usize {
        let mut session = lock(&self.session);
        let taken = session.writer().write(plain).unwrap_or(0);
        let _ = flush(&mut session, self.fd);
        taken
    }

    /// Whether ciphertext is waiting for room in the socket.
    pub fn unsent(&self) -> bool {
        lock(&self.session).wants_write()
    }

    /// Write waiting ciphertext: `WouldBlock` while some is left.
    pub fn flush(&self) -> io::Result<()> {
        flush(&mut lock(&self.session), self.fd)
    }

    /// Read without blocking: everything the socket has, decrypted into `buf`. `Ok(0)` is the
    /// end of the stream, `WouldBlock` nothing yet.
    pub fn recv(&self, buf: &mut ReadBuf) -> io::Result<usize> {
        let mut session = lock(&self.session);
        let mut got = 0;
        let mut ended = false;
        loop {
            loop {
                match session.reader().read(buf.room()) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => {
                        buf.advance(n);
                        got += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // Closed without close_notify (a server killing the connection): the end.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        ended = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if ended {
                break;
            }
            match session.read_tls(&mut Fd(self.fd)) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(_) => {
                    session.process_new_packets().map_err(invalid)?;
                    // (A key update's answer, say: written now, or by the next send.)
                    let _ = flush(&mut session, self.fd);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if got == 0 => return Err(e),
                // Bytes came before the error: hand them over; the next read meets it.
                Err(_) => break,
            }
        }
        match (got, ended) {
            (0, true) => Ok(0),
            (0, false) => Err(io::ErrorKind::WouldBlock.into()),
            (n, _) => Ok(n),
        }
    }

    /// Whether a connection that should be idle has something to say: data nobody asked for,
    /// the end of the stream or an error. TLS records with nothing for us (a TLS 1.3 session
    /// ticket) are taken in and do not count.
    pub fn has_pending_input(&self) -> bool {
        if !ffi::has_pending_input(self.fd) {
            return lock(&self.session).process_new_packets().map_or(true, |state| {
                state.plaintext_bytes_to_read() > 0 || state.peer_has_closed()
            });
        }
        let mut session = lock(&self.session);
        loop {
            match session.read_tls(&mut Fd(self.fd)) {
                Ok(0) => return true,
                Ok(_) => match session.process_new_packets() {
                    Ok(state) if state.plaintext_bytes_to_read() > 0 || state.peer_has_closed() => {
                        return true
                    }
                    Ok(_) => {}
                    Err(_) => return true,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }

    /// `send` on a blocking connection: all of `plain` written by `deadline`.
    pub fn send_by(&self, plain: &[u8], deadline: Instant) -> io::Result<()> {
        self.send(plain);
        loop {
            match self.flush() {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !ffi::wait_for(self.fd, ffi::Ready::Write, left)? {
                return Err(io::ErrorKind::TimedOut.into());
            }
        }
    }

    /// `recv` on a blocking connection: waits up to `timeout` for something to read.
    pub fn recv_within(&self, buf: &mut ReadBuf, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.recv(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            // Waited for without the session's lock: the line's writers go on meanwhile.
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !ffi::wait_for(self.fd, ffi::Ready::Read, left)? {
                return Err(io::ErrorKind::TimedOut.into());
            }
        }
    }
}

/// Write the session's ciphertext: `WouldBlock` while some is left.
fn flush(session: &mut ClientConnection, fd: RawFd) -> io::Result<()> {
    while session.wants_write() {
        match session.write_tls(&mut Fd(fd)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Run the TLS handshake on a connected blocking socket, by `deadline`.
pub fn handshake_blocking(
    session: &mut ClientConnection,
    fd: RawFd,
    deadline: Instant,
) -> io::Result<()> {
    while session.is_handshaking() || session.wants_write() {
        match flush(session, fd) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(fd, ffi::Ready::Write, deadline)?;
                continue;
            }
            Err(e) => return Err(e),
        }
        if !session.is_handshaking() {
            break;
        }
        match session.read_tls(&mut Fd(fd)) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {
                session.process_new_packets().map_err(invalid)?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(fd, ffi::Ready::Read, deadline)?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn wait(fd: RawFd, ready: ffi::Ready, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || !ffi::wait_for(fd, ready, left)? {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(())
}

/// Run the TLS handshake on a connected tokio socket (the caller bounds the time).
pub async fn handshake_async(
    session: &mut ClientConnection,
    tcp: &tokio::net::TcpStream,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use tokio::io::Interest;
    let fd = tcp.as_raw_fd();
    while session.is_handshaking() || session.wants_write() {
        if session.wants_write() {
            tcp.writable().await?;
            match tcp.try_io(Interest::WRITABLE, || flush(session, fd)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        if !session.is_handshaking() {
            break;
        }
        tcp.readable().await?;
        match tcp.try_io(Interest::READABLE, || session.read_tls(&mut Fd(fd))) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {
                session.process_new_packets().map_err(invalid)?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
