//! The process' other near caches (`NearCache.set_peers`: two aliases of one configuration
//! with different prefixes, a second configuration on the same servers): a write this one
//! sends drops the tracked keys it names from theirs too, before it is sent and again once it
//! is answered, so that the process reads its own writes whichever near cache it asks. Made
//! here, in the write's call into the core; with no peer (what a site runs) one atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::writes::{Drops, Owned};
use crate::near::tracking::Near;

/// The other near caches of the process.
pub(super) struct Peers {
    /// Whether there is any (read without the lock).
    any: AtomicBool,
    list: Mutex<Arc<[Arc<Near>]>>,
}

impl Peers {
    pub(super) fn new() -> Peers {
        Peers { any: AtomicBool::new(false), list: Mutex::new(Arc::from(Vec::new())) }
    }

    pub(super) fn set(&self, peers: Vec<Arc<Near>>) {
        let any = !peers.is_empty();
        *self.list.lock().unwrap_or_else(PoisonError::into_inner) = Arc::from(peers);
        self.any.store(any, Ordering::Release);
    }

    /// A write's drops from each peer (`drops` of it: what of the write it tracks), made now
    /// and counted against the keys' reads; made again, not counted, when what this returns
    /// goes (once the write is answered, or its awaitable dropped unconverted). None when no
    /// peer tracks any of it.
    pub(super) fn drop_now<K: AsRef<[u8]>>(
        &self,
        drops: impl Fn(&Near) -> Option<Drops<K>>,
    ) -> Option<PeerDrops> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let list = Arc::clone(&self.list.lock().unwrap_or_else(PoisonError::into_inner));
        let each: Vec<_> = list
            .iter()
            .filter_map(|near| {
                let made = drops(near)?;
                made.apply(near, true);
                Some((Arc::clone(near), made.owned()))
            })
            .collect();
        (!each.is_empty()).then_some(PeerDrops { each })
    }
}

/// The peers' drops of one write, made again when it goes.
pub(super) struct PeerDrops {
    each: Vec<(Arc<Near>, Owned)>,
}

impl Drop for PeerDrops {
    fn drop(&mut self) {
        for (near, drops) in &self.each {
            drops.apply(near, false);
        }
    }
}
