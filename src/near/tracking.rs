//! The tracking connections that keep the near cache coherent, and the liveness gate.
//!
//! One RESP3 connection per tracked server, made from the server's `Endpoint` like its data
//! connections (`HELLO 3` in its handshake), then `CLIENT TRACKING ON BCAST PREFIX ...`, on
//! the I/O runtime. Its reader applies each pushed invalidation to the store as it reads it,
//! in order with the replies (`transport::Pushed`), without the GIL and without a queue.
//!
//! The gate: the task pings every MAX_STALE_MS / 4. The connection is ordered, so when the
//! reply to a PING sent at time t arrives, every invalidation the server generated before t
//! has been applied. A hit is served only while now - t < MAX_STALE_MS for the last answered
//! PING of every tracked server. A (re)connection flushes the store once tracking is on, and
//! only then opens the gate; a lost connection shuts it and flushes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use redis::{PushKind, Value};
use tokio::task::JoinHandle;

use crate::errors::Result;
use crate::near::fill::FillKey;
use crate::near::store::{now_ns, Flush, Store};
use crate::runtime;
use crate::transport::{Endpoint, PushSink, Pushed};

mod admission;
mod session;
pub use admission::Admission;
use admission::Live;
use session::{marker_key, run};

/// A server a near cache tracks: the recipe of its connections, of which the tracking
/// connection is one (its handshake speaking RESP3).
#[derive(Clone)]
pub struct Source {
    pub endpoint: Arc<Endpoint>,
    pub addr: Arc<str>,
    /// Watch for SWAPDB with a marker key (not on a cluster: no SWAPDB, and the key could
    /// belong to another node's slots).
    pub check_db: bool,
}

/// At most this many of the keys one invalidation names, if they were being hit, are read
/// again at once on the connection that named them (the rest ride along with a later fill).
const REFRESH_NOW: usize = 64;

/// Whether tracking works.
const ACTIVE: u8 = 0;
/// A server refused it; the warning has not been given yet.
const REFUSED: u8 = 1;
/// A server refused it and the warning was given: the near cache is off.
const OFF: u8 = 2;
/// Tracking works, but a server refused the database marker (SWAPDB goes unseen); the
/// warning has not been given yet.
const UNMARKED: u8 = 3;

/// The tracked servers of one near cache.
struct Trackers {
    sources: Vec<Arc<Source>>,
    /// Bumped when the set changes: an older task's answers no longer move the gate.
    set_id: u64,
    tasks: Vec<JoinHandle<()>>,
}

/// What the gate is moved by: the current set's answered probes. Apart from `Trackers`, so
/// that a tracking connection closed while those are locked (its last holder dropped in
/// `reset`) shuts the gate without waiting for them.
struct Answers {
    set_id: u64,
    /// Per server, the send time of its last answered PING (0: none since it connected).
    sent: Vec<u64>,
}

/// A near cache: its store, its tracking connections and its gate.
pub struct Near {
    pub store: Store,
    /// Server key prefixes kept locally (and tracked).
    pub prefixes: Vec<Box<[u8]>>,
    max_stale_ns: u64,
    /// Hits are served while `now_ns()` is below this.
    gate_until: AtomicU64,
    gate_open: AtomicBool,
    state: AtomicU8,
    refusal: Mutex<String>,
    /// What the one warning says (a refusal of tracking, or of the marker).
    notice: Mutex<String>,
    /// The database marker's name: one of the cache's own (KEY_PREFIX's) names, so that an
    /// ACL user limited to the application's keys may write it.
    marker: Box<str>,
    /// Numbers the marker's values: each session, and each rewrite after the marker was
    /// found gone, writes a value of its own.
    stamps: AtomicU64,
    /// Whether the tracking session keeps no marker (a server refused it, or is full):
    /// SWAPDB is not seen; invalidations still are.
    unmarked: AtomicBool,
    /// Whether the marker's refusal was told (once per near cache).
    unmarked_told: AtomicBool,
    started: AtomicBool,
    trackers: Mutex<Trackers>,
    answers: Mutex<Answers>,
    /// Every kept key lives on each tracked server's primary (one server, replicas, Sentinel;
    /// not a cluster): a fill may carry keys to refresh (`fill::with_refresh`).
    one_primary: AtomicBool,
    /// Admission by use (None: every key under the prefixes is kept, BCAST tracking).
    admission: Option<Admission>,
    /// The tracking connections up and tracking, by server address, with their set: with
    /// admission by use, fills go through them (`conn_to`).
    live: Mutex<HashMap<Arc<str>, Live>>,
}

/// A tracking connection that carries writes.
#[derive(Clone)]
pub struct Writer {
    /// The set of tracking connections it belongs to.
    pub set_id: u64,
    pub conn: Arc<Pushed>,
}

/// Where one tracking connection's pushes go: its near cache, for the set and place it was
/// opened for.
struct Sink {
    near: Weak<Near>,
    set_id: u64,
    idx: usize,
    /// The connection itself, where the keys it invalidates are refreshed.
    conn: OnceLock<Weak<Pushed>>,
    /// Keys to refresh that the pushes of the read being handled named: read again in one
    /// round trip once it is handled (without BCAST, the server pushes one message per key).
    refresh: Mutex<Vec<FillKey>>,
}

impl PushSink for Sink {
    fn push(&self, kind: PushKind, data: Vec<Value>) {
        let Some(near) = self.near.upgrade() else { return };
        let refresh = near.push(kind, data);
        if !refresh.is_empty() {
            locked(&self.refresh).extend(refresh);
        }
    }

    fn batch_end(&self) {
        let refresh = std::mem::take(&mut *locked(&self.refresh));
        if refresh.is_empty() {
            return;
        }
        let Some(near) = self.near.upgrade() else { return };
        match self.conn.get().and_then(Weak::upgrade) {
            Some(conn) => crate::near::fill::refresh_on(&near, &conn, refresh),
            None => crate::near::fill::cancel_all(&near, &refresh),
        }
    }

    fn lost(&self) {
        if let Some(near) = self.near.upgrade() {
            near.answered(self.set_id, self.idx, 0);
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Near {
    /// A near cache tracking nothing yet, whose database marker is `marker` (None: a name
    /// of redoxide's own, `redoxide:near:<random>`).
    pub fn new(
        store: Store,
        prefixes: Vec<Box<[u8]>>,
        max_stale: Duration,
        marker: Option<String>,
        admission: Option<Admission>,
    ) -> Self {
        Near {
            store,
            prefixes,
            max_stale_ns: u64::try_from(max_stale.as_nanos()).unwrap_or(u64::MAX),
            gate_until: AtomicU64::new(0),
            gate_open: AtomicBool::new(false),
            state: AtomicU8::new(ACTIVE),
            refusal: Mutex::new(String::new()),
            notice: Mutex::new(String::new()),
            marker: marker.unwrap_or_else(marker_key).into_boxed_str(),
            stamps: AtomicU64::new(0),
            unmarked: AtomicBool::new(false),
            unmarked_told: AtomicBool::new(false),
            started: AtomicBool::new(false),
            trackers: Mutex::new(Trackers { sources: Vec::new(), set_id: 0, tasks: Vec::new() }),
            answers: Mutex::new(Answers { set_id: 0, sent: Vec::new() }),
            one_primary: AtomicBool::new(false),
            admission,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// After a write through the tracking connection of set `set_id` went unanswered: where it
    /// lands among later writes is unknown, so that connection is dropped and tracking starts
    /// afresh (a write still in it that lands later reaches the new connection as an
    /// invalidation), once for all the writes that failed with it. On the runtime: the caller
    /// may be a connection's reader, or hold locks a reset takes.
    pub fn restart(self: &Arc<Self>, set_id: u64) {
        let near = Arc::clone(self);
        let restart = move || {
            let mut trackers = locked(&near.trackers);
            if trackers.set_id == set_id {
                let sources = trackers.sources.clone();
                let _ = near.reset(&mut trackers, sources);
            }
        };
        match runtime::get() {
            Ok(rt) => drop(rt.spawn(async move { restart() })),
            Err(_) => restart(),
        }
    }

    /// Whether a server key is one this cache keeps.
    #[inline]
    pub fn tracks(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(p))
    }

    /// Whether tracking is (still) possible; the first call after a refusal of tracking, or
    /// of the database marker, returns Err(Some(..)) once, for the one warning (`notice`).
    /// That lookup reads the server as without a near cache; after a refusal of the marker
    /// the next ones are served again.
    pub fn usable(&self) -> std::result::Result<(), Option<String>> {
        match self.state.load(Ordering::Acquire) {
            ACTIVE => Ok(()),
            REFUSED => {
                if self.state.swap(OFF, Ordering::AcqRel) == REFUSED {
                    return Err(Some(self.notice()));
                }
                Err(None)
            }
            UNMARKED => {
                let told = self.state.compare_exchange(
                    UNMARKED,
                    ACTIVE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                match told {
                    Ok(_) => Err(Some(self.notice())),
                    // Another lookup told it (ACTIVE now), or tracking was refused since.
                    Err(ACTIVE) => Ok(()),
                    Err(_) => Err(None),
                }
            }
            _ => Err(None),
        }
    }

    /// Why a server refused tracking ("" if none did).
    pub fn refusal(&self) -> String {
        locked(&self.refusal).clone()
    }

    /// The one warning's text: why a server refused tracking (the near cache is off), or
    /// the database marker (SWAPDB goes unseen).
    pub fn notice(&self) -> String {
        locked(&self.notice).clone()
    }

    /// The database marker's name.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// A value for the marker no earlier write gave it. A SWAPDB moves the marker to the
    /// other database with the value it had; swapped back later (the marker rewritten here
    /// meanwhile), that old copy must not pass for the current one.
    fn stamp(&self) -> String {
        format!("{}#{}", self.marker, self.stamps.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether SWAPDB is watched for: false while the tracking connection keeps no database
    /// marker (a server refused it, until a new connection may keep it; or it is full, until
    /// there is room).
    pub fn swapdb_watched(&self) -> bool {
        !self.unmarked.load(Ordering::Acquire)
    }

    /// Whether the gate is open (for stats: counts nothing).
    pub fn serving(&self) -> bool {
        now_ns() < self.gate_until.load(Ordering::Acquire)
    }

    /// Whether no server refused tracking.
    pub fn enabled(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), ACTIVE | UNMARKED)
    }

    /// Whether a hit may be served now (counting a trip when the gate is found shut).
    #[inline]
    pub fn gate(&self) -> bool {
        if now_ns() < self.gate_until.load(Ordering::Acquire) {
            return true;
        }
        if self.gate_open.swap(false, Ordering::AcqRel) {
            self.store.stats.gate_trips.fetch_add(1, Ordering::Relaxed);
        }
        false
    }

    /// Start the tracking connections, once (the first lookup does).
    #[inline]
    pub fn start(self: &Arc<Self>) -> Result<()> {
        // A plain load first: every lookup passes here, and a swap would bounce the cache line
        // between the threads that read.
        if self.started.load(Ordering::Acquire) {
            return Ok(());
        }
        // Decided under the trackers' lock: a `track` between the swap and the lock would see
        // `started` and spawn the set, and this call would spawn it a second time.
        let mut trackers = locked(&self.trackers);
        if self.started.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.spawn(&mut trackers)
    }

    /// Track these servers from now on (a failover, a new slot map): flush, and restart.
    /// Whether every kept key lives on one primary (see `one_primary`).
    pub fn one_primary(&self) -> bool {
        self.one_primary.load(Ordering::Acquire)
    }

    /// Whether the server at `addr` is in the tracked set: a fill read from it may be
    /// installed (its invalidations are heard). A router's fill reads the node that owned
    /// the key when it was asked, which a failover may have taken out of the set since.
    pub fn tracks_source(&self, addr: &str) -> bool {
        locked(&self.trackers).sources.iter().any(|s| &*s.addr == addr)
    }

    pub fn track(self: &Arc<Self>, sources: Vec<Source>) -> Result<()> {
        // The database marker is watched exactly where every key lives on one primary (a
        // cluster has no SWAPDB, and its keys live on many).
        self.one_primary.store(sources.iter().all(|s| s.check_db), Ordering::Release);
        let mut trackers = locked(&self.trackers);
        self.reset(&mut trackers, sources.into_iter().map(Arc::new).collect())
    }

    fn reset(self: &Arc<Self>, trackers: &mut Trackers, sources: Vec<Arc<Source>>) -> Result<()> {
        for task in trackers.tasks.drain(..) {
            task.abort();
        }
        trackers.sources = sources;
        trackers.set_id += 1;
        *locked(&self.answers) =
            Answers { set_id: trackers.set_id, sent: vec![0; trackers.sources.len()] };
        self.gate_until.store(0, Ordering::Release);
        self.store.flush(Flush::Topology);
        if self.started.load(Ordering::Acquire) {
            self.spawn(trackers)?;
        }
        Ok(())
    }

    fn spawn(self: &Arc<Self>, trackers: &mut Trackers) -> Result<()> {
        if !self.enabled() {
            return Ok(()); // off for good: nothing to track for
        }
        let rt = runtime::get()?;
        for (idx, source) in trackers.sources.iter().enumerate() {
            let task = run(Arc::clone(self), Arc::clone(source), idx, trackers.set_id);
            trackers.tasks.push(rt.spawn(task));
        }
        Ok(())
    }

    /// Record that server `idx` of set `set_id` answered a PING sent at `sent` (0: it is
    /// not connected), and move the gate to what every server's answers allow.
    fn answered(&self, set_id: u64, idx: usize, sent: u64) {
        let mut answers = locked(&self.answers);
        if answers.set_id != set_id {
            return;
        }
        if let Some(slot) = answers.sent.get_mut(idx) {
            *slot = sent;
        }
        let oldest = answers.sent.iter().copied().min();
        let until = match oldest {
            Some(t) if t > 0 => t.saturating_add(self.max_stale_ns),
            _ => 0,
        };
        self.gate_until.store(until, Ordering::Release);
        if until > 0 {
            self.gate_open.store(true, Ordering::Release);
        }
    }

    /// Open a tracking connection to `source` for server `idx` of set `set_id`.
    fn open(self: &Arc<Self>, source: &Source, set_id: u64, idx: usize) -> Result<Arc<Pushed>> {
        let near = Arc::downgrade(self);
        let sink = Arc::new(Sink {
            near,
            set_id,
            idx,
            conn: OnceLock::new(),
            refresh: Mutex::new(Vec::new()),
        });
        let conn = Arc::new(Pushed::open(Arc::clone(&source.endpoint), Arc::clone(&sink) as _)?);
        let _ = sink.conn.set(Arc::downgrade(&conn));
        Ok(conn)
    }

    /// Apply one push frame from a tracking connection (other kinds are not asked for); the
    /// keys it invalidated that were being hit, registered for a refresh (`REFRESH_NOW`).
    fn push(&self, kind: PushKind, data: Vec<Value>) -> Vec<FillKey> {
        if kind != PushKind::Invalidate {
            return Vec::new();
        }
        match data.first() {
            Some(Value::Array(keys)) => {
                let keys: Vec<&[u8]> = keys
                    .iter()
                    .filter_map(|k| match k {
                        Value::BulkString(b) => Some(b.as_slice()),
                        _ => None,
                    })
                    .collect();
                // With admission by use every fill is read on a tracking connection, in
                // order with its invalidations: one still in flight read after this write.
                match self.admission() {
                    None => self.store.invalidate_heard(keys.iter().copied(), false),
                    // Written before it was of use here: counted against its reads.
                    Some(a) => {
                        self.store.invalidate_heard_cold(keys.iter().copied(), true, |key| {
                            a.sketch.written(key)
                        })
                    }
                }
                let refresh =
                    self.store.take_refresh_of(keys.into_iter(), REFRESH_NOW, self.one_primary());
                refresh.into_iter().map(|(key, token)| (key, Some(token))).collect()
            }
            // A null invalidation: FLUSHDB, FLUSHALL, SWAPDB, a replica's full resync.
            _ => {
                self.store.flush(Flush::Server);
                Vec::new()
            }
        }
    }

    fn refuse(&self, reason: String) {
        *locked(&self.notice) = format!("{reason}; the near cache is off for this cache");
        *locked(&self.refusal) = reason;
        // Shut for good: no hit is served, and lookups pass straight through.
        self.state.store(REFUSED, Ordering::Release);
        self.gate_until.store(0, Ordering::Release);
        self.store.flush(Flush::Disconnect);
    }

    /// A fill found that the near cache cannot keep anything (a server refused the PTTL of a
    /// key it let us read): off for good, as after a refusal of tracking, with one warning;
    /// the tracking connections are closed.
    pub fn refuse_fills(&self, reason: String) {
        if !self.enabled() {
            return;
        }
        let mut trackers = locked(&self.trackers);
        for task in trackers.tasks.drain(..) {
            task.abort();
        }
        drop(trackers);
        self.refuse(reason);
    }

    /// A server refused the database marker (`reason`): told once per near cache.
    fn tell_unmarked(&self, reason: String) {
        if self.unmarked_told.swap(true, Ordering::AcqRel) {
            return;
        }
        *locked(&self.notice) = format!(
            "{reason}; the near cache stays on and hears every invalidation, but cannot see a \
             SWAPDB by another client (a user who may read and write that key watches for it)"
        );
        // Never over a refusal of tracking: that warning is the one to give.
        let _ = self.state.compare_exchange(ACTIVE, UNMARKED, Ordering::AcqRel, Ordering::Acquire);
    }
}
