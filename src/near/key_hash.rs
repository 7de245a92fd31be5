//! The hasher of the store's maps: keys are hashed on every lookup, write and invalidation,
//! so with the standard SipHash they cost more than the rest of a lookup. xxh3 (which the
//! admission sketch uses too) with a seed drawn once per store, so that keys chosen to
//! collide in one process collide in no other.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use twox_hash::XxHash3_64;

/// Builds `KeyHasher`s with this store's seed.
#[derive(Clone, Copy, Debug)]
pub struct KeyHash {
    seed: u64,
}

impl KeyHash {
    /// A random seed (from the standard library's per-process random keys).
    pub fn random() -> Self {
        KeyHash { seed: RandomState::new().hash_one(0x6e_65_61_72_u64) }
    }
}

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { seed: self.seed, hash: 0 }
    }
}

/// One key's hash: its bytes in one xxh3 call (a key is a `[u8]`: its length, then its bytes).
pub struct KeyHasher {
    seed: u64,
    hash: u64,
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.hash = XxHash3_64::oneshot_with_seed(self.seed ^ self.hash, bytes);
    }

    #[inline]
    fn write_usize(&mut self, len: usize) {
        // The length prefix of a slice: xxh3 mixes the length of what it hashes already; kept
        // in the seed of the bytes' hash all the same.
        self.hash ^= len as u64;
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_others_differ() {
        let h = KeyHash::random();
        let a: Box<[u8]> = Box::from(&b"fs:1:item:1"[..]);
        assert_eq!(h.hash_one(&a), h.hash_one(&b"fs:1:item:1"[..]));
        assert_ne!(h.hash_one(&b"fs:1:item:1"[..]), h.hash_one(&b"fs:1:item:2"[..]));
        assert_ne!(h.hash_one(&b""[..]), h.hash_one(&b"\0"[..]));
    }

    #[test]
    fn each_store_has_its_own_seed() {
        let (a, b) = (KeyHash::random(), KeyHash::random());
        assert_ne!(a.hash_one(&b"key"[..]), b.hash_one(&b"key"[..]));
    }
}
