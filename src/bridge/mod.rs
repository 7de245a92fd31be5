//! tokio -> asyncio completion without taking the GIL on tokio threads.
//!
//! A `Bridge` belongs to one event loop. A tokio task that finishes a command stores its reply in
//! the command's `Slot`. If the awaiting task has parked, the slot goes onto the bridge's queue
//! and the loop is woken (only when the queue turns non-empty); the loop calls `Bridge.drain`,
//! which wakes the tasks. A task parks on the awaitable itself: `Pending` is future-like (what
//! asyncio's task accepts in place of a future: `_asyncio_future_blocking`, `get_loop`,
//! `add_done_callback`, `result`, `cancel`), and the drain calls each task's wake-up directly,
//! as the loop would call its handle: no asyncio future, no handle and no `call_soon` per
//! command. How it is woken (`Wakeup`, `Bridge.wakeup`):
//! an eventfd (Linux) or a self-pipe (other Unixes) that the loop watches with `add_reader`, or,
//! for a loop without `add_reader` (Windows' proactor), `loop.call_soon_threadsafe(drain)`: the
//! one case where a completion takes the GIL, once per batch of replies, on tokio's blocking
//! pool so that the I/O thread never waits for it.
//!
//! Before parking, an awaitable yields to the loop a few times (a bare `yield`, which asyncio
//! treats as "run me again next iteration"), polling its slot: a reply that arrives within a loop
//! tick or two then skips the loop's sleep and wake-up entirely. The polling window adapts to the
//! latencies this loop has seen lately, and other runnable tasks run during each tick.

mod current;
mod queue;
mod slot;

use std::sync::Arc;
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{intern, PyTraverseError};

use crate::errors::Result;
use crate::proto::Reply;

pub use queue::{LoopQueue, Wakeup};
pub use slot::Slot;

/// Add the asyncio bridge's classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Bridge>()?;
    m.add_function(wrap_pyfunction!(queue::_interpreter_exits, m)?)?;
    m.add_function(wrap_pyfunction!(current::current_bridge, m)?)?;
    m.add_class::<Pending>()?;
    Ok(())
}

/// One event loop's completion channel. Python registers `fileno()` with `loop.add_reader`
/// and `drain` as its callback; with no descriptor (`fileno()` is None) the bridge schedules
/// `drain` on the loop itself.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Bridge {
    pub queue: Arc<LoopQueue>,
    /// A weak reference: the loop owns the bridge (through its reader callback), not the
    /// other way round, so a finished loop and its descriptor are freed.
    event_loop: Py<PyAny>,
}

#[pymethods]
impl Bridge {
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.event_loop)
    }

    /// A bridge for `event_loop`, woken as `wakeup` says ("eventfd", "pipe", "threadsafe");
    /// by default as `REDOXIDE_ASYNC_WAKEUP` says, else the platform's descriptor.
    #[new]
    #[pyo3(signature = (event_loop, *, wakeup = None))]
    fn new(event_loop: &Bound<'_, PyAny>, wakeup: Option<&str>) -> PyResult<Self> {
        let py = event_loop.py();
        let chosen = match wakeup {
            Some(name) => Wakeup::parse(name)?,
            None => match std::env::var(Wakeup::ENV) {
                Ok(name) => Wakeup::parse(&name)?,
                Err(_) => None,
            },
        };
        let weak =
            py.import(intern!(py, "weakref"))?.getattr(intern!(py, "ref"))?.call1((event_loop,))?;
        let event_loop = weak.unbind();
        let queue = LoopQueue::new(py, chosen.unwrap_or(Wakeup::platform_default()), &event_loop)?;
        Ok(Bridge { queue, event_loop })
    }

    /// Return the descriptor to watch for readability, or None if the bridge wakes the loop
    /// with `call_soon_threadsafe`.
    fn fileno(&self) -> Option<i32> {
        #[cfg(unix)]
        return self.queue.fd();
        #[cfg(not(unix))]
        return None;
    }

    /// How this bridge wakes its loop: "eventfd", "pipe" or "threadsafe".
    #[getter]
    fn wakeup(&self) -> &'static str {
        self.queue.wakeup().name()
    }

    /// Resolve the futures of every parked task whose command has finished.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        self.queue.drain(py)
    }
}

/// A conversion of a reply that carries state (see `Pending::with_finish`).
pub type Finish = Box<dyn FnOnce(Python<'_>, Reply) -> PyResult<Py<PyAny>> + Send + Sync>;

/// Something an awaiting caller can prod to make progress on its own thread.
pub trait Poller: Send + Sync {
    fn poll(&self);
}

/// What `await` on a command returns: polls, then parks (its task waits on it, future-like).
#[pyclass(module = "redoxide._redoxide")]
pub struct Pending {
    slot: Arc<Slot>,
    /// The outcome was handed out: awaiting again is a bug, not a wait.
    consumed: bool,
    /// asyncio's `_asyncio_future_blocking`: None (not future-like, so `asyncio.isfuture` says
    /// no) except while this awaitable is what its task waits on.
    blocking: Option<bool>,
    /// The wait was cancelled (by its task's `cancel`), with the message to raise.
    cancelled: Option<Option<Py<PyAny>>>,
    bridge: Py<Bridge>,
    poller: Option<Arc<dyn Poller>>,
    started: Option<Instant>,
    convert: fn(Python<'_>, Reply) -> PyResult<Py<PyAny>>,
    /// Replaces `convert` when set: a conversion that needs state of its own (a near-cache
    /// fill installs the reply it converts).
    finish_with: Option<Finish>,
    /// Commands sent together with this one by the same caller (this one included).
    group: usize,
    /// The connections of those other commands: polled too while this one polls, so their
    /// replies are read by this thread rather than waiting for the I/O thread to wake.
    siblings: Vec<Arc<dyn Poller>>,
}

impl Pending {
    pub fn new(
        slot: Arc<Slot>,
        bridge: Py<Bridge>,
        poller: Option<Arc<dyn Poller>>,
        convert: fn(Python<'_>, Reply) -> PyResult<Py<PyAny>>,
    ) -> Self {
        bridge.get().queue.started();
        Pending {
            slot,
            consumed: false,
            blocking: None,
            cancelled: None,
            bridge,
            poller,
            started: None,
            convert,
            finish_with: None,
            group: 1,
            siblings: Vec::new(),
        }
    }

    /// Convert the reply with `finish` instead of the plain conversion.
    pub fn with_finish(mut self, finish: Finish) -> Self {
        self.finish_with = Some(finish);
        self
    }

    fn finish(&mut self, py: Python<'_>, outcome: Result<Reply>) -> PyErr {
        self.consumed = true;
        self.blocking = None;
        // No longer in flight from here, though the drain that woke this task may still hold
        // it: the task's next command, sent before the drain lets go, is then a lone one.
        self.bridge.get().queue.finished();
        if let Some(started) = self.started {
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.bridge.get().queue.record_latency(ns);
        }
        let convert = self.convert;
        let finish = self.finish_with.take();
        let converted = outcome.map_err(PyErr::from).and_then(|reply| match finish {
            Some(finish) => finish(py, reply),
            None => convert(py, reply),
        });
        match converted {
            Ok(value) => PyStopIteration::new_err((value,)),
            Err(err) => err,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.consumed {
            self.bridge.get().queue.finished();
        }
    }
}

#[pymethods]
impl Pending {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Tell the garbage collector about a parked task's wake-up (and the bridge), so a task
    /// abandoned on a closed loop (Pending -> wake-up -> task -> coroutine -> Pending) can be
    /// collected.
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.bridge)?;
        if let Some(message) = &self.cancelled {
            visit.call(message)?;
        }
        self.slot.traverse(&visit)
    }

    fn __clear__(&mut self) {
        drop(self.slot.take_waker());
        self.cancelled = None;
    }

    /// Say that this command was sent together with `others` (this one may be among them) by
    /// one caller that awaits them in turn, e.g. one per cluster node: with no other traffic
    /// on the loop, it may then poll for its reply before parking, as a lone command does,
    /// and it polls their connections too.
    fn sent_with(&mut self, others: Vec<Bound<'_, PyAny>>) {
        self.group = others.len().max(1);
        self.siblings.clear();
        for other in &others {
            // This one is borrowed already (by this call): it is skipped.
            if let Ok(pending) = other.cast::<Pending>() {
                if let Ok(pending) = pending.try_borrow() {
                    if let Some(poller) = &pending.poller {
                        if self.poller.as_ref().is_none_or(|own| !Arc::ptr_eq(own, poller)) {
                            self.siblings.push(Arc::clone(poller));
                        }
                    }
                }
            }
        }
    }

    fn __next__(mut slf: PyRefMut<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let this = &mut *slf;
        if this.consumed {
            return Err(PyRuntimeError::new_err("this redoxide command was already awaited"));
        }
        if let Some(outcome) = this.slot.take() {
            return Err(this.finish(py, outcome));
        }
        let queue = &this.bridge.get().queue;
        // Timed only when polling may pay: with other commands in flight the window is 0.
        let window = queue.spin_window_ns(this.group);
        if window > 0 {
            let now = Instant::now();
            let started = *this.started.get_or_insert(now);
            let waited = u64::try_from(now.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
            if waited < window {
                for sibling in &this.siblings {
                    sibling.poll();
                }
                if let Some(poller) = &this.poller {
                    poller.poll();
                }
                if let Some(outcome) = this.slot.take() {
                    return Err(this.finish(py, outcome));
                }
                // A bare yield: asyncio runs this task again on the next loop iteration.
                return Ok(py.None());
            }
        }
        if queue.wakeup() == Wakeup::Threadsafe {
            queue.help_drain(&this.bridge.get().event_loop.bind(py).call0()?);
        }
        // Park: the task waits on this awaitable (see the module's doc) until the drain calls
        // its wake-up; it then sends None and the outcome is taken above.
        this.blocking = Some(true);
        Ok(Py::<Pending>::from(slf).into_any())
    }

    /// asyncio's marker of a future-like object a task may wait on (see `blocking`).
    #[getter(_asyncio_future_blocking)]
    fn future_blocking(&self) -> Option<bool> {
        self.blocking
    }

    #[setter(_asyncio_future_blocking)]
    fn set_future_blocking(&mut self, value: bool) {
        self.blocking = Some(value);
    }

    /// The event loop this awaitable belongs to (its bridge's).
    fn get_loop(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.bridge.get().event_loop.bind(py).call0()?.unbind())
    }

    /// Call `callback(self)` (in `context`) once the outcome is here or the wait is cancelled.
    #[pyo3(signature = (callback, *, context = None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        callback: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let future: Py<PyAny> = slf.clone().into_any().unbind();
        let this = slf.borrow();
        let kept = context.as_ref().map(|c| c.clone_ref(py));
        if this.cancelled.is_none() && this.slot.park(&future, callback.clone_ref(py), kept, py) {
            return Ok(());
        }
        // Done already: called soon, as asyncio calls a done future's new callbacks.
        let event_loop = this.bridge.get().event_loop.bind(py).call0()?;
        slot::schedule(&event_loop, callback.bind(py), &future, context.as_ref())
    }

    /// Remove every done-callback equal to `callback`; return how many.
    fn remove_done_callback(&self, callback: &Bound<'_, PyAny>) -> usize {
        self.slot.unpark(callback)
    }

    /// Stop waiting: the task is woken soon and raises CancelledError here. False if the
    /// outcome is here already (or its wake-up under way), as for a done future.
    #[pyo3(signature = (msg = None))]
    fn cancel(&mut self, py: Python<'_>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        if self.cancelled.is_some() {
            return Ok(false);
        }
        let Some(waker) = self.slot.take_waker() else { return Ok(false) };
        self.cancelled = Some(msg);
        let event_loop = self.bridge.get().event_loop.bind(py).call0()?;
        waker.schedule(&event_loop)?;
        Ok(true)
    }

    fn cancelled(&self) -> bool {
        self.cancelled.is_some()
    }

    fn done(&self) -> bool {
        self.cancelled.is_some() || self.consumed || self.slot.has_outcome()
    }

    /// None once done (the outcome itself is what the await returns); CancelledError if the
    /// wait was cancelled.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(raised) = self.raised(py)? {
            return Err(raised);
        }
        Ok(py.None())
    }

    /// None once done; CancelledError if the wait was cancelled.
    fn exception(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.result(py)
    }
}

impl Pending {
    /// What `result()` raises: CancelledError for a cancelled wait, InvalidStateError for one
    /// not done.
    fn raised(&self, py: Python<'_>) -> PyResult<Option<PyErr>> {
        if self.cancelled.is_none() && self.done() {
            // The case of every wake-up: nothing to look up.
            return Ok(None);
        }
        let asyncio = py.import(intern!(py, "asyncio"))?;
        if let Some(message) = &self.cancelled {
            let kind = asyncio.getattr(intern!(py, "CancelledError"))?;
            let args = match message {
                Some(message) => PyTuple::new(py, [message])?,
                None => PyTuple::empty(py),
            };
            return Ok(Some(PyErr::from_value(kind.call1(args)?)));
        }
        let kind = asyncio.getattr(intern!(py, "InvalidStateError"))?;
        Ok(Some(PyErr::from_value(kind.call1(("Result is not ready.",))?)))
    }
}
