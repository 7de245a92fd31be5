//! This process' writes of tracked keys on one server, sent through the tracking connection.
//!
//! That connection tracks with NOLOOP, so the server sends it no invalidation for them: the
//! writing process does not drop (and then read back) what it has just written. Instead the
//! written value of each key is installed as the server's answer for it is read, on the
//! connection's reader, in order with the invalidations the server pushed before and after
//! it (`Store::ack_write`: see store/writes.rs for what spoils a claim). A read of the key
//! while the write is in flight is served the copy from before it, or reads the server and
//! installs nothing. Other processes see the write as before, through their own tracking
//! connections.

use std::sync::Arc;
use std::time::Duration;

use pyo3::{Py, PyAny, PyResult, Python};
use redis::{Pipeline, Value};

use crate::bridge::{Bridge, Pending, Slot};
use crate::errors::{Error, Result};
use crate::near::store::{now_ns, Token};
use crate::near::tracking::{Near, Writer};
use crate::proto::command::set_cmd;
use crate::proto::Request;
use crate::py::client::Client;
use crate::stats::{Meter, Stats};
use crate::transport::{Done, Ordered, Seen};

/// Past the response timeout, how long a sync caller waits for the task that enforces it.
const GRACE: Duration = Duration::from_millis(250);

/// A kept key of a write: where its reply is (in a pipeline's), the key, the value it gets
/// if the write applies, and whether that value is kept (with admission by use only keys in
/// use are; the others are claimed, so that no fill in flight installs a value from before
/// the write, and dropped).
type Kept = (usize, Box<[u8]>, Box<[u8]>, bool);

/// With admission by use (OPTIN tracking), a write through the tracking connection (NOLOOP)
/// ends the server's tracking of its keys unnoticed: it is sent as `CLIENT CACHING YES`,
/// `MULTI`, the write, `EXISTS` of the keys kept, `EXEC`, so that the keys kept are tracked
/// again by the same transaction, with no other client's write in between.
#[derive(Clone, Copy)]
struct Txn {
    /// Where EXEC's reply is among the pipeline's.
    exec_at: usize,
    /// The write's own replies in EXEC's (the first are the write's, then EXISTS').
    replies: usize,
    /// Whether the write is one command (its one reply is the caller's).
    single: bool,
}

/// How a reply becomes Python's.
type Convert = fn(Python<'_>, Value) -> PyResult<Py<PyAny>>;

/// A write of kept keys, to go through the tracking connection.
pub struct Write {
    sent: Request,
    /// The kept keys it writes.
    kept: Vec<Kept>,
    ttl_ms: Option<u64>,
    writer: Writer,
    convert: Convert,
    /// The server's counters (it is counted as a command to that node, as on any connection).
    stats: Arc<Stats>,
    txn: Option<Txn>,
}

/// Whether a key goes through the tracking connection and its value is kept: a tracked key
/// (in use, with admission by use: a key not in use is written the usual way, which forgets
/// its reads).
pub(crate) fn keeps(near: &Near, key: &[u8]) -> bool {
    near.tracks(key) && (!near.optin() || near.store.in_use(key))
}

/// With admission by use, `cmds` as the transaction that tracks the kept keys again (`Txn`).
fn request(near: &Near, cmds: Vec<redis::Cmd>, kept: &[Kept]) -> (Request, Option<Txn>) {
    if !near.optin() {
        let mut cmds = cmds;
        return match cmds.len() {
            1 => (Request::Cmd(cmds.remove(0)), None),
            _ => {
                let mut pipe = Pipeline::with_capacity(cmds.len());
                cmds.into_iter().for_each(|c| _ = pipe.add_command(c));
                (Request::Pipe(pipe), None)
            }
        };
    }
    let txn = Txn { exec_at: 2 + cmds.len() + 1, replies: cmds.len(), single: cmds.len() == 1 };
    let mut pipe = Pipeline::with_capacity(cmds.len() + 4);
    pipe.cmd("CLIENT").arg("CACHING").arg("YES");
    pipe.cmd("MULTI");
    cmds.into_iter().for_each(|c| _ = pipe.add_command(c));
    let mut exists = redis::cmd("EXISTS");
    for (.., key, _, install) in kept {
        if *install {
            exists.arg(&**key);
        }
    }
    pipe.add_command(exists);
    pipe.cmd("EXEC");
    (Request::Pipe(pipe), Some(txn))
}

/// The caller's reply out of a transaction's (`Txn`): the write's own, as if sent alone; an
/// aborted transaction is its error.
fn unwrap_txn(txn: Txn, outcome: Value) -> Value {
    let Value::Array(mut replies) = outcome else { return outcome };
    // (A refused CLIENT CACHING YES is no error of the write: it applied, untracked.)
    if let Some(refused) = replies.iter().take(txn.exec_at).skip(1).find(|r| is_error(r)) {
        return refused.clone();
    }
    match replies.get_mut(txn.exec_at).map(std::mem::take) {
        Some(Value::Array(mut inner)) => {
            inner.truncate(txn.replies);
            if txn.single {
                inner.pop().unwrap_or(Value::Nil)
            } else {
                Value::Array(inner)
            }
        }
        Some(other) => other,
        None => Value::Nil,
    }
}

fn is_error(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(_))
}

impl Write {
    /// SET of one key; None when it does not go this way (not kept, too large to keep, or no
    /// tracking connection up): the caller writes it the usual way.
    #[allow(clippy::too_many_arguments)]
    pub fn set(
        near: &Near,
        client: &Client,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
    ) -> Option<Write> {
        if !near.store.keeps_size(value.len()) || !keeps(near, key.as_bytes()) {
            return None;
        }
        let writer = near.writer_for(client.addr())?;
        let kept = vec![(0, key.as_bytes().into(), value.into(), true)];
        let (sent, txn) = request(near, vec![set_cmd(key, value, ttl_ms, nx, xx)], &kept);
        Some(Write {
            sent,
            kept,
            ttl_ms,
            writer,
            convert: crate::proto::reply::to_py_bool,
            stats: Arc::clone(&client.stats),
            txn,
        })
    }

    /// set_many: MSET, or a SET PX each when they expire (as the client sends it); None as
    /// for `set` (also when none of the keys is kept, or one kept value is too large).
    pub fn set_many(
        near: &Near,
        client: &Client,
        items: &[(&[u8], &[u8])],
        ttl_ms: Option<u64>,
    ) -> Option<Write> {
        if near.optin() {
            // Admission by use: kept only if one of the keys is in use (looked up under one
            // lock, nothing allocated: most writes of a view that keeps nothing end here, and
            // go the usual way).
            let mut any = false;
            let tracked = items.iter().map(|(key, _)| *key).filter(|key| near.tracks(key));
            near.store.in_use_each(tracked, |_, in_use| any |= in_use);
            if !any {
                return None;
            }
        }
        let tracked: Vec<usize> = (0..items.len()).filter(|&i| near.tracks(items[i].0)).collect();
        if tracked.iter().any(|&i| !near.store.keeps_size(items[i].1.len())) {
            return None;
        }
        // Which tracked keys this write keeps: all of them, or with admission by use those
        // in use.
        let mut keeps = vec![true; tracked.len()];
        if let Some(admission) = near.admission() {
            near.store.in_use_each(tracked.iter().map(|&i| items[i].0), |at, in_use| {
                keeps[at] = in_use;
            });
            if !keeps.iter().any(|&k| k) {
                return None;
            }
            // The others' writes are counted, as a write the usual way does.
            let others = tracked.iter().zip(&keeps).filter(|(_, k)| !**k);
            others.for_each(|(&i, _)| admission.sketch.written(items[i].0));
        }
        let mut kept: Vec<Kept> = tracked
            .iter()
            .zip(keeps)
            .map(|(&i, install)| (i, Box::from(items[i].0), Box::from(items[i].1), install))
            .collect();
        if kept.is_empty() {
            return None;
        }
        let writer = near.writer_for(client.addr())?;
        let cmds = match ttl_ms {
            None => {
                let mut cmd = redis::cmd("MSET");
                for (key, value) in items {
                    cmd.arg(*key).arg(*value);
                }
                // One reply for all: every kept key's is at 0.
                kept.iter_mut().for_each(|k| k.0 = 0);
                vec![cmd]
            }
            Some(ms) => items
                .iter()
                .map(|(key, value)| {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(*key).arg(*value).arg("PX").arg(ms.max(1));
                    cmd
                })
                .collect(),
        };
        let (mut sent, txn) = request(near, cmds, &kept);
        if txn.is_none() && ttl_ms.is_some() && items.len() == 1 {
            // (As the client sends it: a pipeline of one SET PX, whose reply is a list.)
            if let Request::Cmd(cmd) = sent {
                let mut pipe = Pipeline::with_capacity(1);
                pipe.add_command(cmd);
                sent = Request::Pipe(pipe);
            }
        }
        let txn = txn.map(|t| Txn { single: t.single && ttl_ms.is_none(), ..t });
        Some(Write {
            sent,
            kept,
            ttl_ms,
            writer,
            convert: crate::proto::reply::to_py,
            stats: Arc::clone(&client.stats),
            txn,
        })
    }

    /// Claim the kept keys and send the write; `done` gets the outcome once the values are
    /// installed (or not), on the tracking connection's reader. Each key's claim is settled
    /// as its own reply is read (`Store::ack_write`), in order with the invalidations the
    /// server pushed before and after it.
    fn send(
        self,
        near: &Arc<Near>,
        done: impl FnOnce(Result<Value>) + Send + 'static,
    ) -> Result<()> {
        let Write { sent, kept, ttl_ms, writer, stats, txn, .. } = self;
        let (conn, set_id) = (writer.conn, writer.set_id);
        let meter = Meter::start(&sent);
        let begun = now_ns();
        let claimed: Arc<Vec<(Kept, Token)>> = Arc::new(
            kept.into_iter()
                .map(|k| {
                    let token = near.store.begin_write(&k.1);
                    (k, token)
                })
                .collect(),
        );
        let (acks, ack_near) = (Arc::clone(&claimed), Arc::clone(near));
        // In a transaction: whether CLIENT CACHING YES was taken (else nothing is tracked
        // again, and nothing may be kept).
        let mut caching = true;
        let seen = move |at: usize, reply: &Value| {
            let (at, reply) = match txn {
                None => (at, reply),
                Some(_) if at == 0 => {
                    caching = !is_error(reply);
                    return;
                }
                Some(t) if at == t.exec_at && caching => match reply {
                    Value::Array(_) => (usize::MAX, reply),
                    _ => return,
                },
                Some(_) => return,
            };
            for ((of, key, value, install), token) in acks.iter() {
                let here = if at == usize::MAX { applied(reply, *of) } else { *of == at };
                if *install && here && (at == usize::MAX || applied(reply, 0)) {
                    ack_near.store.ack_write(key, *token, (value, ttl_ms), begun);
                }
            }
        };
        let near = Arc::clone(near);
        let addr = Arc::clone(conn.addr());
        let then = move |outcome: Result<Value>| {
            // In a transaction, whether the keys kept are tracked again (CLIENT CACHING YES
            // taken): if not, nothing written may stay kept.
            let mut tracked = true;
            let outcome = match (txn, outcome) {
                (Some(t), Ok(reply)) => {
                    if let Some(meter) = &meter {
                        meter.record(&stats, &Ok(reply.clone()));
                    }
                    tracked = matches!(&reply, Value::Array(r) if !r.first().is_some_and(is_error));
                    Ok(unwrap_txn(t, reply))
                }
                (_, outcome) => outcome,
            };
            let outcome = match outcome {
                // An error reply comes in order: the write was not applied.
                Ok(Value::ServerError(err)) => {
                    Err(Error::from_reply(&err, &format!("Redis at {addr} refused the write")))
                }
                Ok(value) => Ok(value),
                // Where a write that went unanswered lands among later ones is unknown: the
                // tracking connections start afresh (one still in it that lands later reaches
                // the new connection as an invalidation).
                Err(err) => {
                    near.restart(set_id);
                    Err(err)
                }
            };
            if let (Some(meter), None) = (&meter, txn) {
                meter.record(&stats, &outcome);
            }
            for ((at, key, _, install), _) in claimed.iter() {
                // (A key not kept: any copy is dropped, as a write the usual way does.)
                let applied =
                    *install && tracked && outcome.as_ref().is_ok_and(|reply| applied(reply, *at));
                near.store.end_write(key, applied);
            }
            done(outcome);
        };
        let seen: Seen = Box::new(seen);
        conn.send(&sent, Done::Ordered(Box::new(Ordered { seen, then: Box::new(then) })), None);
        Ok(())
    }

    /// Send it and wait (the GIL released by the caller).
    pub fn call(self, near: &Arc<Near>) -> Result<Value> {
        self.start(near)?.wait()
    }

    /// Send it: what to wait on for its outcome (several writes can be sent before any is
    /// waited for).
    pub fn start(self, near: &Arc<Near>) -> Result<Sent> {
        let timeout = self.writer.conn.response_timeout();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(near, move |outcome| drop(tx.send(outcome)))?;
        Ok(Sent { rx, timeout })
    }

    /// The conversion of its reply for Python.
    pub fn convert(&self) -> Convert {
        self.convert
    }

    /// Send it from an event loop: the awaitable of its outcome.
    pub fn submit(self, near: &Arc<Near>, bridge: Py<Bridge>) -> Result<Pending> {
        let slot = Slot::new();
        let queue = Arc::clone(&bridge.get().queue);
        let completed = Arc::clone(&slot);
        let convert = self.convert;
        self.send(near, move |outcome| completed.complete(outcome, &queue))?;
        Ok(Pending::new(slot, bridge, None, convert))
    }
}

/// A write sent (`Write::start`), its outcome to wait for.
pub struct Sent {
    rx: std::sync::mpsc::Receiver<Result<Value>>,
    timeout: Duration,
}

impl Sent {
    /// Its outcome, once its reply is read and its values installed (the GIL released by the
    /// caller); a timeout past the connection's response timeout.
    pub fn wait(self) -> Result<Value> {
        let timeout = self.timeout;
        self.rx.recv_timeout(timeout + GRACE).unwrap_or_else(|_| {
            Err(Error::Timeout(format!("Redis did not answer within {timeout:?}")))
        })
    }
}

/// Whether the write applied to the key whose reply is at `at`: OK (a SET NX/XX that did not
/// apply answers nil; a pipeline's replies come as a list).
fn applied(reply: &Value, at: usize) -> bool {
    let one = match reply {
        Value::Array(replies) => replies.get(at),
        other => Some(other),
    };
    one.is_some_and(|v| !matches!(v, Value::Nil | Value::ServerError(_)))
}
