//! `Holding`: the awaitable of a write a router sends (a Python coroutine), which keeps
//! something until that write is answered, then lets it go: the near cache's drops made again
//! (`py/around.rs`). It passes every step of the coroutine through unchanged (what it yields
//! to the event loop, what the loop sends or throws into it), so it awaits exactly as the
//! coroutine would; it lets go when the coroutine returns or raises, is closed, or is
//! dropped without ever being awaited.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyTraverseError;

/// What a `Holding` keeps until its write is answered.
pub(crate) type Held = Box<dyn Send + Sync>;

/// An awaitable that awaits another and lets `held` go once it is done.
#[pyclass(module = "redoxide._redoxide")]
pub struct Holding {
    /// The awaited one's iterator (its `__await__()`); None once cleared by the collector.
    steps: Option<Py<PyAny>>,
    held: Option<Held>,
}

impl Holding {
    /// Await `awaitable`, keeping `held` until it is done.
    pub(crate) fn new(awaitable: &Bound<'_, PyAny>, held: Held) -> PyResult<Holding> {
        let steps = awaitable.call_method0("__await__")?.unbind();
        Ok(Holding { steps: Some(steps), held: Some(held) })
    }

    /// One step of the awaited iterator: what it yields, or (it returned or raised) its
    /// StopIteration or error, `held` let go first.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        call: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let Some(steps) = &self.steps else {
            self.held = None;
            return Err(pyo3::exceptions::PyRuntimeError::new_err("this awaitable was cleared"));
        };
        match call(steps.bind(py)) {
            Ok(yielded) => Ok(yielded.unbind()),
            Err(err) => {
                self.held = None;
                Err(err)
            }
        }
    }
}

#[pymethods]
impl Holding {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.step(py, |steps| steps.call_method0("__next__"))
    }

    fn send(&mut self, py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
        self.step(py, |steps| steps.call_method1("send", (value,)))
    }

    #[pyo3(signature = (*args))]
    fn throw(&mut self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        self.step(py, |steps| steps.call_method1("throw", args))
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.held = None;
        match &self.steps {
            Some(steps) => steps.bind(py).call_method0("close").map(drop),
            None => Ok(()),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(steps) = &self.steps {
            visit.call(steps)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.steps = None;
    }
}
