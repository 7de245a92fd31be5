//! One tracking connection's life (`run`): connect, turn tracking on, keep the database
//! marker, probe for liveness and a SWAPDB, again after a loss; and when a refusal is believed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{AsyncConnectionConfig, PushInfo, Value};

use super::{Near, Source, Writer};
use crate::errors::Error;
use crate::near::store::{now_ns, Flush};

/// How a session ended.
enum End {
    /// The connection broke or stalled: reconnect.
    Lost,
    /// The server does not do tracking (or refused our request): give up.
    Refused(String),
}

/// Whether a failed setup means the server cannot track (as opposed to being away).
fn refusal(err: &redis::RedisError) -> bool {
    let away = err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal();
    // Loading, busy, full, demoted or authentication trouble stops the data connections too:
    // retry.
    let transient = matches!(
        err.code(),
        Some(
            "LOADING"
                | "BUSY"
                | "MASTERDOWN"
                | "NOAUTH"
                | "WRONGPASS"
                | "TRYAGAIN"
                | "OOM"
                | "READONLY"
        )
    );
    // Anything else (an error reply, or redis-rs finding RESP3 unsupported) is the server
    // saying no.
    !away && !transient
}

/// How many refused setups in a row turn the near cache off.
const REFUSALS_BELIEVED: u32 = 3;

/// One tracking connection's life: connect, subscribe, flush, ping; again after a loss.
pub(super) async fn run(near: Arc<Near>, source: Arc<Source>, idx: usize, set_id: u64) {
    let mut backoff = Duration::from_millis(50);
    let mut refusals = 0;
    loop {
        // Made for each session: credentials that change are the current ones.
        if let Some(creds) = &source.creds {
            // None yet: `client` below says so, and the loop tries again later.
            let _ = creds.first_async(source.connect_timeout).await;
        }
        let (client, auth_gen) = match source.client() {
            Ok(made) => made,
            // No credentials yet: the data connections fail the same way; try again later.
            Err(Error::Credentials(_)) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
            Err(err) => return near.refuse(format!("{}: {err}", source.addr)),
        };
        let outcome = session(&near, &client, auth_gen, &source, idx, set_id).await;
        near.set_writer(set_id, None);
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

/// Connect and track until the connection is lost; Ok(()) if it had been tracking.
async fn session(
    near: &Arc<Near>,
    client: &redis::Client,
    mut auth_gen: u64,
    source: &Source,
    idx: usize,
    set_id: u64,
) -> std::result::Result<(), End> {
    let pusher = Arc::clone(near);
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(source.connect_timeout))
        .set_response_timeout(None)
        .set_push_sender(move |info: PushInfo| {
            pusher.push(set_id, idx, info);
            Ok::<(), redis::aio::SendError>(())
        });
    let deadline = source.connect_timeout + source.response_timeout;
    let marker = near.marker();
    let mut stamp = near.stamp();
    let setup = async {
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("TRACKING").arg("ON").arg("BCAST");
        for prefix in &near.prefixes {
            cmd.arg("PREFIX").arg(&prefix[..]);
        }
        // Writes sent on this connection (see `Near::writer`) are not echoed back to it.
        cmd.arg("NOLOOP");
        cmd.query_async::<Value>(&mut conn).await?;
        let marking = if source.check_db {
            first_mark(&mut conn, marker, &stamp).await?
        } else {
            Marking::Kept
        };
        Ok::<_, redis::RedisError>((conn, marking))
    };
    let (mut conn, marking) = match tokio::time::timeout(deadline, setup).await {
        Ok(Ok(made)) => made,
        Ok(Err(err))
            if err.kind() == redis::ErrorKind::AuthenticationFailed && source.creds.is_some() =>
        {
            // Rotated credentials the server already wants: ask for them (the next session
            // uses them); not a refusal of tracking.
            if let Some(creds) = &source.creds {
                creds.refresh_async(auth_gen, source.connect_timeout).await;
            }
            return Err(End::Lost);
        }
        Ok(Err(err)) if refusal(&err) => {
            return Err(End::Refused(format!(
                "{} refused client tracking ({})",
                source.addr,
                err.code().unwrap_or(err.category())
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
    let source = Arc::new(source.clone());
    near.set_writer(
        set_id,
        Some(Writer { set_id, conn: conn.clone(), source: Arc::clone(&source) }),
    );
    let every = Duration::from_nanos((near.max_stale_ns / 4).max(1_000_000));
    // A PING not answered within the response timeout (or the gate's own bound, if longer)
    // means the connection is stuck: drop it, as the gate already has.
    let patience = source.response_timeout.max(Duration::from_nanos(near.max_stale_ns));
    let mut marked_at = now_ns();
    loop {
        let sent = now_ns();
        if let Some(auth) = source.reauth(&mut auth_gen) {
            // New credentials: this long-lived connection authenticates with them. A refusal
            // leaves it as it was (and is no reason to drop it); a connection that does not
            // answer is dropped, as a probe's would be.
            match tokio::time::timeout(patience, auth.query_async::<Value>(&mut conn)).await {
                Err(_) => return Ok(()),
                Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() => return Ok(()),
                Ok(_) => {}
            }
        }
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
        let reply = tokio::time::timeout(patience, probe.query_async::<Value>(&mut conn));
        let seen = match reply.await {
            Ok(Ok(seen)) => seen,
            // An ACL that refuses the probe (NOPERM): no liveness, no hits; believed as a
            // refusal of tracking is.
            Ok(Err(err)) if refusal(&err) => {
                return Err(End::Refused(format!(
                    "{} refused the near cache's {} ({})",
                    source.addr,
                    if check_db { "GET of its database marker" } else { "PING" },
                    err.code().unwrap_or(err.category())
                )))
            }
            _ => return Ok(()),
        };
        if matches!(&seen, Value::BulkString(b) if b.as_slice() == stamp.as_bytes()) {
            near.answered(set_id, idx, sent);
            // (Only a marker that is kept is refreshed: a cluster has none, its key could
            // belong to another node's slots.)
            if (check_db || retry_mark) && sent.saturating_sub(marked_at) > MARK_REFRESH_NS {
                marked_at = sent;
                match mark(&mut conn, marker, &stamp).await {
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
            if mark(&mut conn, marker, &stamp).await.is_err() {
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
fn full(err: &redis::RedisError) -> bool {
    err.code() == Some("OOM")
}

/// A new session's first marking: write the marker and read it back (what the probes do) in
/// one round trip.
async fn first_mark(
    conn: &mut redis::aio::MultiplexedConnection,
    marker: &str,
    stamp: &str,
) -> redis::RedisResult<Marking> {
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(marker).arg(stamp).arg("PX").arg(MARK_TTL_MS);
    pipe.cmd("GET").arg(marker);
    let replies: Vec<redis::RedisResult<Value>> = pipe.ignore_errors().query_async(conn).await?;
    for reply in replies {
        match reply {
            Ok(_) => {}
            Err(err) if full(&err) => return Ok(Marking::Full),
            Err(err) if refusal(&err) => {
                return Ok(Marking::Refused(err.code().unwrap_or(err.category()).to_owned()))
            }
            Err(err) => return Err(err),
        }
    }
    Ok(Marking::Kept)
}

/// (Re)write the marker, whose disappearance reveals a SWAPDB.
async fn mark(
    conn: &mut redis::aio::MultiplexedConnection,
    marker: &str,
    stamp: &str,
) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(marker).arg(stamp).arg("PX").arg(MARK_TTL_MS);
    cmd.query_async::<Value>(conn).await.map(drop)
}
