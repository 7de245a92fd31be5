//! The near cache's Python surface: `NearCache` (lookups, fills, own writes, stats; what a
//! command drops is `forget.rs`'s) and the registration of `Ready` (`ready.rs`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::bridge::Bridge;
use crate::errors::guard;
use crate::near::fill;
use crate::near::ready::Ready;
use crate::near::sketch::Sketch;
use crate::near::store::{Flush, Limits, Store, Token};
use crate::near::tracking::{Admission, Near, Source};
use crate::near::write;
use crate::proto::reply;
use crate::proto::Request;
use crate::py::client::Client;

mod around;
mod forget;
mod keys;
mod lookup;
mod peers;
mod reads;
mod stats;
mod writes;

use forget::drops_of;
use keys::{fill_keys_of, key_bytes, set_items};
use lookup::{Found, Route};
use peers::Peers;
use writes::drops_keys;

/// Add the classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NearCache>()?;
    m.add_class::<Ready>()?;
    m.add_class::<crate::near::holding::Holding>()
}

/// A near cache: the store of one cache configuration and its tracking connections.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct NearCache {
    near: Arc<Near>,
    /// The logger the one warning of a refusal goes to (`warn`).
    logger: Box<str>,
    /// The process' other near caches (`set_peers`): a write drops its keys there too.
    peers: Peers,
    /// A router's get (`route`, `py/lookup.rs`): set once, by the near client over it.
    route: OnceLock<Route>,
}

#[pymethods]
impl NearCache {
    /// Keep values of server keys starting with one of `prefixes`, at most `max_bytes` in
    /// all, none over `max_value_bytes`, each at most `max_ttl` seconds; serve hits only while
    /// the tracking connections answered within `max_stale` seconds. `marker` names the key
    /// each tracking connection keeps to see a SWAPDB (None: `redoxide:near:<random>`).
    #[new]
    /// With `admit_after` (admission by use), a key under the prefixes is kept only from the
    /// read that makes it read that many times lately, and tracked only then (OPTIN).
    #[pyo3(signature = (
        prefixes, *, max_bytes, max_value_bytes, max_ttl, max_stale, marker=None, admit_after=None,
        logger=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        prefixes: Vec<Vec<u8>>,
        max_bytes: usize,
        max_value_bytes: usize,
        max_ttl: f64,
        max_stale: f64,
        marker: Option<String>,
        admit_after: Option<u8>,
        logger: Option<String>,
    ) -> PyResult<Self> {
        if admit_after == Some(0) {
            return Err(PyValueError::new_err("admit_after must be at least 1 read"));
        }
        if marker.as_deref() == Some("") {
            return Err(PyValueError::new_err("the database marker needs a name"));
        }
        if !(max_ttl.is_finite() && max_ttl > 0.0 && max_stale.is_finite() && max_stale > 0.0) {
            return Err(PyValueError::new_err("max_ttl and max_stale must be positive seconds"));
        }
        let limits = Limits {
            max_bytes,
            max_value_bytes,
            max_ttl_ns: u64::try_from(Duration::from_secs_f64(max_ttl).as_nanos())
                .unwrap_or(u64::MAX),
        };
        let prefixes = prefixes.into_iter().map(Vec::into_boxed_slice).collect();
        let admission =
            admit_after.map(|after| Admission { after, sketch: Sketch::for_bytes(max_bytes) });
        let max_stale = Duration::from_secs_f64(max_stale);
        let near = Near::new(Store::new(limits), prefixes, max_stale, marker, admission);
        let logger = logger.unwrap_or_else(|| "redoxide".into()).into_boxed_str();
        let (peers, route) = (Peers::new(), OnceLock::new());
        Ok(NearCache { near: Arc::new(near), logger, peers, route })
    }

    /// Track these servers' keys (the primaries, the nodes of a cluster); a change of set
    /// flushes. Connections are made on the first lookup. `check_db` watches for SWAPDB
    /// (not on a cluster).
    #[pyo3(signature = (clients, check_db=true))]
    fn track(&self, clients: Vec<Bound<'_, Client>>, check_db: bool) -> PyResult<()> {
        guard(|| {
            let sources: Vec<Source> =
                clients.iter().map(|c| Source { check_db, ..c.get().tracking_source() }).collect();
            Ok(self.near.track(sources)?)
        })
    }

    /// bytes (a hit), an int (a miss: the fill token to install with), None (not kept here).
    fn lookup(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        guard(|| Ok(self.lookup_py(py, key)?.unwrap_or_else(|| py.None())))
    }

    /// get on one server, all in one call: a hit, or the server's value (filled in on the
    /// way when the key is kept here); with `bridge` its awaitable (a hit's at once, a fill
    /// installed when it is converted). When the near cache has just been turned off, the
    /// one warning is given here (`warn`) and the server is read.
    #[pyo3(signature = (client, key, bridge=None))]
    fn get(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        key: &str,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let client = client.get();
            let found = self.find_waiting(py, key.as_bytes(), bridge.is_none())?;
            match (found, bridge) {
                (Found::Hit(value), None) => Ok(value.into_any().unbind()),
                (Found::Hit(value), Some(_)) => {
                    Ok(Py::new(py, Ready { value: value.into_any().unbind() })?.into_any())
                }
                (Found::Miss(token), bridge) => {
                    fill::fill_key(py, &self.near, client, key.as_bytes(), token, bridge)
                }
                (found, bridge) => {
                    if matches!(found, Found::Refused) {
                        self.warn(py)?;
                    }
                    let mut cmd = redis::cmd("GET");
                    cmd.arg(key);
                    client.run(py, bridge, Request::Cmd(cmd), reply::to_py)
                }
            }
        })
    }

    /// Make this store a router's get and get_many (`get_routed`, `mget_routed`; see
    /// `py/lookup.rs`, `py/reads.rs`): `homes()` names where keys live once tracked; `reads`:
    /// get reads a key from its primary; `read(key, bridge)` and `read_many(keys, bridge)`
    /// are the router's get and get_many; `recovered(pending, key, bridge)` awaits a fill or
    /// read, reading through the router if it meets one of `recovers` (the errors a router
    /// recovers from); `finish(keys, found, outcomes, routed, bridge)` ends a get_many;
    /// `write(key, value, ttl_ms, nx, xx, bridge)` is the router's set, dropping the key
    /// around it, and `rewritten(pending, key, value, ttl_ms, nx, xx, bridge)` awaits a set
    /// sent here, or `write` if it meets one of `recovers` (`set_routed`); `execute(args,
    /// bridge)` is the router's execute (`execute_routed`). Set once: a second call changes
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    fn route(
        &self,
        homes: Py<PyAny>,
        reads: bool,
        read: Py<PyAny>,
        recovered: Py<PyAny>,
        recovers: Py<PyAny>,
        read_many: Py<PyAny>,
        finish: Py<PyAny>,
        write: Py<PyAny>,
        rewritten: Py<PyAny>,
        execute: Py<PyAny>,
    ) {
        let route = Route {
            homes,
            reads,
            read,
            recovered,
            recovers,
            read_many,
            finish,
            write,
            rewritten,
            execute,
        };
        _ = self.route.set(route);
    }

    /// set on a router, in one call (`py/writes.rs`; `route` first).
    #[pyo3(signature = (key, value, ttl_ms=None, nx=false, xx=false, bridge=None))]
    #[allow(clippy::too_many_arguments)]
    fn set_routed(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyBytes>,
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.set_routed_body(py, key, value, ttl_ms, nx, xx, bridge))
    }

    /// get on a router, in one call (`py/lookup.rs`; `route` first).
    #[pyo3(signature = (key, bridge=None))]
    fn get_routed(
        &self,
        py: Python<'_>,
        key: &str,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.get_routed_body(py, key, bridge))
    }

    /// The fill of a kept key's miss that `lookup` registered under `token`, on `client`,
    /// the server that owns the key now (one server's `get` / `aget` run the same): GET and
    /// PTTL in one round trip, installed if the token survived and the server is tracked;
    /// the value, or with `bridge` its awaitable. A failed round trip cancels the token.
    /// Keys the server invalidated while they were being hit ride along (`fill::with_refresh`).
    #[pyo3(signature = (client, key, token, bridge=None))]
    fn fill(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        key: &str,
        token: u64,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| fill::fill_key(py, &self.near, client.get(), key.as_bytes(), Token(token), bridge))
    }

    /// get_many's misses on `client`, the server that owns them now: GET of each key, and
    /// PTTL of each one with a fill token (`tokens[i]`, None for a key not kept here), in one
    /// round trip, each installed as `fill` says. The values in order, or with `bridge` their
    /// awaitable; an error reply raises with `raising` (one server: the caller's error), else
    /// it is a `ResponseError` instance in the list (a router reads that key again). A failed
    /// round trip cancels every token and raises. Keys to refresh ride along, as in `fill`.
    #[pyo3(signature = (client, keys, tokens, raising=false, bridge=None))]
    fn fill_keys(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        keys: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        raising: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let keys = fill_keys_of(&self.near, keys, tokens)?;
            fill::fill_keys(py, &self.near, client.get(), keys, raising, bridge)
        })
    }

    /// `fill_keys` on several servers at once, blocking: `parts` is a list of (client, keys,
    /// tokens). Each part's outcome, in order: its values, or the exception instance that
    /// failed its round trip (its tokens cancelled).
    fn fill_fanout<'py>(
        &self,
        py: Python<'py>,
        parts: Vec<(Bound<'py, Client>, Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            // Every part is read before any is sent: one that cannot be read cancels them all.
            let mut keyed = Vec::with_capacity(parts.len());
            let mut failed = None;
            for (client, keys, tokens) in &parts {
                match fill_keys_of(&self.near, keys, tokens) {
                    Ok(keys) => keyed.push((client.get(), keys)),
                    Err(err) => _ = failed.get_or_insert(err),
                }
            }
            if let Some(err) = failed {
                for (_, keys) in &keyed {
                    fill::cancel_all(&self.near, keys);
                }
                return Err(err);
            }
            fill::fill_fanout(py, &self.near, keyed)
        })
    }

    /// SET of a key on one server, through the tracking connection when the key is kept here
    /// (the written value is then kept without reading it back), else the usual way, the key
    /// dropped before and after, here and in the process' other near caches (`writes.rs`):
    /// whether it was stored, or its awaitable with `bridge`.
    #[pyo3(signature = (client, key, value, ttl_ms=None, nx=false, xx=false, bridge=None))]
    #[allow(clippy::too_many_arguments)]
    fn set(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.set_on(py, client.get(), key, value, ttl_ms, nx, xx, bridge))
    }

    /// Any command on one server, the tracked keys it names dropped before it is sent and
    /// again once it is answered (everything, for a flush): `Client.execute` with the near
    /// cache's forgets in the same call.
    #[pyo3(signature = (client, args, bridge=None))]
    fn execute(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        args: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let items = around::words(args)?;
            if let Some(hit) = self.exists_hit(py, &items, bridge.is_some())? {
                return Ok(hit);
            }
            let req = Request::Cmd(crate::proto::command::command_from(args)?);
            let peers = self.peers.drop_now(|near| drops_of(near, &items));
            let drops = drops_of(&self.near, &items);
            self.write_dropping(py, client.get(), drops, peers, req, reply::to_py, bridge)
        })
    }

    /// execute on a router, in one call (`py/around.rs`; `route` first): has_key of a key
    /// kept here at once, else the router's execute, the keys it writes dropped around it.
    #[pyo3(signature = (args, bridge=None))]
    fn execute_routed(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.execute_routed_body(py, args, bridge))
    }

    /// A write the caller's `send` makes (`send(*args)`, with `bridge` `send(*args, bridge)`,
    /// awaited through a `Holding`), the tracked keys it names dropped before and again once
    /// it is answered, here and in the peers; `kind`: what `what` is (0, one command's
    /// arguments; 1, a pipeline's commands; 2, the keys of a set or set_many).
    #[pyo3(signature = (kind, what, send, args, bridge=None))]
    fn write_around(
        &self,
        py: Python<'_>,
        kind: u8,
        what: &Bound<'_, PyAny>,
        send: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.write_around_body(py, kind, what, send, args, bridge))
    }

    /// set_many on one server, through the tracking connection when one of the keys is kept
    /// here, else the usual way, dropping the keys (as `set`).
    #[pyo3(signature = (client, keys, values, ttl_ms=None, bridge=None))]
    fn set_many(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        ttl_ms: Option<u64>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
            let values: Vec<Bound<'_, PyAny>> = values.try_iter()?.collect::<PyResult<_>>()?;
            if keys.len() != values.len() || keys.is_empty() {
                return Err(PyValueError::new_err(
                    "set_many needs as many values as keys, and one",
                ));
            }
            let items = set_items(&keys, &values);
            let client = client.get();
            let named = || keys.iter().filter_map(key_bytes);
            let peers = self.peers.drop_now(|near| drops_keys(near, named()));
            let write = items
                .as_ref()
                .and_then(|items| write::Write::set_many(&self.near, client, items, ttl_ms));
            if let Some(write) = write {
                return self.send_write(py, write, peers, bridge);
            }
            let drops = match &items {
                Some(items) => drops_keys(&self.near, items.iter().map(|(key, _)| *key)),
                None => drops_keys(&self.near, named()),
            };
            let req = client.set_many_request(&keys, &values, ttl_ms)?;
            self.write_dropping(py, client, drops, peers, req, reply::to_py, bridge)
        })
    }

    /// set_many in parts through the tracking connections (`py/writes.rs`): `parts` is a list
    /// of (client, keys, values).
    #[pyo3(signature = (parts, ttl_ms=None, bridge=None))]
    fn set_many_parts(
        &self,
        py: Python<'_>,
        parts: &Bound<'_, PyAny>,
        ttl_ms: Option<u64>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyList>> {
        guard(|| self.set_many_parts_body(py, parts, ttl_ms, bridge))
    }

    /// get_many on one server (`py/reads.rs`): `rest(found, positions, pending)` places an
    /// awaited fill's values.
    #[pyo3(signature = (client, rest, keys, bridge=None))]
    fn mget(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        rest: &Bound<'_, PyAny>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.mget_direct(py, client, rest, keys, bridge))
    }

    /// get_many on a router, in one call (`py/reads.rs`; `route` first).
    #[pyo3(signature = (keys, bridge=None))]
    fn mget_routed(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.mget_routed_body(py, keys, bridge))
    }

    /// Whether a servable value of `key` is kept here (has_key's hit; registers no fill).
    fn has(&self, key: &Bound<'_, PyAny>) -> bool {
        let near = &self.near;
        key_bytes(key).is_some_and(|k| {
            near.tracks(k) && near.enabled() && near.gate() && near.store.contains(k)
        })
    }

    /// Why a server refused client tracking (empty if none did).
    fn refusal(&self) -> String {
        self.near.refusal()
    }

    /// The one warning to give when a lookup answered False: a refusal of tracking (the near
    /// cache is off) or of the database marker (it stays on; SWAPDB goes unseen).
    fn notice(&self) -> String {
        self.near.notice()
    }

    /// The process' other near caches: a write drops the keys it names there too (`peers.rs`).
    fn set_peers(&self, peers: Vec<PyRef<'_, NearCache>>) {
        self.peers.set(peers.iter().map(|peer| Arc::clone(&peer.near)).collect());
    }

    /// The name of the database marker key the tracking connections keep.
    fn marker(&self) -> &str {
        self.near.marker()
    }

    /// Forget a fill whose request failed.
    fn cancel(&self, key: &Bound<'_, PyAny>, token: u64) {
        if let Some(key) = key_bytes(key) {
            self.near.store.cancel(key, Token(token));
        }
    }

    /// Drop these keys (a set or set_many of them); whether any is kept here.
    #[pyo3(signature = (keys, count=true))]
    fn forget_keys(&self, keys: &Bound<'_, PyAny>, count: bool) -> PyResult<bool> {
        guard(|| {
            let mut any = false;
            for key in keys.try_iter()? {
                let key = key?;
                if let Some(bytes) = key_bytes(&key) {
                    if self.near.tracks(bytes) {
                        self.near.forget(bytes, count);
                        any = true;
                    }
                }
            }
            Ok(any)
        })
    }

    /// Drop everything; `reason` is a flush reason of `stats()` ("own", "topology", "fork").
    fn flush(&self, reason: &str) -> PyResult<()> {
        let why = Flush::ALL
            .iter()
            .find(|(_, name)| *name == reason)
            .map(|(why, _)| *why)
            .ok_or_else(|| PyValueError::new_err(format!("unknown flush reason {reason:?}")))?;
        self.near.store.flush(why);
        Ok(())
    }

    /// Counters and sizes, as a plain dict (`py/stats.rs`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats_dict(py)
    }
}
