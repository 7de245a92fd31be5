//! Admission by use on the tracking side: what a near cache with ADMIT_AFTER_READS keeps
//! (`Admission`), what this process' writes forget of a key's reads, and the live tracking
//! connections its fills go through (OPTIN tracking).

use std::sync::{Arc, Weak};

use super::{locked, Near, Writer};
use crate::near::sketch::Sketch;
use crate::transport::Pushed;

/// Admission by use: a key is kept once it was read `after` times lately (by `sketch`). The
/// tracking connections then track with OPTIN, not BCAST: the server tracks only the keys
/// they read after `CLIENT CACHING YES`, the kept ones, so fills go through them
/// (`fill.rs`), and keys no one reads twice cost the server nothing.
pub struct Admission {
    pub after: u8,
    pub sketch: Sketch,
}

/// A live tracking connection: the set it belongs to, and the connection.
pub(super) type Live = (u64, Weak<Pushed>);

impl Near {
    /// Drop `key` before (and after) this process writes it: with admission by use, a key
    /// written while not in use has the write counted against its reads (see sketch.rs) if
    /// `count` (the drop before it; not the one after).
    pub fn forget(&self, key: &[u8], count: bool) {
        let (_, in_use) = self.store.invalidate_in_use(key, self.optin());
        if let (Some(admission), false, true) = (&self.admission, in_use, count) {
            admission.sketch.written(key);
        }
    }

    /// `forget` of each of `keys`, under one lock of the store; the tokens issued so far
    /// (`Store::issued`).
    pub fn forget_keys<K: AsRef<[u8]>>(&self, keys: &[K], count: bool) -> u64 {
        let admission = self.admission.as_ref().filter(|_| count);
        self.store.invalidate_keys(keys, self.optin(), |key, in_use| {
            if let (Some(admission), false) = (admission, in_use) {
                admission.sketch.written(key);
            }
        })
    }

    /// Admission by use, if that is how keys are kept.
    #[inline]
    pub fn admission(&self) -> Option<&Admission> {
        self.admission.as_ref()
    }

    /// Whether fills go through the tracking connections (admission by use: OPTIN tracking).
    #[inline]
    pub fn optin(&self) -> bool {
        self.admission.is_some()
    }

    /// The live tracking connection to the server at `addr`, if it is tracked and tracking.
    pub fn conn_to(&self, addr: &str) -> Option<Arc<Pushed>> {
        let live = locked(&self.live);
        live.get(addr).and_then(|(_, conn)| conn.upgrade())
    }

    /// The tracking connection to write tracked keys of the server at `addr` through (this
    /// process' writes of kept keys: tracking with NOLOOP, the server tells us nothing of
    /// them, and the written value is installed here instead): that server's, of the set
    /// tracking now, connected and answering (the gate open); None otherwise (the write goes
    /// the usual way, and drops the key here).
    pub fn writer_for(&self, addr: &str) -> Option<Writer> {
        if !self.serving() {
            return None;
        }
        let (set_id, conn) = locked(&self.live).get(addr).cloned()?;
        // The set is checked before the connection is upgraded, and no lock is held while
        // it is: an old set's connection is never held here, so never let go of (its end
        // fails the writes still in it, which take locks) under the trackers' lock.
        if locked(&self.trackers).set_id != set_id {
            return None;
        }
        Some(Writer { set_id, conn: conn.upgrade()? })
    }

    /// Record (or with None forget) set `set_id`'s tracking connection to `addr` as live.
    pub(super) fn set_live(&self, set_id: u64, addr: &Arc<str>, conn: Option<&Arc<Pushed>>) {
        let mut live = locked(&self.live);
        match conn {
            Some(conn) => {
                live.insert(Arc::clone(addr), (set_id, Arc::downgrade(conn)));
            }
            None => {
                if live.get(addr).is_some_and(|(id, _)| *id == set_id) {
                    live.remove(addr);
                }
            }
        }
    }
}
