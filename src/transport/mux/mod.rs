//! One multiplexed connection per server for all async traffic of a process.
//!
//! Commands are written in order and their replies read back in order (RESP is strictly
//! ordered), so a FIFO of waiting slots is all the bookkeeping needed. An idle connection is
//! written directly from the calling thread (no thread hop for a lone request); while replies
//! are outstanding, new commands are buffered and one writer task flushes them in batches.
//! One reader task parses replies and completes slots. A broken or stalled connection fails
//! every waiting command with a typed error and is replaced on the next command.

mod fifo;
mod stream;

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::Interest;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::bridge::{LoopQueue, Poller, Slot};
use crate::errors::{Error, Result};
use crate::ffi;
use crate::proto::read_buf::unreadable;
use crate::proto::{ReadBuf, Replies};
use crate::runtime;
use crate::transport::PlainConfig;

use fifo::{Fifo, Unsolicited};
use stream::Stream;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A command waiting for its reply.
struct Waiter {
    slot: Arc<Slot>,
    queue: Arc<LoopQueue>,
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
    waiting: Fifo<Waiter>,
    /// Bytes not yet written, in order.
    outbuf: Vec<u8>,
    /// The writer task is writing a chunk taken from `outbuf`.
    writing: bool,
    /// Why the connection broke, for commands that arrive just after.
    cause: Option<Error>,
}

pub struct Conn {
    state: Mutex<State>,
    wake_writer: Notify,
    stream: std::sync::OnceLock<Stream>,
    /// Whoever reads the socket (the reader task, or an awaiting caller polling) holds this.
    reading: Mutex<ReadBuf>,
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
        // EOF and errors are left for the reader task to report.
        if let Ok(n @ 1..) = ffi::recv_nonblocking(fd, rs.room()) {
            rs.advance(n);
            if let Err(err) = self.absorb(&mut rs) {
                self.break_with(&err);
            }
        }
    }
}

impl Conn {
    /// Parse the complete replies in the read buffer and hand them to their waiters.
    fn absorb(&self, rs: &mut ReadBuf) -> Result<()> {
        // Parse the complete replies first, holding only `reading`: submitters wait on
        // `state`, and must not wait for a large reply to be parsed.
        let mut values = Vec::new();
        let mut failure = None;
        loop {
            match rs.next_reply() {
                Ok(Some(value)) => values.push(value),
                Ok(None) => break,
                Err(e) => {
                    failure = Some(unreadable(&self.addr, e));
                    break;
                }
            }
        }
        rs.compact();
        if values.is_empty() {
            return failure.map_or(Ok(()), Err);
        }
        let mut done = Vec::with_capacity(values.len());
        {
            let mut st = lock(&self.state);
            for value in values {
                match st.waiting.deliver(value) {
                    Ok(Some(answered)) => done.push(answered),
                    Ok(None) => {}
                    Err(Unsolicited) => {
                        failure = Some(Error::Internal(format!(
                            "Redis at {} sent a reply nobody asked for",
                            self.addr
                        )));
                        break;
                    }
                }
            }
        }
        for (w, value) in done {
            w.slot.complete(Ok(value), &w.queue);
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
            st.waiting.take_all()
        };
        // An idle writer waits on the Notify, not the socket: wake it so it sees Broken and
        // ends, releasing the connection.
        self.wake_writer.notify_one();
        if let Some(stream) = self.stream.get() {
            // Wake the other task; the descriptor stays open until the Conn is freed.
            ffi::shutdown(stream.fd());
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
    config: Arc<PlainConfig>,
    current: Mutex<Option<(u64, Arc<Conn>)>>,
}

impl Mux {
    pub fn new(config: Arc<PlainConfig>) -> Self {
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
                waiting: Fifo::new(),
                outbuf: Vec::new(),
                writing: false,
                cause: None,
            }),
            wake_writer: Notify::new(),
            stream: std::sync::OnceLock::new(),
            reading: Mutex::new(ReadBuf::new(64 * 1024)),
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
        let mut st = lock(&conn.state);
        let budget = match st.phase {
            Phase::Connecting => self.config.connect_timeout + self.config.response_timeout,
            _ => self.config.response_timeout,
        };
        let was_idle = st.waiting.is_empty();
        let waiter = Waiter { slot, queue, deadline: Instant::now() + budget };
        if let Some((w, nothing)) = st.waiting.push(waiter, replies) {
            drop(st);
            w.slot.complete(Ok(nothing), &w.queue);
            return Ok(conn);
        }
        match st.phase {
            Phase::Ready(fd) if was_idle && st.outbuf.is_empty() && !st.writing => {
                // Nothing in flight: write from this thread, saving a hop to the I/O thread.
                let sent = ffi::send_nonblocking(fd, packed);
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

async fn connect(conn: Arc<Conn>, config: Arc<PlainConfig>) {
    let _guard = BreakOnDrop(Arc::clone(&conn), Arc::clone(&config.addr));
    let addr = &config.addr;
    let opened = tokio::time::timeout(config.connect_timeout, Stream::open(&config)).await;
    let stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => return conn.break_with(&err),
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
        for w in st.waiting.iter_mut() {
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
                    rs.advance(n);
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
