//! How long a blocking caller polls for its reply before sleeping in the kernel.
//!
//! A reply that comes back within a few tens of microseconds is picked up without the sleep
//! and wake-up of a blocking read, which on a host with idle CPUs costs more than the round
//! trip itself. The budget adapts to the replies seen lately and stops polling while replies
//! keep arriving too late for it to pay.

use std::time::Duration;

/// Longest a caller polls for its reply before sleeping in the kernel.
pub const MAX_SPIN: Duration = Duration::from_micros(150);

/// How a caller waits for its reply before blocking in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll on the CPU for a reply due within tens of microseconds (one server).
    Spin,
    /// Poll, but give the CPU away between polls: while several servers work on a fan-out,
    /// they (on a small host) need the cores more than the waiting thread does.
    Yield,
}

/// One connection's polling budget.
#[derive(Debug)]
pub struct Spin {
    /// Recent round trips, an exponentially weighted average.
    typical: Duration,
    /// Calls in a row whose reply came only after polling gave up.
    misses: u32,
    calls: u32,
}

impl Default for Spin {
    fn default() -> Self {
        Spin { typical: Duration::from_micros(40), misses: 0, calls: 0 }
    }
}

impl Spin {
    /// How long to poll for this call's reply (zero: block at once).
    pub fn window(&mut self) -> Duration {
        self.window_with(|| crate::idle::core_free(0))
    }

    /// `window`, given whether the host has a core to spare.
    #[cfg(test)]
    fn window_given(&mut self, core_free: bool) -> Duration {
        self.window_with(|| core_free)
    }

    /// `window`, asking `core_free` only when the connection's own record allows polling.
    fn window_with(&mut self, core_free: impl FnOnce() -> bool) -> Duration {
        self.calls = self.calls.wrapping_add(1);
        let probe = self.calls.is_multiple_of(64);
        // After repeated misses, or while replies take longer than polling lasts (a network
        // in between), poll no more, except now and then to notice faster replies.
        if (self.misses >= 4 || self.typical > MAX_SPIN) && !probe {
            return Duration::ZERO;
        }
        // With no core to spare, polling takes the CPU from the work that would answer.
        if !core_free() {
            return Duration::ZERO;
        }
        (self.typical * 2).min(MAX_SPIN)
    }

    /// Learn from a call that polled: how long its reply took, and whether polling caught it.
    pub fn record(&mut self, elapsed: Duration, caught: bool) {
        self.typical = (self.typical * 7 + elapsed.min(MAX_SPIN * 4)) / 8;
        self.misses = if caught { 0 } else { self.misses.saturating_add(1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_window_follows_recent_round_trips_within_a_bound() {
        let mut spin = Spin::default();
        assert_eq!(spin.window_given(true), 80 * US);
        for _ in 0..64 {
            spin.record(10 * US, true);
        }
        assert!(spin.window_given(true) <= 22 * US, "{spin:?}");
        for _ in 0..64 {
            spin.record(MAX_SPIN, true);
        }
        assert_eq!(spin.window_given(true), MAX_SPIN);
    }

    #[test]
    fn no_polling_without_a_free_core_or_behind_a_slow_network() {
        let mut spin = Spin::default();
        assert_eq!(spin.window_given(false), Duration::ZERO);
        for _ in 0..64 {
            spin.record(Duration::from_millis(2), true);
        }
        let polled = (0..128).filter(|_| !spin.window_given(true).is_zero()).count();
        assert_eq!(polled, 2, "only the occasional probe");
    }

    #[test]
    fn repeated_misses_stop_polling_except_for_an_occasional_probe() {
        let mut spin = Spin::default();
        for _ in 0..4 {
            spin.record(MAX_SPIN, false);
        }
        let polled = (0..128).filter(|_| !spin.window_given(true).is_zero()).count();
        assert_eq!(polled, 2);
        // Meanwhile the host's load is not even read (only at the probes).
        let asked = std::cell::Cell::new(0);
        for _ in 0..63 {
            spin.window_with(|| {
                asked.set(asked.get() + 1);
                true
            });
        }
        assert_eq!(asked.get(), 0);
        // A caught reply resumes polling.
        spin.record(20 * US, true);
        assert!(!spin.window_given(true).is_zero());
    }
}
