//! This process' writes through the near cache, in one call into the core: the tracked keys
//! a write names are dropped before it is sent and again once it is answered (as its
//! awaitable converts the answer, or is dropped unconverted), here and in the process' other
//! near caches (`peers.rs`); a write of kept keys goes through the tracking connection
//! (`write.rs`). One server's `set`, `set_many` and `execute`, and a router's `set`
//! (`set_routed`); a router's other writes make the same drops around the router's own
//! method (`around.rs`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::keys::{key_bytes, set_items};
use super::lookup::home;
use super::peers::PeerDrops;
use super::NearCache;
use crate::bridge::{Bridge, Finish};
use crate::near::store::Flush;
use crate::near::tracking::Near;
use crate::near::write;
use crate::proto::command::set_cmd;
use crate::proto::{reply, Request};
use crate::py::client::{Client, Convert};

/// What a write drops from the store: tracked keys (borrowed for a blocking write, owned
/// by one that is awaited), or everything.
pub(super) enum Drops<K> {
    /// This tracked key (most writes name one: nothing allocated for it).
    Key(K),
    /// These tracked keys (a key not in use also has its reads forgotten: admission by use).
    Keys(Vec<K>),
    /// Everything (FLUSHDB, FLUSHALL, SWAPDB).
    All,
}

/// Drops that own their keys (to outlive the call that named them).
pub(super) type Owned = Drops<Box<[u8]>>;

impl<K: AsRef<[u8]>> Drops<K> {
    /// Drop them (`count`: count the write against the keys' reads, the first time); the
    /// tokens issued so far (`Store::issued`).
    pub(super) fn apply(&self, near: &Near, count: bool) -> u64 {
        match self {
            Drops::Key(key) => near.forget_keys(std::slice::from_ref(key), count),
            Drops::Keys(keys) => near.forget_keys(keys, count),
            Drops::All => {
                near.store.flush(Flush::Own);
                near.store.issued()
            }
        }
    }

    /// The same drops, owning their keys (to outlive the call that named them).
    pub(super) fn owned(&self) -> Owned {
        match self {
            Drops::Key(key) => Drops::Key(Box::from(key.as_ref())),
            Drops::Keys(keys) => Drops::Keys(keys.iter().map(|k| Box::from(k.as_ref())).collect()),
            Drops::All => Drops::All,
        }
    }

    /// Whether they must be dropped again once the write is answered: a fill or an own write
    /// was registered since `issued` (else nothing can have been installed meanwhile).
    fn again(&self, near: &Near, issued: u64) -> bool {
        matches!(self, Drops::All) || near.store.issued() != issued
    }
}

/// The tracked keys among `keys` (those `near` keeps), as what a write of them drops (None:
/// none).
pub(super) fn drops_keys<'a>(
    near: &Near,
    keys: impl Iterator<Item = &'a [u8]>,
) -> Option<Drops<&'a [u8]>> {
    let mut tracked = keys.filter(|k| near.tracks(k));
    let first = tracked.next()?;
    let Some(second) = tracked.next() else { return Some(Drops::Key(first)) };
    Some(Drops::Keys([first, second].into_iter().chain(tracked).collect()))
}

/// Drops again when it goes: once the write is answered, or with an awaitable that never
/// converted an answer (a fill that read the old value meanwhile is killed either way); the
/// peers' too.
pub(super) struct Again {
    own: Option<(Arc<Near>, Owned, u64)>,
    /// (Dropped with it: their drops made again.)
    _peers: Option<PeerDrops>,
}

impl Again {
    pub(super) fn new(own: Option<(Arc<Near>, Owned, u64)>, peers: Option<PeerDrops>) -> Again {
        Again { own, _peers: peers }
    }

    /// A blocking write's drops made again once it is answered (if anything was installed
    /// since `issued`).
    pub(super) fn after<K: AsRef<[u8]>>(near: &Near, drops: &Drops<K>, issued: u64) {
        if drops.again(near, issued) {
            drops.apply(near, false);
        }
    }
}

impl Drop for Again {
    fn drop(&mut self) {
        if let Some((near, drops, issued)) = &self.own {
            Again::after(near, drops, *issued);
        }
    }
}

/// An awaited write's conversion of its reply, `held` let go once it is converted (or with
/// the awaitable, if it never is): drops made again then.
fn then_release<T: Send + Sync + 'static>(convert: Convert, held: T) -> Finish {
    Box::new(move |py: Python<'_>, reply| {
        let out = convert(py, reply);
        drop(held);
        out
    })
}

impl NearCache {
    /// Run `req` on `client` (one server), dropping `drops` before it is sent and again once
    /// it is answered (`peers`: the other near caches', made already): its converted reply,
    /// or with `bridge` its awaitable.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_dropping<K: AsRef<[u8]>>(
        &self,
        py: Python<'_>,
        client: &Client,
        drops: Option<Drops<K>>,
        peers: Option<PeerDrops>,
        req: Request,
        convert: Convert,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        if drops.is_none() && peers.is_none() {
            return client.run(py, bridge, req, convert);
        }
        let own = drops.map(|drops| {
            let issued = drops.apply(&self.near, true);
            (drops, issued)
        });
        match bridge {
            None => {
                // (The keys stay borrowed: nothing is copied for a blocking write.)
                let out = client.run_sync(py, req, convert);
                if let Some((drops, issued)) = &own {
                    Again::after(&self.near, drops, *issued);
                }
                drop(peers);
                out
            }
            Some(bridge) => {
                let own = own.map(|(d, issued)| (Arc::clone(&self.near), d.owned(), issued));
                let again = Again::new(own, peers);
                let pending = client.run_async(py, bridge, req, convert)?;
                Ok(Py::new(py, pending.with_finish(then_release(convert, again)))?.into_any())
            }
        }
    }

    /// The one warning of a refusal (of tracking: the near cache is off; or of the database
    /// marker), on the cache's logger.
    pub(super) fn warn(&self, py: Python<'_>) -> PyResult<()> {
        let logger = py.import("logging")?.call_method1("getLogger", (&*self.logger,))?;
        logger.call_method1("warning", ("redoxide: %s", self.near.notice()))?;
        Ok(())
    }

    /// Send a write through the tracking connection (`peers`: the other near caches' drops,
    /// made again once it is answered): its converted reply (sync) or its awaitable.
    pub(super) fn send_write(
        &self,
        py: Python<'_>,
        write: write::Write,
        peers: Option<PeerDrops>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let convert = write.convert();
        match bridge {
            None => {
                let reply = py.detach(|| write.call(&self.near));
                drop(peers);
                convert(py, reply?)
            }
            Some(bridge) => {
                let pending = write.submit(&self.near, bridge)?;
                let Some(peers) = peers else { return Ok(Py::new(py, pending)?.into_any()) };
                Ok(Py::new(py, pending.with_finish(then_release(convert, peers)))?.into_any())
            }
        }
    }

    /// set on a router (`NearCache.set_routed`), in this one call: on the primary that owns
    /// the key by the router's `homes()`, through its tracking connection when the key is
    /// kept (the value kept as written), else the usual way, the key dropped before and
    /// after. The router's set (`Route.write`) when no primary is known (a slot table in
    /// doubt, a failover under way: a Sentinel router's hold names none), or when the primary
    /// answers with what a router recovers from (a moved slot, a former primary now read-only,
    /// a lost connection): at once, or for an awaited set through `Route.rewritten`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn set_routed_body(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyBytes>,
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let route = self.routing()?;
        let rewrite = |bridge| route.write.call1(py, (key, value, ttl_ms, nx, xx, bridge));
        let Some(node) = home(&route.homes.bind(py).call0()?, key.as_bytes()) else {
            return rewrite(bridge);
        };
        let asked = bridge.as_ref().map(|b| b.clone_ref(py));
        let sent = self.set_on(py, node.get(), key, value.as_bytes(), ttl_ms, nx, xx, asked);
        match (sent, bridge) {
            (Ok(done), None) => Ok(done),
            (Ok(pending), Some(bridge)) => {
                route.rewritten.call1(py, (pending, key, value, ttl_ms, nx, xx, bridge))
            }
            (Err(err), bridge) if err.is_instance(py, route.recovers.bind(py)) => rewrite(bridge),
            (Err(err), _) => Err(err),
        }
    }

    /// set on one server (`client`): through its tracking connection when the key is kept
    /// (the value kept as written), else the usual way, the key dropped before and after;
    /// here and in the peers.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn set_on(
        &self,
        py: Python<'_>,
        client: &Client,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let peers = self.peers.drop_now(|near| drops_keys(near, std::iter::once(key.as_bytes())));
        if let Some(write) = write::Write::set(&self.near, client, key, value, ttl_ms, nx, xx) {
            return self.send_write(py, write, peers, bridge);
        }
        let drops = drops_keys(&self.near, std::iter::once(key.as_bytes()));
        let req = Request::Cmd(set_cmd(key, value, ttl_ms, nx, xx));
        self.write_dropping(py, client, drops, peers, req, reply::to_py_bool, bridge)
    }

    /// set_many in parts (a cluster's keys by slot, each part on the primary that owns its
    /// slot) through the tracking connections, every part sent before any is waited for:
    /// each part's reply (with `bridge` its awaitable), the exception that failed it, or
    /// NotImplemented for a part that does not go this way (nothing of it sent: no key kept,
    /// or no tracking connection up). The caller sends those parts, and those a node refused,
    /// the usual way.
    pub(super) fn set_many_parts_body(
        &self,
        py: Python<'_>,
        parts: &Bound<'_, PyAny>,
        ttl_ms: Option<u64>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyList>> {
        type Part<'py> = (Bound<'py, Client>, Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>);
        let mut read: Vec<Part<'_>> = Vec::new();
        for part in parts.try_iter()? {
            let (client, keys, values): (Bound<'_, Client>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
                part?.extract()?;
            let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
            let values: Vec<Bound<'_, PyAny>> = values.try_iter()?.collect::<PyResult<_>>()?;
            read.push((client, keys, values));
        }
        let every = || read.iter().flat_map(|(_, keys, _)| keys.iter().filter_map(key_bytes));
        let peers = self.peers.drop_now(|near| drops_keys(near, every()));
        let writes: Vec<_> = read
            .iter()
            .map(|(client, keys, values)| {
                let items = set_items(keys, values)?;
                write::Write::set_many(&self.near, client.get(), &items, ttl_ms)
            })
            .collect();
        let out = PyList::empty(py);
        let Some(bridge) = bridge else {
            let converts: Vec<_> = writes.iter().map(|w| w.as_ref().map(|w| w.convert())).collect();
            let near = &self.near;
            let outcomes: Vec<_> = py.detach(|| {
                let sent: Vec<_> = writes.into_iter().map(|w| w.map(|w| w.start(near))).collect();
                sent.into_iter().map(|s| s.map(|s| s.and_then(write::Sent::wait))).collect()
            });
            for (outcome, convert) in outcomes.into_iter().zip(converts) {
                // (An error among a pipeline's replies, SET PX's, raises as it is converted.)
                match (outcome.map(|o| o.map_err(PyErr::from)), convert) {
                    (Some(Ok(reply)), Some(convert)) => match convert(py, reply) {
                        Ok(value) => out.append(value)?,
                        Err(err) => out.append(err.into_value(py))?,
                    },
                    (Some(Err(err)), _) => out.append(err.into_value(py))?,
                    _ => out.append(py.NotImplemented())?,
                }
            }
            drop(peers);
            return Ok(out.unbind());
        };
        // (The peers' drops made again once every part sent is answered.)
        let peers = peers.map(Arc::new);
        for write in writes {
            let convert = write.as_ref().map(write::Write::convert);
            match write.map(|w| w.submit(&self.near, bridge.clone_ref(py))) {
                Some(Ok(pending)) => match (&peers, convert) {
                    (Some(peers), Some(convert)) => {
                        let finish = then_release(convert, Arc::clone(peers));
                        out.append(Py::new(py, pending.with_finish(finish))?)?
                    }
                    _ => out.append(Py::new(py, pending)?)?,
                },
                Some(Err(err)) => out.append(PyErr::from(err).into_value(py))?,
                None => out.append(py.NotImplemented())?,
            }
        }
        Ok(out.unbind())
    }
}
