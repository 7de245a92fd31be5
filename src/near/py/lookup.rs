//! Lookups in the store as the near cache's Python surface makes them, and get on a router
//! in one call into the core (`NearCache.get_in`): the key looked up; a miss filled on the
//! primary that owns it now, which the router names (its one primary, or a cluster's slot
//! table, read by the key's slot here); a key not kept here read there too when the router
//! reads keys from their primary. A plain cluster get enters the core twice (the key's slot,
//! then the node's GET); a near-cached one once, hit, miss or not kept.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList};

use super::keys::key_bytes;
use super::NearCache;
use crate::bridge::Bridge;
use crate::near::fill;
use crate::near::ready::Ready;
use crate::near::store::{Got, Token};
use crate::proto::reply;
use crate::proto::Request;
use crate::py::client::Client;
use crate::slots::slot;

/// The longest a sync get waits for another thread's fill of the same key before reading
/// the server itself.
const FILL_WAIT: Duration = Duration::from_millis(100);

/// What a lookup found.
pub(super) enum Found<'py> {
    /// Not a kept key, or the near cache is off.
    NotKept,
    /// The near cache has just been turned off: the caller warns, once.
    Refused,
    Hit(Bound<'py, PyBytes>),
    /// A fill was registered under this token.
    Miss(Token),
}

impl NearCache {
    /// A hit, a miss's token, or not kept; with `may_wait` (a sync caller), a key another
    /// thread is filling right now is waited for (GIL released, briefly) rather than read again: a hot
    /// key that was just invalidated then costs one round trip per process, not per thread.
    pub(super) fn find_waiting<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        may_wait: bool,
    ) -> PyResult<Found<'py>> {
        let near = &self.near;
        if !near.tracks(key) {
            return Ok(Found::NotKept);
        }
        if let Err(reason) = near.usable() {
            return Ok(if reason.is_some() { Found::Refused } else { Found::NotKept });
        }
        near.start()?;
        let by_use = near.admission();
        let mut hit = None;
        let store = &near.store;
        // (The gate, which reads the clock, is asked only when a copy is kept, or a fill is
        // to be waited for.)
        let serve = || near.gate();
        let mut got = store
            .lookup_as(key, serve, may_wait, by_use.is_some(), |v| hit = Some(PyBytes::new(py, v)));
        if got == Got::Busy {
            py.detach(|| store.wait_for_fill(key, FILL_WAIT));
            got = store.lookup_as(key, serve, false, by_use.is_some(), |v| {
                hit = Some(PyBytes::new(py, v))
            });
        }
        if let (Got::Unknown, Some(admission)) = (&got, by_use) {
            // Not kept: counted as read, and kept from the read that makes it frequent.
            if admission.sketch.read(key, admission.after) {
                got = Got::Miss(store.admit(key));
            } else {
                store.stats.not_admitted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(match (hit, got) {
            (Some(value), _) => Found::Hit(value),
            (None, Got::Miss(token)) => Found::Miss(token),
            (None, _) => Found::NotKept,
        })
    }

    /// A hit's bytes, a miss's fill token, or None (not kept here, or the near cache is off;
    /// False once, when it has just been turned off, for the caller to warn).
    pub(super) fn lookup_py(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let Some(bytes) = key_bytes(key) else { return Ok(None) };
        Ok(match self.find_waiting(py, bytes, false)? {
            Found::NotKept => None,
            Found::Refused => Some(PyBool::new(py, false).to_owned().into_any().unbind()),
            Found::Hit(value) => Some(value.into_any().unbind()),
            Found::Miss(Token(t)) => Some(t.into_pyobject(py)?.into_any().unbind()),
        })
    }
}

/// What a router's get needs of it (`NearCache.route`).
pub(super) struct Route {
    /// Where keys live now, once tracked (the near client's `_homes`).
    pub(super) homes: Py<PyAny>,
    /// Whether get reads a key from its primary (no replica reads).
    pub(super) reads: bool,
    /// The router's get: `read(key, bridge)`.
    pub(super) read: Py<PyAny>,
    /// `recovered(pending, key, bridge)`: awaits `pending`, or the router's get if it meets
    /// one of `recovers`.
    pub(super) recovered: Py<PyAny>,
    /// The errors a router recovers from (a tuple of exception classes).
    pub(super) recovers: Py<PyAny>,
    /// The router's get_many: `read_many(keys, bridge)`.
    pub(super) read_many: Py<PyAny>,
    /// A get_many's end (`py/reads.rs`): `finish(keys, found, outcomes, routed, bridge)`.
    pub(super) finish: Py<PyAny>,
    /// The router's set, the key dropped around it: `write(key, value, ttl_ms, nx, xx,
    /// bridge)` (`py/writes.rs`).
    pub(super) write: Py<PyAny>,
    /// `rewritten(pending, key, value, ttl_ms, nx, xx, bridge)`: awaits a set sent to the
    /// key's primary, or `write` if it meets one of `recovers`.
    pub(super) rewritten: Py<PyAny>,
    /// The router's execute: `execute(args, bridge)` (`py/around.rs`).
    pub(super) execute: Py<PyAny>,
}

/// The primary that owns `key` by `homes` (a router's `homes()`: its one primary, or a
/// cluster's slot table); None when it names none.
pub(super) fn home<'py>(homes: &Bound<'py, PyAny>, key: &[u8]) -> Option<Bound<'py, Client>> {
    if let Ok(table) = homes.cast::<PyList>() {
        let node = table.get_item(usize::from(slot(key))).ok()?;
        return node.cast_into::<Client>().ok();
    }
    homes.cast::<Client>().ok().cloned()
}

impl NearCache {
    /// get on a router (see the module): `homes()` names where keys live now, once their
    /// servers are tracked, asked only for a miss or a key not kept. A hit's bytes (with
    /// `bridge`: `Ready`); a fill's or a read's value (with `bridge`: its awaitable; an error
    /// reply or a lost connection raises, for the router to read again); NotImplemented when
    /// the router reads instead, nothing installed (no owner known or tracked, or not kept
    /// here and `reads` false).
    /// The router's `Route` (`NearCache.route`).
    pub(super) fn routing(&self) -> PyResult<&Route> {
        self.route.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("a router's call before route")
        })
    }

    /// `get_in_body` by the router's `Route`, with its fallbacks (see the module).
    pub(super) fn get_routed_body(
        &self,
        py: Python<'_>,
        key: &str,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let route = self.routing()?;
        let asked = bridge.as_ref().map(|b| b.clone_ref(py));
        match self.get_in_body(py, route.homes.bind(py), key, route.reads, asked) {
            Ok(found) if found.is(py.NotImplemented()) => {
                Ok(route.read.call1(py, (key, bridge))?)
            }
            Ok(found) => match &bridge {
                Some(b) if !found.bind(py).is_instance_of::<Ready>() => {
                    Ok(route.recovered.call1(py, (found, key, b.clone_ref(py)))?)
                }
                _ => Ok(found),
            },
            Err(err) if err.is_instance(py, route.recovers.bind(py)) => {
                Ok(route.read.call1(py, (key, bridge))?)
            }
            Err(err) => Err(err),
        }
    }

    pub(super) fn get_in_body(
        &self,
        py: Python<'_>,
        homes: &Bound<'_, PyAny>,
        key: &str,
        reads: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let bytes = key.as_bytes();
        match self.find_waiting(py, bytes, bridge.is_none())? {
            Found::Hit(value) => match bridge {
                None => Ok(value.into_any().unbind()),
                Some(_) => Ok(Py::new(py, Ready { value: value.into_any().unbind() })?.into_any()),
            },
            Found::Miss(token) => match home(&homes.call0()?, bytes) {
                Some(node) if self.near.tracks_source(node.get().addr()) => {
                    fill::fill_key(py, &self.near, node.get(), bytes, token, bridge)
                }
                _ => {
                    // Not placed (the router reads): the fill never starts.
                    self.near.store.cancel(bytes, token);
                    Ok(py.NotImplemented())
                }
            },
            found => {
                if matches!(found, Found::Refused) {
                    self.warn(py)?;
                }
                let node = if reads { home(&homes.call0()?, bytes) } else { None };
                let Some(node) = node else { return Ok(py.NotImplemented()) };
                let mut cmd = redis::cmd("GET");
                cmd.arg(key);
                node.get().run(py, bridge, Request::Cmd(cmd), reply::to_py)
            }
        }
    }
}
