//! tokio -> asyncio completion without taking the GIL on tokio threads.
//!
//! A `Bridge` belongs to one event loop. A tokio task that finishes a command stores its reply in
//! the command's `Slot`. If the awaiting coroutine has parked on an asyncio future, the slot goes
//! onto the bridge's queue and the bridge's eventfd is written (only when the queue turns
//! non-empty); the loop, woken by `add_reader`, calls `Bridge.drain` and resolves the futures.
//!
//! Before parking, an awaitable yields to the loop a few times (a bare `yield`, which asyncio
//! treats as "run me again next iteration"), polling its slot: a reply that arrives within a loop
//! tick or two then skips the loop's sleep and wake-up entirely. The polling window adapts to the
//! latencies this loop has seen lately, and other runnable tasks run during each tick.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::{intern, IntoPyObjectExt, PyTraverseError};

use crate::errors::{Error, Result};
use crate::reply::Reply;

/// Longest we poll before parking, in nanoseconds, however slow recent replies were.
const MAX_SPIN_NS: u64 = 400_000;
/// Starting estimate of a reply's latency.
const INITIAL_LATENCY_NS: u64 = 60_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where one command's outcome meets the coroutine waiting for it.
pub struct Slot {
    state: Mutex<SlotState>,
}

struct SlotState {
    outcome: Option<Result<Reply>>,
    /// The asyncio future the awaiting task parked on, once it stopped polling.
    waker: Option<Py<PyAny>>,
}

impl Slot {
    pub fn new() -> Arc<Self> {
        Arc::new(Slot { state: Mutex::new(SlotState { outcome: None, waker: None }) })
    }

    /// Store the outcome; queue the slot on the loop if a task is parked on it.
    pub fn complete(self: &Arc<Self>, outcome: Result<Reply>, queue: &LoopQueue) {
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

    fn take(&self) -> Option<Result<Reply>> {
        lock(&self.state).outcome.take()
    }
}

/// Completes a slot with an internal error if the task that owns it ends without answering
/// (a panic unwinding through it, or the runtime shutting down), so no awaitable hangs.
pub struct CompletionGuard {
    slot: Arc<Slot>,
    queue: Arc<LoopQueue>,
}

impl CompletionGuard {
    pub fn new(slot: Arc<Slot>, queue: Arc<LoopQueue>) -> Self {
        CompletionGuard { slot, queue }
    }

    pub fn finish(self, outcome: Result<Reply>) {
        self.slot.complete(outcome, &self.queue);
        // Drop runs next and finds the slot already answered.
    }
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        self.slot.complete(
            Err(Error::Internal("the command's task ended without an answer".into())),
            &self.queue,
        );
    }
}

/// The queue of answered slots whose tasks are parked, and the eventfd that wakes the loop.
pub struct LoopQueue {
    fd: OwnedFd,
    ready: Mutex<Vec<Arc<Slot>>>,
    /// Recent reply latency, an exponentially weighted average in nanoseconds.
    latency_ns: AtomicU64,
    /// Commands of this loop not yet consumed by their awaitable.
    in_flight: AtomicUsize,
}

impl LoopQueue {
    fn new() -> Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; we check the result.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Internal(format!(
                "eventfd failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(LoopQueue {
            // SAFETY: fd is a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            ready: Mutex::new(Vec::new()),
            latency_ns: AtomicU64::new(INITIAL_LATENCY_NS),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn push(&self, slot: Arc<Slot>) {
        let was_empty = {
            let mut ready = lock(&self.ready);
            let was_empty = ready.is_empty();
            ready.push(slot);
            was_empty
        };
        if was_empty {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our own eventfd. A full counter (EAGAIN)
            // still leaves the fd readable, which is all we need.
            unsafe {
                libc::write(self.fd.as_raw_fd(), std::ptr::from_ref(&one).cast(), 8);
            }
        }
    }

    fn take_ready(&self) -> Vec<Arc<Slot>> {
        // Reset the counter before taking the queue: a push racing with us either lands in what
        // we take, or finds the queue empty and writes the fd again.
        let mut counter: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our own non-blocking eventfd.
        unsafe {
            libc::read(self.fd.as_raw_fd(), std::ptr::from_mut(&mut counter).cast(), 8);
        }
        std::mem::take(&mut *lock(&self.ready))
    }

    fn record_latency(&self, ns: u64) {
        let old = self.latency_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + ns.min(4 * MAX_SPIN_NS) / 8;
        self.latency_ns.store(new, Ordering::Relaxed);
    }

    /// How long an awaitable polls before parking; `own` is how many of the loop's commands
    /// in flight its caller sent together (see `Pending.sent_with`).
    fn spin_window_ns(&self, own: usize) -> u64 {
        if self.in_flight.load(Ordering::Relaxed) > own {
            // Other commands are in flight: their replies arrive in batches, one eventfd
            // wake-up serves them all, and polling would only burn the loop's time.
            return 0;
        }
        // Poll a little past the typical latency; beyond that the reply is late anyway.
        (self.latency_ns.load(Ordering::Relaxed) * 3 / 2).min(MAX_SPIN_NS)
    }
}

/// One event loop's completion channel. Python registers `fileno()` with `loop.add_reader`
/// and `drain` as its callback.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Bridge {
    pub queue: Arc<LoopQueue>,
    /// A weak reference: the loop owns the bridge (through its reader callback), not the
    /// other way round, so a finished loop and its eventfd are freed.
    event_loop: Py<PyAny>,
}

#[pymethods]
impl Bridge {
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.event_loop)
    }

    #[new]
    fn new(event_loop: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = event_loop.py();
        let weak =
            py.import(intern!(py, "weakref"))?.getattr(intern!(py, "ref"))?.call1((event_loop,))?;
        Ok(Bridge { queue: Arc::new(LoopQueue::new()?), event_loop: weak.unbind() })
    }

    /// Return the eventfd to watch for readability.
    fn fileno(&self) -> i32 {
        self.queue.fd.as_raw_fd()
    }

    /// Resolve the futures of every parked task whose command has finished.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        // Wake every parked task even if one wake-up fails (the queue is already taken).
        let mut first_error = None;
        for slot in self.queue.take_ready() {
            let waker = lock(&slot.state).waker.take();
            if let Some(future) = waker {
                let future = future.bind(py);
                // A cancelled task's future is already done; its outcome is simply dropped.
                let woken = future.call_method0(intern!(py, "done")).and_then(|done| {
                    if done.is_truthy()? {
                        Ok(())
                    } else {
                        future.call_method1(intern!(py, "set_result"), (py.None(),)).map(drop)
                    }
                });
                if let Err(err) = woken {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Something an awaiting caller can prod to make progress on its own thread.
pub trait Poller: Send + Sync {
    fn poll(&self);
}

/// What `await` on a command returns: polls, then parks on an asyncio future.
#[pyclass(module = "redoxide._redoxide")]
pub struct Pending {
    slot: Arc<Slot>,
    /// The outcome was handed out: awaiting again is a bug, not a wait.
    consumed: bool,
    bridge: Py<Bridge>,
    poller: Option<Arc<dyn Poller>>,
    started: Option<Instant>,
    convert: fn(Python<'_>, Reply) -> PyResult<Py<PyAny>>,
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
        bridge.get().queue.in_flight.fetch_add(1, Ordering::Relaxed);
        Pending {
            slot,
            consumed: false,
            bridge,
            poller,
            started: None,
            convert,
            group: 1,
            siblings: Vec::new(),
        }
    }

    fn finish(&mut self, py: Python<'_>, outcome: Result<Reply>) -> PyErr {
        self.consumed = true;
        if let Some(started) = self.started {
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.bridge.get().queue.record_latency(ns);
        }
        match outcome.map_err(PyErr::from).and_then(|reply| (self.convert)(py, reply)) {
            Ok(value) => PyStopIteration::new_err((value,)),
            Err(err) => err,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.bridge.get().queue.in_flight.fetch_sub(1, Ordering::Relaxed);
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

    /// Tell the garbage collector about the asyncio future a parked task waits on (and the
    /// bridge), so a task abandoned on a closed loop (Pending -> future -> task -> coroutine
    /// -> Pending) can be collected.
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.bridge)?;
        if let Ok(state) = self.slot.state.try_lock() {
            visit.call(&state.waker)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        let waker = lock(&self.slot.state).waker.take();
        drop(waker);
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

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.consumed {
            return Err(PyRuntimeError::new_err("this redoxide command was already awaited"));
        }
        if let Some(outcome) = self.slot.take() {
            return Err(self.finish(py, outcome));
        }
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let waited = u64::try_from(now.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
        if waited < self.bridge.get().queue.spin_window_ns(self.group) {
            for sibling in &self.siblings {
                sibling.poll();
            }
            if let Some(poller) = &self.poller {
                poller.poll();
            }
            if let Some(outcome) = self.slot.take() {
                return Err(self.finish(py, outcome));
            }
            // A bare yield: asyncio runs this task again on the next loop iteration.
            return Ok(py.None());
        }
        let bridge = self.bridge.get();
        let event_loop = bridge.event_loop.bind(py).call0()?;
        let future = event_loop.call_method0(intern!(py, "create_future"))?;
        {
            let mut state = lock(&self.slot.state);
            if let Some(outcome) = state.outcome.take() {
                drop(state);
                return Err(self.finish(py, outcome));
            }
            state.waker = Some(future.clone().unbind());
        }
        future.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
        future.into_py_any(py)
    }
}
