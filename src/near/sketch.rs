//! Admission by use (OPTIONS["NEAR_CACHE"]["ADMIT_AFTER_READS"]): how often each key was read
//! and written lately, estimated in bounded memory, so that only keys read often enough, and
//! far more often than they are written, are kept (and tracked by the server).
//!
//! A count-min sketch of reads and one of writes, `DEPTH` rows of byte counters each, laid
//! out in blocks of one cache line that hold every counter of the keys they hold (`Block`),
//! with conservative update (an event raises only the counters at the key's current
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

/// Rows: a key has a counter of each kind in each.
const DEPTH: usize = 4;
/// Counters of each kind per row in a block.
const PER_ROW: usize = 8;
/// Where a block's write counters start (its read counters are before).
const WRITES: usize = DEPTH * PER_ROW;
/// Blocks at the least and at the most (32 KiB and 16 MiB).
const MIN_BLOCKS: usize = 1 << 9;
const MAX_BLOCKS: usize = 1 << 18;

/// A key is kept only when read at least this many times as often as written (lately).
pub const READS_PER_WRITE: u16 = 4;

/// One cache line: every counter of the keys it holds (a key's block is picked by its hash,
/// and one counter of each kind in each row by more bits of it), so that counting a key's
/// read or write touches one line of memory, not one per row.
#[repr(align(64))]
struct Block([AtomicU8; 2 * WRITES]);

/// Read and write frequencies of keys.
pub struct Sketch {
    blocks: Box<[Block]>,
    /// Reads counted since the last halving.
    reads: AtomicU64,
    /// Reads between halvings: as many as a row has counters.
    period: u64,
    /// Set while one caller halves.
    halving: AtomicBool,
}

impl Sketch {
    /// A sketch sized for a store of `max_bytes` (a counter of each kind in each row per 256
    /// bytes, within bounds: from 32 KiB to 16 MiB in all).
    pub fn for_bytes(max_bytes: usize) -> Self {
        let blocks =
            (max_bytes / (256 * PER_ROW)).clamp(MIN_BLOCKS, MAX_BLOCKS).next_power_of_two();
        Sketch {
            blocks: (0..blocks).map(|_| Block(std::array::from_fn(|_| AtomicU8::new(0)))).collect(),
            reads: AtomicU64::new(0),
            period: (blocks * PER_ROW) as u64,
            halving: AtomicBool::new(false),
        }
    }

    /// The bytes its counters take.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Block>()
    }

    /// The block of `key`, and where its read counters are in it (its write counters are
    /// `WRITES` after each).
    fn place(&self, key: &[u8]) -> (&[AtomicU8; 2 * WRITES], [usize; DEPTH]) {
        let h = XxHash3_64::oneshot(key);
        let block = &self.blocks[(h as usize) & (self.blocks.len() - 1)].0;
        let bits = (h >> 32) as usize;
        (block, std::array::from_fn(|i| i * PER_ROW + ((bits >> (3 * i)) & (PER_ROW - 1))))
    }

    /// Count one read of `key`: whether it is now read often enough to be kept (at least
    /// `after` reads lately, and `READS_PER_WRITE` times its writes).
    pub fn read(&self, key: &[u8], after: u8) -> bool {
        let (block, at) = self.place(key);
        if min(block, at) == u8::MAX {
            halve(block, at);
        }
        let reads = bump(block, at).saturating_add(1);
        let writes = min(block, at.map(|i| i + WRITES));
        if self.reads.fetch_add(1, Ordering::Relaxed) + 1 >= self.period {
            self.age();
        }
        reads >= after && u16::from(reads) >= READS_PER_WRITE * u16::from(writes)
    }

    /// Count one write of `key` (while it was not in use here).
    pub fn written(&self, key: &[u8]) {
        let (block, at) = self.place(key);
        if min(block, at.map(|i| i + WRITES)) == u8::MAX {
            halve(block, at);
        }
        bump(block, at.map(|i| i + WRITES));
    }

    /// Estimated reads of `key` (for tests).
    #[cfg(test)]
    fn estimate(&self, key: &[u8]) -> u8 {
        let (block, at) = self.place(key);
        min(block, at)
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
        for c in self.blocks.iter().flat_map(|b| b.0.iter()) {
            let v = c.load(Ordering::Relaxed);
            if v != 0 {
                c.store(v / 2, Ordering::Relaxed);
            }
        }
        self.halving.store(false, Ordering::Release);
    }
}

/// The estimate of the key whose counters are at `at` in `block`: the least of them.
fn min(block: &[AtomicU8], at: [usize; DEPTH]) -> u8 {
    at.iter().map(|&i| block[i].load(Ordering::Relaxed)).min().unwrap_or(0)
}

/// Halve the read and the write counters of the key whose read counters are at `at`: one
/// of its counts is full, and the two must keep their ratio (a key read and written as often,
/// both counts full, is not a key read far more often than written).
fn halve(block: &[AtomicU8], at: [usize; DEPTH]) {
    for i in at.into_iter().chain(at.map(|i| i + WRITES)) {
        block[i].store(block[i].load(Ordering::Relaxed) / 2, Ordering::Relaxed);
    }
}

/// Count one event of the key whose counters are at `at`: raise those of them at its
/// estimate (conservative update); the estimate before.
fn bump(block: &[AtomicU8], at: [usize; DEPTH]) -> u8 {
    let seen = min(block, at);
    if seen < u8::MAX {
        for i in at {
            if block[i].load(Ordering::Relaxed) == seen {
                block[i].store(seen + 1, Ordering::Relaxed);
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
        assert_eq!(s.period, (MIN_BLOCKS * PER_ROW) as u64);
        for n in 1..=5 {
            assert_eq!(s.record(b"hot"), n);
        }
        // A thousand keys read once each: in a sketch of 512 blocks (4,096 counters per row),
        // next to none looks like it was read twice.
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
        for i in 0..(MIN_BLOCKS * PER_ROW - 40) {
            s.record(format!("k{i}").as_bytes());
        }
        assert_eq!(s.estimate(b"hot"), 20);
        assert_eq!(s.reads.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn full_counts_halve_with_their_ratio_and_memory_is_bounded() {
        let s = Sketch::for_bytes(0);
        for _ in 0..300 {
            s.record(b"k");
        }
        // Full at 255, halved, and counted on: 128 + 44.
        assert_eq!(s.estimate(b"k"), 172);
        // Read and written alike, as fast as can be: never kept, full or not.
        for n in 0..2000 {
            s.written(b"both");
            assert!(!s.read(b"both", 2), "read {n}");
        }
        // Read twenty times per write: kept, full or not.
        for _ in 0..100 {
            s.written(b"hot");
            (0..19).for_each(|_| _ = s.read(b"hot", 2));
            assert!(s.read(b"hot", 2));
        }
        assert_eq!(Sketch::for_bytes(usize::MAX).bytes(), 16 << 20);
        assert_eq!(Sketch::for_bytes(32 << 20).bytes(), 1 << 20);
        assert_eq!(Sketch::for_bytes(0).bytes(), 32 << 10);
    }
}
