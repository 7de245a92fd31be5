//! Where a command's outcome waits for its awaitable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{intern, PyTraverseError};

use crate::errors::Result;
use crate::proto::Reply;
use crate::stats::{Meter, Stats};

use super::queue::LoopQueue;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where one command's outcome meets the coroutine waiting for it.
pub struct Slot {
    state: Mutex<SlotState>,
    /// Counts the outcome in the client's stats, where it arrives (no GIL needed), once.
    meter: Option<(Meter, Arc<Stats>, AtomicBool)>,
}

struct SlotState {
    outcome: Option<Result<Reply>>,
    /// What wakes the awaiting task, once it parked (it stopped polling).
    waker: Option<Waker>,
}

/// The done-callbacks of a parked awaitable (asyncio's task gives one: its wake-up), each
/// called with the awaitable, in its context, when the outcome arrives or the wait is
/// cancelled.
pub struct Waker {
    /// The awaitable itself (a `Pending`), the callbacks' argument.
    pub future: Py<PyAny>,
    /// `(callback, context)` in the order they were added.
    pub callbacks: Vec<(Py<PyAny>, Option<Py<PyAny>>)>,
}

impl Waker {
    /// Call every callback now, on the loop's thread, as the loop would call their handles.
    pub fn wake(&self, py: Python<'_>) -> PyResult<()> {
        let future = self.future.bind(py);
        for (callback, context) in &self.callbacks {
            match context {
                Some(context) => {
                    context.bind(py).call_method1(intern!(py, "run"), (callback, future))?;
                }
                None => {
                    callback.bind(py).call1((future,))?;
                }
            }
        }
        Ok(())
    }

    /// Schedule every callback on `event_loop` (from inside a running task, where calling
    /// them now would step a task within another).
    pub fn schedule(&self, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
        for (callback, context) in &self.callbacks {
            schedule(event_loop, callback.bind(event_loop.py()), &self.future, context.as_ref())?;
        }
        Ok(())
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.future)?;
        for (callback, context) in &self.callbacks {
            visit.call(callback)?;
            visit.call(context)?;
        }
        Ok(())
    }
}

/// `event_loop.call_soon(callback, future, context=context)`.
pub fn schedule(
    event_loop: &Bound<'_, PyAny>,
    callback: &Bound<'_, PyAny>,
    future: &Py<PyAny>,
    context: Option<&Py<PyAny>>,
) -> PyResult<()> {
    let py = event_loop.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "context"), context)?;
    event_loop.call_method(intern!(py, "call_soon"), (callback, future), Some(&kwargs))?;
    Ok(())
}

impl Slot {
    pub fn new() -> Arc<Self> {
        Arc::new(Slot { state: Mutex::new(SlotState { outcome: None, waker: None }), meter: None })
    }

    /// A slot whose outcome `meter` counts in `stats`.
    pub fn metered(stats: &Arc<Stats>, meter: Option<Meter>) -> Arc<Self> {
        let meter = meter.map(|m| (m, Arc::clone(stats), AtomicBool::new(false)));
        Arc::new(Slot { state: Mutex::new(SlotState { outcome: None, waker: None }), meter })
    }

    /// Store the outcome; queue the slot on the loop if a task is parked on it.
    pub fn complete(self: &Arc<Self>, outcome: Result<Reply>, queue: &LoopQueue) {
        // Counted before taking the lock, which the awaiting task may be polling.
        if let Some((meter, stats, counted)) = &self.meter {
            if !counted.swap(true, Ordering::Relaxed) {
                meter.record(stats, &outcome);
            }
        }
        let parked = {
            let mut state = lock(&self.state);
            if state.outcome.is_some() {
                return;
            }
            state.outcome = Some(outcome);
            state.waker.is_some()
        };
        if parked {
            queue.push(Arc::clone(self));
        }
    }

    /// The outcome, if it has arrived (once).
    pub fn take(&self) -> Option<Result<Reply>> {
        lock(&self.state).outcome.take()
    }

    /// Whether the outcome has arrived and is not taken yet.
    pub fn has_outcome(&self) -> bool {
        lock(&self.state).outcome.is_some()
    }

    /// Add a done-callback of `future`: `complete` will queue the slot for the loop, which
    /// calls it. False (nothing kept) if the outcome is here already: the caller schedules it.
    pub fn park(
        &self,
        future: &Py<PyAny>,
        callback: Py<PyAny>,
        context: Option<Py<PyAny>>,
        py: Python<'_>,
    ) -> bool {
        let mut state = lock(&self.state);
        if state.outcome.is_some() {
            return false;
        }
        match &mut state.waker {
            Some(waker) => waker.callbacks.push((callback, context)),
            None => {
                state.waker = Some(Waker {
                    future: future.clone_ref(py),
                    callbacks: vec![(callback, context)],
                });
            }
        }
        true
    }

    /// Remove the done-callbacks equal to `callback`; return how many.
    pub fn unpark(&self, callback: &Bound<'_, PyAny>) -> usize {
        let mut state = lock(&self.state);
        let Some(waker) = &mut state.waker else { return 0 };
        let before = waker.callbacks.len();
        waker.callbacks.retain(|(kept, _)| !callback.eq(kept).unwrap_or(false));
        let removed = before - waker.callbacks.len();
        if waker.callbacks.is_empty() {
            state.waker = None;
        }
        removed
    }

    /// The parked task's wake-up, taken (to call it or to let it go).
    pub fn take_waker(&self) -> Option<Waker> {
        lock(&self.state).waker.take()
    }

    /// Show the garbage collector the parked task's callbacks (skipped if the slot is busy).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        if let Ok(state) = self.state.try_lock() {
            if let Some(waker) = &state.waker {
                waker.traverse(visit)?;
            }
        }
        Ok(())
    }
}
