//! The sync path's connection: a blocking socket owned by one thread, one round trip a call.

pub mod shared;
mod socket;
mod spin;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::errors::{Error, Result};
use crate::proto::read_buf::unreadable;
use crate::proto::{ReadBuf, Replies};
use crate::stats::Open;
use crate::transport::Endpoint;

use socket::Socket;
use spin::Spin;
pub use spin::Wait;

/// How long a fan-out's read past its deadline may wait: enough to read replies that arrived
/// while another server was being waited for, too short to wait for new ones.
const PAST_DEADLINE_GRACE: Duration = Duration::from_millis(1);

/// One thread's connection to the server.
pub struct Blocking {
    socket: Socket,
    config: Arc<Endpoint>,
    buf: ReadBuf,
    spin: Spin,
    /// Counts the connection open while it lives.
    _open: Open,
    /// Replies to drop before the next request's: those of a handshake sent unanswered, or
    /// of an AUTH sent in front of a request (see `send`).
    discard: usize,
    /// The generation of the credentials this connection authenticated with (changing
    /// credentials only, `Handshake::reauth`).
    auth_gen: u64,
}

fn io_error(err: &std::io::Error, config: &Endpoint, during: &str) -> Error {
    let addr = &config.addr;
    match err.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Error::Timeout(format!(
            "Redis at {addr} did not answer within {:?} ({during})",
            config.response_timeout
        )),
        _ => Error::Connection(format!("Connection to Redis at {addr} broke ({during}): {err}")),
    }
}

impl Blocking {
    /// Connect within the connect timeout and run the AUTH / SELECT handshake.
    pub fn connect(config: &Arc<Endpoint>) -> Result<Self> {
        let addr = &config.addr;
        // One connect timeout in all: waiting for a provider's first credentials, connecting,
        // and waiting for fresh credentials after a refusal.
        let deadline = Instant::now() + config.connect_timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        config.handshake.first(left())?;
        let socket = Socket::connect(config, deadline)?;
        let mut conn = Blocking {
            socket,
            config: Arc::clone(config),
            buf: ReadBuf::new(16 * 1024),
            spin: Spin::default(),
            _open: config.stats.opened(),
            discard: 0,
            auth_gen: 0,
        };
        let handshake = &config.handshake;
        // Written as it is (`write`, not `send`): the handshake carries its own AUTH.
        if !handshake.needs_answer() {
            let (packed, _) = handshake.start()?;
            if !handshake.is_empty() {
                conn.write(&packed)?;
                conn.discard = handshake.replies().count();
            }
            return Ok(conn);
        }
        let mut tried = false;
        loop {
            let (packed, generation) = handshake.start()?;
            conn.auth_gen = generation;
            conn.write(&packed)?;
            let replies = conn.receive(handshake.replies(), Wait::Spin)?;
            match handshake.check(replies, addr) {
                Ok(()) => return Ok(conn),
                // Rotated credentials the server already wants: ask for them, try once more.
                Err(err) if !tried && handshake.refreshed(&err, generation, left()) => tried = true,
                Err(err) => return Err(err),
            }
        }
    }

    /// Whether the server closed this connection (or sent something unasked) while it sat
    /// idle: then it must not be used, and a command sent on it would be lost.
    pub fn is_stale(&self) -> bool {
        self.socket.has_pending_input()
    }

    /// Send packed commands and read their replies (one value, or a list of them).
    pub fn request(&mut self, packed: &[u8], shape: Replies) -> Result<Value> {
        self.send(packed)?;
        self.receive(shape, Wait::Spin)
    }

    /// Send packed commands (their replies are read by `receive`). A connection whose
    /// credentials changed since it authenticated sends AUTH with the new ones first, in the
    /// same write; its reply is dropped.
    pub fn send(&mut self, packed: &[u8]) -> Result<()> {
        if let Some(mut auth) = self.config.handshake.reauth(&mut self.auth_gen) {
            auth.extend_from_slice(packed);
            self.write(&auth)?;
            self.discard += 1;
            return Ok(());
        }
        self.write(packed)
    }

    fn write(&mut self, packed: &[u8]) -> Result<()> {
        let timeout = self.config.response_timeout;
        self.socket
            .write_all_by(packed, timeout)
            .map_err(|e| io_error(&e, &self.config, "sending"))?;
        self.config.stats.sent(packed.len());
        Ok(())
    }

    /// `receive`, but giving up at `deadline` if that comes before the response timeout (a
    /// fan-out over several servers waits one timeout in all, not one per server).
    pub fn receive_by(&mut self, shape: Replies, deadline: Instant, wait: Wait) -> Result<Value> {
        let timeout = self.config.response_timeout;
        let left = deadline.saturating_duration_since(Instant::now());
        if left >= timeout {
            return self.receive(shape, wait);
        }
        // Past the deadline (another server of the fan-out used it up), replies that are here
        // already are still read: a short grace, not a wait.
        let (left, deadline) = if left.is_zero() {
            (PAST_DEADLINE_GRACE, Instant::now() + PAST_DEADLINE_GRACE)
        } else {
            (left, deadline)
        };
        if self.socket.set_read_timeout(left).is_err() {
            return Err(self.timed_out());
        }
        self.receive_within(shape, wait, deadline, true)
    }

    /// Read the replies of what `send` sent (one value, or a list of them), polling for them
    /// briefly before blocking (see `Spin` and `Wait`), all within the response timeout.
    pub fn receive(&mut self, shape: Replies, wait: Wait) -> Result<Value> {
        let deadline = Instant::now() + self.config.response_timeout;
        self.receive_within(shape, wait, deadline, false)
    }

    fn timed_out(&self) -> Error {
        Error::Timeout(format!(
            "Redis at {} did not answer within {:?}",
            self.config.addr, self.config.response_timeout
        ))
    }

    /// `receive` by `deadline`. The socket's read timeout bounds one read() call, so a reply
    /// that keeps trickling in would never let it fire: each blocking read after the first is
    /// bounded by what is left until the deadline (re-arming the timeout costs a syscall only
    /// for replies that take several reads). `shortened`: the read timeout is below the
    /// usual already; it is put back once the replies are in.
    fn receive_within(
        &mut self,
        shape: Replies,
        wait: Wait,
        deadline: Instant,
        mut shortened: bool,
    ) -> Result<Value> {
        let expected = shape.count() + self.discard;
        let started = Instant::now();
        let mut blocked = false;
        let window = self.spin.window();
        let mut caught = window.is_zero();
        let mut missed = false;
        let mut replies = Vec::with_capacity(expected);
        while replies.len() < expected {
            match self.buf.next_reply() {
                Ok(Some(value)) => {
                    replies.push(value);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(unreadable(&self.config.addr, e)),
            }
            if !caught {
                // Poll while the reply is likely close; the first bytes end the polling.
                let mut got = 0;
                loop {
                    match self.socket.try_recv(&mut self.buf) {
                        // End of stream: the blocking read below reports it.
                        Ok(0) => break,
                        Ok(n) => {
                            got = n;
                            break;
                        }
                        Err(_) => {}
                    }
                    if started.elapsed() >= window {
                        break;
                    }
                    match wait {
                        Wait::Spin => std::hint::spin_loop(),
                        Wait::Yield => std::thread::yield_now(),
                    }
                }
                // From here on, wait in the kernel.
                caught = true;
                if got > 0 {
                    self.config.stats.received(got);
                    continue;
                }
                missed = true;
            }
            if blocked {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(self.timed_out());
                }
                if let Err(e) = self.socket.set_read_timeout(left) {
                    return Err(io_error(&e, &self.config, "arming the timeout"));
                }
                shortened = true;
            }
            blocked = true;
            match self.socket.read_into(&mut self.buf) {
                Ok(0) => {
                    return Err(Error::Connection(format!(
                        "Connection to Redis at {} was closed by the server",
                        self.config.addr
                    )))
                }
                Ok(n) => self.config.stats.received(n),
                Err(e) => return Err(io_error(&e, &self.config, "waiting for the reply")),
            }
        }
        self.buf.compact();
        if shortened {
            // Back to the usual bound (a failed connection is closed anyway).
            if let Err(e) = self.socket.set_read_timeout(self.config.response_timeout) {
                return Err(io_error(&e, &self.config, "resetting the timeout"));
            }
        }
        if !window.is_zero() {
            self.spin.record(started.elapsed(), !missed);
        }
        let discard = std::mem::take(&mut self.discard);
        if discard > 0 {
            // A handshake's replies (or a reauthentication's): what the server offers.
            let dropped: Vec<Value> = replies.drain(..discard).collect();
            self.config.offers.learn_discarded(&Value::Array(dropped));
        }
        Ok(match shape {
            Replies::One => replies.pop().unwrap_or(Value::Nil),
            Replies::Many(_) => Value::Array(replies),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;
    use std::thread::JoinHandle;

    use super::*;
    use crate::proto::handshake::Handshake;
    use crate::transport::Target;

    /// A one-connection server on a fresh socket path that, for each script step, reads
    /// `expect` bytes and then writes `reply` (in two halves, to split replies across reads).
    fn serve(script: Vec<(usize, &'static [u8])>) -> (Arc<Endpoint>, JoinHandle<()>, PathBuf) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("redoxide-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            for (expect, reply) in script {
                let mut got = vec![0u8; expect];
                sock.read_exact(&mut got).unwrap();
                let (a, b) = reply.split_at(reply.len() / 2);
                sock.write_all(a).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                sock.write_all(b).unwrap();
            }
        });
        (config(Target::Unix(path.clone()), Handshake::new(None, None, 0, false)), server, path)
    }

    fn config(target: Target, handshake: Handshake) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            target,
            handshake,
            resp3: Handshake::resp3(None, None, 0, false, None),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            addr: "test".into(),
            stats: Arc::default(),
            offers: Arc::default(),
        })
    }

    #[test]
    fn a_pipeline_gets_all_its_replies_across_reads() {
        let ping = b"*1\r\n$4\r\nPING\r\n";
        let (cfg, server, path) = serve(vec![(ping.len() * 3, b"+PONG\r\n:7\r\n$3\r\nabc\r\n")]);
        let mut conn = Blocking::connect(&cfg).unwrap();
        let reply = conn.request(&ping.repeat(3), Replies::Many(3)).unwrap();
        let want = vec![
            Value::SimpleString("PONG".into()),
            Value::Int(7),
            Value::BulkString(b"abc".to_vec()),
        ];
        assert_eq!(reply, Value::Array(want));
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_refused_password_is_an_authentication_error() {
        let handshake = Handshake::new(None, Some("bad"), 0, false);
        let sent = handshake.packed().len();
        let (_, server, path) = serve(vec![(sent, b"-WRONGPASS invalid password\r\n")]);
        let cfg = config(Target::Unix(path.clone()), handshake);
        let err = Blocking::connect(&cfg).err().unwrap();
        assert!(matches!(&err, Error::Connection(m) if m.starts_with("Authentication")), "{err:?}");
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn changed_credentials_go_in_front_of_the_next_request_and_a_refusal_asks_for_new_ones() {
        use crate::credentials::Cell;
        let creds = Arc::new(Cell::default());
        creds.set(Some("u".into()), "a".into());
        let auth = |password: &str| redis::cmd("AUTH").arg("u").arg(password).get_packed_command();
        let get = redis::cmd("GET").arg("k").get_packed_command();
        let (first, changed) = (auth("a"), [auth("b"), get.clone()].concat());
        let (_, server, path) = serve(vec![
            (first.len(), b"+OK\r\n"),
            (changed.len(), b"+OK\r\n$1\r\nv\r\n"),
            (get.len(), b"$1\r\nw\r\n"),
        ]);
        let handshake = Handshake::new(None, None, 0, false).with_credentials(Some(creds.clone()));
        let cfg = config(Target::Unix(path.clone()), handshake);
        let mut conn = Blocking::connect(&cfg).unwrap();
        creds.set(Some("u".into()), "b".into());
        // AUTH with the new password and the GET in one write; AUTH's reply is not the GET's.
        assert_eq!(conn.request(&get, Replies::One).unwrap(), Value::BulkString(b"v".to_vec()));
        assert_eq!(conn.request(&get, Replies::One).unwrap(), Value::BulkString(b"w".to_vec()));
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_refused_handshake_with_a_provider_waits_for_its_answer_and_tries_again() {
        use crate::credentials::Cell;
        let creds = Arc::new(Cell::default());
        creds.set(None, "old".into());
        let auth = |password: &str| redis::cmd("AUTH").arg(password).get_packed_command();
        let (_, server, path) = serve(vec![
            (auth("old").len(), b"-WRONGPASS invalid password\r\n"),
            (auth("new").len(), b"+OK\r\n"),
        ]);
        let handshake = Handshake::new(None, None, 0, false).with_credentials(Some(creds.clone()));
        let cfg = config(Target::Unix(path.clone()), handshake);
        let provider = {
            let creds = Arc::clone(&creds);
            std::thread::spawn(move || {
                assert!(creds.take_request(Duration::from_secs(30)));
                creds.set(None, "new".into());
            })
        };
        assert!(Blocking::connect(&cfg).is_ok());
        provider.join().unwrap();
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_server_that_hangs_up_or_sends_garbage_breaks_the_call() {
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let (cfg, server, path) = serve(vec![(get.len(), b"")]);
        let mut conn = Blocking::connect(&cfg).unwrap();
        assert!(!conn.is_stale());
        conn.send(get).unwrap();
        server.join().unwrap();
        let err = conn.receive(Replies::One, Wait::Spin).unwrap_err();
        assert!(matches!(&err, Error::Connection(m) if m.contains("closed")), "{err:?}");
        let (cfg, server, path2) = serve(vec![(get.len(), b"?garbage\r\n")]);
        let mut conn = Blocking::connect(&cfg).unwrap();
        let err = conn.request(get, Replies::One).unwrap_err();
        assert!(matches!(&err, Error::Connection(m) if m.contains("unreadable")), "{err:?}");
        server.join().unwrap();
        let _ = (std::fs::remove_file(path), std::fs::remove_file(path2));
    }

    #[test]
    fn a_reply_that_trickles_in_times_out_within_the_response_timeout() {
        let path =
            std::env::temp_dir().join(format!("redoxide-{}-trickle.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut got = [0u8; 64];
            let _ = sock.read(&mut got);
            let _ = sock.write_all(b"$1000\r\n");
            // One byte every 10 ms for up to 5 s; stops once the client hangs up.
            for _ in 0..500 {
                std::thread::sleep(Duration::from_millis(10));
                if sock.write_all(b"x").is_err() {
                    break;
                }
            }
        });
        let cfg = Arc::new(Endpoint {
            target: Target::Unix(path.clone()),
            handshake: Handshake::new(None, None, 0, false),
            resp3: Handshake::resp3(None, None, 0, false, None),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_millis(200),
            addr: "test".into(),
            stats: Arc::default(),
            offers: Arc::default(),
        });
        let mut conn = Blocking::connect(&cfg).unwrap();
        let started = Instant::now();
        let err = conn.request(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", Replies::One).unwrap_err();
        // Without one deadline for the reply, this read would last the whole 5 s trickle.
        assert!(matches!(err, Error::Timeout(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        drop(conn);
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn past_a_fan_outs_deadline_a_reply_already_here_is_read_and_none_is_waited_for() {
        let path = std::env::temp_dir().join(format!("redoxide-{}-past.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let (written, wait_written) = std::sync::mpsc::channel();
        let (done, wait_done) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            sock.write_all(b"+OK\r\n").unwrap();
            written.send(()).unwrap();
            // Hold the connection open (no more replies) until the client is done.
            let _ = wait_done.recv();
        });
        let cfg = config(Target::Unix(path.clone()), Handshake::new(None, None, 0, false));
        let mut conn = Blocking::connect(&cfg).unwrap();
        wait_written.recv().unwrap();
        let here = conn.receive_by(Replies::One, Instant::now(), Wait::Yield).unwrap();
        assert_eq!(here, Value::Okay);
        let err = conn.receive_by(Replies::One, Instant::now(), Wait::Yield).unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err:?}");
        done.send(()).unwrap();
        server.join().unwrap();
        let _ = std::fs::remove_file(path);
    }
}
