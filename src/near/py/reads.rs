//! get_many through the near cache in one call into the core: on one server
//! (`NearCache.mget`, bound as the near client's `mget` when it is the process' only near
//! cache) and on a router (`NearCache.mget_routed`, bound as its `mget`, with `route`).
//! Every key is looked up; when none is kept here, the client's (the router's) own get_many
//! reads them all, as without a near cache; when all are hits, the list answers at once.
//! Else the misses are filled by the one fill protocol (`fill.rs`): on one server in one
//! round trip, on a router one per primary the router's `homes()` name, all sent before any
//! is waited for. Their fill tokens never leave the core: what goes back to Python is an
//! awaited fill to await, and on a router each primary's outcome to place and the keys to
//! read through the router (`route.finish`).

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::lookup::{home, Found};
use super::NearCache;
use crate::bridge::Bridge;
use crate::near::fill::{self, FillKey};
use crate::near::ready::Ready;
use crate::near::store::Token;
use crate::py::client::Client;

/// What a get_many's lookups found: the list to answer with (a hit's bytes, None for every
/// other key), the misses (position, and fill token: None for a key not kept here), and
/// whether any key is kept here.
struct Looked<'py> {
    found: Bound<'py, PyList>,
    misses: Vec<(usize, Option<Token>)>,
    kept: bool,
}

/// A miss to fill: its position, its key and its fill token.
type Miss = (usize, FillKey);

impl<'py> Looked<'py> {
    /// The misses with their keys (copied only now: most get_many that keep nothing, under
    /// admission by use, never get here).
    fn fills(self, keys: &Bound<'py, PyList>) -> PyResult<(Bound<'py, PyList>, Vec<Miss>)> {
        let mut fills = Vec::with_capacity(self.misses.len());
        for (at, token) in self.misses {
            let key = keys.get_item(at)?;
            fills.push((at, (Box::from(crate::py::functions::key_bytes(&key)?), token)));
        }
        Ok((self.found, fills))
    }
}

/// `keys` as a list (read twice: to look up, and to send).
fn listed<'py>(py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    match keys.cast::<PyList>() {
        Ok(list) => Ok(list.clone()),
        Err(_) => PyList::new(py, keys.try_iter()?.collect::<PyResult<Vec<_>>>()?),
    }
}

/// The values (`found`, the list) in order: the list, or with `bridge` its `Ready`.
fn answer(py: Python<'_>, found: Bound<'_, PyList>, bridge: bool) -> PyResult<Py<PyAny>> {
    let found = found.into_any().unbind();
    if bridge {
        return Ok(Py::new(py, Ready { value: found })?.into_any());
    }
    Ok(found)
}

impl NearCache {
    /// Look every key up (a sync caller waits for the fills other threads have in flight:
    /// `may_wait`); None when a key is neither str nor bytes (the caller's own get_many says
    /// what is wrong with it; nothing is left registered).
    fn look_up<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyList>,
        may_wait: bool,
    ) -> PyResult<Option<Looked<'py>>> {
        let mut looked = Looked { found: PyList::empty(py), misses: Vec::new(), kept: false };
        let mut warned = false;
        for key in keys.iter() {
            let Ok(bytes) = crate::py::functions::key_bytes(&key) else {
                for (at, token) in looked.misses {
                    if let (Some(token), Ok(key)) = (token, keys.get_item(at)) {
                        if let Ok(key) = crate::py::functions::key_bytes(&key) {
                            self.near.store.cancel(key, token);
                        }
                    }
                }
                return Ok(None);
            };
            let at = looked.found.len();
            let token = match self.find_waiting(py, bytes, may_wait)? {
                Found::Hit(value) => {
                    looked.kept = true;
                    looked.found.append(value)?;
                    continue;
                }
                Found::Miss(token) => {
                    looked.kept = true;
                    Some(token)
                }
                Found::Refused => {
                    if !std::mem::replace(&mut warned, true) {
                        self.warn(py)?;
                    }
                    None
                }
                Found::NotKept => None,
            };
            looked.misses.push((at, token));
            looked.found.append(py.None())?;
        }
        Ok(Some(looked))
    }

    /// get_many on one server (see the module): the values in order, or with `bridge` their
    /// awaitable; an awaited fill goes to `rest(found, positions, pending)`, which places its
    /// values. An error (an error reply among the misses' too) raises, carrying what did
    /// answer (the hits; None for the others) as `partial_values`.
    pub(super) fn mget_direct(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        rest: &Bound<'_, PyAny>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let keys = listed(py, keys)?;
        let looked = self.look_up(py, &keys, bridge.is_none())?;
        let Some(looked @ Looked { kept: true, .. }) = looked else {
            return client.get().mget(py, keys.as_any(), bridge);
        };
        if looked.misses.is_empty() {
            return answer(py, looked.found, bridge.is_some());
        }
        let (found, misses) = looked.fills(&keys)?;
        let (at, fills): (Vec<usize>, Vec<FillKey>) = misses.into_iter().unzip();
        let asked = bridge.as_ref().map(|b| b.clone_ref(py));
        let filled = fill::fill_keys(py, &self.near, client.get(), fills, true, asked);
        let filled = match filled {
            Ok(filled) => filled,
            Err(err) => return Err(with_partial(py, err, &found)),
        };
        if bridge.is_some() {
            return Ok(rest.call1((found, at, filled))?.unbind());
        }
        for (i, value) in at.into_iter().zip(filled.bind(py).try_iter()?) {
            found.set_item(i, value?)?;
        }
        Ok(found.into_any().unbind())
    }

    /// get_many on a router (see the module; `route` first): the values in order, or with
    /// `bridge` their awaitable.
    pub(super) fn mget_routed_body(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let route = self.routing()?;
        let keys = listed(py, keys)?;
        let looked = self.look_up(py, &keys, bridge.is_none())?;
        let Some(looked @ Looked { kept: true, .. }) = looked else {
            return route.read_many.call1(py, (keys, bridge));
        };
        if looked.misses.is_empty() {
            return answer(py, looked.found, bridge.is_some());
        }
        let (found, misses) = looked.fills(&keys)?;
        // Each primary's part (its client, the positions, the keys), placed by the router's
        // homes; the keys no primary is known for are read through the router.
        let homes = route.homes.call0(py)?;
        let mut parts: Vec<(Bound<'_, Client>, Vec<usize>, Vec<FillKey>)> = Vec::new();
        let mut routed = Vec::new();
        for (at, key) in misses {
            let Some(node) = home(homes.bind(py), &key.0) else {
                fill::cancel_all(&self.near, std::slice::from_ref(&key));
                routed.push(at);
                continue;
            };
            match parts.iter_mut().find(|part| part.0.is(&node)) {
                Some(part) => {
                    part.1.push(at);
                    part.2.push(key);
                }
                None => parts.push((node, vec![at], vec![key])),
            }
        }
        let outcomes = PyList::empty(py);
        match &bridge {
            None => {
                let mut sent = Vec::with_capacity(parts.len());
                let mut ats = Vec::with_capacity(parts.len());
                for (node, at, keys) in &mut parts {
                    sent.push((node.get(), std::mem::take(keys)));
                    ats.push(std::mem::take(at));
                }
                let answered = fill::fill_fanout(py, &self.near, sent)?;
                for (at, outcome) in ats.into_iter().zip(answered.iter()) {
                    outcomes.append((at, outcome))?;
                }
            }
            Some(bridge) => {
                for (node, at, keys) in parts {
                    let pending = fill::fill_keys(
                        py,
                        &self.near,
                        node.get(),
                        keys,
                        false,
                        Some(bridge.clone_ref(py)),
                    )
                    .unwrap_or_else(|err| err.into_value(py).into_any());
                    outcomes.append((at, pending))?;
                }
            }
        }
        route.finish.call1(py, (keys, found, outcomes, routed, bridge))
    }
}

/// `err` carrying what did answer (`found`: the hits, None for the others) as
/// `partial_values`, for a fail-open get_many to return.
fn with_partial(py: Python<'_>, err: PyErr, found: &Bound<'_, PyList>) -> PyErr {
    if let Ok(partial) = PyList::new(py, found.iter()) {
        _ = err.value(py).setattr("partial_values", partial);
    }
    err
}
