//! One multiplexed connection per server for all async traffic of a process.
//!
//! Commands are written in order and their replies read back in order (RESP is strictly
//! ordered), so a FIFO of waiting slots is all the bookkeeping needed. An idle connection is
//! written directly from the calling thread (no thread hop for a lone request); while replies
//! are outstanding, new commands are buffered and one writer task flushes them in batches.
//! One reader task parses replies and completes slots. A broken or stalled connection fails
//! every waiting command with a typed error and is replaced on the next command.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::bridge::{LoopQueue, Poller, Slot};
use crate::errors::{Error, Result};
use crate::resp::{self, Scan};
use crate::runtime;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where the server is.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// Settings for every connection a `Mux` makes.
pub struct MuxConfig {
    pub target: Target,
    /// Packed AUTH / SELECT commands sent first on every connection, and their reply count.
    pub handshake: Vec<u8>,
    pub handshake_replies: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// host:port or path, for messages.
    pub addr: Arc<str>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    async fn ready(&self, interest: Interest) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.ready(interest).await.map(|_| ()),
            Stream::Unix(s) => s.ready(interest).await.map(|_| ()),
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
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

    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    async fn write_all(&self, mut buf: &[u8]) -> std::io::Result<()> {
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

    /// Read until `buf` holds `count` complete replies; return them and what is left over.
    async fn read_replies(&self, count: usize) -> std::io::Result<Vec<Value>> {
        let mut buf = Vec::with_capacity(256);
        let mut replies = Vec::with_capacity(count);
        while replies.len() < count {
            match resp::parse(&buf) {
                Ok(Some((value, used))) => {
                    replies.push(value);
                    buf.drain(..used);
                    continue;
                }
                Ok(None) => {}
                Err(resp::ParseError::Protocol(m)) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, m))
                }
            }
            self.ready(Interest::READABLE).await?;
            let mut chunk = [0u8; 512];
            match self.try_read(&mut chunk) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(replies)
    }
}

/// How many replies a request gets, and whether they come back as a list (a pipeline of one
/// command still answers with a list of one).
#[derive(Clone, Copy, Debug)]
pub enum Replies {
    One,
    Many(usize),
}

impl Replies {
    pub fn count(self) -> usize {
        match self {
            Replies::One => 1,
            Replies::Many(n) => n,
        }
    }
}

struct Waiting {
    slot: Arc<Slot>,
    queue: Arc<LoopQueue>,
    replies: Replies,
    got: Vec<Value>,
    deadline: Instant,
}

enum Phase {
    Connecting,
    Ready(RawFd),
    Broken,
}

struct State {
    phase: Phase,
    /// Commands written (or queued to be written), oldest first.
    waiting: VecDeque<Waiting>,
    /// Bytes not yet written, in order.
    outbuf: Vec<u8>,
    /// The writer task is writing a chunk taken from `outbuf`.
    writing: bool,
    /// Why the connection broke, for commands that arrive just after.
    cause: Option<Error>,
}

/// Replies are parsed from `buf[..filled]`; the buffer stays initialised so reads need no
/// zeroing, and grows only for a reply larger than it.
struct ReadState {
    buf: Vec<u8>,
    filled: usize,
    /// Parsing waits until `filled` reaches this (the known size of an incomplete reply).
    need: usize,
}

impl ReadState {
    /// The free part of the buffer, grown first if it is full.
    fn room(&mut self) -> &mut [u8] {
        if self.filled == self.buf.len() {
            let len = (self.buf.len() * 2).max(self.need);
            self.buf.resize(len, 0);
        }
        &mut self.buf[self.filled..]
    }
}

pub struct Conn {
    state: Mutex<State>,
    wake_writer: Notify,
    stream: std::sync::OnceLock<Stream>,
    /// Whoever reads the socket (the reader task, or an awaiting caller polling) holds this.
    reading: Mutex<ReadState>,
    addr: Arc<str>,
}

impl Poller for Conn {
    /// Read and deliver replies from the calling thread, if no one else is reading: an
    /// awaiting coroutine that is polling anyway picks its reply up without waiting for the
    /// I/O thread to wake.
    fn poll(&self) {
        let fd = match lock(&self.state).phase {
            Phase::Ready(fd) => fd,
            _ => return,
        };
        let Ok(mut rs) = self.reading.try_lock() else { return };
        let rs = &mut *rs;
        let room = rs.room();
        // SAFETY: receives into a valid, initialised slice; the descriptor is kept open by the
        // Conn, and EOF or errors are left for the reader task to report.
        let n = unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT) };
        if let Ok(n @ 1..) = usize::try_from(n) {
            rs.filled += n;
            if let Err(err) = self.absorb(rs) {
                self.break_with(&err);
            }
        }
    }
}

impl Conn {
    /// Parse the complete replies in the read buffer and hand them to their waiters.
    fn absorb(&self, rs: &mut ReadState) -> Result<()> {
        let addr = &self.addr;
        if rs.filled < rs.need {
            return Ok(());
        }
        // Parse the complete replies first, holding only `reading`: submitters wait on
        // `state`, and must not wait for a large reply to be parsed.
        let mut values = Vec::new();
        let mut used = 0;
        let mut failure = None;
        rs.need = 0;
        loop {
            let rest = &rs.buf[used..rs.filled];
            match resp::scan(rest).and_then(|scan| match scan {
                Scan::Complete(n) => {
                    resp::parse(&rest[..n]).map(|v| v.map(|(value, _)| (value, n)))
                }
                Scan::NeedAtLeast(n) => {
                    rs.need = n;
                    Ok(None)
                }
            }) {
                Ok(Some((value, n))) => {
                    used += n;
                    values.push(value);
                }
                Ok(None) => break,
                Err(resp::ParseError::Protocol(m)) => {
                    failure = Some(Error::Connection(format!(
                        "Redis at {addr} sent an unreadable reply ({m})"
                    )));
                    break;
                }
            }
        }
        rs.buf.copy_within(used..rs.filled, 0);
        rs.filled -= used;
        if values.is_empty() {
            return failure.map_or(Ok(()), Err);
        }
        let mut done = Vec::with_capacity(values.len());
        {
            let mut st = lock(&self.state);
            for value in values {
                let Some(front) = st.waiting.front_mut() else {
                    failure = Some(Error::Internal(format!(
                        "Redis at {addr} sent a reply nobody asked for"
                    )));
                    break;
                };
                if let Replies::One = front.replies {
                    if let Some(w) = st.waiting.pop_front() {
                        done.push((w.slot, w.queue, value));
                    }
                } else {
                    front.got.push(value);
                    if front.got.len() == front.replies.count() {
                        if let Some(w) = st.waiting.pop_front() {
                            done.push((w.slot, w.queue, Value::Array(w.got)));
                        }
                    }
                }
            }
        }
        for (slot, queue, value) in done {
            slot.complete(Ok(value), &queue);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Fail every waiting command and mark the connection unusable.
    fn break_with(&self, err: &Error) {
        let failed = {
            let mut st = lock(&self.state);
            st.phase = Phase::Broken;
            st.cause = Some(err.clone());
            st.outbuf = Vec::new();
            std::mem::take(&mut st.waiting)
        };
        // An idle writer waits on the Notify, not the socket: wake it so it sees Broken and
        // ends, releasing the connection.
        self.wake_writer.notify_one();
        if let Some(stream) = self.stream.get() {
            // Wake the other task; the descriptor stays open until the Conn is freed.
            // SAFETY: shutdown on a descriptor we own; no memory is involved.
            unsafe {
                libc::shutdown(stream.fd(), libc::SHUT_RDWR);
            }
        }
        for w in failed {
            w.slot.complete(Err(err.clone()), &w.queue);
        }
    }
}

/// Ends a connection's tasks cleanly even if one of them panics.
struct BreakOnDrop(Arc<Conn>, Arc<str>);

impl Drop for BreakOnDrop {
    fn drop(&mut self) {
        let broken = matches!(lock(&self.0.state).phase, Phase::Broken);
        if !broken {
            self.0.break_with(&Error::Internal(format!(
                "the connection task for {} stopped unexpectedly",
                self.1
            )));
        }
    }
}

/// The multiplexed connection of one client, remade on demand.
pub struct Mux {
    config: Arc<MuxConfig>,
    current: Mutex<Option<(u64, Arc<Conn>)>>,
}

impl Mux {
    pub fn new(config: Arc<MuxConfig>) -> Self {
        Mux { config, current: Mutex::new(None) }
    }

    /// The live connection, or a new one being made.
    fn conn(&self) -> Result<Arc<Conn>> {
        let generation = runtime::generation();
        let mut current = lock(&self.current);
        if let Some((g, conn)) = current.as_ref() {
            if *g == generation && !matches!(lock(&conn.state).phase, Phase::Broken) {
                return Ok(Arc::clone(conn));
            }
        }
        if let Some((g, stale)) = current.take() {
            if g != generation {
                // The parent's connection: its socket is registered with the parent's reactor,
                // and touching it here would disturb the parent. Leak it.
                std::mem::forget(stale);
            }
        }
        let conn = Arc::new(Conn {
            state: Mutex::new(State {
                phase: Phase::Connecting,
                waiting: VecDeque::new(),
                outbuf: Vec::new(),
                writing: false,
                cause: None,
            }),
            wake_writer: Notify::new(),
            stream: std::sync::OnceLock::new(),
            reading: Mutex::new(ReadState { buf: vec![0; 64 * 1024], filled: 0, need: 0 }),
            addr: Arc::clone(&self.config.addr),
        });
        runtime::get()?.spawn(connect(Arc::clone(&conn), Arc::clone(&self.config)));
        *current = Some((generation, Arc::clone(&conn)));
        Ok(conn)
    }

    /// Send packed commands; the outcome lands in `slot` (one value, or a list of them).
    pub fn submit(
        &self,
        packed: &[u8],
        replies: Replies,
        slot: Arc<Slot>,
        queue: Arc<LoopQueue>,
    ) -> Result<Arc<Conn>> {
        let conn = self.conn()?;
        if replies.count() == 0 {
            // Nothing will answer: a waiter in the FIFO would take someone else's reply.
            slot.complete(Ok(Value::Array(Vec::new())), &queue);
            return Ok(conn);
        }
        let mut st = lock(&conn.state);
        let budget = match st.phase {
            Phase::Connecting => self.config.connect_timeout + self.config.response_timeout,
            _ => self.config.response_timeout,
        };
        let was_idle = st.waiting.is_empty();
        st.waiting.push_back(Waiting {
            slot,
            queue,
            replies,
            got: Vec::new(),
            deadline: Instant::now() + budget,
        });
        match st.phase {
            Phase::Ready(fd) if was_idle && st.outbuf.is_empty() && !st.writing => {
                // Nothing in flight: write from this thread, saving a hop to the I/O thread.
                let sent = send_now(fd, packed);
                if sent < packed.len() {
                    st.outbuf.extend_from_slice(&packed[sent..]);
                    conn.wake_writer.notify_one();
                }
            }
            Phase::Ready(_) => {
                // Replies are outstanding: batch with whatever else comes this tick.
                let wake = st.outbuf.is_empty() && !st.writing;
                st.outbuf.extend_from_slice(packed);
                if wake {
                    conn.wake_writer.notify_one();
                }
            }
            Phase::Connecting => st.outbuf.extend_from_slice(packed),
            Phase::Broken => {
                let w = st.waiting.pop_back();
                let cause = st.cause.clone().unwrap_or_else(|| {
                    Error::Connection(format!(
                        "Connection to Redis at {} was lost",
                        self.config.addr
                    ))
                });
                drop(st);
                if let Some(w) = w {
                    w.slot.complete(Err(cause), &w.queue);
                }
                return Ok(conn);
            }
        }
        drop(st);
        Ok(conn)
    }
}

/// Write what the socket takes right now without blocking; return how much that was.
fn send_now(fd: RawFd, buf: &[u8]) -> usize {
    // SAFETY: sends from a valid slice on a descriptor kept open by its `Conn`.
    let n = unsafe {
        libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    // Errors (other than a full buffer) resurface in the writer or the reader, which own them.
    usize::try_from(n).unwrap_or(0)
}

async fn open(config: &MuxConfig) -> std::io::Result<Stream> {
    let stream = match &config.target {
        Target::Tcp(host, port) => {
            let tcp = TcpStream::connect((host.as_str(), *port)).await?;
            tcp.set_nodelay(true)?;
            Stream::Tcp(tcp)
        }
        Target::Unix(path) => Stream::Unix(UnixStream::connect(path).await?),
    };
    if config.handshake_replies > 0 {
        stream.write_all(&config.handshake).await?;
        for reply in stream.read_replies(config.handshake_replies).await? {
            if let Value::ServerError(err) = reply {
                let text = err.to_string();
                let kind = if text.contains("WRONGPASS")
                    || text.contains("NOAUTH")
                    || text.contains("AUTH")
                {
                    std::io::ErrorKind::PermissionDenied
                } else {
                    std::io::ErrorKind::InvalidInput
                };
                return Err(std::io::Error::new(kind, text));
            }
        }
    }
    Ok(stream)
}

async fn connect(conn: Arc<Conn>, config: Arc<MuxConfig>) {
    let _guard = BreakOnDrop(Arc::clone(&conn), Arc::clone(&config.addr));
    let addr = &config.addr;
    let opened = tokio::time::timeout(config.connect_timeout, open(&config)).await;
    let stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let err = match e.kind() {
                std::io::ErrorKind::PermissionDenied => Error::Connection(format!(
                    "Authentication to Redis at {addr} failed: check the username and password"
                )),
                std::io::ErrorKind::InvalidInput => {
                    Error::Response(format!("Redis at {addr} refused the connection settings: {e}"))
                }
                _ => Error::Connection(format!("Connection to Redis at {addr} failed: {e}")),
            };
            return conn.break_with(&err);
        }
        Err(_) => {
            return conn.break_with(&Error::Connection(format!(
                "Connection to Redis at {addr} timed out after {:?}",
                config.connect_timeout
            )));
        }
    };
    let fd = stream.fd();
    if conn.stream.set(stream).is_err() {
        return conn.break_with(&Error::Internal("connection opened twice".into()));
    }
    {
        let mut st = lock(&conn.state);
        if matches!(st.phase, Phase::Broken) {
            return;
        }
        st.phase = Phase::Ready(fd);
        // Commands queued while connecting had connect + response time; now connected, they
        // get one response timeout from here (a stalled server costs one timeout, not two).
        let answer_by = Instant::now() + config.response_timeout;
        for w in &mut st.waiting {
            w.deadline = w.deadline.min(answer_by);
        }
        if !st.outbuf.is_empty() {
            conn.wake_writer.notify_one();
        }
    }
    tokio::spawn(write_loop(Arc::clone(&conn), Arc::clone(addr)));
    read_loop(conn, Arc::clone(addr), config.response_timeout).await;
}

async fn write_loop(conn: Arc<Conn>, addr: Arc<str>) {
    let _guard = BreakOnDrop(Arc::clone(&conn), Arc::clone(&addr));
    let Some(stream) = conn.stream.get() else { return };
    loop {
        conn.wake_writer.notified().await;
        loop {
            let chunk = {
                let mut st = lock(&conn.state);
                if matches!(st.phase, Phase::Broken) {
                    return;
                }
                if st.outbuf.is_empty() {
                    st.writing = false;
                    break;
                }
                st.writing = true;
                std::mem::take(&mut st.outbuf)
            };
            if let Err(e) = stream.write_all(&chunk).await {
                return conn.break_with(&Error::Connection(format!(
                    "Connection to Redis at {addr} broke: {e}"
                )));
            }
        }
    }
}

async fn read_loop(conn: Arc<Conn>, addr: Arc<str>, response_timeout: Duration) {
    let _guard = BreakOnDrop(Arc::clone(&conn), Arc::clone(&addr));
    let Some(stream) = conn.stream.get() else { return };
    loop {
        // Idle, re-check every quarter timeout: a command written from a caller's thread does
        // not wake us, so its deadline is noticed at the latest that much late.
        let deadline = lock(&conn.state)
            .waiting
            .front()
            .map_or_else(|| Instant::now() + response_timeout / 4, |w| w.deadline);
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await
        {
            Ok(ready) => ready,
            Err(_) => {
                let late =
                    lock(&conn.state).waiting.front().is_some_and(|w| w.deadline <= Instant::now());
                if late {
                    return conn.break_with(&Error::Timeout(format!(
                        "Redis at {addr} did not answer within {response_timeout:?}"
                    )));
                }
                continue;
            }
        };
        if let Err(e) = ready {
            return conn.break_with(&Error::Connection(format!(
                "Connection to Redis at {addr} broke: {e}"
            )));
        }
        let outcome = {
            let mut rs = lock(&conn.reading);
            let rs = &mut *rs;
            match stream.try_read(rs.room()) {
                Ok(0) => Err(Error::Connection(format!(
                    "Connection to Redis at {addr} was closed by the server"
                ))),
                Ok(n) => {
                    rs.filled += n;
                    conn.absorb(rs)
                }
                // A polling caller may have taken the bytes first.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
                Err(e) => {
                    Err(Error::Connection(format!("Connection to Redis at {addr} broke: {e}")))
                }
            }
        };
        if let Err(err) = outcome {
            return conn.break_with(&err);
        }
    }
}
