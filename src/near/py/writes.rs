//! This process' writes on one server through the near cache, in one call into the core: the
//! tracked keys a write names are dropped before it is sent and again once it is answered (as
//! its awaitable converts the answer, or is dropped unconverted), what `near.py`'s `_write`
//! does for every topology and for several near caches in one process.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::keys::set_items;
use super::NearCache;
use crate::bridge::{Bridge, Finish};
use crate::near::store::Flush;
use crate::near::tracking::Near;
use crate::near::write;
use crate::proto::Request;
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
    fn owned(&self) -> Drops<Box<[u8]>> {
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

/// Drops again when it goes: once the write is answered, or with an awaitable that never
/// converted an answer (a fill that read the old value meanwhile is killed either way).
struct Again {
    near: Arc<Near>,
    drops: Drops<Box<[u8]>>,
    issued: u64,
}

impl Drop for Again {
    fn drop(&mut self) {
        if self.drops.again(&self.near, self.issued) {
            self.drops.apply(&self.near, false);
        }
    }
}

impl NearCache {
    /// Run `req` on `client` (one server), dropping `drops` before it is sent and again once
    /// it is answered: its converted reply, or with `bridge` its awaitable.
    pub(super) fn write_dropping<K: AsRef<[u8]>>(
        &self,
        py: Python<'_>,
        client: &Client,
        drops: Option<Drops<K>>,
        req: Request,
        convert: Convert,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let Some(drops) = drops else { return client.run(py, bridge, req, convert) };
        let issued = drops.apply(&self.near, true);
        match bridge {
            None => {
                // (The keys stay borrowed: nothing is copied for a blocking write.)
                let out = client.run_sync(py, req, convert);
                if drops.again(&self.near, issued) {
                    drops.apply(&self.near, false);
                }
                out
            }
            Some(bridge) => {
                let again = Again { near: Arc::clone(&self.near), drops: drops.owned(), issued };
                let pending = client.run_async(py, bridge, req, convert)?;
                let finish: Finish = Box::new(move |py: Python<'_>, reply| {
                    let out = convert(py, reply);
                    drop(again);
                    out
                });
                Ok(Py::new(py, pending.with_finish(finish))?.into_any())
            }
        }
    }

    /// The tracked keys among `keys`, as what a write of them drops (None: none).
    pub(super) fn drops_keys<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Drops<&'a [u8]>> {
        let mut tracked = keys.filter(|k| self.near.tracks(k));
        let first = tracked.next()?;
        let Some(second) = tracked.next() else { return Some(Drops::Key(first)) };
        Some(Drops::Keys([first, second].into_iter().chain(tracked).collect()))
    }

    /// The one warning of a refusal (of tracking: the near cache is off; or of the database
    /// marker), on the cache's logger.
    pub(super) fn warn(&self, py: Python<'_>) -> PyResult<()> {
        let logger = py.import("logging")?.call_method1("getLogger", (&*self.logger,))?;
        logger.call_method1("warning", ("redoxide: %s", self.near.notice()))?;
        Ok(())
    }

    /// Send a write through the tracking connection: its converted reply (sync) or its
    /// awaitable; NotImplemented when there is none to send.
    pub(super) fn send_write(
        &self,
        py: Python<'_>,
        write: Option<write::Write>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let Some(write) = write else { return Ok(py.NotImplemented()) };
        match bridge {
            None => {
                let convert = write.convert();
                let reply = py.detach(|| write.call(&self.near))?;
                convert(py, reply)
            }
            Some(bridge) => Ok(Py::new(py, write.submit(&self.near, bridge)?)?.into_any()),
        }
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
        let mut writes = Vec::new();
        for part in parts.try_iter()? {
            let (client, keys, values): (Bound<'_, Client>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
                part?.extract()?;
            let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
            let values: Vec<Bound<'_, PyAny>> = values.try_iter()?.collect::<PyResult<_>>()?;
            let items = set_items(&keys, &values);
            writes.push(items.and_then(|items| {
                write::Write::set_many(&self.near, client.get(), &items, ttl_ms)
            }));
        }
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
            return Ok(out.unbind());
        };
        for write in writes {
            match write.map(|w| w.submit(&self.near, bridge.clone_ref(py))) {
                Some(Ok(pending)) => out.append(Py::new(py, pending)?)?,
                Some(Err(err)) => out.append(PyErr::from(err).into_value(py))?,
                None => out.append(py.NotImplemented())?,
            }
        }
        Ok(out.unbind())
    }
}
