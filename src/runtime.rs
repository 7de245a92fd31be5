//! The process-wide tokio runtime, created on first use and rebuilt after `fork()`.
//!
//! A forked child inherits the parent's memory but none of its threads, so the parent's runtime
//! (and every connection driven by it) is dead weight in the child: dropping it there hangs.
//! We never drop it: a child sees a new fork generation and leaks the old one.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use tokio::runtime::{Builder, Runtime};

use crate::errors::{Error, Result};
use crate::ffi;

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX);
static BUILD_LOCK: Mutex<()> = Mutex::new(());
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

#[cold]
fn build(generation: u64) -> Result<&'static Runtime> {
    // A lock inherited locked from the parent would deadlock; in that case build unlocked.
    let _lock = BUILD_LOCK.try_lock().ok();
    let current = RUNTIME.load(Ordering::Acquire);
    if !current.is_null() && RUNTIME_GENERATION.load(Ordering::Acquire) == generation {
        // SAFETY: as in `get`: a leaked, never-freed runtime.
        return Ok(unsafe { &*current });
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
