//! The sync path's connection: a blocking socket owned by one thread, one round trip a call.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::Value;

use crate::errors::{Error, Result};
use crate::mux::{MuxConfig, Replies, Target};
use crate::resp::{self, Scan};
use crate::runtime;

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn fd(&self) -> RawFd {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.write_all(buf),
            Socket::Unix(s) => s.write_all(buf),
        }
    }

    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(Some(timeout)),
            Socket::Unix(s) => s.set_read_timeout(Some(timeout)),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let result = match self {
                Socket::Tcp(s) => s.read(buf),
                Socket::Unix(s) => s.read(buf),
            };
            // A signal handler ran: the socket is fine, read again.
            match result {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// One thread's connection to the server.
pub struct Blocking {
    socket: Socket,
    /// Always initialised in full; replies are read into `buf[filled..]`.
    buf: Vec<u8>,
    filled: usize,
    spin: Spin,
}

/// How a caller waits for its reply before blocking in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll on the CPU for a reply due within tens of microseconds (one server).
    Spin,
    /// Poll, but give the CPU away between polls: while several servers work on a fan-out,
    /// they (on a small host) need the cores more than the waiting thread does.
    Yield,
}

/// Longest a caller polls for its reply before sleeping in the kernel.
const MAX_SPIN: Duration = Duration::from_micros(150);

/// How long to poll for a reply before blocking: a reply that comes back within a few tens of
/// microseconds is picked up without the sleep and wake-up of a blocking read, which on a host
/// with idle CPUs costs more than the round trip itself. Adapts to the replies seen lately and
/// stops polling while replies keep arriving too late for it to pay.
struct Spin {
    /// Recent round trips, an exponentially weighted average.
    typical: Duration,
    /// Calls in a row whose reply came only after polling gave up.
    misses: u32,
    calls: u32,
}

impl Spin {
    fn window(&mut self) -> Duration {
        self.calls = self.calls.wrapping_add(1);
        // After repeated misses, poll no more, except now and then to notice faster replies.
        if self.misses >= 4 && !self.calls.is_multiple_of(64) {
            return Duration::ZERO;
        }
        (self.typical * 2).min(MAX_SPIN)
    }

    fn record(&mut self, elapsed: Duration, caught: bool) {
        self.typical = (self.typical * 7 + elapsed.min(MAX_SPIN * 4)) / 8;
        self.misses = if caught { 0 } else { self.misses.saturating_add(1) };
    }
}

fn io_error(err: &std::io::Error, config: &MuxConfig, during: &str) -> Error {
    let addr = &config.addr;
    match err.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Error::Timeout(format!(
            "Redis at {addr} did not answer within {:?} ({during})",
            config.response_timeout
        )),
        _ => Error::Connection(format!("Connection to Redis at {addr} broke ({during}): {err}")),
    }
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

impl Blocking {
    /// Connect within the connect timeout and run the AUTH / SELECT handshake.
    pub fn connect(config: &MuxConfig) -> Result<Self> {
        let addr = &config.addr;
        let refused = |e: &std::io::Error| {
            Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
        };
        let socket = match &config.target {
            Target::Tcp(host, port) => {
                let mut last = None;
                let mut stream = None;
                let deadline = Instant::now() + config.connect_timeout;
                for sockaddr in resolve(host, *port, config.connect_timeout, addr)? {
                    let left = deadline.saturating_duration_since(Instant::now());
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
                    (None, None) => {
                        return Err(Error::Connection(format!("{addr} resolves to no address")))
                    }
                };
                stream.set_nodelay(true).map_err(|e| refused(&e))?;
                stream.set_read_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
                stream.set_write_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
                Socket::Tcp(stream)
            }
            Target::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(|e| refused(&e))?;
                stream.set_read_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
                stream.set_write_timeout(Some(config.response_timeout)).map_err(|e| refused(&e))?;
                Socket::Unix(stream)
            }
        };
        let mut conn = Blocking {
            socket,
            buf: vec![0; 16 * 1024],
            filled: 0,
            spin: Spin { typical: Duration::from_micros(40), misses: 0, calls: 0 },
        };
        if config.handshake_replies > 0 {
            let replies = match conn.request(
                &config.handshake,
                Replies::Many(config.handshake_replies),
                config,
            )? {
                Value::Array(items) => items,
                one => vec![one],
            };
            for reply in replies {
                if let Value::ServerError(err) = reply {
                    let text = err.to_string();
                    return Err(if text.contains("WRONGPASS") || text.contains("AUTH") {
                        Error::Connection(format!(
                            "Authentication to Redis at {addr} failed: check the username and password"
                        ))
                    } else {
                        Error::Response(format!(
                            "Redis at {addr} refused the connection settings: {text}"
                        ))
                    });
                }
            }
        }
        Ok(conn)
    }

    /// Whether the server closed this connection (or sent something unasked) while it sat
    /// idle: then it must not be used, and a command sent on it would be lost.
    pub fn is_stale(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: peeks at most one byte into a valid local; never blocks.
        let n = unsafe {
            libc::recv(
                self.socket.fd(),
                std::ptr::from_mut(&mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return err.kind() != std::io::ErrorKind::WouldBlock;
        }
        true
    }

    /// Send packed commands and read their replies (one value, or a list of them).
    pub fn request(&mut self, packed: &[u8], shape: Replies, config: &MuxConfig) -> Result<Value> {
        self.send(packed, config)?;
        self.receive(shape, config, Wait::Spin)
    }

    /// Send packed commands (their replies are read by `receive`).
    pub fn send(&mut self, packed: &[u8], config: &MuxConfig) -> Result<()> {
        self.socket.write_all(packed).map_err(|e| io_error(&e, config, "sending"))
    }

    /// `receive`, but giving up at `deadline` if that comes before the response timeout (a
    /// fan-out over several servers waits one timeout in all, not one per server).
    pub fn receive_by(
        &mut self,
        shape: Replies,
        config: &MuxConfig,
        deadline: Instant,
        wait: Wait,
    ) -> Result<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left >= config.response_timeout {
            return self.receive(shape, config, wait);
        }
        let shortened = !left.is_zero() && self.socket.set_read_timeout(left).is_ok();
        if !shortened {
            return Err(Error::Timeout(format!(
                "Redis at {} did not answer within {:?}",
                config.addr, config.response_timeout
            )));
        }
        let result = self.receive(shape, config, wait);
        if result.is_ok() {
            // Back to the usual bound (a failed connection is closed anyway).
            if let Err(e) = self.socket.set_read_timeout(config.response_timeout) {
                return Err(io_error(&e, config, "resetting the timeout"));
            }
        }
        result
    }

    /// Read the replies of what `send` sent (one value, or a list of them), polling for them
    /// briefly before blocking (see `Spin` and `Wait`).
    pub fn receive(&mut self, shape: Replies, config: &MuxConfig, wait: Wait) -> Result<Value> {
        let expected = shape.count();
        let started = Instant::now();
        let window = self.spin.window();
        let mut caught = window.is_zero();
        let mut missed = false;
        let mut replies = Vec::with_capacity(expected);
        let mut used = 0;
        // The size an incomplete reply is known to need: no re-parsing before that.
        let mut need = 0;
        while replies.len() < expected {
            if self.filled >= need {
                let rest = &self.buf[used..self.filled];
                let parsed = resp::scan(rest).and_then(|scan| match scan {
                    Scan::Complete(n) => {
                        resp::parse(&rest[..n]).map(|v| v.map(|(value, _)| (value, n)))
                    }
                    Scan::NeedAtLeast(n) => {
                        need = used + n;
                        Ok(None)
                    }
                });
                match parsed {
                    Ok(Some((value, n))) => {
                        used += n;
                        replies.push(value);
                        continue;
                    }
                    Ok(None) => {}
                    Err(resp::ParseError::Protocol(m)) => {
                        return Err(Error::Connection(format!(
                            "Redis at {} sent an unreadable reply ({m})",
                            config.addr
                        )))
                    }
                }
            }
            if self.filled == self.buf.len() {
                if used > 0 {
                    self.buf.copy_within(used..self.filled, 0);
                    self.filled -= used;
                    need -= used.min(need);
                    used = 0;
                } else {
                    let len = (self.buf.len() * 2).max(need);
                    self.buf.resize(len, 0);
                }
            }
            if !caught {
                // Poll while the reply is likely close; the first bytes end the polling.
                let fd = self.socket.fd();
                let room = &mut self.buf[self.filled..];
                loop {
                    // SAFETY: receives into a valid, initialised slice; never blocks.
                    let n = unsafe {
                        libc::recv(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT)
                    };
                    if n > 0 {
                        self.filled += usize::try_from(n).unwrap_or(0);
                        caught = true;
                        break;
                    }
                    if n == 0 || started.elapsed() >= window {
                        break;
                    }
                    match wait {
                        Wait::Spin => std::hint::spin_loop(),
                        Wait::Yield => std::thread::yield_now(),
                    }
                }
                if caught {
                    continue;
                }
                // From here on, wait in the kernel.
                caught = true;
                missed = true;
            }
            match self.socket.read(&mut self.buf[self.filled..]) {
                Ok(0) => {
                    return Err(Error::Connection(format!(
                        "Connection to Redis at {} was closed by the server",
                        config.addr
                    )))
                }
                Ok(n) => self.filled += n,
                Err(e) => return Err(io_error(&e, config, "waiting for the reply")),
            }
        }
        self.buf.copy_within(used..self.filled, 0);
        self.filled -= used;
        if !window.is_zero() {
            self.spin.record(started.elapsed(), !missed);
        }
        Ok(match shape {
            Replies::One => replies.pop().unwrap_or(Value::Nil),
            Replies::Many(_) => Value::Array(replies),
        })
    }
}
