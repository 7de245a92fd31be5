//! This process' own writes of kept keys, through the tracking connection: their claims on
//! the store (`begin_write`), the written values installed as the server's answers are read
//! (`ack_write`), and the claims' end (`end_write`).
//!
//! The tracking connection's reader reads the server's answers and its invalidations in the
//! order the server sent them, and calls `ack_write` as it reads a key's answer: the written
//! value is then the server's, whatever was invalidated before (writes the server applied
//! earlier, another client's or this process'), and an invalidation read after it drops it as
//! any invalidation does. Own writes of one key that overlap are installed in turn, in the
//! order the server applied them. What spoils a claim is what is not ordered with the answer:
//! a flush, or a write of the key through another connection of this process.

use std::sync::atomic::Ordering;

use super::{Inner, Store, Token};

/// The writes of a key in flight through the tracking connection.
pub(super) struct Writing {
    /// What their answers install with; 0 (nothing is installed) once a flush, or a write of
    /// the key through another connection, came while one was in flight.
    pub(super) token: u64,
    pub(super) writes: u32,
}

impl Store {
    /// Before this process writes `key` through the tracking connection: kill its fills in
    /// flight (their replies may come from either side of the write), and claim the install of
    /// the written value. A kept copy stays served until the write is answered: a read
    /// meanwhile runs concurrently with a write not yet done, and may return the value from
    /// before it (an invalidation still drops it, as ever). A write of a key whose claim is
    /// spoiled shares the spoiled claim, until every write of it in flight has ended.
    pub fn begin_write(&self, key: &[u8]) -> Token {
        let mut inner = self.lock();
        inner.pending.remove(key);
        self.wake(&inner);
        if let Some(write) = inner.writing.get_mut(key) {
            write.writes += 1;
            return Token(write.token);
        }
        let token = inner.next_token;
        inner.next_token += 1;
        inner.writing.insert(key.into(), Writing { token, writes: 1 });
        Token(token)
    }

    /// The server's answer to a write of `key` begun with `begin_write` at `begun` (ns), read
    /// in order with the invalidations: install `written` (its bytes and its expiry in ms,
    /// None for none) if the claim still holds, else drop the copy from before the write;
    /// whether it was installed.
    pub fn ack_write(
        &self,
        key: &[u8],
        token: Token,
        (value, ttl_ms): (&[u8], Option<u64>),
        begun: u64,
    ) -> bool {
        let mut inner = self.lock();
        let live = inner.writing.get(key).is_some_and(|w| w.token != 0 && w.token == token.0);
        if !live {
            self.stats.fills_dropped.fetch_add(1, Ordering::Relaxed);
            inner.drop_key(key);
            return false;
        }
        let ttl_ns = match ttl_ms {
            None => self.limits.max_ttl_ns,
            Some(ms) => self.limits.max_ttl_ns.min(ms.saturating_mul(1_000_000)),
        };
        // As much in use as the copy it replaces (or the one an invalidation just took, which
        // waits for a refresh that this value makes needless).
        let replaced = inner.map.get(key).map_or(0, |&idx| inner.nodes[idx].heat);
        let heat = replaced.max(inner.refresh.remove(key).unwrap_or(0));
        // Counted from before the write was sent: never outlives the server's copy.
        let kept = self.keep(&mut inner, key, value, begun.saturating_add(ttl_ns), heat);
        if kept {
            self.stats.own_writes_kept.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    /// A write begun with `begin_write` is over: answered and `applied` (its value installed
    /// or not by `ack_write`), or not (refused, not applied, or its fate unknown: the copy
    /// from before it is dropped). Readers waiting for the key look again.
    pub fn end_write(&self, key: &[u8], applied: bool) {
        let mut inner = self.lock();
        if let Some(write) = inner.writing.get_mut(key) {
            write.writes -= 1;
            if write.writes == 0 {
                inner.writing.remove(key);
            }
        }
        if !applied {
            inner.drop_key(key);
            // A refresh it was to make needless: read when next missed.
            inner.refresh.remove(key);
        }
        self.wake(&inner);
    }
}

impl Inner {
    /// Spoil the claim of the writes of `key` in flight, if any (a write of it through
    /// another connection, whose order against them is unknown); whether there were any.
    pub(super) fn poison_write(&mut self, key: &[u8]) -> bool {
        let Some(write) = self.writing.get_mut(key) else { return false };
        write.token = 0;
        true
    }
}
