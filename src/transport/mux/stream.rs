//! The socket under a multiplexed connection: TCP or unix, driven by tokio.

use std::os::fd::{AsRawFd, RawFd};

use redis::Value;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use crate::errors::{Error, Result};
use crate::proto::read_buf::unreadable;
use crate::proto::ReadBuf;
use crate::transport::{PlainConfig, Target};

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connect and run the handshake (no time limit: the caller bounds it). Return the
    /// stream, how many replies of a handshake sent without waiting are still to come, and
    /// the generation of the credentials it authenticated with (see `Handshake::start`).
    pub async fn open(config: &PlainConfig) -> Result<(Self, usize, u64)> {
        let addr = &config.addr;
        config.handshake.first_async(config.connect_timeout).await?;
        let failed = |e: std::io::Error| {
            Error::Connection(format!("Connection to Redis at {addr} failed: {e}"))
        };
        let stream = match &config.target {
            Target::Tcp(host, port) => {
                let tcp = TcpStream::connect((host.as_str(), *port)).await.map_err(failed)?;
                tcp.set_nodelay(true).map_err(failed)?;
                Stream::Tcp(tcp)
            }
            Target::Unix(path) => Stream::Unix(UnixStream::connect(path).await.map_err(failed)?),
        };
        let handshake = &config.handshake;
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
            Stream::Tcp(s) => s.ready(interest).await.map(|_| ()),
            Stream::Unix(s) => s.ready(interest).await.map(|_| ()),
        }
    }

    pub fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
        }
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
        }
    }

    pub fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    pub async fn write_all(&self, mut buf: &[u8]) -> std::io::Result<()> {
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
    async fn read_replies(&self, count: usize, config: &PlainConfig) -> Result<Vec<Value>> {
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
            match self.try_read(buf.room()) {
                Ok(0) => return Err(failed(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    config.stats.received(n);
                    buf.advance(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(replies)
    }
}
