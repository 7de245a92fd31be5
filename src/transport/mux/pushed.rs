//! The near cache's tracking connection: one RESP3 connection (`HELLO 3` in its handshake)
//! made from the server's `Endpoint` like every other, whose invalidations, pushed between
//! its replies, go to a sink.
//!
//! Its reader handles pushes and replies strictly in the order they arrive, and runs a call's
//! code (`Done::Ordered`) before anything that came after its reply: an own write knows
//! exactly which invalidations the server sent before answering it (those of writes applied
//! before it) and which after. It is never remade: once broken, every call on it fails (and
//! the sink hears `lost`), and its owner opens another, turning tracking on again.

use std::sync::Arc;
use std::time::Duration;

use redis::{PushKind, Value};
use tokio::time::Instant;

use super::{lock, Conn, Done, Idle, Phase, Shared};
use crate::errors::{Error, Result};
use crate::proto::Request;
use crate::runtime::PerFork;
use crate::transport::Endpoint;

/// Where a tracking connection's pushes go, on its reader.
pub trait PushSink: Send + Sync {
    /// One push frame (`invalidate` and its keys, or null for a flush).
    fn push(&self, kind: PushKind, data: Vec<Value>);
    /// The connection broke or was closed: nothing more comes from it.
    fn lost(&self);
    /// The pushes and replies of one read have been handled (what they started may be sent
    /// together).
    fn batch_end(&self) {}
}

/// One tracking connection.
pub struct Pushed {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
}

impl Pushed {
    /// Start connecting to `config`'s server with its RESP3 handshake; calls sent meanwhile
    /// wait for it (and fail as it does).
    pub fn open(config: Arc<Endpoint>, sink: Arc<dyn PushSink>) -> Result<Self> {
        let shared = Arc::new(Shared { config, sink: Some(sink), current: PerFork::new() });
        let conn = shared.conn()?;
        Ok(Pushed { shared, conn })
    }

    /// Send a request; `done` gets its outcome on the reader. It must be answered within
    /// `patience` (None: the response timeout), or the connection is dropped.
    pub fn send(&self, req: &Request, done: Done, patience: Option<Duration>) {
        let (packed, replies) = req.pack();
        let deadline = patience.map(|p| {
            let connecting = matches!(lock(&self.conn.state).phase, Phase::Connecting);
            let connect =
                if connecting { self.shared.config.connect_timeout } else { Duration::ZERO };
            Instant::now() + connect + p
        });
        let conn = Arc::clone(&self.conn);
        self.shared.submit_on(conn, packed, replies, done, None, Idle::Send, deadline);
    }

    /// `send`, and wait for the outcome; an error reply is an error.
    pub async fn call(&self, req: &Request, patience: Option<Duration>) -> Result<Value> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(req, Done::then(move |outcome| drop(tx.send(outcome))), patience);
        let addr = &self.shared.config.addr;
        match rx.await {
            Ok(Ok(Value::ServerError(err))) => {
                Err(Error::from_reply(&err, &format!("Redis at {addr} refused it")))
            }
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Internal(format!("a call to {addr} was dropped unanswered"))),
        }
    }

    /// How long a reply may take.
    pub fn response_timeout(&self) -> Duration {
        self.shared.config.response_timeout
    }

    /// host:port or path, for messages.
    pub fn addr(&self) -> &Arc<str> {
        &self.shared.config.addr
    }

    /// Close it: calls waiting fail, and the sink hears `lost`.
    pub fn close(&self) {
        if !matches!(lock(&self.conn.state).phase, Phase::Broken) {
            self.conn.break_with(&Error::Connection(format!(
                "the tracking connection to {} was closed",
                self.shared.config.addr
            )));
        }
    }
}

impl Drop for Pushed {
    fn drop(&mut self) {
        self.close();
    }
}
