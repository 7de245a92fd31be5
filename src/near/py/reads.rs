//! get_many on one server in one call into the core (`NearCache.mget`, bound as the near
//! client's `mget` when it is the process' only near cache): every key looked up; no key
//! kept here reads them all with one MGET, as without a near cache, and all of them hits
//! answer at once. Only a get_many with keys to fill goes back to Python (`rest`), where the
//! one fill protocol reads the misses.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::NearCache;
use crate::bridge::Bridge;
use crate::near::ready::Ready;
use crate::py::client::Client;

impl NearCache {
    /// See the module: the values in order, or with `bridge` their awaitable.
    pub(super) fn mget_direct(
        &self,
        py: Python<'_>,
        client: &Bound<'_, Client>,
        rest: &Bound<'_, PyAny>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        // (Read twice, to look up and to send: an iterator becomes a list first.)
        let keys = match keys.cast::<PyList>() {
            Ok(list) => list.clone(),
            Err(_) => PyList::new(py, keys.try_iter()?.collect::<PyResult<Vec<_>>>()?)?,
        };
        // A sync caller waits for the fills other threads have in flight.
        let (found, all_hits) = self.lookup_list(py, keys.as_any(), bridge.is_none())?;
        match found {
            None => client.get().mget(py, keys.as_any(), bridge),
            Some(found) if all_hits => match bridge {
                None => Ok(found.into_any().unbind()),
                Some(_) => Ok(Py::new(py, Ready { value: found.into_any().unbind() })?.into_any()),
            },
            Some(found) => Ok(rest.call1((keys, found, bridge))?.unbind()),
        }
    }

    /// `lookup` of each key (`lookup_many`): the list (None when no key is kept here), and
    /// whether every key was a hit.
    pub(super) fn lookup_list<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        may_wait: bool,
    ) -> PyResult<(Option<Bound<'py, PyList>>, bool)> {
        let out = PyList::empty(py);
        let (mut any, mut all_hits) = (false, true);
        for key in keys.try_iter()? {
            let found = self.lookup_waiting(py, &key?, may_wait)?;
            any |= found.is_some();
            all_hits &= found.as_ref().is_some_and(|f| f.bind(py).is_instance_of::<PyBytes>());
            out.append(found.unwrap_or_else(|| py.None()))?;
        }
        Ok((any.then_some(out), all_hits))
    }
}
