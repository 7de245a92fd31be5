//! Each thread's blocking connections, one per client it has used (closed when the thread
//! exits), and the retry policy of a sync call.

use std::cell::RefCell;

use crate::errors::{Error, Result};
use crate::proto::{Reply, Request};
use crate::runtime;
use crate::transport::{Link, Transport};

struct ThreadConn {
    client_id: u64,
    /// The fork generation the connection was made in.
    generation: u64,
    link: Link,
}

/// The connections of the calling thread, and the clients whose connection broke (the next
/// one made for them is a reconnect).
#[derive(Default)]
pub struct ThreadConns(Vec<ThreadConn>, Vec<u64>);

thread_local! {
    static CONNS: RefCell<ThreadConns> = RefCell::new(ThreadConns::default());
}

/// Run `f` on this thread's connections; `None` if the thread is shutting down.
pub fn with<T>(f: impl FnOnce(&RefCell<ThreadConns>) -> T) -> Option<T> {
    CONNS.try_with(f).ok()
}

/// Whether an error leaves the connection out of step with the server: never reuse it then.
pub fn breaks_connection(err: &Error) -> bool {
    matches!(err, Error::Connection(_) | Error::Timeout(_) | Error::Internal(_))
}

/// Whether a failed request is sent once more on a new connection: a read (`replayable`,
/// `Request::is_idempotent`) that met a connection closed under it (one that sat in the pool,
/// not one just made).
fn may_replay(err: &Error, reused: bool, replayable: bool) -> bool {
    reused && matches!(err, Error::Connection(_)) && replayable
}

impl ThreadConns {
    /// This thread's connection for a client: its position, and whether it was reused (not
    /// just made). Made on first use; remade if stale or from before a fork. `replayable`:
    /// the request is sent again on a new connection if this one turns out closed, so the
    /// socket is not asked beforehand (a system call saved).
    fn position(
        &mut self,
        id: u64,
        transport: &Transport,
        generation: u64,
        replayable: bool,
    ) -> Result<(usize, bool)> {
        let found = self.0.iter().position(|c| c.client_id == id);
        if let Some(i) = found {
            let conn = &self.0[i];
            if conn.generation == generation && (replayable || !conn.link.is_stale()) {
                return Ok((i, true));
            }
        }
        let mut replaces = false;
        if let Some(i) = found {
            let old = self.0.swap_remove(i);
            if old.generation == generation {
                replaces = true;
            } else {
                // Inherited across fork(): the socket is the parent's too.
                std::mem::forget(old);
            }
        }
        let link = transport.connect()?;
        if self.forget_lost(id) || replaces {
            transport.stats().reconnected();
        }
        self.0.push(ThreadConn { client_id: id, generation, link });
        Ok((self.0.len() - 1, false))
    }

    /// Whether a client's connection broke since this thread last made one (forgetting it).
    fn forget_lost(&mut self, id: u64) -> bool {
        let Some(at) = self.1.iter().position(|&lost| lost == id) else { return false };
        self.1.swap_remove(at);
        true
    }

    /// This thread's connection for a client, made if needed (see `position`).
    pub fn link(&mut self, id: u64, transport: &Transport, generation: u64) -> Result<&mut Link> {
        let (at, _) = self.position(id, transport, generation, false)?;
        Ok(&mut self.0[at].link)
    }

    /// The connection this thread already has for a client.
    pub fn find(&mut self, id: u64) -> Option<&mut Link> {
        self.0.iter_mut().find(|c| c.client_id == id).map(|c| &mut c.link)
    }

    /// Close this thread's connection of a client (it may be out of step with the server).
    pub fn remove(&mut self, id: u64) {
        if let Some(at) = self.0.iter().position(|c| c.client_id == id) {
            self.0.swap_remove(at);
            self.1.push(id);
        }
    }
}

/// Run one request on this thread's connection to a client's server (made on first use,
/// remade after errors).
pub fn exec_sync(id: u64, transport: &Transport, req: &Request) -> Result<Reply> {
    let generation = runtime::generation();
    with(|cell| {
        let mut conns = cell.borrow_mut();
        // One answer for both: a request that may be replayed skips the staleness check.
        let replayable = req.is_idempotent();
        let (at, reused) = conns.position(id, transport, generation, replayable)?;
        let mut result = conns.0[at].link.send_request(req);
        if let Err(err) = &result {
            if breaks_connection(err) {
                conns.0.swap_remove(at);
                conns.1.push(id);
                if may_replay(err, reused, replayable) {
                    let mut link = transport.connect()?;
                    conns.forget_lost(id);
                    transport.stats().reconnected();
                    result = link.send_request(req);
                    if !matches!(result, Err(Error::Connection(_) | Error::Timeout(_))) {
                        conns.0.push(ThreadConn { client_id: id, generation, link });
                    }
                }
            }
        }
        result
    })
    .unwrap_or_else(|| Err(Error::Internal("thread is shutting down".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get() -> Request {
        let mut cmd = redis::cmd("GET");
        cmd.arg("k");
        Request::Cmd(cmd)
    }

    #[test]
    fn only_transport_failures_break_the_connection() {
        assert!(breaks_connection(&Error::Connection("x".into())));
        assert!(breaks_connection(&Error::Timeout("x".into())));
        assert!(breaks_connection(&Error::Internal("x".into())));
        assert!(!breaks_connection(&Error::other_response("x".into())));
        assert!(!breaks_connection(&Error::Decode("x".into())));
    }

    #[test]
    fn only_reads_on_a_reused_connection_that_broke_are_replayed() {
        let broke = Error::Connection("closed".into());
        assert!(may_replay(&broke, true, get().is_idempotent()));
        // A connection just made that fails is the server being away: no second try.
        assert!(!may_replay(&broke, false, get().is_idempotent()));
        // A timeout may have run the command already.
        assert!(!may_replay(&Error::Timeout("slow".into()), true, get().is_idempotent()));
        let mut incr = redis::cmd("INCR");
        incr.arg("k");
        assert!(!may_replay(&broke, true, Request::Cmd(incr).is_idempotent()));
    }
}
