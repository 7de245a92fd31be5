//! Blocking calls to several servers at once (a cluster's get_many from sync code): every
//! request is written, on the calling thread's connection to each server, before any reply is
//! read, so the servers work in parallel and a call to N servers costs about one round trip
//! plus N reads.

use std::time::Instant;

use redis::Pipeline;

use crate::errors::{Error, Result};
use crate::proto::{Replies, Reply};
use crate::runtime;
use crate::transport::blocking::Wait;
use crate::transport::thread_conns::{self, breaks_connection};
use crate::transport::Transport;

/// One server's part of a fan-out: the client's id (which names its thread connections), its
/// transport, and the commands to send it.
pub struct Call<'a> {
    pub id: u64,
    pub transport: &'a Transport,
    pub pipe: Pipeline,
}

/// Run every call's pipeline at once; return each one's replies, in order.
pub fn fanout_sync(calls: &[Call<'_>]) -> Vec<Result<Reply>> {
    let generation = runtime::generation();
    thread_conns::with(|cell| {
        let mut conns = cell.borrow_mut();
        let mut outcomes: Vec<Option<Result<Reply>>> = (0..calls.len()).map(|_| None).collect();
        let mut sent = vec![false; calls.len()];
        for (i, call) in calls.iter().enumerate() {
            let packed = call.pipe.get_packed_pipeline();
            let outcome =
                conns.link(call.id, call.transport, generation).and_then(|link| link.send(&packed));
            match outcome {
                Ok(()) => sent[i] = true,
                Err(err) => {
                    conns.remove(call.id);
                    outcomes[i] = Some(Err(err));
                }
            }
        }
        // One response timeout for the whole fan-out, counted from when the requests are sent.
        let longest = calls.iter().map(|c| c.transport.response_timeout()).max();
        let deadline = Instant::now() + longest.unwrap_or_default();
        for (i, call) in calls.iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            let outcome = match conns.find(call.id) {
                Some(conn) if sent[i] => {
                    conn.receive_by(Replies::Many(call.pipe.len()), deadline, Wait::Yield)
                }
                _ => Err(Error::Internal("lost track of a connection".into())),
            };
            if outcome.as_ref().is_err_and(breaks_connection) {
                conns.remove(call.id);
            }
            outcomes[i] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::Internal("no outcome".into()))))
            .collect()
    })
    .unwrap_or_else(|| {
        calls.iter().map(|_| Err(Error::Internal("thread is shutting down".into()))).collect()
    })
}
