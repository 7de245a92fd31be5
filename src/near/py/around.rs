//! The writes a router (or a pipeline on one server) sends itself, in one call into the
//! core: the tracked keys the write names are dropped here and in the process' other near
//! caches (`peers.rs`) before the router's method is called, and again once it answers
//! (blocking) or its awaitable is done (`Holding`), as `writes.rs` does around a write the
//! store sends. What a write names is found by its kind: one command's arguments, a
//! pipeline's commands, or a list of keys (a set or set_many sent by the router).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::forget::drops_of;
use super::keys::key_bytes;
use super::writes::{drops_keys, Again, Drops};
use super::NearCache;
use crate::bridge::Bridge;
use crate::near::holding::Holding;
use crate::near::ready::Ready;

/// A command's arguments, as a list of objects.
pub(super) fn words<'py>(args: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    match args.cast::<PyTuple>() {
        Ok(tuple) => Ok(tuple.iter().collect()),
        Err(_) => args.try_iter()?.collect(),
    }
}

/// Every tracked key the commands name (everything if one is a flush), as one write's drops.
fn drops_of_all<'a>(
    near: &crate::near::tracking::Near,
    commands: &'a [Vec<Bound<'_, PyAny>>],
) -> Option<Drops<&'a [u8]>> {
    let mut keys: Vec<&'a [u8]> = Vec::new();
    for command in commands {
        match drops_of(near, command) {
            None => {}
            Some(Drops::All) => return Some(Drops::All),
            Some(Drops::Key(key)) => keys.push(key),
            Some(Drops::Keys(more)) => keys.extend(more),
        }
    }
    match keys.len() {
        0 => None,
        1 => Some(Drops::Key(keys[0])),
        _ => Some(Drops::Keys(keys)),
    }
}

impl NearCache {
    /// has_key of a key kept here (`EXISTS key`): 1 at once (with `asked`, its awaitable).
    pub(super) fn exists_hit(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        asked: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        let [name, key] = items else { return Ok(None) };
        if !(key_bytes(name).is_some_and(|n| n.eq_ignore_ascii_case(b"EXISTS")) && self.has(key)) {
            return Ok(None);
        }
        let one = 1i64.into_pyobject(py)?.into_any().unbind();
        Ok(Some(if asked { Py::new(py, Ready { value: one })?.into_any() } else { one }))
    }

    /// `send(*args)` (with `bridge`, `send(*args, bridge)`, whose awaitable is awaited
    /// through a `Holding`), a write whose tracked keys `kind` and `what` name dropped
    /// around it: kind 0, one command's arguments; 1, a pipeline's commands; 2, keys.
    pub(super) fn write_around_body(
        &self,
        py: Python<'_>,
        kind: u8,
        what: &Bound<'_, PyAny>,
        send: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        match kind {
            0 => {
                let items = words(what)?;
                let peers = self.peers.drop_now(|near| drops_of(near, &items));
                self.around(py, drops_of(&self.near, &items), peers, send, args, bridge)
            }
            1 => {
                let commands: Vec<Vec<_>> =
                    what.try_iter()?.map(|c| words(&c?)).collect::<PyResult<_>>()?;
                let peers = self.peers.drop_now(|near| drops_of_all(near, &commands));
                self.around(py, drops_of_all(&self.near, &commands), peers, send, args, bridge)
            }
            2 => {
                let keys: Vec<Bound<'_, PyAny>> = what.try_iter()?.collect::<PyResult<_>>()?;
                let every = || keys.iter().filter_map(key_bytes);
                let peers = self.peers.drop_now(|near| drops_keys(near, every()));
                self.around(py, drops_keys(&self.near, every()), peers, send, args, bridge)
            }
            _ => Err(PyValueError::new_err(format!("redoxide: no write kind {kind}"))),
        }
    }

    /// A router's execute (`execute_routed`): has_key of a key kept here answered at once,
    /// any other command through the router's execute (`Route.execute`), dropping what it
    /// names.
    pub(super) fn execute_routed_body(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let items = words(args)?;
        if let Some(hit) = self.exists_hit(py, &items, bridge.is_some())? {
            return Ok(hit);
        }
        let route = self.routing()?;
        let send = route.execute.bind(py);
        let peers = self.peers.drop_now(|near| drops_of(near, &items));
        let call = PyTuple::new(py, [args])?;
        self.around(py, drops_of(&self.near, &items), peers, send, &call, bridge)
    }

    /// `send(*args[, bridge])`, `drops` (and the peers', made already) dropped before it
    /// and again once it is answered.
    fn around<K: AsRef<[u8]>>(
        &self,
        py: Python<'_>,
        drops: Option<Drops<K>>,
        peers: Option<super::peers::PeerDrops>,
        send: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let call = |bridge: Option<Py<Bridge>>| match bridge {
            None => send.call1(args),
            Some(bridge) => {
                let mut all: Vec<Bound<'_, PyAny>> = args.iter().collect();
                all.push(bridge.into_bound(py).into_any());
                send.call1(PyTuple::new(py, all)?)
            }
        };
        if drops.is_none() && peers.is_none() {
            return Ok(call(bridge)?.unbind());
        }
        let own = drops.map(|drops| {
            let issued = drops.apply(&self.near, true);
            (drops, issued)
        });
        match bridge {
            None => {
                let out = call(None);
                if let Some((drops, issued)) = &own {
                    Again::after(&self.near, drops, *issued);
                }
                drop(peers);
                Ok(out?.unbind())
            }
            Some(bridge) => {
                let own = own.map(|(d, issued)| (Arc::clone(&self.near), d.owned(), issued));
                let again = Again::new(own, peers);
                let pending = call(Some(bridge))?;
                Ok(Py::new(py, Holding::new(&pending, Box::new(again))?)?.into_any())
            }
        }
    }
}
