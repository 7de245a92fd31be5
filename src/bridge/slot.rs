//! Where a command's outcome waits for its awaitable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

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
    /// The asyncio future the awaiting task parked on, once it stopped polling.
    waker: Option<Py<PyAny>>,
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

    /// Park on `future`: `complete` will queue the slot for the loop to resolve it. If the
    /// outcome arrived meanwhile, return it instead of parking.
    pub fn park(&self, future: Py<PyAny>) -> Option<Result<Reply>> {
        let mut state = lock(&self.state);
        if let Some(outcome) = state.outcome.take() {
            return Some(outcome);
        }
        state.waker = Some(future);
        None
    }

    /// The future a parked task waits on, taken (to resolve it or to let it go).
    pub fn take_waker(&self) -> Option<Py<PyAny>> {
        lock(&self.state).waker.take()
    }

    /// Show the garbage collector the parked task's future (skipped if the slot is busy).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        if let Ok(state) = self.state.try_lock() {
            visit.call(&state.waker)?;
        }
        Ok(())
    }
}
