//! The process-wide tokio runtime, created on first use and rebuilt after `fork()`.
//!
//! A forked child inherits the parent's memory but none of its threads, so the parent's runtime
//! (and every connection driven by it) is dead weight in the child: dropping it there hangs.
//! We never drop it: a child sees a new fork generation and leaks the old one.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

use tokio::runtime::{Builder, Runtime};

use crate::errors::{Error, Result};
use crate::ffi;

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX);
/// Which fork generation holds the build lock (`FREE` when none). A lock word rather than a
/// `Mutex`: a child must not wait for a build that one of its parent's threads was running at
/// the fork, yet its own threads must wait for each other (two builders would each start an
/// I/O thread, and the loser's would run for ever).
static BUILDING: AtomicU64 = AtomicU64::new(FREE);
const FREE: u64 = u64::MAX;
static AT_FORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Count forks from now on. Cheap to call repeatedly.
pub fn watch_forks() {
    AT_FORK.call_once(|| ffi::on_fork_in_child(after_fork_in_child));
}

/// Which process image we are in: bumps in a child after every `fork()`.
#[inline]
pub fn generation() -> u64 {
    FORK_GENERATION.load(Ordering::Acquire)
}

/// The runtime for this process, built on first use.
pub fn get() -> Result<&'static Runtime> {
    watch_forks();
    let generation = generation();
    let current = RUNTIME.load(Ordering::Acquire);
    if !current.is_null() && RUNTIME_GENERATION.load(Ordering::Acquire) == generation {
        // SAFETY: the pointer came from `Box::leak` in `build` and runtimes are never freed,
        // so it is valid for 'static; only shared references are ever made from it.
        return Ok(unsafe { &*current });
    }
    build(generation)
}

/// This generation's runtime, if it is built.
fn built(generation: u64) -> Option<&'static Runtime> {
    let current = RUNTIME.load(Ordering::Acquire);
    if !current.is_null() && RUNTIME_GENERATION.load(Ordering::Acquire) == generation {
        // SAFETY: as in `get`: a leaked, never-freed runtime.
        return Some(unsafe { &*current });
    }
    None
}

/// Holds `BUILDING` for one generation; frees it on drop (also when the build fails).
struct BuildLock(u64);

impl BuildLock {
    /// Take the lock for `generation`, or return the runtime another thread of it built while
    /// this one waited. A lock word left by an older generation was the parent's: take it over.
    fn take(generation: u64) -> std::result::Result<BuildLock, &'static Runtime> {
        loop {
            let held = BUILDING.load(Ordering::Acquire);
            if held != generation {
                if BUILDING
                    .compare_exchange(held, generation, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Ok(BuildLock(generation));
                }
                continue;
            }
            if let Some(runtime) = built(generation) {
                return Err(runtime);
            }
            // A build is a thread spawn away from done: microseconds, once per process.
            std::thread::yield_now();
        }
    }
}

impl Drop for BuildLock {
    fn drop(&mut self) {
        let _ = BUILDING.compare_exchange(self.0, FREE, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cold]
fn build(generation: u64) -> Result<&'static Runtime> {
    let _lock = match BuildLock::take(generation) {
        Ok(lock) => lock,
        Err(runtime) => return Ok(runtime),
    };
    if let Some(runtime) = built(generation) {
        return Ok(runtime);
    }
    // One I/O thread drives every connection: a current-thread scheduler on a thread of its own
    // costs less per task than the work-stealing one, and one thread is all the sockets need.
    let runtime = Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the I/O runtime: {e}")))?;
    let leaked: &'static Runtime = Box::leak(Box::new(runtime));
    std::thread::Builder::new()
        .name("redoxide-io".into())
        .spawn(move || leaked.block_on(std::future::pending::<()>()))
        .map_err(|e| Error::Internal(format!("cannot start the I/O thread: {e}")))?;
    RUNTIME.store(std::ptr::from_ref(leaked).cast_mut(), Ordering::Release);
    RUNTIME_GENERATION.store(generation, Ordering::Release);
    Ok(leaked)
}

/// State a forked child must not inherit: each fork generation gets a `T` of its own, made
/// (by `Default`) on first use in it. In a child the parent's is leaked, never locked nor
/// dropped: a lock that one of the parent's threads held at the fork would never be released
/// there, and its connections' sockets are the parent's.
pub struct PerFork<T> {
    /// Never null; replaced ones are leaked.
    current: AtomicPtr<Generation<T>>,
    /// Send and Sync as `T` is (an `AtomicPtr` alone is both whatever it points to).
    _owns: std::marker::PhantomData<T>,
}

struct Generation<T> {
    generation: u64,
    value: T,
}

impl<T: Default> PerFork<T> {
    pub fn new() -> Self {
        PerFork {
            current: AtomicPtr::new(Self::boxed(generation())),
            _owns: std::marker::PhantomData,
        }
    }

    fn boxed(generation: u64) -> *mut Generation<T> {
        Box::into_raw(Box::new(Generation { generation, value: T::default() }))
    }

    /// This generation's value.
    pub fn get(&self) -> &T {
        self.get_in(generation())
    }

    fn get_in(&self, now: u64) -> &T {
        let mut ptr = self.current.load(Ordering::Acquire);
        loop {
            // SAFETY: `current` always holds a pointer from `boxed`; one that is replaced is
            // leaked and the last one is freed only in `drop` (with `&mut self`: no borrow of
            // it is left), so it lives as long as `self`.
            let current = unsafe { &*ptr };
            if current.generation == now {
                return &current.value;
            }
            let fresh = Self::boxed(now);
            match self.current.compare_exchange(ptr, fresh, Ordering::AcqRel, Ordering::Acquire) {
                // SAFETY: as above: `fresh` is now the current one.
                Ok(_) => return unsafe { &(*fresh).value },
                Err(newer) => {
                    // Another thread of the child made one first: ours was never shared.
                    // SAFETY: `fresh` came from `Box::into_raw` and nobody else has seen it.
                    drop(unsafe { Box::from_raw(fresh) });
                    ptr = newer;
                }
            }
        }
    }
}

impl<T: Default> Default for PerFork<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for PerFork<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `boxed`, and `&mut self` means nobody borrows it.
        let current = unsafe { Box::from_raw(*self.current.get_mut()) };
        if current.generation != generation() {
            std::mem::forget(current); // the parent's: see the type's documentation
        }
    }
}

#[cfg(test)]
mod per_fork_tests {
    use super::PerFork;

    #[test]
    fn a_new_generation_gets_a_fresh_value_and_keeps_it() {
        let cell: PerFork<std::sync::Mutex<Vec<u32>>> = PerFork::new();
        let now = super::generation();
        cell.get_in(now).lock().unwrap().push(1);
        assert_eq!(*cell.get_in(now).lock().unwrap(), [1]);
        // As after a fork, with the parent's lock held by a thread the child does not have.
        let held = cell.get_in(now).lock().unwrap();
        assert!(cell.get_in(now + 1).lock().unwrap().is_empty());
        cell.get_in(now + 1).lock().unwrap().push(2);
        assert_eq!(*cell.get_in(now + 1).lock().unwrap(), [2]);
        std::mem::forget(held);
    }
}
