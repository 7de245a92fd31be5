//! What the server's invalidations do to the store (`invalidate_heard`), and the keys they
//! named that were in use, read again (`take_refresh`, `take_refresh_of`).

use std::sync::atomic::Ordering;

use super::{now_ns, Inner, Store, Token, HOT, MAX_REFRESH};

impl Store {
    /// Drop keys named by the server's invalidation message.
    #[cfg(test)]
    pub fn invalidate_from_server<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) {
        self.invalidate_heard(keys, false);
    }

    /// `invalidate_from_server`; with `ordered`, the fills in flight are spared: every fill
    /// goes through the tracking connection that read this message (admission by use), so
    /// one whose reply is still to come reads the server after the write it names.
    pub fn invalidate_heard<'a>(&self, keys: impl Iterator<Item = &'a [u8]>, ordered: bool) {
        self.invalidate_heard_cold(keys, ordered, |_| {});
    }

    /// `invalidate_heard`, calling `cold` (under the store's lock) with each key that was not
    /// kept and in use (served since it was filled).
    pub fn invalidate_heard_cold<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
        ordered: bool,
        mut cold: impl FnMut(&[u8]),
    ) {
        let mut inner = self.lock();
        for key in keys {
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            // (Not a claim of an own write in flight: read in order with its answer, it is
            // of a write applied before it, or else drops what the answer installed.)
            if !ordered {
                inner.pending.remove(key);
            }
            match inner.map.get(key) {
                Some(&idx) => {
                    let heat = inner.nodes[idx].heat;
                    if heat > 0 && inner.refresh.len() < MAX_REFRESH {
                        inner.refresh.insert(key.into(), heat);
                    }
                    if heat < HOT {
                        cold(key);
                    }
                    inner.remove(idx);
                }
                // Not kept: cold unless it is being filled or waits for a refresh.
                None if !inner.pending.contains_key(key) && !inner.refresh.contains_key(key) => {
                    cold(key)
                }
                None => {}
            }
        }
        self.wake(&inner);
    }

    /// Keys to read with a fill that goes to the server anyway: up to `limit` of those the
    /// server invalidated while they were being hit, each registered for a fill under its own
    /// token (as a lookup's miss would), unless it is kept again, being filled or written.
    pub fn take_refresh(&self, limit: usize) -> Vec<(Box<[u8]>, Token)> {
        let mut inner = self.lock();
        if inner.refresh.is_empty() {
            return Vec::new();
        }
        let now = now_ns();
        let keys: Vec<Box<[u8]>> = inner.refresh.keys().take(limit).cloned().collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(token) = inner.take_for_refresh(&key, now) {
                out.push((key, token));
            }
        }
        self.stats.refreshes.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// `take_refresh` of these keys only (those of one invalidation, read from one node's
    /// tracking connection): up to `limit` of them that were in use, registered for a fill.
    /// The rest wait for a later fill to ride along with if `keep_rest` (every key on one
    /// primary), else are forgotten (nothing would take them).
    pub fn take_refresh_of<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
        limit: usize,
        keep_rest: bool,
    ) -> Vec<(Box<[u8]>, Token)> {
        let mut inner = self.lock();
        if inner.refresh.is_empty() {
            return Vec::new();
        }
        let now = now_ns();
        let mut out = Vec::new();
        for key in keys {
            if out.len() == limit {
                if keep_rest {
                    break;
                }
                inner.refresh.remove(key);
                continue;
            }
            if let Some(token) = inner.take_for_refresh(key, now) {
                out.push((Box::from(key), token));
            }
        }
        self.stats.refreshes.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }
}

impl Inner {
    /// Register a refresh of `key` if it waits for one and is not kept again or being filled
    /// (a key being written keeps waiting: the write's value takes its heat).
    fn take_for_refresh(&mut self, key: &[u8], now: u64) -> Option<Token> {
        if self.writing.contains_key(key) {
            return None;
        }
        let heat = self.refresh.remove(key)?;
        if self.map.contains_key(key) || self.pending.contains_key(key) {
            return None;
        }
        Some(self.register_with(key, now, heat - 1))
    }
}
