//! Keys are not stored: a key is known by a 63-bit fingerprint of a keyed hash.
//!
//! The hash is SipHash-1-3 (the variant std's `HashMap` uses against hash flooding), a
//! pseudo-random function keyed by 128 random bits drawn once per store (from std's
//! [`RandomState`], itself seeded by the operating system). Two distinct keys share state only if their
//! fingerprints collide: for a store tracking `n` keys, the chance that a given new key
//! collides with one of them is `n / 2^63` (about 1 in 10^13 at a million keys), and the
//! chance that any two of `n` keys ever collide is about `n² / 2^64` (5 × 10^-8 at a
//! million). Without the per-process key an attacker cannot compute fingerprints, so cannot
//! choose a key that collides with a victim's. A collision merges two keys' limits; it
//! never crashes or corrupts anything.

use std::hash::{BuildHasher, RandomState};

use super::siphash::Sip;

/// The keyed hash of a store or limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyHasher(Sip<1, 3>);

/// A key's identity in the tables: 63 bits of hash with bit 0 clear, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Fingerprint(u64);

impl KeyHasher {
    /// A hasher with a fresh random key.
    pub(crate) fn new() -> Self {
        // Two outputs of a secretly keyed PRF on distinct inputs: 128 random bits.
        let seed = RandomState::new();
        KeyHasher(Sip::new(
            seed.hash_one(0x5eed_u64),
            seed.hash_one(0x5eed_u64 + 1),
        ))
    }

    /// The hasher of a snapshot's key, so restored fingerprints name the same keys.
    pub(crate) fn from_key(k0: u64, k1: u64) -> Self {
        KeyHasher(Sip::new(k0, k1))
    }

    /// Its key (secret: it is what keeps fingerprints unpredictable; snapshots hold it).
    pub(crate) fn key(&self) -> (u64, u64) {
        self.0.key()
    }

    /// The fingerprint of `key`.
    #[inline]
    pub(crate) fn fingerprint(&self, key: &str) -> Fingerprint {
        self.fingerprint_bytes(key.as_bytes())
    }

    /// The fingerprint of a key known by `bytes` (a [`Key`](super::Key)'s).
    #[inline(always)]
    pub(crate) fn fingerprint_bytes(&self, bytes: &[u8]) -> Fingerprint {
        let fp = self.0.hash(bytes) & !1;
        // 0 marks an empty cell.
        Fingerprint(if fp == 0 { 2 } else { fp })
    }
}

impl Fingerprint {
    /// A fingerprint read back from a snapshot; `None` for bits no fingerprint has.
    pub(crate) fn from_bits(bits: u64) -> Option<Self> {
        (bits != 0 && bits & 1 == 0).then_some(Fingerprint(bits))
    }

    /// The raw bits (bit 0 clear, never 0).
    #[inline]
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// Rebuilds a fingerprint from a cell tag (drops the tag's flag bit).
    #[inline]
    pub(crate) fn from_tag(tag: u64) -> Self {
        Fingerprint(tag & !1)
    }

    /// Which of `shards` (a power of two) holds the key. Uses low bits; cells use high bits.
    #[inline]
    pub(crate) fn shard(self, shards: usize) -> usize {
        (self.0 >> 1) as usize & (shards - 1)
    }

    /// The home cell in a table of `len` cells (multiply-shift, any `len`).
    #[inline]
    pub(crate) fn home(self, len: usize) -> usize {
        ((u128::from(self.0) * len as u128) >> 64) as usize
    }
}
