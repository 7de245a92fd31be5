//! Where a command's outcome goes: an event loop's slot (async callers), or a blocked thread
//! (sync callers sharing the multiplexed connection).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::bridge::{LoopQueue, Slot};
use crate::errors::{Error, Result};
use crate::proto::Reply;

/// Who waits for one command.
pub enum Done {
    /// An awaitable: the slot, and the loop queue that wakes its task.
    Loop { slot: Arc<Slot>, queue: Arc<LoopQueue> },
    /// A thread blocked in `ThreadWait::wait`.
    Thread(Arc<ThreadWait>),
    /// Nobody: the replies of a handshake sent without waiting for them.
    Discard,
}

impl Done {
    /// Hand over the outcome.
    pub fn complete(self, outcome: Result<Reply>) {
        match self {
            Done::Loop { slot, queue } => slot.complete(outcome, &queue),
            Done::Thread(wait) => wait.complete(outcome),
            Done::Discard => {}
        }
    }
}

/// A sync caller's wait for its reply (the GIL released meanwhile).
#[derive(Default)]
pub struct ThreadWait {
    outcome: Mutex<Option<Result<Reply>>>,
    ready: Condvar,
}

impl ThreadWait {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Result<Reply>>> {
        self.outcome.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn complete(&self, outcome: Result<Reply>) {
        let mut slot = self.lock();
        if slot.is_none() {
            *slot = Some(outcome);
            self.ready.notify_one();
        }
    }

    /// Whether the outcome has arrived.
    pub fn is_done(&self) -> bool {
        self.lock().is_some()
    }

    /// Block until the outcome arrives, or `limit` passes (the connection's own deadlines
    /// answer first: this bound only guards against a layer below misbehaving).
    pub fn wait(&self, limit: Duration, addr: &str) -> Result<Reply> {
        let deadline = Instant::now() + limit;
        let mut slot = self.lock();
        loop {
            if let Some(outcome) = slot.take() {
                return outcome;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!("Redis at {addr} did not answer in time")));
            }
            slot = self
                .ready
                .wait_timeout(slot, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn a_thread_gets_the_outcome_completed_from_another() {
        let wait = Arc::new(ThreadWait::default());
        let other = Arc::clone(&wait);
        let handle = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            Done::Thread(other).complete(Ok(Value::Int(7)));
        });
        assert_eq!(wait.wait(Duration::from_secs(5), "h:1").ok(), Some(Value::Int(7)));
        handle.join().ok();
    }

    #[test]
    fn only_the_first_outcome_counts_and_a_missing_one_times_out() {
        let wait = ThreadWait::default();
        wait.complete(Ok(Value::Int(1)));
        wait.complete(Ok(Value::Int(2)));
        assert_eq!(wait.wait(Duration::from_millis(1), "h:1").ok(), Some(Value::Int(1)));
        let never = ThreadWait::default();
        assert!(matches!(never.wait(Duration::from_millis(5), "h:1"), Err(Error::Timeout(_))));
    }
}
