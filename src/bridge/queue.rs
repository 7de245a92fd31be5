//! The per-loop queue of outcomes whose tasks have parked, with the signal that wakes the loop
//! when it turns non-empty.

#[cfg(unix)]
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;

use super::slot::Slot;
use crate::errors::{Error, Result};
#[cfg(unix)]
use crate::ffi;

/// Longest we poll before parking, in nanoseconds, however slow recent replies were.
const MAX_SPIN_NS: u64 = 400_000;
/// Starting estimate of a reply's latency.
const INITIAL_LATENCY_NS: u64 = 60_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a loop learns that its queue turned non-empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// A Linux eventfd the loop watches with `add_reader`.
    EventFd,
    /// A non-blocking self-pipe the loop watches with `add_reader` (macOS, the BSDs).
    Pipe,
    /// No descriptor: `loop.call_soon_threadsafe(drain)`, for loops without `add_reader`
    /// (Windows' proactor loop). The completing thread takes the GIL, once per batch.
    Threadsafe,
}

impl Wakeup {
    /// The environment variable that overrides the automatic choice (read per bridge).
    pub const ENV: &'static str = "REDOXIDE_ASYNC_WAKEUP";

    /// What this platform watches when the loop has a working `add_reader`.
    pub const fn platform_default() -> Self {
        if cfg!(target_os = "linux") {
            Wakeup::EventFd
        } else if cfg!(unix) {
            Wakeup::Pipe
        } else {
            Wakeup::Threadsafe
        }
    }

    /// Parse a mode's name; the empty string is "choose for me".
    pub fn parse(name: &str) -> PyResult<Option<Self>> {
        match name.trim() {
            "" => Ok(None),
            "eventfd" => Ok(Some(Wakeup::EventFd)),
            "pipe" => Ok(Some(Wakeup::Pipe)),
            "threadsafe" => Ok(Some(Wakeup::Threadsafe)),
            other => Err(PyValueError::new_err(format!(
                "{} must be eventfd, pipe or threadsafe, not {other:?}",
                Self::ENV
            ))),
        }
    }

    /// The mode's name, as `Bridge.wakeup` reports it.
    pub const fn name(self) -> &'static str {
        match self {
            Wakeup::EventFd => "eventfd",
            Wakeup::Pipe => "pipe",
            Wakeup::Threadsafe => "threadsafe",
        }
    }
}

fn unavailable(wakeup: Wakeup) -> Error {
    Error::Config(format!("the {} wake-up is not available on this platform", wakeup.name()))
}

/// The signal of one queue, chosen when the queue is made.
enum Signal {
    #[cfg(target_os = "linux")]
    EventFd(OwnedFd),
    #[cfg(unix)]
    Pipe {
        read: OwnedFd,
        write: OwnedFd,
    },
    Threadsafe(OnceLock<Arc<Poster>>),
}

/// What the threadsafe signal posts to the loop: weak, so that neither the loop nor the queue
/// is kept alive by the other (the loop's bridges live in a dict keyed weakly by loop).
struct Poster {
    /// `weakref.ref(loop)`.
    event_loop: Py<PyAny>,
    /// A `Drain` of this queue.
    drain: Py<Drain>,
}

/// Set when the interpreter exits (an `atexit` hook, which runs before it finalizes): from then
/// on no runtime thread attaches to it.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Runtime threads between deciding to attach and having detached again.
static ATTACHING: AtomicUsize = AtomicUsize::new(0);
/// Longest the exit hook waits for runtime threads still attached (each holds the GIL for one
/// `call_soon_threadsafe`): an exit is never held up longer.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Called once the interpreter exits, before it finalizes: stop runtime threads attaching, and
/// wait (the GIL released) for those already attaching or attached. A thread that waits for the
/// GIL when finalization begins is ended by CPython before 3.14 with `pthread_exit`, whose
/// forced unwinding aborts the process when it meets a `catch_unwind` (tokio's blocking pool):
/// a clean exit would end with SIGABRT. Python objects released by runtime threads afterwards
/// go to PyO3's pending decrefs, which need no attaching.
#[pyfunction]
pub fn _interpreter_exits(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + EXIT_WAIT;
        while ATTACHING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    });
}

/// `f` attached to the interpreter from a thread Python did not start, unless the interpreter
/// is exiting or finalizing (None then).
fn attach_from_runtime<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    // SeqCst on both sides (here: count, then read the flag; the hook: set the flag, then read
    // the count): either this thread sees the flag, or the hook sees the count and waits.
    ATTACHING.fetch_add(1, Ordering::SeqCst);
    let result = if EXITING.load(Ordering::SeqCst) { None } else { Python::try_attach(f) };
    ATTACHING.fetch_sub(1, Ordering::SeqCst);
    result
}

impl Poster {
    /// Schedule the drain on the loop, taking the GIL for it.
    fn post(&self) {
        // Not during interpreter shutdown: nobody is left to wake.
        let posted = attach_from_runtime(|py| {
            let Ok(event_loop) = self.event_loop.bind(py).call0() else { return false };
            // None: the loop is gone, and its tasks with it. A closed loop refuses
            // (RuntimeError): its tasks will never run again.
            !event_loop.is_none()
                && event_loop
                    .call_method1(intern!(py, "call_soon_threadsafe"), (self.drain.bind(py),))
                    .is_ok()
        });
        if posted != Some(true) {
            // Nothing will run the drain: let the next completion try again.
            if let Some(queue) = self.drain.get().queue.upgrade() {
                queue.posted.store(false, Ordering::Release);
            }
        }
    }
}

/// The callback the threadsafe signal schedules on the loop: drains its queue, if it still
/// exists.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Drain {
    queue: Weak<LoopQueue>,
}

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(queue) = self.queue.upgrade() else { return Ok(()) };
        // Before taking the queue: a completion after this posts again.
        queue.posted.store(false, Ordering::Release);
        queue.drain(py)
    }
}

/// The queue of answered slots whose tasks are parked, and the signal that wakes the loop.
pub struct LoopQueue {
    signal: Signal,
    ready: Mutex<Vec<Arc<Slot>>>,
    /// Recent reply latency, an exponentially weighted average in nanoseconds.
    latency_ns: AtomicU64,
    /// Commands of this loop not yet consumed by their awaitable.
    in_flight: AtomicUsize,
    /// The threadsafe signal's drain is scheduled and has not started: completions meanwhile
    /// need no other post (its drain, or one by the loop thread, takes them).
    posted: AtomicBool,
    /// This loop's flush of deferred writes is scheduled and has not run yet.
    flush_scheduled: AtomicBool,
}

impl LoopQueue {
    fn with_signal(signal: Signal) -> Self {
        LoopQueue {
            signal,
            ready: Mutex::new(Vec::new()),
            latency_ns: AtomicU64::new(INITIAL_LATENCY_NS),
            in_flight: AtomicUsize::new(0),
            posted: AtomicBool::new(false),
            flush_scheduled: AtomicBool::new(false),
        }
    }

    /// Claim this loop's flush of deferred writes: true if the caller must schedule it (none
    /// is pending). Per loop, so a loop that stopped before its flush ran blocks no other.
    /// (Only the loop's own thread claims and flushes: no ordering with other memory needed.)
    pub fn claim_flush(&self) -> bool {
        !self.flush_scheduled.swap(true, Ordering::Relaxed)
    }

    /// This loop's scheduled flush has run.
    pub fn flushed(&self) {
        self.flush_scheduled.store(false, Ordering::Relaxed);
    }

    /// A queue for `event_loop` (a weak reference to it, for the threadsafe signal) that
    /// signals through `wakeup`; an error if this platform has no such signal.
    pub fn new(py: Python<'_>, wakeup: Wakeup, event_loop: &Py<PyAny>) -> PyResult<Arc<Self>> {
        match wakeup {
            Wakeup::Threadsafe => Self::threadsafe(py, event_loop),
            #[cfg(unix)]
            _ => Ok(Arc::new(Self::with_fd(wakeup)?)),
            #[cfg(not(unix))]
            other => Err(unavailable(other).into()),
        }
    }

    fn threadsafe(py: Python<'_>, event_loop: &Py<PyAny>) -> PyResult<Arc<Self>> {
        let queue = Arc::new(Self::with_signal(Signal::Threadsafe(OnceLock::new())));
        let drain = Py::new(py, Drain { queue: Arc::downgrade(&queue) })?;
        // The only kind of signal where there are no descriptors (Windows).
        #[allow(irrefutable_let_patterns)]
        if let Signal::Threadsafe(poster) = &queue.signal {
            let event_loop = event_loop.clone_ref(py);
            // Just made, so unset: the result says nothing.
            let _ = poster.set(Arc::new(Poster { event_loop, drain }));
        }
        Ok(queue)
    }

    /// A queue signalling through a descriptor (`EventFd` or `Pipe`).
    #[cfg(unix)]
    pub fn with_fd(wakeup: Wakeup) -> Result<Self> {
        let failed = |what: &str, e: std::io::Error| Error::Internal(format!("{what} failed: {e}"));
        let signal = match wakeup {
            #[cfg(target_os = "linux")]
            Wakeup::EventFd => Signal::EventFd(ffi::eventfd().map_err(|e| failed("eventfd", e))?),
            Wakeup::Pipe => {
                let (read, write) = ffi::pipe().map_err(|e| failed("pipe", e))?;
                Signal::Pipe { read, write }
            }
            other => return Err(unavailable(other)),
        };
        Ok(Self::with_signal(signal))
    }

    /// How this queue wakes its loop.
    pub fn wakeup(&self) -> Wakeup {
        match self.signal {
            #[cfg(target_os = "linux")]
            Signal::EventFd(_) => Wakeup::EventFd,
            #[cfg(unix)]
            Signal::Pipe { .. } => Wakeup::Pipe,
            Signal::Threadsafe(_) => Wakeup::Threadsafe,
        }
    }

    pub(super) fn push(&self, slot: Arc<Slot>) {
        let was_empty = {
            let mut ready = lock(&self.ready);
            let was_empty = ready.is_empty();
            ready.push(slot);
            was_empty
        };
        // Signalled outside the lock: the threadsafe signal waits for the GIL.
        if was_empty {
            self.signal();
        }
    }

    fn signal(&self) {
        match &self.signal {
            #[cfg(target_os = "linux")]
            Signal::EventFd(fd) => ffi::eventfd_signal(fd.as_raw_fd()),
            #[cfg(unix)]
            Signal::Pipe { write, .. } => ffi::pipe_signal(write.as_raw_fd()),
            Signal::Threadsafe(poster) => {
                let Some(poster) = poster.get() else { return };
                if self.posted.swap(true, Ordering::AcqRel) {
                    return;
                }
                let poster = Arc::clone(poster);
                // Posted from tokio's blocking pool, not from here: waiting here for the GIL
                // (up to the interpreter's switch interval while the loop runs Python) would
                // stall the I/O thread, and every reply behind it.
                match crate::runtime::get() {
                    Ok(runtime) => drop(runtime.spawn_blocking(move || poster.post())),
                    Err(_) => poster.post(),
                }
            }
        }
    }

    /// The descriptor the loop watches, if this queue signals through one.
    #[cfg(unix)]
    pub fn fd(&self) -> Option<RawFd> {
        match &self.signal {
            #[cfg(target_os = "linux")]
            Signal::EventFd(fd) => Some(fd.as_raw_fd()),
            Signal::Pipe { read, .. } => Some(read.as_raw_fd()),
            Signal::Threadsafe(_) => None,
        }
    }

    /// Take every queued slot.
    pub fn take_ready(&self) -> Vec<Arc<Slot>> {
        // Reset the signal before taking the queue: a push racing with us either lands in what
        // we take, or finds the queue empty and signals again.
        match &self.signal {
            #[cfg(target_os = "linux")]
            Signal::EventFd(fd) => ffi::eventfd_reset(fd.as_raw_fd()),
            #[cfg(unix)]
            Signal::Pipe { read, .. } => ffi::pipe_drain(read.as_raw_fd()),
            // Each post is one call of `drain`: nothing to reset.
            Signal::Threadsafe(_) => {}
        }
        std::mem::take(&mut *lock(&self.ready))
    }

    /// On the loop's thread, from inside a running task: schedule the wake-ups queued now
    /// rather than when the posted drain runs (which needs the GIL handed over). Only the
    /// threadsafe signal gains: a descriptor is read by the loop before it runs anything else.
    pub fn help_drain(&self, event_loop: &Bound<'_, PyAny>) {
        if matches!(self.signal, Signal::Threadsafe(_)) && !lock(&self.ready).is_empty() {
            for slot in std::mem::take(&mut *lock(&self.ready)) {
                if let Some(waker) = slot.take_waker() {
                    // Refused only by a closed loop, whose tasks will not run again.
                    let _ = waker.schedule(event_loop);
                }
            }
        }
    }

    /// Wake every parked task whose command has finished: call its done-callbacks (asyncio's
    /// task wake-up) here, as the loop would call their handles, without a handle each. If one
    /// raises, the slots not yet woken go back to the queue (signalled again, so the next
    /// drain wakes them) and the error goes to the loop, which reports it as a failing
    /// callback's.
    pub fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut ready = self.take_ready().into_iter();
        while let Some(slot) = ready.next() {
            if let Some(waker) = slot.take_waker() {
                if let Err(err) = waker.wake(py) {
                    let rest: Vec<Arc<Slot>> = ready.collect();
                    if !rest.is_empty() {
                        let was_empty = {
                            let mut queued = lock(&self.ready);
                            let was_empty = queued.is_empty();
                            queued.splice(0..0, rest);
                            was_empty
                        };
                        if was_empty {
                            self.signal();
                        }
                    }
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Count a command sent and not yet consumed by its awaitable.
    pub fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a command's awaitable gone.
    pub fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Commands of this loop sent and not yet consumed by their awaitables.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
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
        self.spin_window_given(own, crate::idle::core_free(1))
    }

    /// `spin_window_ns`, given whether the host has a core to spare.
    fn spin_window_given(&self, own: usize, core_free: bool) -> u64 {
        if self.in_flight.load(Ordering::Relaxed) > own {
            // Other commands are in flight: their replies arrive in batches, one eventfd
            // wake-up serves them all, and polling would only burn the loop's time.
            return 0;
        }
        let latency = self.latency_ns.load(Ordering::Relaxed);
        if !core_free || latency > MAX_SPIN_NS {
            // No core to spare (polling takes it from the work that answers), or replies
            // slower than any poll (a network in between): park at once.
            return 0;
        }
        // Poll a little past the typical latency; beyond that the reply is late anyway.
        (latency * 3 / 2).min(MAX_SPIN_NS)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::proto::Reply;

    /// Every descriptor-based wake-up this platform has.
    fn fd_modes() -> Vec<Wakeup> {
        let mut modes = vec![Wakeup::Pipe];
        if cfg!(target_os = "linux") {
            modes.push(Wakeup::EventFd);
        }
        modes
    }

    /// How many times the queue's descriptor was signalled since the last read (and reads
    /// it): `None` if not at all. An eventfd counts; a pipe holds one byte per signal.
    fn signals(queue: &LoopQueue) -> Option<u64> {
        let mut file = std::fs::File::from(dup(queue.fd().unwrap()));
        let mut buf = [0u8; 8];
        match queue.wakeup() {
            Wakeup::EventFd => file.read_exact(&mut buf).ok().map(|()| u64::from_ne_bytes(buf)),
            _ => file.read(&mut buf).ok().and_then(|n| u64::try_from(n).ok()),
        }
    }

    /// A duplicate of the queue's descriptor, closed when dropped.
    fn dup(fd: RawFd) -> OwnedFd {
        // SAFETY: `fd` is open for the duration of this borrow (the queue owns it).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().unwrap()
    }

    #[test]
    fn push_wakes_the_loop_only_when_the_queue_turns_non_empty() {
        for mode in fd_modes() {
            let queue = LoopQueue::with_fd(mode).unwrap();
            assert_eq!(queue.wakeup(), mode);
            assert_eq!(signals(&queue), None, "{mode:?}");
            for _ in 0..3 {
                queue.push(Slot::new());
            }
            assert_eq!(signals(&queue), Some(1), "{mode:?}");
            assert_eq!(queue.take_ready().len(), 3);
            queue.push(Slot::new());
            assert_eq!(signals(&queue), Some(1), "{mode:?}");
        }
    }

    #[test]
    fn take_ready_drains_the_queue_and_resets_the_signal() {
        for mode in fd_modes() {
            let queue = LoopQueue::with_fd(mode).unwrap();
            queue.push(Slot::new());
            queue.push(Slot::new());
            assert_eq!(queue.take_ready().len(), 2);
            assert_eq!(signals(&queue), None, "{mode:?}");
            assert!(queue.take_ready().is_empty());
        }
    }

    #[test]
    fn wakeup_names_parse_back() {
        for mode in [Wakeup::EventFd, Wakeup::Pipe, Wakeup::Threadsafe] {
            assert_eq!(Wakeup::parse(mode.name()).unwrap(), Some(mode));
        }
        assert_eq!(Wakeup::parse("").unwrap(), None);
        assert_eq!(Wakeup::parse(" pipe ").unwrap(), Some(Wakeup::Pipe));
    }

    #[test]
    fn an_outcome_nobody_parked_on_is_kept_not_queued() {
        let queue = LoopQueue::with_fd(Wakeup::Pipe).unwrap();
        let unparked = Slot::new();
        unparked.complete(Ok(Reply::Okay), &queue);
        assert!(queue.take_ready().is_empty());
        assert_eq!(unparked.take().map(|r| r.ok()), Some(Some(Reply::Okay)));
        assert!(unparked.take().is_none());
    }

    #[test]
    fn no_polling_while_other_commands_are_in_flight() {
        let queue = LoopQueue::with_fd(Wakeup::Pipe).unwrap();
        queue.started();
        assert_eq!(queue.spin_window_given(1, true), INITIAL_LATENCY_NS * 3 / 2);
        queue.started();
        assert_eq!(queue.spin_window_given(1, true), 0);
        // Two sent together by one caller: each may poll.
        assert_eq!(queue.spin_window_given(2, true), INITIAL_LATENCY_NS * 3 / 2);
        queue.finished();
        assert_eq!(queue.spin_window_given(1, true), INITIAL_LATENCY_NS * 3 / 2);
        // Without a free core, never.
        assert_eq!(queue.spin_window_given(1, false), 0);
    }

    #[test]
    fn the_latency_average_is_bounded() {
        let queue = LoopQueue::with_fd(Wakeup::Pipe).unwrap();
        for _ in 0..200 {
            queue.record_latency(u64::MAX);
        }
        assert!(queue.latency_ns.load(Ordering::Relaxed) <= 4 * MAX_SPIN_NS);
        // Replies slower than any poll: none.
        assert_eq!(queue.spin_window_given(0, true), 0);
        for _ in 0..200 {
            queue.record_latency(1_000);
        }
        assert!(queue.spin_window_given(0, true) < 2_000, "{}", queue.spin_window_given(0, true));
    }
}
