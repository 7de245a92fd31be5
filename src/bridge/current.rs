//! The running event loop's bridge, found in one call from Python (the request path's lookup).

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use super::Bridge;

/// This thread's last loop (a weak reference) and its bridge, with the process image they
/// belong to (a forked child must make its own).
type Last = (u64, Py<PyAny>, Py<Bridge>);

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// Return the running event loop's bridge; `redoxide._bridges._bridge_of(loop)` makes and
/// registers one on first use. RuntimeError if no loop is running.
#[pyfunction]
pub fn current_bridge(py: Python<'_>) -> PyResult<Py<Bridge>> {
    static GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static WEAKREF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static BRIDGE_OF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_loop = GET_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?.getattr("get_running_loop").map(Bound::unbind)
    })?;
    let running = get_loop.bind(py).call0()?;
    let generation = crate::runtime::generation();
    let last = LAST
        .try_with(|last| {
            last.borrow().as_ref().and_then(|(born, weak, bridge)| {
                (*born == generation).then(|| (weak.clone_ref(py), bridge.clone_ref(py)))
            })
        })
        .ok()
        .flatten();
    if let Some((weak, bridge)) = last {
        // Called outside the borrow: a weak reference's call runs no Python code, but nothing
        // here depends on that.
        if weak.bind(py).call0()?.is(&running) {
            return Ok(bridge);
        }
    }
    crate::runtime::watch_forks();
    let bridge_of = BRIDGE_OF.get_or_try_init(py, || {
        py.import("redoxide._bridges")?.getattr("_bridge_of").map(Bound::unbind)
    })?;
    let found = bridge_of.bind(py).call1((&running,))?.cast_into::<Bridge>()?.unbind();
    let weakref =
        WEAKREF.get_or_try_init(py, || py.import("weakref")?.getattr("ref").map(Bound::unbind))?;
    let weak = weakref.bind(py).call1((&running,))?.unbind();
    let _ = LAST.try_with(|last| {
        // The previous entry (another loop's) is dropped after the borrow ends.
        let old = last.borrow_mut().replace((generation, weak, found.clone_ref(py)));
        drop(old);
    });
    Ok(found)
}
