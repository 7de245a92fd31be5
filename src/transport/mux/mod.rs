//! One multiplexed connection per server for all async traffic of a process.
//!
//! Commands are written in order and their replies read back in order (RESP is strictly
//! ordered), so a FIFO of waiting slots is all the bookkeeping needed. An idle connection is
//! written directly from the calling thread (no thread hop for a lone request); while replies
//! are outstanding, new commands are buffered and one writer task flushes them in batches.
//! One reader task parses replies and completes slots. A broken or stalled connection fails
//! every waiting command with a typed error and is replaced on the next command, with one
//! exception: a plain read written on an idle connection that the server turns out to have
//! closed (idle timeout, CLIENT KILL, a proxy) is sent once more on the new connection, and a
//! write on an idle connection first checks the server has not closed it (the same rules as
//! the sync path's, `thread_conns`).
//!
//! The connection's tasks (connect, the writer, the reader) are `tasks.rs`'; `fifo.rs` matches
//! replies to waiters, `done.rs` says who waits, `stream.rs` opens the socket.

mod done;
pub(in crate::transport) mod fifo;
mod pushed;
mod stream;
mod tasks;

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::bridge::{LoopQueue, Poller, Slot};
use crate::errors::{Error, Result};
use crate::ffi;
use crate::proto::{ReadBuf, Replies};
use crate::runtime::{self, PerFork};
use crate::stats::{Open, Stats};
use crate::transport::Endpoint;

pub use done::{Done, Ordered, Seen};
use fifo::Fifo;
pub use pushed::{PushSink, Pushed};
use stream::Stream;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A command waiting for its reply.
struct Waiter {
    done: Done,
    deadline: Instant,
    /// A plain read's bytes, written on an idle connection: sent once more on a new connection
    /// if the server closed this one before answering.
    replay: Option<Vec<u8>>,
}

enum Phase {
    Connecting,
    Ready,
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
    /// Commands in `outbuf` waiting for a loop's flush.
    batched: usize,
    /// Why the connection broke, for commands that arrive just after.
    cause: Option<Error>,
    /// The generation of the credentials the connection authenticated with
    /// (`Handshake::reauth`).
    auth_gen: u64,
}

pub struct Conn {
    state: Mutex<State>,
    wake_writer: Notify,
    stream: std::sync::OnceLock<Stream>,
    /// Whoever reads the socket (the reader task, or an awaiting caller polling) holds this.
    reading: Mutex<ReadBuf>,
    addr: Arc<str>,
    stats: Arc<Stats>,
    /// Counts the connection open once it is, until it is freed.
    open: std::sync::OnceLock<Open>,
    /// Where a replayed read goes.
    mux: Weak<Shared>,
    /// A RESP3 connection's pushes (the tracking connection, `pushed.rs`).
    sink: Option<Arc<dyn PushSink>>,
}

impl Poller for Conn {
    /// Read and deliver replies from the calling thread, if no one else is reading: an
    /// awaiting coroutine that is polling anyway picks its reply up without waiting for the
    /// I/O thread to wake.
    fn poll(&self) {
        if !matches!(lock(&self.state).phase, Phase::Ready) {
            return;
        }
        let Some(stream) = self.stream.get() else { return };
        let Ok(mut rs) = self.reading.try_lock() else { return };
        // EOF and errors are left for the reader task to report.
        if let Ok(n @ 1..) = stream.recv_now(&mut rs) {
            self.stats.received(n);
            if let Err(err) = self.absorb(&mut rs) {
                self.break_with(&err);
            }
        }
    }
}

impl Conn {
    /// Write the buffered bytes from this thread, unless the writer task has them.
    fn flush_now(&self) {
        let mut st = lock(&self.state);
        let Phase::Ready = st.phase else { return };
        if st.writing || st.outbuf.is_empty() {
            return;
        }
        self.send_buffered(&mut st);
    }

    /// Write what the socket takes of the buffered bytes now; the writer task gets the rest.
    fn send_buffered(&self, st: &mut State) {
        st.batched = 0;
        let (sent, unsent) = self.send_now(&st.outbuf);
        st.outbuf.drain(..sent.min(st.outbuf.len()));
        if !st.outbuf.is_empty() || unsent {
            self.wake_writer.notify_one();
        }
    }

    /// Write from this thread what the socket takes now (see `Stream::send_now`).
    fn send_now(&self, buf: &[u8]) -> (usize, bool) {
        self.stream.get().map_or((0, false), |stream| stream.send_now(buf))
    }

    /// Parse the complete replies in the read buffer and hand them to their waiters.
    fn absorb(&self, rs: &mut ReadBuf) -> Result<()> {
        // Parse first, holding only `reading`: submitters wait on `state`, and must not wait
        // for a large reply to be parsed.
        let (values, unreadable) = rs.take_replies(&self.addr);
        if values.is_empty() {
            return unreadable.map_or(Ok(()), Err);
        }
        if let Some(sink) = &self.sink {
            self.absorb_in_order(values, sink.as_ref())?;
            return unreadable.map_or(Ok(()), Err);
        }
        let (answered, unasked) = lock(&self.state).waiting.deliver_all(values, &self.addr);
        for (w, value) in answered {
            w.done.complete(Ok(value));
        }
        unasked.or(unreadable).map_or(Ok(()), Err)
    }

    /// When a waiting command's time is up: the oldest's (they share one budget), or on the
    /// tracking connection, whose probes have a longer one than the writes behind them, the
    /// earliest of all (a few wait there).
    fn earliest_deadline(&self) -> Option<Instant> {
        let st = lock(&self.state);
        match self.sink {
            None => st.waiting.front().map(|w| w.deadline),
            Some(_) => st.waiting.iter().map(|w| w.deadline).min(),
        }
    }

    /// `absorb` on a connection with pushes: each push and each reply handled in the order
    /// they came, a call's code run before anything after its reply (see `pushed.rs`).
    fn absorb_in_order(&self, values: Vec<redis::Value>, sink: &dyn PushSink) -> Result<()> {
        let handled = self.handle_in_order(values, sink);
        sink.batch_end();
        handled
    }

    fn handle_in_order(&self, values: Vec<redis::Value>, sink: &dyn PushSink) -> Result<()> {
        for value in values {
            if let redis::Value::Push { kind, data } = value {
                sink.push(kind, data);
                continue;
            }
            let delivered =
                lock(&self.state).waiting.deliver_seen(value, |w, at, v| w.done.seen(at, v));
            match delivered {
                Ok(Some((w, answer))) => w.done.complete(Ok(answer)),
                Ok(None) => {}
                Err(fifo::Unsolicited) => {
                    return Err(Error::Internal(format!(
                        "Redis at {} sent a reply nobody asked for",
                        self.addr
                    )))
                }
            }
        }
        Ok(())
    }

    /// Fail every waiting command and mark the connection unusable; a read kept for replay
    /// (see `Waiter::replay`) goes to a new connection instead if the connection was lost.
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
        let lost = matches!(err, Error::Connection(_));
        let mux = self.mux.upgrade();
        for w in failed {
            match (w.replay, &mux) {
                (Some(packed), Some(mux)) if lost => mux.replay(packed, w.done, w.deadline),
                _ => w.done.complete(Err(err.clone())),
            }
        }
        if let Some(sink) = &self.sink {
            sink.lost();
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

/// While a loop's tasks keep sending, what they buffered is written once this many commands
/// wait, without waiting for the loop's flush: the server starts on them while the loop goes
/// on. (Below it, one write a loop iteration; a real server's iteration rarely sends more.)
const EARLY_FLUSH: usize = 32;

/// The multiplexed connection of one client, remade on demand.
pub struct Mux(Arc<Shared>);

/// A client's connection and its settings, shared with the connection (for replays).
struct Shared {
    config: Arc<Endpoint>,
    /// Where pushes go: set for the tracking connection, which speaks RESP3.
    sink: Option<Arc<dyn PushSink>>,
    /// Per fork generation: a child leaks its parent's connection (its socket is registered
    /// with the parent's reactor, and touching it would disturb the parent).
    current: PerFork<Mutex<Option<Arc<Conn>>>>,
}

impl Mux {
    pub fn new(config: Arc<Endpoint>) -> Self {
        Mux(Arc::new(Shared { config, sink: None, current: PerFork::new() }))
    }

    /// Send packed commands; the outcome lands in `slot` (one value, or a list of them).
    /// From an event loop's thread: while replies are outstanding, the bytes wait for the
    /// loop's `flush_deferred` (what the loop's other tasks send meanwhile goes in the same
    /// write); the returned flag says that flush must be scheduled. `replayable`: a plain
    /// read, which may be sent again if the connection turns out closed.
    pub fn submit(
        &self,
        packed: Vec<u8>,
        replies: Replies,
        replayable: bool,
        slot: Arc<Slot>,
        queue: Arc<LoopQueue>,
    ) -> Result<(Arc<Conn>, bool)> {
        // A lone command (nothing else of this loop in flight) is written at once: nothing
        // would share its write, and the loop need not come round first. The others wait for
        // the loop's own flush at the end of this iteration, with whatever its other tasks send
        // meanwhile: one write and one server read for them all, and no I/O-thread wake-up
        // (`EARLY_FLUSH` bounds how many wait). Waking the I/O thread to write each command in
        // parallel with the loop, as this did while the host had a core free, cost more on
        // every count measured: in real servers (granian ASGI, uvicorn) 2-19% fewer requests/s
        // with the server reading 1.5-5x as often; in steady loops of 50 tasks fewer calls/s
        // at 1.3-1.4x the client CPU per call.
        let flusher = (queue.in_flight() > 0).then(|| Arc::clone(&queue));
        let mode = if replayable { Idle::Replay } else { Idle::Check };
        let done = Done::Loop { slot, queue };
        let conn = self.0.conn()?;
        Ok(self.0.submit_on(conn, packed, replies, done, flusher, mode, None))
    }
}

/// What a command written on an idle connection does about the server having closed it
/// unseen (the reader task has not yet read the end of the stream).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// A plain read: written at once, its bytes kept to send again if the connection is lost.
    Replay,
    /// Anything else: the socket is asked first (one system call, as the sync path does), and
    /// a closed connection replaced before the command goes out.
    Check,
    /// A replay, or a write already checked once: sent as it is.
    Send,
}

impl Shared {
    /// The live connection, or a new one being made.
    fn conn(self: &Arc<Self>) -> Result<Arc<Conn>> {
        let mut current = lock(self.current.get());
        if let Some(conn) = current.as_ref() {
            if !matches!(lock(&conn.state).phase, Phase::Broken) {
                return Ok(Arc::clone(conn));
            }
        }
        if current.take().is_some() {
            self.config.stats.reconnected();
        }
        let conn = Arc::new(Conn {
            state: Mutex::new(State {
                phase: Phase::Connecting,
                waiting: Fifo::new(),
                outbuf: Vec::new(),
                writing: false,
                batched: 0,
                cause: None,
                auth_gen: 0,
            }),
            wake_writer: Notify::new(),
            stream: std::sync::OnceLock::new(),
            reading: Mutex::new(ReadBuf::new(64 * 1024)),
            addr: Arc::clone(&self.config.addr),
            stats: Arc::clone(&self.config.stats),
            open: std::sync::OnceLock::new(),
            mux: Arc::downgrade(self),
            sink: self.sink.clone(),
        });
        runtime::get()?.spawn(tasks::connect(Arc::clone(&conn), Arc::clone(&self.config)));
        *current = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Send a read kept for replay on a new connection, by the original deadline plus a
    /// connect timeout (the bound of a command that finds its connection being made).
    fn replay(self: &Arc<Self>, packed: Vec<u8>, done: Done, deadline: Instant) {
        match self.conn() {
            Ok(conn) => {
                let deadline = Some(deadline + self.config.connect_timeout);
                self.submit_on(conn, packed, Replies::One, done, None, Idle::Send, deadline);
            }
            Err(err) => done.complete(Err(err)),
        }
    }

    /// `Mux::submit` on a given connection; `deadline` overrides the usual budget.
    #[allow(clippy::too_many_arguments)]
    fn submit_on(
        self: &Arc<Self>,
        conn: Arc<Conn>,
        packed: Vec<u8>,
        replies: Replies,
        done: Done,
        flusher: Option<Arc<LoopQueue>>,
        idle: Idle,
        deadline: Option<Instant>,
    ) -> (Arc<Conn>, bool) {
        let defer = flusher.is_some();
        let mut st = lock(&conn.state);
        let direct = matches!(st.phase, Phase::Ready)
            && st.waiting.is_empty()
            && !defer
            && st.outbuf.is_empty()
            && !st.writing;
        if let (true, Idle::Check) = (direct, idle) {
            if conn.stream.get().is_some_and(Stream::has_pending_input) {
                // Idle, so anything to read is the end of the stream (or bytes nobody asked
                // for): the server closed the connection and the reader has not seen it yet.
                drop(st);
                conn.break_with(&Error::Connection(format!(
                    "Connection to Redis at {} was closed by the server",
                    self.config.addr
                )));
                return match self.conn() {
                    Ok(fresh) => {
                        self.submit_on(fresh, packed, replies, done, flusher, Idle::Send, deadline)
                    }
                    Err(err) => {
                        done.complete(Err(err));
                        (conn, false)
                    }
                };
            }
        }
        let budget = match st.phase {
            Phase::Connecting => self.config.connect_timeout + self.config.response_timeout,
            _ => self.config.response_timeout,
        };
        let deadline = deadline.unwrap_or_else(|| Instant::now() + budget);
        if replies.count() == 0 {
            drop(st);
            done.complete(Ok(redis::Value::Array(Vec::new())));
            return (conn, false);
        }
        // Credentials changed since the connection authenticated: AUTH with the new ones goes
        // in front, in the same write, its reply for nobody (a connection still connecting
        // authenticates with what is current when its handshake goes out).
        let mut auth_len = 0;
        let mut packed = packed;
        if let Phase::Ready = st.phase {
            if let Some(mut auth) = self.config.handshake.reauth(&mut st.auth_gen) {
                let waiter = Waiter { done: Done::Discard(None), deadline, replay: None };
                st.waiting.push(waiter, Replies::One);
                auth_len = auth.len();
                auth.extend_from_slice(&packed);
                packed = auth;
            }
        }
        st.waiting.push(Waiter { done, deadline, replay: None }, replies);
        let mut schedule = false;
        match st.phase {
            Phase::Ready if direct => {
                self.config.stats.sent(packed.len());
                // Nothing in flight: write from this thread, saving a hop to the I/O thread.
                let (sent, unsent) = conn.send_now(&packed);
                if sent < packed.len() || unsent {
                    st.outbuf.extend_from_slice(&packed[sent.min(packed.len())..]);
                    conn.wake_writer.notify_one();
                }
                if idle == Idle::Replay {
                    if let Some(w) = st.waiting.back_mut() {
                        w.replay = Some(match auth_len {
                            0 => packed,
                            n => packed[n..].to_vec(),
                        });
                    }
                }
            }
            Phase::Ready => {
                self.config.stats.sent(packed.len());
                // Replies are outstanding. Bytes the writer task is writing are its to finish;
                // otherwise whoever adds to the buffer sees it written, and never counts on
                // another loop's flush (that loop may have stopped and never flush).
                if st.outbuf.is_empty() && !st.writing {
                    st.batched = 0;
                }
                st.outbuf.extend_from_slice(&packed);
                if !st.writing {
                    if let Some(queue) = flusher {
                        // Batch with whatever else this loop sends this iteration.
                        schedule = defer_flush(&conn, queue);
                        st.batched += 1;
                        if st.batched >= EARLY_FLUSH {
                            // The loop's flush finds what is left, if anything.
                            conn.send_buffered(&mut st);
                        }
                    } else {
                        conn.send_buffered(&mut st);
                    }
                }
            }
            Phase::Connecting => {
                self.config.stats.sent(packed.len());
                st.outbuf.extend_from_slice(&packed);
            }
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
                    w.done.complete(Err(cause));
                }
                return (conn, false);
            }
        }
        drop(st);
        (conn, schedule)
    }
}

/// A connection with bytes a loop's flush will write: the fork generation it belongs to (a
/// forked child must never write a parent's socket), and the loop whose flush was counted on.
type Deferred = (u64, Arc<Conn>, Arc<LoopQueue>);

thread_local! {
    /// Connections with bytes this thread's event loops will write at their next flush.
    static DEFERRED: std::cell::RefCell<Vec<Deferred>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Leave a connection's buffered bytes (its own and any others waiting) to the next
/// `flush_deferred` of this thread; true if `queue`'s loop must schedule one. A loop that
/// stopped before its flush ran leaves its entries here: the next flush of any loop of this
/// thread writes them.
fn defer_flush(conn: &Arc<Conn>, queue: Arc<LoopQueue>) -> bool {
    DEFERRED
        .try_with(|deferred| {
            let mut deferred = deferred.borrow_mut();
            // The loop's later commands this iteration find their entry last: its flush is
            // claimed already, and nothing more is needed.
            if deferred
                .last()
                .is_some_and(|(_, c, q)| Arc::ptr_eq(c, conn) && Arc::ptr_eq(q, &queue))
            {
                return false;
            }
            let schedule = queue.claim_flush();
            deferred.push((runtime::generation(), Arc::clone(conn), queue));
            schedule
        })
        .unwrap_or_else(|_| {
            conn.wake_writer.notify_one(); // thread shutting down: the writer takes them
            false
        })
}

/// Write what this thread's event loops deferred: one write per connection for everything
/// their tasks sent since the last flush. What the socket does not take goes to the writer.
pub fn flush_deferred() {
    let conns = DEFERRED.try_with(|d| std::mem::take(&mut *d.borrow_mut())).unwrap_or_default();
    let generation = runtime::generation();
    for (born, conn, queue) in conns {
        queue.flushed();
        if born == generation {
            conn.flush_now();
        }
    }
}
