//! `Ready`: the awaitable of a near-cache hit under `await`.

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;

/// An awaitable that returns a value at once (a near-cache hit under `await`).
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Ready {
    pub(crate) value: Py<PyAny>,
}

#[pymethods]
impl Ready {
    #[new]
    fn new(value: Py<PyAny>) -> Self {
        Ready { value }
    }

    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<()> {
        Err(PyStopIteration::new_err((self.value.clone_ref(py),)))
    }
}
