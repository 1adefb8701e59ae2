//! The in-memory store stays within `max_keys`, evicts expired state before live state,
//! reclaims expired state without pressure, and keeps unchanged policies across reloads.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::algorithm::{Gcra, Quota};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, CheckRequest, KeyedCheck, ManualClock, MemoryStore, Policy};
use sluicegate_testkit::shared_policy;

const T0: u64 = 1_700_000_000_000_000;

fn remaining(store: &MemoryStore<ManualClock>, p: &Arc<Policy>, key: &str) -> u64 {
    store
        .check_keyed_now(&[KeyedCheck::new(p, key, 0)])
        .unwrap()
        .decisions[0]
        .decision
        .remaining
}

#[test]
fn ten_times_max_keys_stay_within_max_keys() {
    for max_keys in [1, 7, 1000, 5000] {
        let store = MemoryStore::with_clock(max_keys, ManualClock::new(T0));
        let policies: Vec<Arc<Policy>> = AlgorithmKind::ALL
            .iter()
            .map(|&kind| shared_policy(kind.name(), kind, 5, Duration::from_secs(60)))
            .collect();
        for i in 0..10 * max_keys {
            let key = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            // Each key under two of the policies, so the bound counts (policy, key) states.
            let pair = [
                Arc::clone(&policies[i % 6]),
                Arc::clone(&policies[(i + 1) % 6]),
            ];
            store.check_now(CheckRequest::new(&pair, &key, 1)).unwrap();
            assert!(store.len() <= max_keys, "{} > {max_keys}", store.len());
        }
        assert_eq!(store.len(), max_keys, "a full store stays full");
    }
}

#[test]
fn keyed_limiter_stays_within_max_keys() {
    let p = Policy::builder("p", AlgorithmKind::Gcra, 5, Duration::from_secs(60))
        .build()
        .unwrap();
    let limiter = KeyedLimiter::with_max_keys(Gcra::from(Quota::from(&p)), p, 3000);
    for i in 0..30_000 {
        limiter.check(&format!("key-{i}"), T0, 1);
    }
    assert_eq!(limiter.len(), 3000);
}

#[test]
fn expired_state_is_evicted_before_live_state() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(1000, clock.clone());
    // One request a key keeps its state for 10 s.
    let p = shared_policy("p", AlgorithmKind::Gcra, 1, Duration::from_secs(10));
    let one = [Arc::clone(&p)];
    let check = |key: &str| store.check_now(CheckRequest::new(&one, key, 1)).unwrap();
    // A: fills the store (and overflows it), live until T0 + 10 s.
    for i in 0..2000 {
        check(&format!("a-{i}"));
    }
    assert_eq!(store.len(), 1000);
    // B: at 5 s, live until 15 s; evicts some A (all live: the least recently used go).
    clock.advance(Duration::from_secs(5));
    for i in 0..300 {
        assert!(check(&format!("b-{i}")).allowed);
    }
    // C: at 12 s every A is expired and every B still live: only A may go.
    clock.advance(Duration::from_secs(7));
    for i in 0..300 {
        assert!(check(&format!("c-{i}")).allowed);
    }
    // Under 1000: the sweep also reclaims expired A states on its own.
    assert!(store.len() <= 1000);
    for i in 0..300 {
        assert_eq!(
            remaining(&store, &p, &format!("b-{i}")),
            0,
            "b-{i} was evicted while live"
        );
        assert_eq!(remaining(&store, &p, &format!("c-{i}")), 0);
    }
}

#[test]
fn expired_state_is_reclaimed_without_pressure() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(100_000, clock.clone());
    let p = shared_policy("p", AlgorithmKind::TokenBucket, 10, Duration::from_secs(1));
    let one = [Arc::clone(&p)];
    for i in 0..500 {
        store
            .check_now(CheckRequest::new(&one, &format!("old-{i}"), 1))
            .unwrap();
    }
    assert_eq!(store.len(), 500);
    // Long after they expired, ordinary traffic on other keys sweeps them away. The sweep
    // runs in the shards that traffic uses (no stop-the-world pass), so the traffic is
    // spread over enough keys to reach all 256 shards: 5,000 keys miss a given shard with
    // probability (255/256)^5000 ≈ 3e-9. (Ten keys, as this test once used, leave most
    // shards unswept, and how many old states share their shards is up to the hash key.)
    clock.advance(Duration::from_secs(60));
    for round in 0..4 {
        for i in 0..5_000 {
            store
                .check_now(CheckRequest::new(&one, &format!("new-{i}"), 1))
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
    }
    assert_eq!(
        store.len(),
        5_000,
        "expired states left beside the 5,000 live ones"
    );
}

#[test]
fn retain_policies_keeps_unchanged_policies() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(T0));
    let kept = shared_policy(
        "kept",
        AlgorithmKind::FixedWindow,
        5,
        Duration::from_secs(60),
    );
    let changed = shared_policy(
        "changed",
        AlgorithmKind::FixedWindow,
        5,
        Duration::from_secs(60),
    );
    let both = [Arc::clone(&kept), Arc::clone(&changed)];
    store.check_now(CheckRequest::new(&both, "k", 2)).unwrap();
    assert_eq!(store.len(), 2);
    // The reload: `kept` is unchanged (an equal, freshly parsed policy), `changed` has a new
    // limit (its keys keep what they used), `gone` a new algorithm (its keys start afresh).
    let kept_again = shared_policy(
        "kept",
        AlgorithmKind::FixedWindow,
        5,
        Duration::from_secs(60),
    );
    let changed_now = shared_policy(
        "changed",
        AlgorithmKind::FixedWindow,
        6,
        Duration::from_secs(60),
    );
    store.retain_policies(&[Arc::clone(&kept_again), Arc::clone(&changed_now)]);
    assert_eq!(store.len(), 2);
    assert_eq!(remaining(&store, &kept_again, "k"), 3, "kept its state");
    assert_eq!(remaining(&store, &changed_now, "k"), 4, "kept its usage");
    let other_algorithm = shared_policy("changed", AlgorithmKind::Gcra, 6, Duration::from_secs(60));
    store.retain_policies(&[Arc::clone(&kept_again), Arc::clone(&other_algorithm)]);
    assert_eq!(store.len(), 1);
    assert_eq!(remaining(&store, &other_algorithm, "k"), 6, "starts afresh");
    // The old definition is gone too, and its index is reused safely.
    let newer = shared_policy("newer", AlgorithmKind::Gcra, 4, Duration::from_secs(60));
    store
        .check_now(CheckRequest::new(&[Arc::clone(&newer)], "k", 1))
        .unwrap();
    assert_eq!(remaining(&store, &newer, "k"), 3);
    assert_eq!(remaining(&store, &kept_again, "k"), 3);
}

/// A flood of 10 × `max_keys` unique keys, one request each, never resets a client that is
/// being limited: eviction takes the states whose loss admits the fewest extra requests,
/// and a fresh flood key (one request used) always costs less than a spent client. Every
/// algorithm, the store and the single-policy limiter.
#[test]
fn a_key_flood_never_resets_a_limited_client() {
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new(T0);
        let max_keys = 2000;
        let store = MemoryStore::with_clock(max_keys, clock.clone());
        let p = shared_policy(kind.name(), kind, 5, Duration::from_secs(3600));
        let one = [Arc::clone(&p)];
        let check = |key: &str| store.check_now(CheckRequest::new(&one, key, 1)).unwrap();
        for _ in 0..5 {
            assert!(check("victim").allowed);
        }
        assert!(!check("victim").allowed, "{kind}");
        for i in 0..10 * max_keys {
            check(&format!("flood-{i}"));
            if i % 1000 == 0 {
                clock.advance(Duration::from_millis(1));
            }
        }
        assert_eq!(store.len(), max_keys);
        assert!(
            !check("victim").allowed,
            "{kind}: the flood reset the victim"
        );
        assert_eq!(remaining(&store, &p, "victim"), 0, "{kind}");
    }
}

#[test]
fn a_key_flood_never_resets_a_limited_client_of_the_keyed_limiter() {
    let p = Policy::builder("p", AlgorithmKind::Gcra, 5, Duration::from_secs(3600))
        .build()
        .unwrap();
    let limiter = KeyedLimiter::with_max_keys(Gcra::from(Quota::from(&p)), p, 3000);
    for _ in 0..5 {
        assert!(limiter.check("victim", T0, 1).allowed);
    }
    for i in 0..30_000 {
        limiter.check(&format!("flood-{i}"), T0, 1);
    }
    assert_eq!(limiter.len(), 3000);
    assert!(!limiter.check("victim", T0, 1).allowed);
}

/// `max_memory` bounds every byte of state, sliding logs included: a flood of unique keys,
/// each logging many requests, stays within it (by the store's own count, which includes
/// the logs' buffers), and a client that is being limited is still limited after it.
#[test]
fn sliding_logs_stay_within_max_memory() {
    const BOUND: usize = 1 << 20;
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(1_000_000, clock.clone()).with_max_memory(BOUND);
    assert_eq!(store.max_memory(), Some(BOUND));
    let log = shared_policy(
        "log",
        AlgorithmKind::SlidingLog,
        200,
        Duration::from_secs(3600),
    );
    let p = [Arc::clone(&log)];
    // The victim spends its whole budget: 200 entries, and is then denied.
    for _ in 0..200 {
        assert!(
            store
                .check_now(CheckRequest::new(&p, "victim", 1))
                .unwrap()
                .allowed
        );
    }
    assert!(
        !store
            .check_now(CheckRequest::new(&p, "victim", 1))
            .unwrap()
            .allowed
    );
    // Unbounded, this flood would log 4,000 × 100 entries of 16 bytes: 6.4 MB.
    let mut peak = 0;
    for i in 0..4000 {
        let key = format!("flood-{i}");
        for _ in 0..100 {
            clock.advance(Duration::from_micros(1));
            store.check_now(CheckRequest::new(&p, &key, 1)).unwrap();
        }
        peak = peak.max(store.bytes());
    }
    assert!(peak <= BOUND, "{peak} bytes held, bound {BOUND}");
    assert!(
        peak > BOUND / 2,
        "the flood never came near the bound: {peak}"
    );
    assert_eq!(
        remaining(&store, &log, "victim"),
        0,
        "the limited client was reset"
    );
    assert!(
        !store
            .check_now(CheckRequest::new(&p, "victim", 1))
            .unwrap()
            .allowed
    );
}

/// Without `max_memory` the same count only grows with the logs: the count is real.
#[test]
fn bytes_count_the_logs() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(T0));
    let log = shared_policy(
        "log",
        AlgorithmKind::SlidingLog,
        1000,
        Duration::from_secs(60),
    );
    let p = [log];
    store.check_now(CheckRequest::new(&p, "k", 1)).unwrap();
    let one = store.bytes();
    for _ in 0..999 {
        store.check_now(CheckRequest::new(&p, "k", 1)).unwrap();
    }
    assert!(
        store.bytes() >= one + 999 * 16,
        "{} bytes for a 1000-entry log ({one} for one entry)",
        store.bytes()
    );
}
