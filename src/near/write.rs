//! This process' writes of tracked keys on one server, sent through the tracking connection.
//!
//! That connection tracks with NOLOOP, so the server sends it no invalidation for them: the
//! writing process does not drop (and then read back) what it has just written. Instead the
//! written value is installed here when the server's answer arrives, on the I/O runtime, under
//! the store's write claim (`Store::begin_write`): an invalidation or a flush meanwhile, or a
//! second own write of the key in flight, spoils it, and a read of the key while the write is
//! in flight installs nothing. Other processes see the write as before, through their own
//! tracking connections.

use std::sync::Arc;
use std::time::Duration;

use pyo3::Py;
use redis::Value;

use crate::bridge::{Bridge, Pending, Slot};
use crate::errors::{Error, Result};
use crate::near::store::Token;
use crate::near::tracking::{Near, Writer};
use crate::proto::command::set_cmd;
use crate::proto::reply;
use crate::runtime;

/// Past the response timeout, how long a sync caller waits for the task that enforces it.
const GRACE: Duration = Duration::from_millis(250);

/// One SET of a tracked key.
pub struct Set<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
    pub ttl_ms: Option<u64>,
    pub nx: bool,
    pub xx: bool,
}

impl Set<'_> {
    /// The writer to send it through, if the key is tracked, the value could be kept (a
    /// larger one is not worth holding the tracking connection's pings up for) and one is up.
    fn writer(&self, near: &Near) -> Option<Writer> {
        if !near.tracks(self.key.as_bytes()) || !near.store.keeps_size(self.value.len()) {
            return None;
        }
        near.writer()
    }

    /// Claim the key and send the SET on the runtime; `done` gets the outcome once the value
    /// is installed (or not). None: not sent this way (the caller writes the usual way).
    fn send(
        &self,
        near: &Arc<Near>,
        done: impl FnOnce(Result<Value>) + Send + 'static,
    ) -> Option<Result<()>> {
        let Writer { mut conn, source, .. } = self.writer(near)?;
        let rt = match runtime::get() {
            Ok(rt) => rt,
            Err(err) => return Some(Err(err)),
        };
        let cmd = set_cmd(self.key, self.value, self.ttl_ms, self.nx, self.xx);
        let key: Box<[u8]> = self.key.as_bytes().into();
        let value: Box<[u8]> = self.value.into();
        let ttl_ms = self.ttl_ms;
        let token = near.store.begin_write(&key);
        let near = Arc::clone(near);
        rt.spawn(async move {
            let timeout = source.response_timeout;
            let reply = tokio::time::timeout(timeout, cmd.query_async::<Value>(&mut conn)).await;
            let outcome = match reply {
                Ok(Ok(value)) => Ok(value),
                // An error reply comes in order: the write was not applied.
                Ok(Err(err))
                    if matches!(
                        err.kind(),
                        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                    ) =>
                {
                    Err(Error::from_redis(&err, &source.addr))
                }
                Ok(Err(err)) => {
                    near.restart();
                    Err(Error::from_redis(&err, &source.addr))
                }
                Err(_) => {
                    near.restart();
                    Err(Error::Timeout(format!(
                        "Redis at {} did not answer within {timeout:?}",
                        source.addr
                    )))
                }
            };
            finish(&near, &key, token, &value, ttl_ms, outcome.as_ref().ok());
            done(outcome);
        });
        Some(Ok(()))
    }

    /// Send it and wait (the GIL released by the caller); None: not sent this way.
    pub fn call(&self, near: &Arc<Near>) -> Option<Result<Value>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let timeout = self.writer(near)?.source.response_timeout;
        match self.send(near, move |outcome| drop(tx.send(outcome)))? {
            Ok(()) => {}
            Err(err) => return Some(Err(err)),
        }
        Some(rx.recv_timeout(timeout + GRACE).unwrap_or_else(|_| {
            Err(Error::Timeout(format!("Redis did not answer within {timeout:?}")))
        }))
    }

    /// Send it from an event loop: the awaitable of its outcome; None: not sent this way.
    pub fn submit(&self, near: &Arc<Near>, bridge: Py<Bridge>) -> Option<Result<Pending>> {
        let slot = Slot::new();
        let queue = Arc::clone(&bridge.get().queue);
        let completed = Arc::clone(&slot);
        match self.send(near, move |outcome| completed.complete(outcome, &queue))? {
            Ok(()) => Some(Ok(Pending::new(slot, bridge, None, reply::to_py_bool))),
            Err(err) => Some(Err(err)),
        }
    }
}

/// Install what was written if the server applied it (OK; a NX/XX that did not apply answers
/// nil); release the claim either way.
fn finish(
    near: &Near,
    key: &[u8],
    token: Token,
    value: &[u8],
    ttl_ms: Option<u64>,
    reply: Option<&Value>,
) {
    let applied = reply.is_some_and(|v| !matches!(v, Value::Nil));
    near.store.end_write(key, token, applied.then_some((value, ttl_ms)));
}
