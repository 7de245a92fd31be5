//! Admission by use (OPTIONS["NEAR_CACHE"]["ADMIT_AFTER_READS"]): how often each key was read
//! lately, estimated in bounded memory, so that only keys read often enough are kept (and
//! tracked by the server).
//!
//! A count-min sketch of `DEPTH` rows of byte counters, with conservative update (a read
//! raises only the counters at the key's current estimate, which keeps collisions from
//! inflating it) and aging: after `width` reads every counter is halved, so a key must be read
//! again to stay frequent, and what was hot an hour ago weighs nothing now. A key read once
//! among `width` others is taken for a frequent one only when it collides in every row, which
//! at one read per counter on average is well under one in a hundred.
//!
//! A key written (by this process, or by another one as the server tells) while it was not
//! in use is reset (`reset`): a key written about as often as it is read would be filled and
//! dropped again and again, and is better read from the server.
//!
//! Counters are relaxed atomics: concurrent reads of one key may count once, and a halving
//! racing a count may lose it; an estimate is all admission needs. Nothing here takes a lock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use twox_hash::XxHash3_64;

/// Rows, each indexed by its own hash of the key.
const DEPTH: usize = 4;
/// Counters per row at the least and at the most.
const MIN_WIDTH: usize = 1 << 12;
const MAX_WIDTH: usize = 1 << 21;

/// Read frequencies of keys.
pub struct Sketch {
    counters: Box<[AtomicU8]>,
    /// Counters per row, a power of two.
    width: usize,
    /// Reads counted since the last halving.
    reads: AtomicU64,
    /// Set while one caller halves.
    halving: AtomicBool,
}

impl Sketch {
    /// A sketch sized for a store of `max_bytes` (a counter per 128 bytes, within bounds:
    /// from 16 KiB to 8 MiB of counters).
    pub fn for_bytes(max_bytes: usize) -> Self {
        let width = (max_bytes / 128).clamp(MIN_WIDTH, MAX_WIDTH).next_power_of_two();
        Sketch {
            counters: (0..width * DEPTH).map(|_| AtomicU8::new(0)).collect(),
            width,
            reads: AtomicU64::new(0),
            halving: AtomicBool::new(false),
        }
    }

    /// The bytes its counters take.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    /// The counters of `key`, one per row.
    fn slots(&self, key: &[u8]) -> [usize; DEPTH] {
        let h = XxHash3_64::oneshot(key);
        // Rows indexed by h1 + i * h2 (double hashing), h2 odd so that no row repeats another.
        let (h1, h2) = (h as usize, ((h >> 32) as usize) | 1);
        let mask = self.width - 1;
        std::array::from_fn(|i| i * self.width + (h1.wrapping_add(i.wrapping_mul(h2)) & mask))
    }

    /// Count one read of `key`; its estimated reads since it was last forgotten, this one
    /// included.
    pub fn record(&self, key: &[u8]) -> u8 {
        let slots = self.slots(key);
        let seen = slots.iter().map(|&s| self.counters[s].load(Ordering::Relaxed)).min();
        let seen = seen.unwrap_or(0);
        if seen < u8::MAX {
            for &s in &slots {
                let c = &self.counters[s];
                if c.load(Ordering::Relaxed) == seen {
                    c.store(seen + 1, Ordering::Relaxed);
                }
            }
        }
        if self.reads.fetch_add(1, Ordering::Relaxed) + 1 >= self.width as u64 {
            self.age();
        }
        seen.saturating_add(1)
    }

    /// Forget the reads of `key` counted so far (what it adds to its counters, at most):
    /// it was written, or invalidated, before it was of use.
    pub fn reset(&self, key: &[u8]) {
        let slots = self.slots(key);
        let seen = slots.iter().map(|&s| self.counters[s].load(Ordering::Relaxed)).min();
        let seen = seen.unwrap_or(0);
        if seen > 0 {
            for &s in &slots {
                let c = &self.counters[s];
                c.store(c.load(Ordering::Relaxed).saturating_sub(seen), Ordering::Relaxed);
            }
        }
    }

    /// Estimated reads of `key` (for tests).
    #[cfg(test)]
    fn estimate(&self, key: &[u8]) -> u8 {
        let slots = self.slots(key);
        slots.iter().map(|&s| self.counters[s].load(Ordering::Relaxed)).min().unwrap_or(0)
    }

    /// Halve every counter (one caller at a time; the others go on counting).
    fn age(&self) {
        if self.halving.swap(true, Ordering::Acquire) {
            return;
        }
        self.reads.store(0, Ordering::Relaxed);
        for c in self.counters.iter() {
            let v = c.load(Ordering::Relaxed);
            if v != 0 {
                c.store(v / 2, Ordering::Relaxed);
            }
        }
        self.halving.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_counted_per_read_and_others_stay_apart() {
        let s = Sketch::for_bytes(0);
        assert_eq!(s.width, MIN_WIDTH);
        for n in 1..=5 {
            assert_eq!(s.record(b"hot"), n);
        }
        // A thousand keys read once each: in a sketch of 4,096 per row, next to none looks
        // like it was read twice, and none three times.
        let twice = (0..1000).filter(|i| s.record(format!("cold:{i}").as_bytes()) >= 2).count();
        assert!(twice < 10, "{twice} of 1,000 keys read once looked read twice");
        assert!(s.estimate(b"hot") >= 5);
    }

    #[test]
    fn a_reset_forgets_a_keys_reads_only() {
        let s = Sketch::for_bytes(0);
        for _ in 0..3 {
            s.record(b"written");
            s.record(b"read");
        }
        s.reset(b"written");
        assert_eq!((s.estimate(b"written"), s.estimate(b"read")), (0, 3));
        assert_eq!(s.record(b"written"), 1);
    }

    #[test]
    fn counts_halve_after_a_width_of_reads() {
        let s = Sketch::for_bytes(0);
        for _ in 0..40 {
            s.record(b"hot");
        }
        assert_eq!(s.estimate(b"hot"), 40);
        // The rest of a period's reads, on other keys: every count is halved once.
        for i in 0..(MIN_WIDTH - 40) {
            s.record(format!("k{i}").as_bytes());
        }
        assert_eq!(s.estimate(b"hot"), 20);
        assert_eq!(s.reads.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn counts_saturate_and_memory_is_bounded() {
        let s = Sketch::for_bytes(0);
        for _ in 0..300 {
            s.record(b"k");
        }
        assert_eq!(s.estimate(b"k"), u8::MAX);
        assert_eq!(Sketch::for_bytes(usize::MAX).bytes(), MAX_WIDTH * DEPTH);
        assert_eq!(Sketch::for_bytes(32 << 20).bytes(), (1 << 18) * DEPTH);
    }
}
