//! One connection for the sync calls of every thread of a process (`SYNC_CONNECTIONS:
//! "shared"`), with no I/O thread in between: leader and followers.
//!
//! A caller writes its command from its own thread (under the connection's lock, so the
//! order on the wire is the order of the waiting list) and then either leads or follows. The
//! leader is the one thread reading the socket: it reads whatever replies have arrived, hands
//! each to its waiter in order (RESP answers strictly in order) and keeps reading until its own
//! reply is in; then it passes the lead to the oldest caller still waiting, if any. A follower
//! sleeps on its own condition variable until the leader gives it its reply, or the lead.
//!
//! So the threads' commands reach the server on one connection (the server reads what has
//! queued up in one read and answers it in one write), no thread is woken that has nothing to
//! do, and a lone thread pays exactly what it pays on a connection of its own: write, poll
//! briefly while a core is free (`Spin`), read.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::Value;

use crate::errors::{Error, Result};
use crate::proto::{ReadBuf, Replies, Reply, Request};
use crate::runtime::PerFork;
use crate::stats::Open;
use crate::transport::mux::fifo::Fifo;
use crate::transport::Endpoint;

use super::spin::Spin;
use super::{io_error, Blocking, Socket};

/// Past the response timeout, how long a follower waits for a leader that failed to answer
/// it (only a bug below could need this).
const GUARD: Duration = Duration::from_millis(250);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The process' shared sync connection to one server, remade on demand.
pub struct Shared {
    config: Arc<Endpoint>,
    /// Per fork generation: a child never locks its parent's.
    current: PerFork<Mutex<Current>>,
}

#[derive(Default)]
struct Current {
    line: Option<Arc<Line>>,
    /// The last one broke: the next one made is a reconnect.
    lost: bool,
    /// When the last connect failed, and why: callers that queued behind that attempt get its
    /// error instead of each trying in turn (which, against an unreachable host, would make
    /// the last of N callers wait N connect timeouts).
    failed: Option<(Instant, Error)>,
}

impl Shared {
    pub fn new(config: Arc<Endpoint>) -> Self {
        Shared { config, current: PerFork::new() }
    }

    /// One request from the calling thread (GIL released by the caller). A read that meets a
    /// connection closed under it (one that was reused, not just made) is sent once more on a
    /// new one, as on a connection per thread.
    pub fn call(&self, req: &Request) -> Result<Reply> {
        let (packed, replies) = req.pack();
        let (line, reused) = self.line()?;
        let outcome = line.call(&packed, replies);
        if reused && matches!(outcome, Err(Error::Connection(_))) && req.is_idempotent() {
            let (line, _) = self.line()?;
            return line.call(&packed, replies);
        }
        outcome
    }

    /// The live line and whether it was reused; a new one (connected here, within the
    /// connect timeout, while other callers wait for it) if it broke, went stale or is the
    /// parent's.
    fn line(&self) -> Result<(Arc<Line>, bool)> {
        let asked = Instant::now();
        let mut current = lock(self.current.get());
        if let Some(line) = current.line.as_ref() {
            if line.usable() {
                return Ok((Arc::clone(line), true));
            }
        }
        if let Some((at, err)) = &current.failed {
            if *at >= asked {
                return Err(err.clone());
            }
        }
        if current.line.take().is_some() {
            current.lost = true;
        }
        let line = match Blocking::connect(&self.config) {
            Ok(conn) => Arc::new(Line::new(conn)),
            Err(err) => {
                current.failed = Some((Instant::now(), err.clone()));
                return Err(err);
            }
        };
        current.failed = None;
        if std::mem::take(&mut current.lost) {
            self.config.stats.reconnected();
        }
        current.line = Some(Arc::clone(&line));
        Ok((line, false))
    }
}

/// One caller's wait for its reply.
#[derive(Default)]
struct Ticket {
    state: Mutex<TicketState>,
    wake: Condvar,
}

#[derive(Default)]
struct TicketState {
    outcome: Option<Result<Value>>,
    /// The reading passed to this caller.
    lead: bool,
    /// The caller sleeps on `wake` (a notification is needed).
    asleep: bool,
    /// The caller gave up waiting: it will read nothing.
    gone: bool,
}

/// What a follower woke up to.
enum Woke {
    Outcome(Result<Value>),
    Lead,
}

impl Ticket {
    /// Give the caller its outcome. The wake-up comes after the lock is released: woken
    /// while the lock is still held, the caller would only wake to wait for it.
    fn complete(&self, outcome: Result<Value>) {
        let asleep = {
            let mut st = lock(&self.state);
            if st.outcome.is_some() {
                return;
            }
            st.outcome = Some(outcome);
            st.asleep
        };
        if asleep {
            self.wake.notify_one();
        }
    }

    /// Pass the reading to this caller, unless it left (woken, as above, after the lock).
    fn promote(&self) -> bool {
        let asleep = {
            let mut st = lock(&self.state);
            if st.gone || st.outcome.is_some() {
                return false;
            }
            st.lead = true;
            st.asleep
        };
        if asleep {
            self.wake.notify_one();
        }
        true
    }

    fn take(&self) -> Option<Result<Value>> {
        lock(&self.state).outcome.take()
    }

    /// Sleep until the reply or the lead comes, at most `limit`.
    fn wait(&self, limit: Duration, addr: &str) -> Woke {
        let deadline = Instant::now() + limit;
        let mut st = lock(&self.state);
        loop {
            if let Some(outcome) = st.outcome.take() {
                return Woke::Outcome(outcome);
            }
            if std::mem::take(&mut st.lead) {
                st.asleep = false;
                return Woke::Lead;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.gone = true;
                let message = format!("Redis at {addr} did not answer in time");
                return Woke::Outcome(Err(Error::Timeout(message)));
            }
            st.asleep = true;
            st = self
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

/// A command on the line: who waits for its replies (nobody, for a handshake's), and by when.
struct Waiting {
    ticket: Option<Arc<Ticket>>,
    deadline: Instant,
}

struct LineState {
    waiting: Fifo<Waiting>,
    /// A caller is reading (or has been handed the reading and is about to).
    leader: bool,
    broken: Option<Error>,
    /// The generation of the credentials the connection authenticated with (`Handshake::reauth`).
    auth_gen: u64,
}

/// The leader's side: the bytes read, and how long to poll before sleeping in the kernel.
struct Reader {
    buf: ReadBuf,
    spin: Spin,
}

/// Passes the reading on when the leader leaves: to the oldest caller still waiting, if any.
struct Handover<'a>(&'a Line);

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Replies may have been taken from the buffer and not handed out: whatever is
            // read next could reach the wrong caller. Nobody reads this line again.
            let err = Error::Connection(format!(
                "The connection to Redis at {} was closed after an internal error",
                self.0.config.addr
            ));
            let (failed, err) = self.0.break_line(&err);
            Line::complete_all(failed, &err);
        }
        let mut st = lock(&self.0.state);
        st.leader = false;
        if st.broken.is_none() {
            let promoted =
                st.waiting.iter_mut().filter_map(|w| w.ticket.as_ref()).any(|t| t.promote());
            st.leader = promoted;
        }
    }
}

/// One connection, shared by the process' threads.
struct Line {
    socket: Socket,
    config: Arc<Endpoint>,
    /// Held by a caller from queueing its waiter until its bytes are written: the order on the
    /// wire is the order of the waiting list, and the leader never waits for a write.
    writing: Mutex<()>,
    state: Mutex<LineState>,
    reader: Mutex<Reader>,
    /// Counts the connection open while it lives.
    _open: Open,
}

impl Line {
    fn new(conn: Blocking) -> Self {
        let Blocking { socket, config, buf, spin, _open, discard, auth_gen } = conn;
        let mut waiting = Fifo::new();
        if discard > 0 {
            // A handshake sent without waiting: its replies come first, for nobody.
            let deadline = Instant::now() + config.response_timeout;
            waiting.push(Waiting { ticket: None, deadline }, Replies::Many(discard));
        }
        let state = LineState { waiting, leader: false, broken: None, auth_gen };
        // The leader sleeps in a blocking read; it wakes this often while replies are overdue,
        // to fail them once the oldest one's deadline has passed.
        let recheck = (config.response_timeout / 4).max(Duration::from_millis(1));
        // (If that fails, the connection's own response timeout stays: a coarser check.)
        let _ = socket.set_read_timeout(recheck);
        Line {
            socket,
            config,
            writing: Mutex::new(()),
            state: Mutex::new(state),
            reader: Mutex::new(Reader { buf, spin }),
            _open,
        }
    }

    /// Whether new commands may go on this line: not broken, and (if idle) not closed by the
    /// server meanwhile.
    fn usable(&self) -> bool {
        let st = lock(&self.state);
        if st.broken.is_some() {
            return false;
        }
        !(st.waiting.is_empty() && !st.leader && self.socket.has_pending_input())
    }

    fn call(&self, packed: &[u8], replies: Replies) -> Result<Value> {
        let ticket = Arc::new(Ticket::default());
        let mut with_auth: Option<Vec<u8>> = None;
        let writing = lock(&self.writing);
        let lead = {
            let mut st = lock(&self.state);
            if let Some(err) = &st.broken {
                return Err(err.clone());
            }
            let deadline = Instant::now() + self.config.response_timeout;
            if replies.count() == 0 {
                return Ok(Value::Array(Vec::new()));
            }
            if let Some(mut auth) = self.config.handshake.reauth(&mut st.auth_gen) {
                // Credentials changed: AUTH with the new ones goes first, its reply for nobody.
                st.waiting.push(Waiting { ticket: None, deadline }, Replies::One);
                auth.extend_from_slice(packed);
                with_auth = Some(auth);
            }
            let waiting = Waiting { ticket: Some(Arc::clone(&ticket)), deadline };
            if let Some((_, nothing)) = st.waiting.push(waiting, replies) {
                return Ok(nothing);
            }
            !std::mem::replace(&mut st.leader, true)
        };
        let packed = with_auth.as_deref().unwrap_or(packed);
        if let Err(e) = self.socket.write_all_by(packed, self.config.response_timeout) {
            // (If the line broke meanwhile, that is the cause: a send cut short by it.)
            let (failed, err) = self.break_line(&io_error(&e, &self.config, "sending"));
            drop(writing);
            Self::complete_all(failed, &err);
            if lead {
                // Give the reading up: nobody is left to read for.
                lock(&self.state).leader = false;
            }
            return Err(err);
        }
        drop(writing);
        self.config.stats.sent(packed.len());
        if !lead {
            let limit = self.config.response_timeout + GUARD;
            match ticket.wait(limit, &self.config.addr) {
                Woke::Outcome(outcome) => return outcome,
                Woke::Lead => {}
            }
        }
        self.lead(&ticket)
    }

    /// Read and hand out replies until this caller's own is in; then pass the reading on
    /// (in a guard: even a panic below must not leave the line with a leader nobody is).
    fn lead(&self, mine: &Ticket) -> Result<Value> {
        let _handover = Handover(self);
        self.read_until(mine)
    }

    /// The leader's loop: poll briefly while that pays (see `Spin`), then sleep in the kernel
    /// until input comes; deliver what arrives; stop once `mine` has its outcome. A broken
    /// connection fails every waiter, `mine` included.
    fn read_until(&self, mine: &Ticket) -> Result<Value> {
        let mut reader = lock(&self.reader);
        let reader = &mut *reader;
        let window = reader.spin.window();
        let started = Instant::now();
        let mut polling = !window.is_zero();
        let mut caught = false;
        loop {
            if let Some(outcome) = mine.take() {
                if !window.is_zero() {
                    reader.spin.record(started.elapsed(), caught);
                }
                return outcome;
            }
            let got = if polling {
                self.socket.try_recv(&mut reader.buf)
            } else {
                self.socket.read_into(&mut reader.buf)
            };
            let step = match got {
                Ok(0) => Err(Error::Connection(format!(
                    "Connection to Redis at {} was closed by the server",
                    self.config.addr
                ))),
                Ok(n) => {
                    caught |= polling;
                    self.config.stats.received(n);
                    let absorbed = self.absorb(&mut reader.buf);
                    if polling {
                        absorbed // within the poll window: no deadline is near
                    } else {
                        // Replies that keep trickling in never let the blocking read time
                        // out: check the oldest deadline here too.
                        absorbed.and_then(|()| self.check_overdue())
                    }
                }
                Err(e) if polling && e.kind() == std::io::ErrorKind::WouldBlock => {
                    if started.elapsed() < window {
                        std::hint::spin_loop();
                    } else {
                        polling = false;
                    }
                    Ok(())
                }
                // The blocking read's timeout (`recheck`): fail the waiters once overdue.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    self.check_overdue()
                }
                Err(e) => Err(io_error(&e, &self.config, "waiting for the reply")),
            };
            if let Err(err) = step {
                let (failed, err) = self.break_line(&err);
                Self::complete_all(failed, &err);
            }
        }
    }

    /// A timeout error if the oldest command's deadline has passed.
    fn check_overdue(&self) -> Result<()> {
        let deadline = lock(&self.state).waiting.front().map(|w| w.deadline);
        if deadline.is_none_or(|d| d > Instant::now()) {
            return Ok(());
        }
        Err(Error::Timeout(format!(
            "Redis at {} did not answer within {:?}",
            self.config.addr, self.config.response_timeout
        )))
    }

    /// Parse the complete replies read so far and give each to its waiter.
    fn absorb(&self, buf: &mut ReadBuf) -> Result<()> {
        let addr = &self.config.addr;
        let (values, unreadable) = buf.take_replies(addr);
        if values.is_empty() {
            return unreadable.map_or(Ok(()), Err);
        }
        let (answered, unasked) = lock(&self.state).waiting.deliver_all(values, addr);
        for (w, answer) in answered {
            match w.ticket {
                Some(ticket) => ticket.complete(Ok(answer)),
                // A handshake's replies (or a reauthentication's): what the server offers.
                None => self.config.offers.learn_discarded(&answer),
            }
        }
        unasked.or(unreadable).map_or(Ok(()), Err)
    }

    /// Mark the line broken and take every waiter (to be failed, once the lock is released,
    /// with the error returned: the first that broke it). The first break also shuts the
    /// socket down, so a caller blocked in a send to a stalled server fails now too.
    fn break_line(&self, err: &Error) -> (Vec<Waiting>, Error) {
        let mut st = lock(&self.state);
        let first = st.broken.get_or_insert_with(|| {
            self.socket.shutdown();
            err.clone()
        });
        let first = first.clone();
        (st.waiting.take_all(), first)
    }

    fn complete_all(failed: Vec<Waiting>, err: &Error) {
        for w in failed {
            if let Some(ticket) = w.ticket {
                ticket.complete(Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::proto::handshake::Handshake;
    use crate::transport::Target;

    fn socket_path() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("redoxide-sh-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    fn config(path: &Path, timeout: Duration) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            target: Target::Unix(path.to_path_buf()),
            handshake: Handshake::new(None, None, 0, false),
            resp3: Handshake::resp3(None, None, 0, false, None),
            connect_timeout: Duration::from_secs(2),
            response_timeout: timeout,
            addr: "test".into(),
            stats: Arc::default(),
            offers: Arc::default(),
        })
    }

    fn get(key: &str) -> Request {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        Request::Cmd(cmd)
    }

    /// An echo-like server: answers each `GET k` with the bulk string `k`, reading as much as
    /// has arrived and answering it in one write (as Redis does), after `delay`.
    fn serve(path: &Path, delay: Duration) -> std::thread::JoinHandle<usize> {
        let listener = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut buf = ReadBuf::new(4096);
            let mut answered = 0;
            loop {
                let n = match sock.read(buf.room()) {
                    Ok(0) | Err(_) => return answered,
                    Ok(n) => n,
                };
                buf.advance(n);
                let mut out = Vec::new();
                while let Ok(Some(Value::Array(parts))) = buf.next_reply() {
                    let Some(Value::BulkString(key)) = parts.get(1) else { continue };
                    out.extend(format!("${}\r\n", key.len()).into_bytes());
                    out.extend(key);
                    out.extend(b"\r\n");
                    answered += 1;
                }
                buf.compact();
                std::thread::sleep(delay);
                if sock.write_all(&out).is_err() {
                    return answered;
                }
            }
        })
    }

    #[test]
    fn many_threads_get_their_own_replies_on_one_connection() {
        let path = socket_path();
        let server = serve(&path, Duration::from_micros(200));
        let shared = Arc::new(Shared::new(config(&path, Duration::from_secs(5))));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    for i in 0..300 {
                        let key = format!("k{t}-{i}");
                        let reply = shared.call(&get(&key)).unwrap();
                        assert_eq!(reply, Value::BulkString(key.into_bytes()));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // The server accepts one connection only: a second would never be answered.
        drop(shared);
        assert_eq!(server.join().unwrap(), 8 * 300);
        let _ = std::fs::remove_file(path);
    }

    /// A server that reads every command at once but answers one every `interval`, so
    /// replies keep arriving more often than the leader's blocking read would time out; it
    /// serves `connections` connections, one after another.
    fn serve_trickling(
        path: &Path,
        interval: Duration,
        connections: usize,
    ) -> std::thread::JoinHandle<()> {
        let listener = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            let served: Vec<_> = (0..connections)
                .map(|_| {
                    let (sock, _) = listener.accept().unwrap();
                    std::thread::spawn(move || trickle(sock, interval))
                })
                .collect();
            for conn in served {
                let _ = conn.join();
            }
        })
    }

    fn trickle(mut sock: std::os::unix::net::UnixStream, interval: Duration) {
        let mut writer = sock.try_clone().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let answering = std::thread::spawn(move || {
            for reply in rx {
                std::thread::sleep(interval);
                if writer.write_all(&reply).is_err() {
                    return;
                }
            }
        });
        let mut buf = ReadBuf::new(4096);
        while let Ok(n @ 1..) = sock.read(buf.room()) {
            buf.advance(n);
            while let Ok(Some(Value::Array(parts))) = buf.next_reply() {
                let Some(Value::BulkString(key)) = parts.get(1) else { continue };
                let mut reply = format!("${}\r\n", key.len()).into_bytes();
                reply.extend(key);
                reply.extend(b"\r\n");
                let _ = tx.send(reply);
            }
            buf.compact();
        }
        drop(tx);
        let _ = answering.join();
    }

    #[test]
    fn replies_that_trickle_in_late_still_time_the_waiters_out() {
        // One reply every 40 ms for 40 callers queued at once: the 11th is due at 440 ms,
        // past the 400 ms timeout, while the leader's blocking read (100 ms) never times out.
        let path = socket_path();
        let server = serve_trickling(&path, Duration::from_millis(40), 2);
        let timeout = Duration::from_millis(400);
        let shared = Arc::new(Shared::new(config(&path, timeout)));
        let started = Instant::now();
        let call = |i: usize| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let asked = Instant::now();
                (i, shared.call(&get(&format!("k{i}"))), asked.elapsed())
            })
        };
        let threads: Vec<_> = (0..40).map(call).collect();
        // Past every queued caller's timeout (and the followers' guard), one more caller:
        // it must not wait behind the replies the others gave up on.
        std::thread::sleep(Duration::from_millis(700).saturating_sub(started.elapsed()));
        let (_, late, took) = call(40).join().unwrap();
        assert_eq!(late.unwrap(), Value::BulkString(b"k40".to_vec()));
        // Without a deadline check on reads it waited for ~23 stale replies (~0.9 s).
        assert!(took < timeout + Duration::from_millis(250), "the late caller: {took:?}");
        let mut timed_out = 0;
        for t in threads {
            let (i, outcome, took) = t.join().unwrap();
            assert!(took < timeout + Duration::from_millis(600), "caller {i}: {took:?}");
            match outcome {
                Ok(reply) => assert_eq!(reply, Value::BulkString(format!("k{i}").into_bytes())),
                Err(Error::Timeout(_)) => timed_out += 1,
                Err(err) => panic!("caller {i}: {err:?}"),
            }
        }
        assert!(timed_out >= 20, "{timed_out} timed out");
        drop(shared);
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_silent_server_times_every_waiter_out_and_the_next_call_reconnects() {
        let path = socket_path();
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            // The first connection never answers; the second answers one GET.
            let (_silent, _) = listener.accept().unwrap();
            let (mut sock, _) = listener.accept().unwrap();
            let mut got = [0u8; 64];
            let _ = sock.read(&mut got);
            sock.write_all(b"$2\r\nok\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let shared = Arc::new(Shared::new(config(&path, Duration::from_millis(150))));
        let started = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || shared.call(&get("k")))
            })
            .collect();
        for t in threads {
            let err = t.join().unwrap().unwrap_err();
            assert!(matches!(err, Error::Timeout(_)), "{err:?}");
        }
        assert!(started.elapsed() < Duration::from_millis(150) * 3, "{:?}", started.elapsed());
        let reply = shared.call(&get("k")).unwrap();
        assert_eq!(reply, Value::BulkString(b"ok".to_vec()));
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }
}
