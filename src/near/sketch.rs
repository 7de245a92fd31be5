//! Admission by use (OPTIONS["NEAR_CACHE"]["ADMIT_AFTER_READS"]): how often each key was read
//! and written lately, estimated in bounded memory, so that only keys read often enough, and
//! far more often than they are written, are kept (and tracked by the server).
//!
//! Two count-min sketches (reads and writes) of `DEPTH` rows of byte counters over the same
//! slots, with conservative update (an event raises only the counters at the key's current
//! estimate, which keeps collisions from inflating it) and aging: after `width` reads every
//! counter is halved, so a key must be read again to stay frequent, and what was hot an hour
//! ago weighs nothing now. A key read once among `width` others is taken for a frequent one
//! only when it collides in every row, which at one read per counter on average is well under
//! one in a hundred.
//!
//! Writes count only for keys not in use here (a write by this process, or another client's
//! that the server tells of, of a key not served since it was filled): a key written about as
//! often as it is read (a view that writes a key and reads it back, a get_many of keys a
//! set_many just wrote, from many threads at once) would be filled and dropped again and
//! again, and is better read from the server. `READS_PER_WRITE` says how much more often a
//! key must be read than written to be kept.
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

/// A key is kept only when read at least this many times as often as written (lately).
pub const READS_PER_WRITE: u16 = 4;

/// Read and write frequencies of keys.
pub struct Sketch {
    counters: Box<[AtomicU8]>,
    writes: Box<[AtomicU8]>,
    /// Counters per row, a power of two.
    width: usize,
    /// Reads counted since the last halving.
    reads: AtomicU64,
    /// Set while one caller halves.
    halving: AtomicBool,
}

impl Sketch {
    /// A sketch sized for a store of `max_bytes` (a counter of each kind per 256 bytes,
    /// within bounds: from 32 KiB to 16 MiB of counters).
    pub fn for_bytes(max_bytes: usize) -> Self {
        let width = (max_bytes / 256).clamp(MIN_WIDTH, MAX_WIDTH).next_power_of_two();
        Sketch {
            counters: (0..width * DEPTH).map(|_| AtomicU8::new(0)).collect(),
            writes: (0..width * DEPTH).map(|_| AtomicU8::new(0)).collect(),
            width,
            reads: AtomicU64::new(0),
            halving: AtomicBool::new(false),
        }
    }

    /// The bytes its counters take.
    pub fn bytes(&self) -> usize {
        self.counters.len() + self.writes.len()
    }

    /// The counters of `key`, one per row.
    fn slots(&self, key: &[u8]) -> [usize; DEPTH] {
        let h = XxHash3_64::oneshot(key);
        // Rows indexed by h1 + i * h2 (double hashing), h2 odd so that no row repeats another.
        let (h1, h2) = (h as usize, ((h >> 32) as usize) | 1);
        let mask = self.width - 1;
        std::array::from_fn(|i| i * self.width + (h1.wrapping_add(i.wrapping_mul(h2)) & mask))
    }

    /// Count one read of `key`: whether it is now read often enough to be kept (at least
    /// `after` reads lately, and `READS_PER_WRITE` times its writes).
    pub fn read(&self, key: &[u8], after: u8) -> bool {
        let slots = self.slots(key);
        let reads = bump(&self.counters, &slots).saturating_add(1);
        if self.reads.fetch_add(1, Ordering::Relaxed) + 1 >= self.width as u64 {
            self.age();
        }
        reads >= after && u16::from(reads) >= READS_PER_WRITE * u16::from(min(&self.writes, &slots))
    }

    /// Count one write of `key` (while it was not in use here).
    pub fn written(&self, key: &[u8]) {
        bump(&self.writes, &self.slots(key));
    }

    /// Estimated reads of `key` (for tests).
    #[cfg(test)]
    fn estimate(&self, key: &[u8]) -> u8 {
        min(&self.counters, &self.slots(key))
    }

    /// Count one read of `key` (for tests): its estimated reads, this one included.
    #[cfg(test)]
    fn record(&self, key: &[u8]) -> u8 {
        self.read(key, u8::MAX);
        self.estimate(key)
    }

    /// Halve every counter (one caller at a time; the others go on counting).
    fn age(&self) {
        if self.halving.swap(true, Ordering::Acquire) {
            return;
        }
        self.reads.store(0, Ordering::Relaxed);
        for c in self.counters.iter().chain(self.writes.iter()) {
            let v = c.load(Ordering::Relaxed);
            if v != 0 {
                c.store(v / 2, Ordering::Relaxed);
            }
        }
        self.halving.store(false, Ordering::Release);
    }
}

/// The estimate of the key at `slots` in `counters`: the least of its counters.
fn min(counters: &[AtomicU8], slots: &[usize; DEPTH]) -> u8 {
    slots.iter().map(|&s| counters[s].load(Ordering::Relaxed)).min().unwrap_or(0)
}

/// Count one event of the key at `slots`: raise those of its counters at its estimate
/// (conservative update); the estimate before.
fn bump(counters: &[AtomicU8], slots: &[usize; DEPTH]) -> u8 {
    let seen = min(counters, slots);
    if seen < u8::MAX {
        for &s in slots {
            let c = &counters[s];
            if c.load(Ordering::Relaxed) == seen {
                c.store(seen + 1, Ordering::Relaxed);
            }
        }
    }
    seen
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
    fn a_key_written_about_as_often_as_read_is_not_kept() {
        let s = Sketch::for_bytes(0);
        // Read twice: kept at 2 reads; written once per read, never.
        assert!(!s.read(b"read", 2));
        assert!(s.read(b"read", 2));
        for n in 0..20 {
            s.written(b"written");
            assert!(!s.read(b"written", 2), "read {n}");
            assert!(!s.read(b"written", 2), "read {n} again");
        }
        // Far more reads than writes: kept from the fourth read.
        s.written(b"mostly");
        let kept = (1..=10).find(|_| s.read(b"mostly", 2));
        assert_eq!(kept, Some(4));
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
        assert_eq!(Sketch::for_bytes(usize::MAX).bytes(), 2 * MAX_WIDTH * DEPTH);
        assert_eq!(Sketch::for_bytes(32 << 20).bytes(), 2 * (1 << 17) * DEPTH);
    }
}
