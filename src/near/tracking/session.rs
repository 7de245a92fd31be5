//! One tracking connection's life (`run`): connect, turn tracking on, keep the database
//! marker, probe for liveness and a SWAPDB, again after a loss; and when a refusal is believed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{ServerError, Value};

use super::{Near, Source};
use crate::errors::Error;
use crate::near::store::{now_ns, Flush};
use crate::proto::Request;
use crate::transport::Pushed;

/// How a session ended.
enum End {
    /// The connection broke or stalled: reconnect.
    Lost,
    /// The server does not do tracking (or refused our request): give up.
    Refused(String),
}

/// Whether a failed setup means the server cannot track (as opposed to being away): an
/// error reply (to `HELLO 3` in the handshake, or to a command), but not one that stops the
/// data connections too (loading, busy, full, demoted or authentication trouble): retried.
fn refusal(err: &Error) -> bool {
    let Error::Response { code, .. } = err else { return false };
    !matches!(
        code.as_str(),
        "LOADING"
            | "BUSY"
            | "MASTERDOWN"
            | "NOAUTH"
            | "WRONGPASS"
            | "TRYAGAIN"
            | "OOM"
            | "READONLY"
    )
}

/// An error's code, for messages ("ERR", "NOPERM", ...), or its kind.
fn code(err: &Error) -> &str {
    match err {
        Error::Response { code, .. } => code,
        Error::Timeout(_) => "timeout",
        _ => "connection",
    }
}

/// How many refused setups in a row turn the near cache off.
const REFUSALS_BELIEVED: u32 = 3;

/// One tracking connection's life: connect, subscribe, flush, ping; again after a loss.
pub(super) async fn run(near: Arc<Near>, source: Arc<Source>, idx: usize, set_id: u64) {
    let mut backoff = Duration::from_millis(50);
    let mut refusals = 0;
    loop {
        let conn = match near.open(&source, set_id, idx) {
            Ok(conn) => conn,
            Err(err) => return near.refuse(format!("{}: {err}", source.addr)),
        };
        let outcome = session(&near, &conn, &source, idx, set_id).await;
        near.set_live(set_id, &source.addr, None);
        conn.close();
        drop(conn);
        let connected = match outcome {
            Ok(()) => true,
            // A refusal may be passing (a full server answers ERR too): believe it when the
            // server says it again on the next tries.
            Err(End::Refused(reason)) => {
                refusals += 1;
                if refusals >= REFUSALS_BELIEVED {
                    return near.refuse(reason);
                }
                false
            }
            Err(End::Lost) => false,
        };
        near.answered(set_id, idx, 0);
        if connected {
            near.store.flush(Flush::Disconnect);
            backoff = Duration::from_millis(50);
            refusals = 0;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Track on `conn` until it is lost; Ok(()) if it had been tracking. (Its handshake, made
/// with the data connections' recipe, authenticates with the current credentials, tries
/// fresh ones once if they are refused, and, on a live connection, sends AUTH in front of
/// the next command whenever they change.)
async fn session(
    near: &Arc<Near>,
    conn: &Arc<Pushed>,
    source: &Source,
    idx: usize,
    set_id: u64,
) -> std::result::Result<(), End> {
    let endpoint = &source.endpoint;
    let deadline = endpoint.connect_timeout + endpoint.response_timeout;
    let marker = near.marker();
    let mut stamp = near.stamp();
    let setup = async {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("TRACKING").arg("ON");
        if near.optin() {
            // Admission by use: only the keys this connection reads after CLIENT CACHING YES
            // (the kept ones, filled through it) are tracked.
            cmd.arg("OPTIN");
        } else {
            cmd.arg("BCAST");
            for prefix in &near.prefixes {
                cmd.arg("PREFIX").arg(&prefix[..]);
            }
        }
        // Writes sent on this connection (see `Near::writer`) are not echoed back to it.
        cmd.arg("NOLOOP");
        conn.call(&Request::Cmd(cmd), None).await?;
        if source.check_db {
            first_mark(conn, marker, &stamp).await
        } else {
            Ok(Marking::Kept)
        }
    };
    let marking = match tokio::time::timeout(deadline, setup).await {
        Ok(Ok(marking)) => marking,
        Ok(Err(err)) if refusal(&err) => {
            return Err(End::Refused(format!(
                "{} refused client tracking ({})",
                source.addr,
                code(&err)
            )))
        }
        _ => return Err(End::Lost),
    };
    // Without its marker (a server refused it, or is full) the session watches liveness
    // only; a full server's is tried again at each refresh.
    let mut check_db = source.check_db && matches!(marking, Marking::Kept);
    let mut retry_mark = source.check_db && matches!(marking, Marking::Full);
    if source.check_db {
        near.unmarked.store(!check_db, Ordering::Release);
        if let Marking::Refused(code) = &marking {
            near.tell_unmarked(format!(
                "{} refused the near cache's database marker {marker} ({code})",
                source.addr
            ));
        }
    }
    // Tracking is on: whatever was kept (or is being filled) from before may have missed an
    // invalidation.
    near.store.flush(Flush::Connect);
    near.set_live(set_id, &source.addr, Some(conn));
    let every = Duration::from_nanos((near.max_stale_ns / 4).max(1_000_000));
    // A PING not answered within the response timeout (or the gate's own bound, if longer)
    // means the connection is stuck: it is dropped, as the gate already is.
    let patience = endpoint.response_timeout.max(Duration::from_nanos(near.max_stale_ns));
    let mut marked_at = now_ns();
    loop {
        let sent = now_ns();
        // The probe: its answer proves every earlier invalidation arrived. GET of the marker
        // when it is kept (and SWAPDB watched for), else PING with the marker's value as
        // argument, which answers it.
        let mut probe = redis::cmd("GET");
        if check_db {
            probe.arg(marker);
        } else {
            probe = redis::cmd("PING");
            probe.arg(&stamp);
        }
        let seen = match conn.call(&Request::Cmd(probe), Some(patience)).await {
            Ok(seen) => seen,
            // An ACL that refuses the probe (NOPERM): no liveness, no hits; believed as a
            // refusal of tracking is.
            Err(err) if refusal(&err) => {
                return Err(End::Refused(format!(
                    "{} refused the near cache's {} ({})",
                    source.addr,
                    if check_db { "GET of its database marker" } else { "PING" },
                    code(&err)
                )))
            }
            Err(_) => return Ok(()),
        };
        if matches!(&seen, Value::BulkString(b) if b.as_slice() == stamp.as_bytes()) {
            near.answered(set_id, idx, sent);
            // (Only a marker that is kept is refreshed: a cluster has none, its key could
            // belong to another node's slots.)
            if (check_db || retry_mark) && sent.saturating_sub(marked_at) > MARK_REFRESH_NS {
                marked_at = sent;
                match mark(conn, marker, &stamp).await {
                    Ok(()) => {
                        if retry_mark {
                            // Room again: from the next probe on, SWAPDB is watched for.
                            (check_db, retry_mark) = (true, false);
                            near.unmarked.store(false, Ordering::Release);
                        }
                    }
                    // A full server (maxmemory, noeviction): the marker lives on until its
                    // TTL (the refresh is tried again), or is written once there is room.
                    Err(err) if full(&err) => {}
                    Err(_) => return Ok(()),
                }
            }
        } else {
            // Our marker left the database without a flush message: another client ran
            // SWAPDB (which servers do not signal to tracking clients), or deleted it.
            near.store.flush(Flush::Swapped);
            marked_at = now_ns();
            stamp = near.stamp();
            if mark(conn, marker, &stamp).await.is_err() {
                return Ok(());
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// How long the database marker lives without a refresh, and how often it is refreshed.
const MARK_TTL_MS: u64 = 600_000;
const MARK_REFRESH_NS: u64 = 60_000_000_000;

/// A database marker's name when none is given: a key of redoxide's own.
pub(super) fn marker_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ns());
    format!("redoxide:near:{:016x}", h.finish())
}

/// How a session's first marking went.
enum Marking {
    /// The marker is written (or not wanted: a cluster): SWAPDB is watched for.
    Kept,
    /// The server refuses it (an ACL user without rights on that key: NOPERM, with this
    /// code): the session goes on without it.
    Refused(String),
    /// The server is full (maxmemory with noeviction): the session goes on without it, and
    /// tries again at each refresh.
    Full,
}

/// Whether a write failed because the server is full (OOM): reads still work.
fn full(err: &Error) -> bool {
    code(err) == "OOM"
}

/// A new session's first marking: write the marker and read it back (what the probes do) in
/// one round trip.
async fn first_mark(conn: &Pushed, marker: &str, stamp: &str) -> Result<Marking, Error> {
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(marker).arg(stamp).arg("PX").arg(MARK_TTL_MS);
    pipe.cmd("GET").arg(marker);
    let replies = match conn.call(&Request::Pipe(pipe), None).await? {
        Value::Array(replies) => replies,
        other => vec![other],
    };
    let refused = |e: &ServerError| Error::from_reply(e, &format!("Redis at {}", conn.addr()));
    for reply in replies {
        let Value::ServerError(err) = reply else { continue };
        let err = refused(&err);
        if full(&err) {
            return Ok(Marking::Full);
        }
        if refusal(&err) {
            return Ok(Marking::Refused(code(&err).to_owned()));
        }
        return Err(err);
    }
    Ok(Marking::Kept)
}

/// (Re)write the marker, whose disappearance reveals a SWAPDB.
async fn mark(conn: &Pushed, marker: &str, stamp: &str) -> Result<(), Error> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(marker).arg(stamp).arg("PX").arg(MARK_TTL_MS);
    conn.call(&Request::Cmd(cmd), None).await.map(drop)
}
