//! The near cache store's counters, and why it was flushed.

use std::sync::atomic::AtomicU64;

/// Why everything was dropped at once; the index into `Stats::flushes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// The server said so: FLUSHDB, FLUSHALL, SWAPDB, a replica's resync (a null invalidation).
    Server,
    /// The tracking connection was (re)established: anything from before may have been missed.
    Connect,
    /// The tracking connection was lost.
    Disconnect,
    /// This process flushed the database itself (clear, FLUSHDB through the cache).
    Own,
    /// The nodes to track changed (a failover, a new slot map).
    Topology,
    /// A forked child starts empty.
    Fork,
    /// The database under the tracking connection changed without a message (SWAPDB).
    Swapped,
}

impl Flush {
    /// Every reason, in `Stats::flushes` order, with its name for `near_cache_stats()`.
    pub const ALL: [(Flush, &'static str); 7] = [
        (Flush::Server, "server"),
        (Flush::Connect, "connect"),
        (Flush::Disconnect, "disconnect"),
        (Flush::Own, "own"),
        (Flush::Topology, "topology"),
        (Flush::Fork, "fork"),
        (Flush::Swapped, "swapped"),
    ];

    pub(super) fn index(self) -> usize {
        Flush::ALL.iter().position(|(f, _)| *f == self).unwrap_or(0)
    }
}

/// Counters, read without a lock.
#[derive(Default)]
pub struct Stats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub installs: AtomicU64,
    /// Values this process wrote through the tracking connection and kept without reading
    /// them back (counted in `installs` too).
    pub own_writes_kept: AtomicU64,
    /// Sync lookups that waited for another thread's fill (or own write) of the key instead
    /// of reading the server themselves.
    pub fill_waits: AtomicU64,
    /// Fills whose token an invalidation or a flush killed before the reply was installed.
    pub fills_dropped: AtomicU64,
    /// Values over MAX_VALUE_BYTES, fetched but not kept.
    pub too_large: AtomicU64,
    /// Keys named by the server's invalidation messages.
    pub invalidations: AtomicU64,
    pub evictions: AtomicU64,
    pub expired: AtomicU64,
    /// Times the gate was found shut after having been open (a hit refused for staleness).
    pub gate_trips: AtomicU64,
    /// Lookups of a present entry refused because the gate was shut.
    pub gate_refusals: AtomicU64,
    /// Keys read along with another fill because the server invalidated them while they were
    /// being hit (one round trip for them all).
    pub refreshes: AtomicU64,
    /// Admission by use: misses of keys read often enough to be kept from then on (a fill
    /// registered), and of keys not (yet): read from the server, nothing kept or tracked.
    pub admitted: AtomicU64,
    pub not_admitted: AtomicU64,
    pub flushes: [AtomicU64; 7],
}
