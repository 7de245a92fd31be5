//! The near cache's one fill protocol, for a get's miss and a get_many's misses alike: a
//! token is registered before the request is sent (the lookup did that); GET and PTTL of each
//! key go to the server that owns it in one round trip; a value is installed only if its
//! token survived (no invalidation or flush came first) and the server that answered is one
//! whose invalidations this process hears. Anything else cancels the token, so a fill never
//! outlives its request: a failed round trip, an error reply, an awaitable dropped unawaited.

//!
//! With admission by use (OPTIN tracking) the server tracks only what a tracking connection
//! reads after `CLIENT CACHING YES`: a fill goes through the tracking connection of the
//! server that owns its keys, its reply read in order with that server's invalidations, and
//! installed there. When that connection is not up, the keys are read the usual way and
//! nothing is installed.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use redis::{Pipeline, Value};

use crate::bridge::{Bridge, Finish, Pending, Slot};
use crate::errors::Error;
use crate::near::store::Token;
use crate::near::tracking::Near;
use crate::proto::{reply, Reply, Request};
use crate::py::client::Client;
use crate::py::functions::fanout_metered;
use crate::stats::Meter;
use crate::transport::{Done, Pushed};

/// Past the response timeout, how long a sync fill through a tracking connection waits for
/// the task that enforces it.
const GRACE: Duration = Duration::from_millis(250);

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

/// The round trip of a fill: GET of every key, and PTTL after each one that is filled; with
/// `optin` (through a tracking connection, admission by use) `CLIENT CACHING YES` in front of
/// each such GET, so that the server tracks the keys kept here, and only those.
fn request(keys: &[FillKey], optin: bool) -> Pipeline {
    let mut pipe = Pipeline::with_capacity(keys.len() * if optin { 3 } else { 2 });
    for (key, token) in keys {
        if optin && token.is_some() {
            pipe.cmd("CLIENT").arg("CACHING").arg("YES");
        }
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
/// `optin`: the request was `request(keys, true)`.
fn settle(
    near: &Near,
    keys: &[FillKey],
    source: &str,
    reply: Result<Reply, Error>,
    optin: bool,
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
        // With OPTIN, the answer to CLIENT CACHING YES: refused, the key is not tracked.
        let caching = if optin && token.is_some() { items.next() } else { None };
        let tracked = tracked && !matches!(caching, Some(Value::ServerError(_)));
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
    let optin = near.optin();
    let req = Request::Pipe(request(&keys, optin));
    let (near, source) = (Arc::clone(near), Arc::clone(conn.addr()));
    let done = move |reply| drop(settle(&near, &keys, &source, reply, optin));
    conn.send(&req, Done::then(done), None);
}

/// A get's fill: the value (an error reply raises).
fn one(py: Python<'_>, values: Value) -> PyResult<Py<PyAny>> {
    let first = match values {
        Value::Array(values) => values.into_iter().next(),
        other => Some(other),
    };
    reply::to_py(py, first.unwrap_or(Value::Nil))
}

/// A get_many's fill: the values in order, an error reply as a `ResponseError` instance (a
/// router reads that key again through its own redirects).
fn many(py: Python<'_>, values: Value) -> PyResult<Py<PyAny>> {
    reply::to_py_results(py, values)
}

/// A get_many's fill on one server: the values in order; an error reply raises.
fn many_raising(py: Python<'_>, values: Value) -> PyResult<Py<PyAny>> {
    reply::to_py(py, values)
}

/// How a fill's values (an array of the GET replies asked for) become Python's.
type Convert = fn(Python<'_>, Value) -> PyResult<Py<PyAny>>;

/// With admission by use, the tracking connection a fill of `keys` on `client` goes through;
/// None: the usual way (without admission by use; or its connection is not up, when every
/// token is cancelled: the keys are read, and nothing is installed).
fn through_tracking(near: &Near, client: &Client, keys: &mut [FillKey]) -> Option<Arc<Pushed>> {
    if !near.optin() {
        return None;
    }
    let conn = near.conn_to(client.addr());
    if conn.is_none() {
        cancel_all(near, keys);
        keys.iter_mut().for_each(|(_, token)| *token = None);
    }
    conn
}

/// Send a fill of `keys` through the tracking connection `conn` (of `client`'s server, whose
/// counters count it): on its reader, in order with the invalidations, the reply is settled
/// and `done` gets the first `asked` values.
fn send_on(
    near: &Arc<Near>,
    client: &Client,
    conn: &Pushed,
    keys: Vec<FillKey>,
    asked: usize,
    done: impl FnOnce(Result<Vec<Value>, Error>) + Send + 'static,
) {
    let req = Request::Pipe(request(&keys, true));
    let meter = Meter::start(&req);
    let (near, stats, source) =
        (Arc::clone(near), Arc::clone(&client.stats), Arc::clone(conn.addr()));
    let then = move |reply: Result<Reply, Error>| {
        if let Some(meter) = meter {
            meter.record(&stats, &reply);
        }
        done(settle(&near, &keys, &source, reply, true).map(|mut values| {
            values.truncate(asked);
            values
        }));
    };
    conn.send(&req, Done::then(then), None);
}

/// A fill sent through a tracking connection by a sync caller, to be waited for.
struct Sent {
    rx: Receiver<Result<Vec<Value>, Error>>,
    timeout: Duration,
}

impl Sent {
    /// `send_on` for a sync caller.
    fn start(
        near: &Arc<Near>,
        client: &Client,
        conn: &Pushed,
        keys: Vec<FillKey>,
        asked: usize,
    ) -> Self {
        let (tx, rx) = sync_channel(1);
        send_on(near, client, conn, keys, asked, move |outcome| drop(tx.send(outcome)));
        Sent { rx, timeout: conn.response_timeout() }
    }

    /// Its values, waited for (GIL released) at most the response timeout.
    fn wait(self, py: Python<'_>) -> Result<Vec<Value>, Error> {
        let Sent { rx, timeout } = self;
        py.detach(move || rx.recv_timeout(timeout + GRACE)).unwrap_or_else(|_| {
            Err(Error::Timeout(format!("Redis did not answer within {timeout:?}")))
        })
    }
}

/// A fill of `keys` through the tracking connection `conn`: the first `asked` values, or
/// with `bridge` their awaitable.
#[allow(clippy::too_many_arguments)]
fn fill_on(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    conn: &Pushed,
    keys: Vec<FillKey>,
    asked: usize,
    bridge: Option<Py<Bridge>>,
    convert: Convert,
) -> PyResult<Py<PyAny>> {
    let Some(bridge) = bridge else {
        let values = Sent::start(near, client, conn, keys, asked).wait(py)?;
        return convert(py, Value::Array(values));
    };
    let slot = Slot::new();
    let queue = Arc::clone(&bridge.get().queue);
    let completed = Arc::clone(&slot);
    send_on(near, client, conn, keys, asked, move |outcome| {
        completed.complete(outcome.map(Value::Array), &queue);
    });
    Ok(Py::new(py, Pending::new(slot, bridge, None, convert))?.into_any())
}

/// A fill of `keys` on `client`, blocking (GIL released): the values of the first `asked`.
fn sync(
    py: Python<'_>,
    near: &Near,
    client: &Client,
    keys: &[FillKey],
    asked: usize,
    convert: Convert,
) -> PyResult<Py<PyAny>> {
    let reply = client.call_sync(py, &Request::Pipe(request(keys, false)));
    let mut values = settle(near, keys, client.addr(), reply, false)?;
    values.truncate(asked);
    convert(py, Value::Array(values))
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
    let req = Request::Pipe(request(&keys, false));
    let mut guard =
        Guard { near: Arc::clone(near), keys, source: Arc::clone(client.addr()), settled: false };
    let finish: Finish = Box::new(move |py: Python<'_>, reply: Reply| {
        guard.settled = true;
        let mut values = settle(&guard.near, &guard.keys, &guard.source, Ok(reply), false)?;
        values.truncate(asked);
        convert(py, Value::Array(values))
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
    fill(py, near, client, vec![(Box::from(key), Some(token))], bridge, one)
}

/// `fill_key` and `fill_keys`: through the tracking connection with admission by use, else
/// on `client`'s own connections.
fn fill(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    mut keys: Vec<FillKey>,
    bridge: Option<Py<Bridge>>,
    convert: Convert,
) -> PyResult<Py<PyAny>> {
    let conn = through_tracking(near, client, &mut keys);
    if near.optin() && conn.is_none() {
        // Read the usual way, nothing kept: no refresh rides along.
        let asked = keys.len();
        return match bridge {
            None => sync(py, near, client, &keys, asked, convert),
            Some(bridge) => pending(py, near, client, keys, asked, bridge, convert),
        };
    }
    let asked = with_refresh(near, &mut keys);
    match (conn, bridge) {
        (Some(conn), bridge) => fill_on(py, near, client, &conn, keys, asked, bridge, convert),
        (None, None) => sync(py, near, client, &keys, asked, convert),
        (None, Some(bridge)) => pending(py, near, client, keys, asked, bridge, convert),
    }
}

/// A get_many's fill of `keys` on `client`: the list of values (an error reply raises with
/// `raising`, else it is an instance in the list), or with `bridge` its awaitable.
/// Keys to refresh ride along (`with_refresh`).
pub fn fill_keys(
    py: Python<'_>,
    near: &Arc<Near>,
    client: &Client,
    keys: Vec<FillKey>,
    raising: bool,
    bridge: Option<Py<Bridge>>,
) -> PyResult<Py<PyAny>> {
    fill(py, near, client, keys, bridge, if raising { many_raising } else { many })
}

/// A get_many's fills on several servers at once, blocking: every request is written before
/// any reply is read. Each part's outcome, in order: its list of values, or the exception
/// instance that failed its round trip (the caller decides what to read again).
/// With admission by use each part goes through its server's tracking connection (all sent
/// before any is waited for), or the usual way, installing nothing, when that is not up.
pub fn fill_fanout<'py>(
    py: Python<'py>,
    near: &Arc<Near>,
    mut parts: Vec<(&Client, Vec<FillKey>)>,
) -> PyResult<Bound<'py, PyList>> {
    // With admission by use: the parts sent through tracking connections, by index.
    let mut sent = Vec::new();
    for (at, (client, keys)) in parts.iter_mut().enumerate() {
        if let Some(conn) = through_tracking(near, client, keys) {
            let asked = keys.len();
            sent.push((at, Sent::start(near, client, &conn, std::mem::take(keys), asked)));
        }
    }
    let rest: Vec<usize> = (0..parts.len()).filter(|at| !sent.iter().any(|s| s.0 == *at)).collect();
    let calls = rest.iter().map(|&at| (parts[at].0, request(&parts[at].1, false))).collect();
    let mut outcomes: Vec<Option<Result<Vec<Value>, Error>>> =
        (0..parts.len()).map(|_| None).collect();
    let answered = if rest.is_empty() { Vec::new() } else { fanout_metered(py, calls) };
    for (&at, outcome) in rest.iter().zip(answered) {
        let (client, keys) = &parts[at];
        outcomes[at] = Some(settle(near, keys, client.addr(), outcome, false));
    }
    for (at, waiting) in sent {
        outcomes[at] = Some(waiting.wait(py));
    }
    let out = PyList::empty(py);
    for outcome in outcomes {
        match outcome.unwrap_or_else(|| Err(Error::Internal("a fill part went unsent".into()))) {
            Ok(values) => out.append(many(py, Value::Array(values))?)?,
            Err(err) => out.append(PyErr::from(err).into_value(py))?,
        }
    }
    Ok(out)
}
