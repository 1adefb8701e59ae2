//! Core's hand-written one-shot SipHash-1-3 (`sluicegate-core/src/memory/siphash.rs`, the
//! key fingerprint of the memory store) against the `siphasher` crate's one-shot keyed
//! SipHash-1-3, side by side on the same keys, for `valgrind --tool=callgrind` (instruction
//! counts, repeatable on a loaded machine): `scripts/siphash-probe.sh`. Both must agree on
//! every key, which this checks first.
#![allow(dead_code)]

use std::hint::black_box;

#[path = "../../../sluicegate-core/src/memory/siphash.rs"]
mod siphash;

/// Iterations per key set.
const N: usize = 200_000;

/// Client keys as the middleware forms them: `ip:` plus an address, and API-key headers.
fn keys(len: usize) -> Vec<String> {
    (0..256)
        .map(|i| {
            let base = format!("ip:10.{}.{}.{}", i % 7, i / 7, i);
            format!("{base:x<len$}")
        })
        .collect()
}

#[inline(never)]
fn probe_core(sip: &siphash::Sip<1, 3>, keys: &[String]) -> u64 {
    let mut acc = 0u64;
    for i in 0..N {
        acc ^= sip.hash(black_box(keys[i % keys.len()].as_bytes()));
    }
    acc
}

#[inline(never)]
fn probe_siphasher(sip: &siphasher::sip::SipHasher13, keys: &[String]) -> u64 {
    let mut acc = 0u64;
    for i in 0..N {
        acc ^= sip.hash(black_box(keys[i % keys.len()].as_bytes()));
    }
    acc
}

fn main() {
    let (k0, k1) = (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
    let ours = siphash::Sip::<1, 3>::new(k0, k1);
    let theirs = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    let len: usize = std::env::var("KEY_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let keys = keys(len);
    for key in &keys {
        assert_eq!(
            ours.hash(key.as_bytes()),
            theirs.hash(key.as_bytes()),
            "{key}"
        );
    }
    black_box(probe_core(&ours, &keys));
    black_box(probe_siphasher(&theirs, &keys));
}
