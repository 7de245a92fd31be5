//! A connection's tasks on the I/O runtime: `connect` (open, handshake, then run the other
//! two), `write_loop` (what callers buffered while replies were outstanding) and `read_loop`
//! (replies to their waiters, and the response timeout).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::time::Instant;

use super::{lock, BreakOnDrop, Conn, Done, Phase, Stream, Waiter};
use crate::errors::Error;
use crate::proto::Replies;
use crate::transport::Endpoint;

pub(super) async fn connect(conn: Arc<Conn>, config: Arc<Endpoint>) {
    let _guard = BreakOnDrop(Arc::clone(&conn), Arc::clone(&config.addr));
    let addr = &config.addr;
    // The tracking connection (pushes go to a sink) speaks RESP3.
    let handshake = if conn.sink.is_some() { &config.resp3 } else { &config.handshake };
    let opened =
        tokio::time::timeout(config.connect_timeout, Stream::open(&config, handshake)).await;
    let (stream, unanswered, auth_gen) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(err)) => return conn.break_with(&err),
        Err(_) => {
            return conn.break_with(&Error::Connection(format!(
                "Connection to Redis at {addr} timed out after {:?}",
                config.connect_timeout
            )));
        }
    };
    if conn.stream.set(stream).is_err() {
        return conn.break_with(&Error::Internal("connection opened twice".into()));
    }
    {
        let mut st = lock(&conn.state);
        if matches!(st.phase, Phase::Broken) {
            return;
        }
        st.phase = Phase::Ready;
        st.auth_gen = auth_gen;
        let _ = conn.open.set(config.stats.opened());
        // Commands queued while connecting had connect + response time; now connected, they
        // get one response timeout from here (a stalled server costs one timeout, not two).
        let answer_by = Instant::now() + config.response_timeout;
        for w in st.waiting.iter_mut() {
            w.deadline = w.deadline.min(answer_by);
        }
        if unanswered > 0 {
            // The handshake's replies come first: read and dropped.
            let done = Done::Discard(Some(Arc::clone(&config.offers)));
            let waiter = Waiter { done, deadline: answer_by, replay: None };
            st.waiting.push_front(waiter, Replies::Many(unanswered));
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
                if st.outbuf.is_empty() && !stream.unsent() {
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
        let deadline =
            conn.earliest_deadline().unwrap_or_else(|| Instant::now() + response_timeout / 4);
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await
        {
            Ok(ready) => ready,
            Err(_) => {
                let late = conn.earliest_deadline().is_some_and(|d| d <= Instant::now());
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
            match stream.try_read_into(rs) {
                Ok(0) => Err(Error::Connection(format!(
                    "Connection to Redis at {addr} was closed by the server"
                ))),
                Ok(n) => {
                    conn.stats.received(n);
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
