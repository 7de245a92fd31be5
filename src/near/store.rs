//! The near cache's local store: encoded values by server key, bounded in bytes with LRU
//! eviction, each with a local expiry; the fill tokens that keep a reply an invalidation
//! overtook from being installed; and the liveness gate.
//!
//! Everything here runs without the GIL: the tracking task applies invalidations directly,
//! and Python only ever copies a value out (`get`) or in (`install`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::key_hash::KeyHash;

/// The store's maps, keyed by server key.
type KeyMap<V> = HashMap<Box<[u8]>, V, KeyHash>;

/// Nanoseconds on a monotonic clock (since the first call; never 0 after it).
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX).saturating_add(1)
}

/// What the store keeps per entry besides its bytes (the key is held twice: in the map and in
/// the entry), for the map slot and the list links: used
/// in the byte bound so that many tiny values cannot outgrow it.
const ENTRY_OVERHEAD: usize = 96;
/// Fills that never reported back (a cancelled task) are forgotten past this many.
const MAX_PENDING: usize = 100_000;
const NIL: usize = usize::MAX;
/// Keys invalidated while being hit, waiting to ride along with this process' next fill, are
/// forgotten past this many (an invalidation storm costs bounded memory; the rest are read
/// when next missed, one by one).
const MAX_REFRESH: usize = 1024;
/// A key's heat once served (see `Node::heat`).
const HOT: u8 = 2;
/// The heat of a value filled by a read that missed: it was read once.
const READ: u8 = 1;

pub use super::store_stats::{Flush, Stats};

mod heard;
mod writes;
use writes::Writing;

/// Limits from OPTIONS["NEAR_CACHE"].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_value_bytes: usize,
    pub max_ttl_ns: u64,
}

struct Node {
    key: Box<[u8]>,
    /// Shared so that a hit takes a reference under the lock and copies after it.
    value: Arc<[u8]>,
    expires_ns: u64,
    /// How much in use: `HOT` when served since it was filled, less for a value filled by a
    /// read (or refreshed) and not served since. When the server invalidates a key with some
    /// heat it is read again (`take_refresh_of`, `take_refresh`) rather than only dropped,
    /// and the value read comes in one step cooler: a key no one reads stops being refreshed.
    heat: u8,
    prev: usize,
    next: usize,
}

/// The part behind the lock.
struct Inner {
    map: KeyMap<usize>,
    /// Entries in a slab, linked most recently used first.
    nodes: Vec<Node>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    bytes: usize,
    /// Fills in flight: key -> (token, when it was first registered, fills sharing it). An
    /// invalidation of the key removes it; a flush clears all.
    /// The heat its value comes in with is the fourth.
    pending: KeyMap<(u64, u64, u32, u8)>,
    next_token: u64,
    /// Bumped by every flush: a token from an older epoch never installs.
    epoch: u64,
    /// Callers in `wait_for_fill`: only then is ending a fill signalled.
    waiters: usize,
    /// This process' writes in flight through the tracking connection (which the server
    /// does not tell us about: NOLOOP), by key.
    writing: KeyMap<Writing>,
    /// Kept keys another client's write invalidated while they were being hit: the next fill
    /// this process sends reads them too (`take_refresh`), in the same round trip.
    refresh: KeyMap<u8>,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// A value was copied out.
    Hit,
    /// Nothing servable: a fill was registered under this token.
    Miss(Token),
    /// Nothing servable, and another caller's fill of the key is in flight: wait for it.
    Busy,
    /// Not kept, nothing registered: whether it is kept now is for admission by use to say
    /// (`Store::admit`).
    Unknown,
}

/// A fill's claim: installable while the key's token and the epoch are still these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(pub u64);

/// The bounded byte store.
pub struct Store {
    limits: Limits,
    inner: Mutex<Inner>,
    /// Signalled when fills end while callers wait for them (`wait_for_fill`).
    filled: Condvar,
    pub stats: Stats,
}

impl Store {
    /// An empty store.
    pub fn new(limits: Limits) -> Self {
        let seed = KeyHash::random();
        Store {
            limits,
            inner: Mutex::new(Inner {
                map: KeyMap::with_hasher(seed),
                nodes: Vec::new(),
                free: Vec::new(),
                head: NIL,
                tail: NIL,
                bytes: 0,
                pending: KeyMap::with_hasher(seed),
                next_token: 1,
                epoch: 0,
                waiters: 0,
                writing: KeyMap::with_hasher(seed),
                refresh: KeyMap::with_hasher(seed),
            }),
            filled: Condvar::new(),
            stats: Stats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent map (no partial updates escape
        // a method), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key` copied out (and marked most recently used) when `serve` allows a
    /// hit and it has not expired; otherwise register a fill and return its token, or, when
    /// `may_wait` and another fill of the key is in flight, register nothing (`Busy`).
    #[cfg(test)]
    pub fn lookup(&self, key: &[u8], serve: bool, may_wait: bool, copy: impl FnOnce(&[u8])) -> Got {
        self.lookup_as(key, || serve, may_wait, false, copy)
    }

    /// `lookup`; with `by_use` (admission by use), a key that is not kept, being filled,
    /// written or waiting for a refresh registers nothing and is `Unknown`.
    /// `serve` is asked only when it matters (a kept copy, or a fill to wait for): it reads
    /// the clock, as the expiry check does only for a kept copy.
    pub fn lookup_as(
        &self,
        key: &[u8],
        serve: impl FnOnce() -> bool,
        may_wait: bool,
        by_use: bool,
        copy: impl FnOnce(&[u8]),
    ) -> Got {
        let (mut ask, mut answer) = (Some(serve), None);
        let mut serve = || *answer.get_or_insert_with(|| ask.take().is_some_and(|f| f()));
        let mut inner = self.lock();
        let mut known = false;
        if let Some(&idx) = inner.map.get(key) {
            known = true;
            if inner.nodes[idx].expires_ns <= now_ns() {
                inner.remove(idx);
                self.stats.expired.fetch_add(1, Ordering::Relaxed);
            } else if serve() {
                inner.touch(idx);
                inner.nodes[idx].heat = HOT;
                let value = Arc::clone(&inner.nodes[idx].value);
                drop(inner);
                // Copied after the lock is released: the caller makes a Python object of it,
                // and no Python object is made (nor memory copied) under the store's lock.
                copy(&value);
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Got::Hit;
            } else {
                self.stats.gate_refusals.fetch_add(1, Ordering::Relaxed);
            }
        }
        let busy = inner.pending.contains_key(key) || inner.writing.contains_key(key);
        if may_wait && busy && serve() {
            self.stats.fill_waits.fetch_add(1, Ordering::Relaxed);
            return Got::Busy;
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        if inner.writing.contains_key(key) {
            // Our own write of it is in flight and no echo will tell us when it lands: a read
            // now may return the value before it, so it must install nothing.
            return Got::Miss(Token(0));
        }
        if by_use && !known && !inner.pending.contains_key(key) && !inner.refresh.contains_key(key)
        {
            return Got::Unknown;
        }
        Got::Miss(inner.register(key, now_ns()))
    }

    /// Register a fill of a key a lookup found `Unknown` and admission by use admitted.
    pub fn admit(&self, key: &[u8]) -> Token {
        let mut inner = self.lock();
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        if inner.writing.contains_key(key) {
            return Token(0); // as in `lookup`: an own write of it is in flight
        }
        inner.register(key, now_ns())
    }

    /// Wait (at most `limit`, without the GIL) until no fill of `key` is in flight.
    pub fn wait_for_fill(&self, key: &[u8], limit: Duration) {
        let mut inner = self.lock();
        inner.waiters += 1;
        let (mut inner, _) = self
            .filled
            .wait_timeout_while(inner, limit, |i| {
                i.pending.contains_key(key) || i.writing.contains_key(key)
            })
            .unwrap_or_else(PoisonError::into_inner);
        inner.waiters -= 1;
    }

    /// Whether `key` has a present, unexpired value (a hit, counted as one; nothing is
    /// registered otherwise).
    pub fn contains(&self, key: &[u8]) -> bool {
        let now = now_ns();
        let inner = self.lock();
        let found = inner.map.get(key).is_some_and(|&idx| inner.nodes[idx].expires_ns > now);
        if found {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Install a fill's reply if its token survived; `pttl_ms` is the key's PTTL from the same
    /// round trip (-1: no expiry). Return whether it was installed.
    pub fn install(&self, key: &[u8], token: Token, value: &[u8], pttl_ms: i64) -> bool {
        let mut inner = self.lock();
        let (registered, heat) = match inner.pending.get(key) {
            Some(&(t, at, _, heat)) if t == token.0 => (at, heat),
            _ => {
                self.stats.fills_dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        inner.release(key);
        self.wake(&inner);
        let ttl_ns = match pttl_ms {
            -1 => self.limits.max_ttl_ns,
            ms if ms > 0 => self.limits.max_ttl_ns.min(ms.unsigned_abs().saturating_mul(1_000_000)),
            // Gone (-2) or expiring now: between our GET and PTTL someone deleted it.
            _ => return false,
        };
        // The PTTL was read after the fill was registered: counting from then, the local copy
        // never outlives the server's.
        self.keep(&mut inner, key, value, registered.saturating_add(ttl_ns), heat)
    }

    /// Put a value in (replacing the key's), evicting the least recently used to fit.
    fn keep(&self, inner: &mut Inner, key: &[u8], value: &[u8], expires_ns: u64, heat: u8) -> bool {
        if value.len() > self.limits.max_value_bytes {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let size = 2 * key.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.limits.max_bytes {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if let Some(&idx) = inner.map.get(key) {
            inner.remove(idx);
        }
        while inner.bytes + size > self.limits.max_bytes && inner.tail != NIL {
            let tail = inner.tail;
            inner.remove(tail);
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        inner.insert(key.into(), Arc::from(value), expires_ns, size, heat);
        self.stats.installs.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forget a fill that will not report back (its request failed).
    pub fn cancel(&self, key: &[u8], token: Token) {
        let mut inner = self.lock();
        if inner.pending.get(key).is_some_and(|&(t, ..)| t == token.0) {
            inner.release(key);
            self.wake(&inner);
        }
    }

    /// Drop `key` and kill its fill in flight; return whether anything was there.
    #[cfg(test)]
    pub fn invalidate(&self, key: &[u8]) -> bool {
        self.invalidate_in_use(key, false).0
    }

    /// `invalidate`, and whether the key is in use: its copy was served since it was filled,
    /// or it waits for a refresh. With `remember`, a copy with some heat waits for one (the
    /// server's invalidation of this write brings it back, as another client's would).
    pub fn invalidate_in_use(&self, key: &[u8], remember: bool) -> (bool, bool) {
        let mut inner = self.lock();
        let out = inner.drop_in_use(key, remember);
        self.wake(&inner);
        out
    }

    /// `invalidate_in_use` of each of `keys` under one lock, telling `used` of each whether
    /// it is in use; the tokens issued so far (see `issued`).
    pub fn invalidate_keys<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        remember: bool,
        mut used: impl FnMut(&[u8], bool),
    ) -> u64 {
        let mut inner = self.lock();
        for key in keys {
            let key = key.as_ref();
            let (_, in_use) = inner.drop_in_use(key, remember);
            used(key, in_use);
        }
        self.wake(&inner);
        inner.next_token
    }

    /// How many tokens (of fills and own writes) were issued so far: while it stays the same,
    /// nothing new can be installed, so a write that found it so after dropping its keys has
    /// nothing to drop again once answered.
    pub fn issued(&self) -> u64 {
        self.lock().next_token
    }

    /// Drop everything and kill every fill in flight.
    pub fn flush(&self, why: Flush) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.nodes.clear();
        inner.free.clear();
        inner.head = NIL;
        inner.tail = NIL;
        inner.bytes = 0;
        inner.pending.clear();
        inner.refresh.clear();
        for write in inner.writing.values_mut() {
            write.token = 0;
        }
        inner.epoch = inner.epoch.wrapping_add(1);
        self.stats.flushes[why.index()].fetch_add(1, Ordering::Relaxed);
        self.wake(&inner);
    }

    /// Whether `key` is in use: kept, or waiting for a refresh.
    pub fn in_use(&self, key: &[u8]) -> bool {
        let inner = self.lock();
        inner.map.contains_key(key) || inner.refresh.contains_key(key)
    }

    /// `in_use` of each of `keys`, under one lock: `each(position, in use)`.
    pub fn in_use_each<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
        mut each: impl FnMut(usize, bool),
    ) {
        let inner = self.lock();
        if inner.map.is_empty() && inner.refresh.is_empty() {
            return keys.enumerate().for_each(|(at, _)| each(at, false));
        }
        for (at, key) in keys.enumerate() {
            each(at, inner.map.contains_key(key) || inner.refresh.contains_key(key));
        }
    }

    /// Whether a value of `len` bytes could be kept (MAX_VALUE_BYTES).
    pub fn keeps_size(&self, len: usize) -> bool {
        len <= self.limits.max_value_bytes
    }

    /// Let callers waiting for a fill look again (they run once the lock is released).
    fn wake(&self, inner: &Inner) {
        if inner.waiters > 0 {
            self.filled.notify_all();
        }
    }

    /// (bytes, entries, fills in flight, flush epoch).
    pub fn size(&self) -> (usize, usize, usize, u64) {
        let inner = self.lock();
        (inner.bytes, inner.map.len(), inner.pending.len(), inner.epoch)
    }
}

impl Inner {
    /// `Store::invalidate_in_use`, under the lock.
    fn drop_in_use(&mut self, key: &[u8], remember: bool) -> (bool, bool) {
        // (A map is looked at only when it holds anything: hashing the key is most of the cost
        // of a write of a key not kept, the usual case.)
        let filling = match self.pending.is_empty() {
            true => None,
            false => self.pending.remove(key).map(|(.., heat)| heat),
        };
        let pending = filling.is_some() | self.poison_write(key);
        // A copy with some heat, or a fill (a refresh) it kills, and its heat.
        let (found, heat) = match self.map.get(key) {
            Some(&idx) => {
                let heat = self.nodes[idx].heat;
                self.remove(idx);
                (true, heat)
            }
            None => (pending, filling.unwrap_or(0)),
        };
        if remember && heat > 0 && self.refresh.len() < MAX_REFRESH {
            self.refresh.entry(key.into()).or_insert(heat);
        }
        (found, heat >= HOT || self.refresh.contains_key(key))
    }

    /// Drop the kept copy of `key`, if any.
    fn drop_key(&mut self, key: &[u8]) {
        if let Some(&idx) = self.map.get(key) {
            self.remove(idx);
        }
    }

    fn register(&mut self, key: &[u8], now: u64) -> Token {
        if !self.refresh.is_empty() {
            // Filled now: nothing left to refresh.
            self.refresh.remove(key);
        }
        self.register_with(key, now, READ)
    }

    /// `register`, the value to come in with `heat`.
    fn register_with(&mut self, key: &[u8], now: u64, heat: u8) -> Token {
        if self.pending.len() >= MAX_PENDING {
            // Abandoned fills (cancelled awaits): forgetting them all only costs a few installs.
            self.pending.clear();
        }
        // Concurrent fills of one key share its token: each is then killed by any invalidation
        // since the first registered (stricter than since its own), and one installing does
        // not make the others' replies look overtaken.
        if let Some(entry) = self.pending.get_mut(key) {
            entry.2 += 1;
            return Token(entry.0);
        }
        // Tokens are unique for the store's life, so clearing `pending` (a flush) is enough to
        // kill every older one; the epoch is kept for the stats.
        let token = self.next_token;
        self.next_token += 1;
        self.pending.insert(key.into(), (token, now, 1, heat));
        Token(token)
    }

    /// One fill sharing the key's token is done: forget the token after the last.
    fn release(&mut self, key: &[u8]) {
        if let Some(entry) = self.pending.get_mut(key) {
            entry.2 -= 1;
            if entry.2 == 0 {
                self.pending.remove(key);
            }
        }
    }

    fn unlink(&mut self, idx: usize) {
        let (prev, next) = (self.nodes[idx].prev, self.nodes[idx].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
    }

    fn push_front(&mut self, idx: usize) {
        self.nodes[idx].prev = NIL;
        self.nodes[idx].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = idx;
        }
        self.head = idx;
        if self.tail == NIL {
            self.tail = idx;
        }
    }

    fn touch(&mut self, idx: usize) {
        if self.head != idx {
            self.unlink(idx);
            self.push_front(idx);
        }
    }

    fn remove(&mut self, idx: usize) {
        self.unlink(idx);
        let node = &mut self.nodes[idx];
        let key = std::mem::take(&mut node.key);
        let value = std::mem::take(&mut node.value);
        self.bytes -= 2 * key.len() + value.len() + ENTRY_OVERHEAD;
        self.map.remove(&key);
        self.free.push(idx);
    }

    fn insert(&mut self, key: Box<[u8]>, value: Arc<[u8]>, expires_ns: u64, size: usize, heat: u8) {
        let node = Node { key: key.clone(), value, expires_ns, heat, prev: NIL, next: NIL };
        let idx = match self.free.pop() {
            Some(idx) => {
                self.nodes[idx] = node;
                idx
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.push_front(idx);
        self.map.insert(key, idx);
        self.bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(max_bytes: usize) -> Store {
        Store::new(Limits { max_bytes, max_value_bytes: 1000, max_ttl_ns: 60_000_000_000 })
    }

    fn get(s: &Store, key: &[u8]) -> Result<Vec<u8>, Token> {
        let mut out = Vec::new();
        match s.lookup(key, true, false, |v| out = v.to_vec()) {
            Got::Hit => Ok(out),
            Got::Miss(token) => Err(token),
            Got::Busy => panic!("busy without waiting"),
            Got::Unknown => panic!("unknown without admission by use"),
        }
    }

    #[test]
    fn a_fill_installs_and_hits() {
        let s = store(10_000);
        let Err(token) = get(&s, b"k") else { panic!("hit in an empty store") };
        assert!(s.install(b"k", token, b"v", -1));
        assert_eq!(get(&s, b"k"), Ok(b"v".to_vec()));
    }

    /// Keys filled, then each of `hit` read once from the store.
    fn kept(s: &Store, keys: &[&[u8]], hit: &[&[u8]]) {
        for key in keys {
            let Err(token) = get(s, key) else { panic!("{key:?} was kept already") };
            assert!(s.install(key, token, b"v", -1));
        }
        for key in hit {
            assert!(get(s, key).is_ok());
        }
    }

    /// The keys `take_refresh` registers, sorted, each installed as "new".
    fn refreshed(s: &Store) -> Vec<Vec<u8>> {
        let mut taken = s.take_refresh(64);
        taken.sort_by(|x, y| x.0.cmp(&y.0));
        for (key, token) in &taken {
            assert!(s.install(key, *token, b"new", -1));
        }
        taken.into_iter().map(|(k, _)| k.to_vec()).collect()
    }

    #[test]
    fn invalidated_keys_in_use_are_refreshed_and_cool_off_unless_read() {
        let s = store(10_000);
        // Served ("a", "b"), filled by a read ("once"), written here and never read ("w").
        kept(&s, &[b"a", b"b", b"once"], &[b"a", b"b"]);
        let w = s.begin_write(b"w");
        assert!(s.ack_write(b"w", w, (b"v", None), now_ns()));
        s.end_write(b"w", true);
        let all = [&b"a"[..], b"b", b"once", b"w"];
        s.invalidate_from_server(all.into_iter());
        assert_eq!(refreshed(&s), [b"a".to_vec(), b"b".to_vec(), b"once".to_vec()]);
        assert_eq!(get(&s, b"a"), Ok(b"new".to_vec()));
        // Not read since: "b" comes back once more, "once" no more.
        s.invalidate_from_server(all.into_iter());
        assert_eq!(refreshed(&s), [b"a".to_vec(), b"b".to_vec()]);
        s.invalidate_from_server(all.into_iter());
        assert_eq!(refreshed(&s), [b"a".to_vec()]);
        assert!(s.take_refresh(64).is_empty());
        assert_eq!(s.stats.refreshes.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn past_a_batch_the_rest_waits_for_a_fill_or_is_forgotten() {
        // One primary: the rest rides along with the next fill; a cluster: nothing would take
        // it, and it must not fill the bounded list for ever.
        for keep_rest in [true, false] {
            let s = store(10_000);
            let keys = [&b"a"[..], b"b", b"c"];
            kept(&s, &keys, &keys);
            s.invalidate_from_server(keys.into_iter());
            assert_eq!(s.take_refresh_of(keys.into_iter(), 1, keep_rest).len(), 1);
            assert_eq!(s.take_refresh(64).len(), if keep_rest { 2 } else { 0 }, "{keep_rest}");
        }
    }

    #[test]
    fn an_own_write_takes_the_heat_of_what_it_replaces() {
        let s = store(10_000);
        kept(&s, &[b"k"], &[b"k"]);
        let w = s.begin_write(b"k");
        // Another client's write, applied before this one: its invalidation is read first,
        // and the key waits for a refresh that the write's value makes needless.
        s.invalidate_from_server([&b"k"[..]].into_iter());
        assert!(s.take_refresh(64).is_empty());
        assert!(s.ack_write(b"k", w, (b"mine", None), now_ns()));
        s.end_write(b"k", true);
        s.invalidate_from_server([&b"k"[..]].into_iter());
        assert_eq!(refreshed(&s), [b"k".to_vec()]);
    }

    #[test]
    fn a_refresh_obeys_the_fill_tokens_and_skips_keys_filled_meanwhile() {
        let s = store(10_000);
        kept(&s, &[b"a", b"b", b"c"], &[b"a", b"b", b"c"]);
        s.invalidate_from_server([&b"a"[..], b"b", b"c"].into_iter());
        // "a" is being filled by a lookup's miss already; "b" is refreshed, but another write's
        // invalidation overtakes its reply.
        let Err(_) = get(&s, b"a") else { panic!() };
        let taken = s.take_refresh(64);
        let keys: Vec<&[u8]> = taken.iter().map(|(k, _)| &**k).collect();
        assert!(!keys.contains(&&b"a"[..]) && keys.len() == 2, "{keys:?}");
        s.invalidate_from_server([&b"b"[..]].into_iter());
        for (key, token) in &taken {
            assert_eq!(s.install(key, *token, b"new", -1), &**key != b"b");
        }
        // A flush forgets what was waiting to be refreshed.
        kept(&s, &[b"d"], &[b"d"]);
        s.invalidate_from_server([&b"d"[..]].into_iter());
        s.flush(Flush::Server);
        assert!(s.take_refresh(64).is_empty());
    }

    #[test]
    fn a_kept_copy_is_served_during_an_own_write_and_replaced_or_dropped_after() {
        let s = store(10_000);
        kept(&s, &[b"a", b"b"], &[]);
        let (ta, _) = (s.begin_write(b"a"), s.begin_write(b"b"));
        for key in [&b"a"[..], b"b"] {
            assert_eq!(get(&s, key), Ok(b"v".to_vec()), "{key:?} during its write");
        }
        assert!(s.ack_write(b"a", ta, (b"new", None), now_ns()));
        s.end_write(b"a", true);
        assert_eq!(get(&s, b"a"), Ok(b"new".to_vec()));
        // A write that did not apply, or failed: what was kept before it may be stale now.
        s.end_write(b"b", false);
        assert!(get(&s, b"b").is_err());
    }

    #[test]
    fn by_use_a_key_not_kept_registers_nothing_until_admitted() {
        let s = store(10_000);
        assert_eq!(s.lookup_as(b"k", || true, false, true, |_| {}), Got::Unknown);
        assert_eq!(s.size().2, 0);
        let token = s.admit(b"k");
        // A second caller while the fill is in flight shares it (admitted already).
        assert_eq!(s.lookup_as(b"k", || true, false, true, |_| {}), Got::Miss(token));
        assert!(s.install(b"k", token, b"v", -1));
        let mut out = Vec::new();
        assert_eq!(s.lookup_as(b"k", || true, false, true, |v| out = v.to_vec()), Got::Hit);
        assert_eq!(out, b"v");
        // Kept but not servable (the gate shut), or waiting for a refresh: filled again.
        assert!(matches!(s.lookup_as(b"k", || false, false, true, |_| {}), Got::Miss(_)));
        kept(&s, &[b"r"], &[b"r"]);
        s.invalidate_from_server([&b"r"[..]].into_iter());
        assert!(matches!(s.lookup_as(b"r", || true, false, true, |_| {}), Got::Miss(_)));
        assert_eq!(s.stats.admitted.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_invalidation_read_before_an_ordered_fills_reply_spares_it() {
        // Admission by use: the fill and the invalidations come on one connection; one read
        // before the fill's reply is of a write the fill read after. One read after it drops
        // what was installed, and a local write (its order unknown) still spoils the fill.
        let s = store(10_000);
        let token = s.admit(b"k");
        s.invalidate_heard([&b"k"[..]].into_iter(), true);
        assert!(s.install(b"k", token, b"new", -1));
        s.invalidate_heard([&b"k"[..]].into_iter(), true);
        assert!(get(&s, b"k").is_err());
        let token = s.admit(b"k");
        s.invalidate(b"k");
        assert!(!s.install(b"k", token, b"old", -1));
    }

    #[test]
    fn an_invalidation_kills_the_fill_in_flight() {
        let s = store(10_000);
        let Err(token) = get(&s, b"k") else { panic!() };
        s.invalidate_from_server([&b"k"[..]].into_iter());
        assert!(!s.install(b"k", token, b"old", -1));
        assert!(get(&s, b"k").is_err());
    }

    #[test]
    fn a_flush_kills_every_fill_in_flight() {
        let s = store(10_000);
        let Err(token) = get(&s, b"k") else { panic!() };
        s.flush(Flush::Server);
        assert!(!s.install(b"k", token, b"old", -1));
        assert_eq!(s.stats.fills_dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn concurrent_fills_share_a_token_and_all_install() {
        let s = store(10_000);
        let Err(a) = get(&s, b"k") else { panic!() };
        let Err(b) = get(&s, b"k") else { panic!() };
        assert_eq!(a, b);
        assert!(s.install(b"k", a, b"v", -1));
        assert!(s.install(b"k", b, b"v", -1));
        assert_eq!(s.size().2, 0); // no token left behind
        assert_eq!(s.stats.fills_dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_invalidation_kills_every_fill_sharing_the_token() {
        let s = store(10_000);
        let Err(a) = get(&s, b"k") else { panic!() };
        let Err(b) = get(&s, b"k") else { panic!() };
        s.invalidate_from_server([&b"k"[..]].into_iter());
        assert!(!s.install(b"k", a, b"old", -1));
        assert!(!s.install(b"k", b, b"old", -1));
    }

    #[test]
    fn a_caller_that_may_wait_is_told_a_fill_is_in_flight() {
        let s = store(10_000);
        let Err(token) = get(&s, b"k") else { panic!() };
        assert_eq!(s.lookup(b"k", true, true, |_| {}), Got::Busy);
        assert!(s.install(b"k", token, b"v", -1));
        s.wait_for_fill(b"k", Duration::from_secs(5)); // returns at once: nothing in flight
        let mut out = Vec::new();
        assert_eq!(s.lookup(b"k", true, true, |v| out = v.to_vec()), Got::Hit);
        assert_eq!(out, b"v");
    }

    #[test]
    fn an_own_write_installs_its_value_once_answered() {
        let s = store(10_000);
        let Err(fill) = get(&s, b"k") else { panic!() };
        let write = s.begin_write(b"k");
        // The fill that read before the write installs nothing; a read meanwhile gets a
        // token that never installs, and a caller that may wait is told to.
        assert!(!s.install(b"k", fill, b"old", -1));
        let Err(during) = get(&s, b"k") else { panic!() };
        assert_eq!(during, Token(0));
        assert_eq!(s.lookup(b"k", true, true, |_| {}), Got::Busy);
        assert!(!s.install(b"k", during, b"old", -1));
        assert!(s.ack_write(b"k", write, (b"new", Some(5_000)), now_ns()));
        s.end_write(b"k", true);
        assert_eq!(get(&s, b"k"), Ok(b"new".to_vec()));
    }

    #[test]
    fn invalidations_read_before_the_answer_spare_the_install_and_after_it_drop_it() {
        // The tracking connection reads both in the server's order: one before the answer
        // was of a write applied before this one.
        let s = store(10_000);
        let write = s.begin_write(b"k");
        s.invalidate_from_server([&b"k"[..]].into_iter());
        assert!(s.ack_write(b"k", write, (b"new", None), now_ns()));
        s.invalidate_from_server([&b"k"[..]].into_iter());
        s.end_write(b"k", true);
        assert!(get(&s, b"k").is_err());
    }

    #[test]
    fn a_flush_or_a_write_through_another_connection_spoils_the_writes_in_flight() {
        let s = store(10_000);
        let write = s.begin_write(b"k");
        s.flush(Flush::Server);
        assert!(!s.ack_write(b"k", write, (b"new", None), now_ns()));
        s.end_write(b"k", true);
        assert!(get(&s, b"k").is_err());
        // A write of the key on a data connection: its order against this one is unknown,
        // for as long as any own write of the key is in flight.
        let first = s.begin_write(b"k");
        s.invalidate(b"k");
        let second = s.begin_write(b"k");
        assert!(!s.ack_write(b"k", first, (b"1", None), now_ns()));
        assert!(!s.ack_write(b"k", second, (b"2", None), now_ns()));
        s.end_write(b"k", true);
        s.end_write(b"k", true);
        assert!(get(&s, b"k").is_err());
        let third = s.begin_write(b"k");
        assert!(s.ack_write(b"k", third, (b"3", None), now_ns()));
        s.end_write(b"k", true);
        assert_eq!(get(&s, b"k"), Ok(b"3".to_vec()));
    }

    #[test]
    fn overlapping_own_writes_install_in_the_order_they_are_answered() {
        // One connection: the server applied them in the order their answers are read.
        let s = store(10_000);
        let first = s.begin_write(b"k");
        let second = s.begin_write(b"k");
        assert!(s.ack_write(b"k", second, (b"2", None), now_ns()));
        assert_eq!(get(&s, b"k"), Ok(b"2".to_vec()));
        assert!(s.ack_write(b"k", first, (b"1", None), now_ns()));
        s.end_write(b"k", true);
        s.end_write(b"k", true);
        assert_eq!(get(&s, b"k"), Ok(b"1".to_vec()));
    }

    #[test]
    fn a_failed_own_write_leaves_the_key_to_be_read() {
        let s = store(10_000);
        s.begin_write(b"k");
        s.end_write(b"k", false);
        let Err(token) = get(&s, b"k") else { panic!() };
        assert!(s.install(b"k", token, b"v", -1));
    }

    #[test]
    fn least_recently_used_goes_first() {
        let per = 2 + 10 + ENTRY_OVERHEAD;
        let s = store(per * 2);
        for key in [b"a", b"b"] {
            let Err(t) = get(&s, key) else { panic!() };
            assert!(s.install(key, t, b"0123456789", -1));
        }
        assert!(get(&s, b"a").is_ok()); // b is now the least recently used
        let Err(t) = get(&s, b"c") else { panic!() };
        assert!(s.install(b"c", t, b"0123456789", -1));
        assert!(get(&s, b"a").is_ok());
        assert!(get(&s, b"b").is_err());
        assert!(s.size().0 <= per * 2);
    }

    #[test]
    fn gone_or_oversized_values_are_not_kept() {
        let s = store(10_000);
        let Err(t) = get(&s, b"k") else { panic!() };
        assert!(!s.install(b"k", t, b"v", -2));
        let Err(t) = get(&s, b"k") else { panic!() };
        assert!(!s.install(b"k", t, &[0; 1001], -1));
        assert_eq!(s.size().1, 0);
    }
}
