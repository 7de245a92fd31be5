//! What one client (one server node) has done: calls and errors by command family, hits and
//! misses, bytes on the wire, connections, reconnects, timeouts, and a latency histogram per
//! family.
//!
//! Every counter is a relaxed atomic: callers on any thread add to them without the GIL and
//! without a lock, and a reader sees each counter exact, though not all of them at one instant.
//! Building without the `stats` feature compiles the counting out (every method below returns
//! at once); the counters are then always zero.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use redis::{Arg, Cmd, Pipeline, Value};

use crate::commands;
use crate::errors::{Error, Result};
use crate::proto::{Reply, Request};

/// Whether this build counts anything.
pub const ENABLED: bool = cfg!(feature = "stats");

/// The command families counted by name: the rows of the command table (src/commands.rs),
/// which has every command a cache method, a lock or the raw client sends
/// (tests/observability/test_stats.py fails on one counted as OTHER); anything else is counted
/// as OTHER. A pipeline's round trip is timed as PIPELINE (its commands are counted each under
/// its own family).
const FAMILIES: usize = commands::TABLE.len();
const OTHER: usize = FAMILIES;
const PIPELINE: usize = FAMILIES + 1;
const SLOTS: usize = FAMILIES + 2;

/// The error classes, named as the Python exceptions they become.
const ERROR_CLASSES: [&str; 6] = [
    "ConnectionInterrupted",
    "CacheTimeout",
    "ResponseError",
    "ConfigurationError",
    "SerializationError",
    "InternalError",
];

/// Latency buckets: bucket i holds round trips of at most 2^(i+2) microseconds (4 us to
/// about 1 s); the last one everything slower.
const BOUNDS: usize = 19;
const BUCKETS: usize = BOUNDS + 1;

fn family_of(name: &[u8]) -> usize {
    commands::position(name).unwrap_or(OTHER)
}

fn bucket_of(micros: u64) -> usize {
    if micros <= 4 {
        return 0;
    }
    let bits = 64 - (micros - 1).leading_zeros() as usize;
    (bits - 2).min(BUCKETS - 1)
}

fn error_class(err: &Error) -> usize {
    match err {
        Error::Connection(_) | Error::Credentials(_) => 0,
        Error::Timeout(_) => 1,
        Error::Response { .. } => 2,
        Error::Config(_) => 3,
        Error::Decode(_) => 4,
        Error::Internal(_) => 5,
    }
}

/// One family's counters, in the order a successful call touches them (calls, the sum, a
/// fast bucket: one cache line).
#[derive(Default)]
struct Family {
    calls: AtomicU64,
    sum_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
    errors: [AtomicU64; ERROR_CLASSES.len()],
}

/// A counter on a cache line of its own: the async path counts bytes sent on the event loop's
/// thread and bytes received on the I/O thread, which must not fight over one line.
#[derive(Default)]
#[repr(align(64))]
struct Padded(AtomicU64);

impl std::ops::Deref for Padded {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

/// The counters of one client. Bytes sent have a cache line of their own (an event loop's
/// thread counts them); the rest of the per-call counters share one (a sync caller, or the
/// I/O thread for async calls, counts them).
pub struct Stats {
    families: Box<[Family]>,
    bytes_sent: Padded,
    hits: Padded,
    misses: AtomicU64,
    bytes_received: AtomicU64,
    reconnects: AtomicU64,
    timeouts: AtomicU64,
    /// Open now (a gauge: not reset).
    connections: AtomicI64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            families: (0..SLOTS).map(|_| Family::default()).collect(),
            hits: Padded::default(),
            misses: AtomicU64::new(0),
            bytes_sent: Padded::default(),
            bytes_received: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            reconnects: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

impl Stats {
    /// Count bytes written to the server.
    #[inline]
    pub fn sent(&self, n: usize) {
        if ENABLED {
            add(&self.bytes_sent, n as u64);
        }
    }

    /// Count bytes read from the server.
    #[inline]
    pub fn received(&self, n: usize) {
        if ENABLED {
            add(&self.bytes_received, n as u64);
        }
    }

    /// Count a connection made to replace one that broke or went stale.
    pub fn reconnected(&self) {
        if ENABLED {
            add(&self.reconnects, 1);
        }
    }

    /// A connection just opened: counted as open until the returned guard is dropped.
    pub fn opened(self: &Arc<Self>) -> Open {
        if ENABLED {
            self.connections.fetch_add(1, Relaxed);
        }
        Open(Arc::clone(self))
    }

    /// Count one command's reply (or error).
    fn command(&self, family: usize, keys: u32, reply: &Value) {
        let f = &self.families[family];
        add(&f.calls, 1);
        match reply {
            Value::ServerError(_) => add(&f.errors[2], 1),
            // A cache read's hits and misses: GET, each key of MGET, EXISTS' keys.
            Value::Nil if family == GET => add(&self.misses, 1),
            _ if family == GET => add(&self.hits, 1),
            Value::Array(items) if family == MGET => {
                let found = items.iter().filter(|v| !matches!(v, Value::Nil)).count() as u64;
                add(&self.hits, found);
                add(&self.misses, items.len() as u64 - found);
            }
            Value::Int(n) if family == EXISTS => {
                let found = u64::try_from(*n).unwrap_or(0).min(u64::from(keys));
                add(&self.hits, found);
                add(&self.misses, u64::from(keys) - found);
            }
            _ => {}
        }
    }

    /// Count a failed request: every command it held, under the error's class.
    fn failed(&self, families: &[(usize, u32)], err: &Error) {
        let class = error_class(err);
        for &(family, _) in families {
            let f = &self.families[family];
            add(&f.calls, 1);
            add(&f.errors[class], 1);
        }
        if matches!(err, Error::Timeout(_)) {
            add(&self.timeouts, 1);
        }
    }

    fn timed(&self, family: usize, started: Instant) {
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let f = &self.families[family];
        add(&f.buckets[bucket_of(ns / 1000)], 1);
        add(&f.sum_ns, ns);
    }

    /// Zero every counter (the open connections, a gauge, only if `connections`).
    pub fn reset(&self, connections: bool) {
        if connections {
            self.connections.store(0, Relaxed);
        }
        for f in &*self.families {
            f.calls.store(0, Relaxed);
            f.sum_ns.store(0, Relaxed);
            f.errors.iter().chain(&f.buckets).for_each(|c| c.store(0, Relaxed));
        }
        for c in [
            &*self.hits,
            &self.misses,
            &*self.bytes_sent,
            &self.bytes_received,
            &self.reconnects,
            &self.timeouts,
        ] {
            c.store(0, Relaxed);
        }
    }

    /// The counters as a plain dict (see `Client.stats` in the stubs for its shape).
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let calls = PyDict::new(py);
        let errors = PyDict::new(py);
        let latency = PyDict::new(py);
        let bounds: Vec<u64> = (0..BOUNDS).map(|i| 1u64 << (i + 2)).collect();
        for (i, f) in self.families.iter().enumerate() {
            let name = match i {
                OTHER => "OTHER",
                PIPELINE => "PIPELINE",
                _ => commands::TABLE[i].name,
            };
            let n = f.calls.load(Relaxed);
            if n > 0 {
                calls.set_item(name, n)?;
            }
            let by_class = PyDict::new(py);
            for (class, c) in ERROR_CLASSES.iter().zip(&f.errors) {
                let n = c.load(Relaxed);
                if n > 0 {
                    by_class.set_item(class, n)?;
                }
            }
            if !by_class.is_empty() {
                errors.set_item(name, by_class)?;
            }
            let counts: Vec<u64> = f.buckets.iter().map(|c| c.load(Relaxed)).collect();
            let count: u64 = counts.iter().sum();
            if count > 0 {
                let hist = PyDict::new(py);
                hist.set_item("bounds_us", PyList::new(py, &bounds)?)?;
                hist.set_item("counts", PyList::new(py, counts)?)?;
                hist.set_item("sum_us", f.sum_ns.load(Relaxed) as f64 / 1000.0)?;
                hist.set_item("count", count)?;
                latency.set_item(name, hist)?;
            }
        }
        out.set_item("enabled", ENABLED)?;
        out.set_item("calls", calls)?;
        out.set_item("errors", errors)?;
        out.set_item("hits", self.hits.load(Relaxed))?;
        out.set_item("misses", self.misses.load(Relaxed))?;
        out.set_item("bytes_sent", self.bytes_sent.load(Relaxed))?;
        out.set_item("bytes_received", self.bytes_received.load(Relaxed))?;
        out.set_item("connections", self.connections.load(Relaxed).max(0))?;
        out.set_item("reconnects", self.reconnects.load(Relaxed))?;
        out.set_item("timeouts", self.timeouts.load(Relaxed))?;
        out.set_item("latency", latency)?;
        Ok(out)
    }
}

const GET: usize = commands::position_of("GET");
const MGET: usize = commands::position_of("MGET");
const EXISTS: usize = commands::position_of("EXISTS");

/// An open connection; dropping it counts it closed.
pub struct Open(Arc<Stats>);

impl Drop for Open {
    fn drop(&mut self) {
        if ENABLED {
            self.0.connections.fetch_sub(1, Relaxed);
        }
    }
}

/// A command's family and how many keys it names (EXISTS' hits and misses need the count).
fn describe(cmd: &Cmd) -> (usize, u32) {
    let mut args = cmd.args_iter();
    let family = match args.next() {
        Some(Arg::Simple(name)) => family_of(name),
        _ => OTHER,
    };
    let keys = if family == EXISTS { u32::try_from(args.count()).unwrap_or(u32::MAX) } else { 1 };
    (family, keys)
}

/// What a request holds, for counting its reply.
enum Sent {
    One(usize, u32),
    Many(Box<[(usize, u32)]>),
}

/// One request being timed: made before it is sent, told its outcome (and the client's
/// counters) once.
pub struct Meter {
    sent: Sent,
    started: Instant,
}

impl Meter {
    /// Start timing a request (None when this build counts nothing).
    #[inline]
    pub fn start(req: &Request) -> Option<Self> {
        if !ENABLED {
            return None;
        }
        let sent = match req {
            Request::Cmd(cmd) => {
                let (family, keys) = describe(cmd);
                Sent::One(family, keys)
            }
            Request::Pipe(pipe) => Self::many(pipe),
        };
        Some(Meter { sent, started: Instant::now() })
    }

    /// Start timing a pipeline sent on its own (a fan-out's part).
    pub fn start_pipe(pipe: &Pipeline) -> Option<Self> {
        if !ENABLED {
            return None;
        }
        Some(Meter { sent: Self::many(pipe), started: Instant::now() })
    }

    fn many(pipe: &Pipeline) -> Sent {
        Sent::Many(pipe.cmd_iter().map(describe).collect())
    }

    /// Count the request's outcome: calls, errors, hits and misses, and its round trip.
    pub fn record(&self, stats: &Stats, outcome: &Result<Reply>) {
        match (&self.sent, outcome) {
            (Sent::One(family, keys), Ok(reply)) => {
                stats.command(*family, *keys, reply);
                stats.timed(*family, self.started);
            }
            (Sent::Many(commands), Ok(reply)) => {
                let replies = match reply {
                    Value::Array(items) => items.as_slice(),
                    one => std::slice::from_ref(one),
                };
                for (&(family, keys), reply) in commands.iter().zip(replies) {
                    stats.command(family, keys, reply);
                }
                stats.timed(PIPELINE, self.started);
            }
            (Sent::One(family, keys), Err(err)) => stats.failed(&[(*family, *keys)], err),
            (Sent::Many(commands), Err(err)) => stats.failed(commands, err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_the_table_rows_found_whatever_the_case() {
        let name = |family: usize| commands::TABLE[family].name;
        assert_eq!(name(family_of(b"get")), "GET");
        assert_eq!(name(family_of(b"EvalSha")), "EVALSHA");
        assert_eq!(name(family_of(b"lpos")), "LPOS");
        assert_eq!(family_of(b"NOSUCHCOMMAND"), OTHER);
        assert_eq!(name(GET), "GET");
        assert_eq!(name(MGET), "MGET");
        assert_eq!(name(EXISTS), "EXISTS");
        assert_eq!(name(family_of(b"set")), "SET");
    }

    #[test]
    fn latency_buckets_are_powers_of_two_microseconds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(4), 0);
        assert_eq!(bucket_of(5), 1);
        assert_eq!(bucket_of(8), 1);
        assert_eq!(bucket_of(9), 2);
        assert_eq!(bucket_of(1 << 20), BOUNDS - 1);
        assert_eq!(bucket_of((1 << 20) + 1), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[cfg(feature = "stats")]
    #[test]
    fn replies_count_hits_misses_and_errors() {
        let stats = Arc::new(Stats::default());
        let mut mget = redis::cmd("MGET");
        mget.arg("a").arg("b").arg("c");
        let meter = Meter::start(&Request::Cmd(mget)).unwrap();
        meter.record(
            &stats,
            &Ok(Value::Array(vec![Value::Nil, Value::BulkString(b"x".to_vec()), Value::Nil])),
        );
        let mut exists = redis::cmd("EXISTS");
        exists.arg("a").arg("b");
        Meter::start(&Request::Cmd(exists)).unwrap().record(&stats, &Ok(Value::Int(1)));
        assert_eq!((stats.hits.load(Relaxed), stats.misses.load(Relaxed)), (2, 3));
        let mut pipe = Pipeline::new();
        pipe.add_command(redis::cmd("GET").arg("k").clone()).add_command(redis::cmd("PING"));
        let meter = Meter::start_pipe(&pipe).unwrap();
        meter.record(&stats, &Err(Error::Timeout("slow".into())));
        assert_eq!(stats.families[GET].errors[1].load(Relaxed), 1);
        assert_eq!(stats.timeouts.load(Relaxed), 1);
        assert_eq!(stats.families[family_of(b"PING")].calls.load(Relaxed), 1);
        stats.reset(false);
        assert_eq!(stats.hits.load(Relaxed), 0);
        assert_eq!(stats.families[GET].calls.load(Relaxed), 0);
    }
}
