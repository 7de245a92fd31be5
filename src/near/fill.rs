//! The near cache's one fill protocol, for a get's miss and a get_many's misses alike: a
//! token is registered before the request is sent (the lookup did that); GET and PTTL of each
//! key go to the server that owns it in one round trip; a value is installed only if its
//! token survived (no invalidation or flush came first) and the server that answered is one
//! whose invalidations this process hears. Anything else cancels the token, so a fill never
//! outlives its request: a failed round trip, an error reply, an awaitable dropped unawaited.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;
use redis::{Pipeline, Value};

use crate::bridge::{Bridge, Finish};
use crate::errors::Error;
use crate::near::store::Token;
use crate::near::tracking::Near;
use crate::proto::{reply, Reply, Request};
use crate::py::client::Client;
use crate::py::functions::fanout_metered;
use crate::transport::{Done, Pushed};

/// A key to read, with the token of its fill; none for a key not kept here (read, never
/// installed: a get_many's other keys ride in the same round trip).
pub type FillKey = (Box<[u8]>, Option<Token>);

/// At most this many keys invalidated while being hit ride along with one fill.
const REFRESH_BATCH: usize = 64;

/// Add to a fill the keys the server invalidated while they were being hit, when every kept
/// key lives on the server the fill goes to (one server, or one primary with replicas: not a
/// cluster, whose fills go to the primary of each key's slot): they are read and installed in
/// the same round trip, so a write of many hot keys by another client costs this process one
/// round trip, not one per key. Return how many keys the caller asked for (the values it
/// gets back).
fn with_refresh(near: &Near, keys: &mut Vec<FillKey>) -> usize {
    let asked = keys.len();
    if near.one_primary() {
        let more = near.store.take_refresh(REFRESH_BATCH);
        keys.extend(more.into_iter().map(|(key, token)| (key, Some(token))));
    }
    asked
}

/// The round trip of a fill: GET of every key, and PTTL after each one that is filled.
fn request(keys: &[FillKey]) -> Pipeline {
    let mut pipe = Pipeline::with_capacity(keys.len() * 2);
    for (key, token) in keys {
        pipe.cmd("GET").arg(&**key);
        if token.is_some() {
            pipe.cmd("PTTL").arg(&**key);
        }
    }
    pipe
}

/// Cancel every token among `keys` (a fill that failed, or never started).
pub fn cancel_all(near: &Near, keys: &[FillKey]) {
    for (key, token) in keys {
        if let Some(token) = token {
            near.store.cancel(key, *token);
        }
    }
}

/// The end of every fill: install each value whose token survived if `source`, the server
/// that answered, is tracked; cancel every other token; return the GET replies in order.
fn settle(
    near: &Near,
    keys: &[FillKey],
    source: &str,
    reply: Result<Reply, Error>,
) -> Result<Vec<Value>, Error> {
    let items = match reply {
        Ok(Value::Array(items)) => items,
        Ok(other) => {
            cancel_all(near, keys);
            return Err(Error::Internal(format!("unexpected reply to a fill: {other:?}")));
        }
        Err(err) => {
            cancel_all(near, keys);
            return Err(err);
        }
    };
    let tracked = near.tracks_source(source);
    let mut items = items.into_iter();
    let mut values = Vec::with_capacity(keys.len());
    for (key, token) in keys {
        let data = items.next().unwrap_or(Value::Nil);
        if let Some(token) = *token {
            match (&data, items.next()) {
                (Value::BulkString(value), Some(Value::Int(pttl))) if tracked => {
                    near.store.install(key, token, value, pttl);
                }
                // An ACL that lets the key be read but not its PTTL (which every install
                // needs): nothing could ever be kept. Said once, and the near cache is off.
                (Value::BulkString(_), Some(Value::ServerError(err))) if err.code() == "NOPERM" => {
                    near.store.cancel(key, token);
                    near.refuse_fills(format!("{source} refused the near cache's PTTL (NOPERM)"));
                }
                _ => near.store.cancel(key, token),
            }
        }
        values.push(data);
    }
    Ok(values)
}

/// Refresh `keys` (registered by `Store::take_refresh_of`) on the tracking connection whose
/// invalidation named them: one round trip to the node that owns them, off every caller's
/// path. Its reader reads the reply in order with the invalidations, and a token that
/// survived until then installs.
pub fn refresh_on(near: &Arc<Near>, conn: &Pushed, keys: Vec<FillKey>) {
    let req = Request::Pipe(request(&keys));
    let (near, source) = (Arc::clone(near), Arc::clone(conn.addr()));
    conn.send(&req, Done::then(move |reply| drop(settle(&near, &keys, &source, reply))), None);
}

/// A get's fill: the value (an error reply raises).
fn one(py: Python<'_>, values: Vec<Value>) -> PyResult<Py<PyAny>> {
    reply::to_py(py, values.into_iter().next().unwrap_or(Value::Nil))
}

/// A get_many's fill: the values in order, an error reply as a `ResponseError` instance (a
/// router reads that key again through its own redirects).
fn many(py: Python<'_>, values: Vec<Value>) -> PyResult<Py<PyAny>> {
    reply::to_py_results(py, Value::Array(values))
}

/// A get_many's fill on one server: the values in order; an error reply raises.
fn many_raising(py: Python<'_>, values: Vec<Value>) -> PyResult<Py<PyAny>> {
    reply::to_py(py, Value::Array(values))
}

type Convert = fn(Python<'_>, Vec<Value>) -> PyResult<Py<PyAny>>;

/// A fill of `keys` on `client`, blocking (GIL released): the values of the first `asked`.
fn sync(
    py: Python<'_>,
    near: &Near,
    client: &Client,
    keys: &[FillKey],
    asked: usize,
    convert: Convert,
) -> PyResult<Py<PyAny>> {
    let reply = client.call_sync(py, &Request::Pipe(request(keys)));
    let mut values = settle(near, keys, client.addr(), reply)?;
    values.truncate(asked);
    convert(py, values)
}

/// An async fill's keys, their tokens cancelled if its awaitable is dropped (or its request
/// fails) before the reply is settled.
struct Guard {
    near: Arc<Near>,
    keys: Vec<FillKey>,
    source: Arc<str>,
    settled: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.settled {
            cancel_all(&self.near, &self.keys);
        }
    }
}

/// A fill of `keys` on `client` from an event loop: the awaitable of the first `asked`
/// values, settled when converted.
fn pending(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    keys: Vec<FillKey>,
    asked: usize,
    bridge: Py<Bridge>,
    convert: Convert,
) -> PyResult<Py<PyAny>> {
    let req = Request::Pipe(request(&keys));
    let mut guard =
        Guard { near: Arc::clone(near), keys, source: Arc::clone(client.addr()), settled: false };
    let finish: Finish = Box::new(move |py: Python<'_>, reply: Reply| {
        guard.settled = true;
        let mut values = settle(&guard.near, &guard.keys, &guard.source, Ok(reply))?;
        values.truncate(asked);
        convert(py, values)
    });
    let pending = client.run_async(py, bridge, req, reply::to_py)?;
    Ok(Py::new(py, pending.with_finish(finish))?.into_any())
}

/// A get's fill of `key` under `token` on `client`: the value, or with `bridge` its
/// awaitable (keys to refresh ride along: `with_refresh`).
pub fn fill_key(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    key: &[u8],
    token: Token,
    bridge: Option<Py<Bridge>>,
) -> PyResult<Py<PyAny>> {
    let mut keys = vec![(Box::from(key), Some(token))];
    let asked = with_refresh(near, &mut keys);
    match bridge {
        None => sync(py, near, client, &keys, asked, one),
        Some(bridge) => pending(py, near, client, keys, asked, bridge, one),
    }
}

/// A get_many's fill of `keys` on `client`: the list of values (an error reply raises with
/// `raising`, else it is an instance in the list), or with `bridge` its awaitable.
/// Keys to refresh ride along (`with_refresh`).
pub fn fill_keys(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    mut keys: Vec<FillKey>,
    raising: bool,
    bridge: Option<Py<Bridge>>,
) -> PyResult<Py<PyAny>> {
    let convert: Convert = if raising { many_raising } else { many };
    let asked = with_refresh(near, &mut keys);
    match bridge {
        None => sync(py, near, client, &keys, asked, convert),
        Some(bridge) => pending(py, near, client, keys, asked, bridge, convert),
    }
}

/// A get_many's fills on several servers at once, blocking: every request is written before
/// any reply is read. Each part's outcome, in order: its list of values, or the exception
/// instance that failed its round trip (the caller decides what to read again).
pub fn fill_fanout<'py>(
    py: Python<'py>,
    near: &Near,
    parts: &[(&Client, Vec<FillKey>)],
) -> PyResult<Bound<'py, PyList>> {
    let calls = parts.iter().map(|(client, keys)| (*client, request(keys))).collect();
    let outcomes = fanout_metered(py, calls);
    let out = PyList::empty(py);
    for ((client, keys), outcome) in parts.iter().zip(outcomes) {
        match settle(near, keys, client.addr(), outcome) {
            Ok(values) => out.append(many(py, values)?)?,
            Err(err) => out.append(PyErr::from(err).into_value(py))?,
        }
    }
    Ok(out)
}
