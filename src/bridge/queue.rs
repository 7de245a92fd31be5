//! Where a command's outcome waits for its awaitable, and the per-loop queue (with its
//! eventfd) of outcomes whose tasks have parked.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::errors::{Error, Result};
use crate::ffi;
use crate::proto::Reply;

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
    pub fn new() -> Result<Self> {
        let fd = ffi::eventfd().map_err(|e| Error::Internal(format!("eventfd failed: {e}")))?;
        Ok(LoopQueue {
            fd,
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
            ffi::eventfd_signal(self.fd.as_raw_fd());
        }
    }

    /// The eventfd the loop watches.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Take every queued slot.
    pub fn take_ready(&self) -> Vec<Arc<Slot>> {
        // Reset the counter before taking the queue: a push racing with us either lands in what
        // we take, or finds the queue empty and writes the fd again.
        ffi::eventfd_reset(self.fd.as_raw_fd());
        std::mem::take(&mut *lock(&self.ready))
    }

    /// Count a command sent and not yet consumed by its awaitable.
    pub fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a command's awaitable gone.
    pub fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Learn how long a reply took.
    pub fn record_latency(&self, ns: u64) {
        let old = self.latency_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + ns.min(4 * MAX_SPIN_NS) / 8;
        self.latency_ns.store(new, Ordering::Relaxed);
    }

    /// How long an awaitable polls before parking; `own` is how many of the loop's commands
    /// in flight its caller sent together (see `Pending.sent_with`).
    pub fn spin_window_ns(&self, own: usize) -> u64 {
        if self.in_flight.load(Ordering::Relaxed) > own {
            // Other commands are in flight: their replies arrive in batches, one eventfd
            // wake-up serves them all, and polling would only burn the loop's time.
            return 0;
        }
        // Poll a little past the typical latency; beyond that the reply is late anyway.
        (self.latency_ns.load(Ordering::Relaxed) * 3 / 2).min(MAX_SPIN_NS)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// The eventfd's counter, read (and so reset); `None` if it was not signalled.
    fn signals(queue: &LoopQueue) -> Option<u64> {
        let dup = queue.fd.try_clone().unwrap();
        let mut buf = [0u8; 8];
        let mut file = std::fs::File::from(dup);
        file.read_exact(&mut buf).ok().map(|()| u64::from_ne_bytes(buf))
    }

    #[test]
    fn push_wakes_the_loop_only_when_the_queue_turns_non_empty() {
        let queue = LoopQueue::new().unwrap();
        assert_eq!(signals(&queue), None);
        for _ in 0..3 {
            queue.push(Slot::new());
        }
        assert_eq!(signals(&queue), Some(1));
        assert_eq!(queue.take_ready().len(), 3);
        queue.push(Slot::new());
        assert_eq!(signals(&queue), Some(1));
    }

    #[test]
    fn take_ready_drains_the_queue_and_resets_the_eventfd() {
        let queue = LoopQueue::new().unwrap();
        queue.push(Slot::new());
        queue.push(Slot::new());
        assert_eq!(queue.take_ready().len(), 2);
        assert_eq!(signals(&queue), None);
        assert!(queue.take_ready().is_empty());
    }

    #[test]
    fn an_outcome_nobody_parked_on_is_kept_not_queued() {
        let queue = LoopQueue::new().unwrap();
        let unparked = Slot::new();
        unparked.complete(Ok(Reply::Okay), &queue);
        assert!(queue.take_ready().is_empty());
        assert_eq!(unparked.take().map(|r| r.ok()), Some(Some(Reply::Okay)));
        assert!(unparked.take().is_none());
    }

    #[test]
    fn no_polling_while_other_commands_are_in_flight() {
        let queue = LoopQueue::new().unwrap();
        queue.started();
        assert_eq!(queue.spin_window_ns(1), INITIAL_LATENCY_NS * 3 / 2);
        queue.started();
        assert_eq!(queue.spin_window_ns(1), 0);
        // Two sent together by one caller: each may poll.
        assert_eq!(queue.spin_window_ns(2), INITIAL_LATENCY_NS * 3 / 2);
        queue.finished();
        assert_eq!(queue.spin_window_ns(1), INITIAL_LATENCY_NS * 3 / 2);
    }

    #[test]
    fn the_latency_average_is_bounded() {
        let queue = LoopQueue::new().unwrap();
        for _ in 0..200 {
            queue.record_latency(u64::MAX);
        }
        assert!(queue.latency_ns.load(Ordering::Relaxed) <= 4 * MAX_SPIN_NS);
        assert_eq!(queue.spin_window_ns(0), MAX_SPIN_NS);
        for _ in 0..200 {
            queue.record_latency(1_000);
        }
        assert!(queue.spin_window_ns(0) < 2_000, "{}", queue.spin_window_ns(0));
    }
}
