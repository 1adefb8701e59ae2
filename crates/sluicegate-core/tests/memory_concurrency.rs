//! Threads hammering one key with a frozen clock admit exactly `limit` (or `burst`), never
//! more, for every algorithm, through the store and through the keyed limiter; concurrent
//! multi-shard checks in opposite orders neither deadlock nor over-admit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluicegate_core::algorithm::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, Quota, SlidingLog, SlidingWindow, TokenBucket,
};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, CheckRequest, KeyedCheck, ManualClock, MemoryStore, Policy};
use sluicegate_testkit::policy;

const THREADS: usize = 4;
const PER_THREAD: usize = 200;
/// Not a divisor of the period in µs: GCRA's rounded emission interval must still admit
/// exactly `LIMIT` at once.
const LIMIT: u64 = 57;
const T0: u64 = 1_700_000_000_000_000;

fn hammer(check: impl Fn() -> bool + Sync) -> u64 {
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..PER_THREAD {
                    if check() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn store_admits_exactly_the_limit() {
    for kind in AlgorithmKind::ALL {
        let store = MemoryStore::with_clock(10_000, ManualClock::new(T0));
        let policies = [Arc::new(policy("p", kind, LIMIT, Duration::from_secs(60)))];
        let admitted = hammer(|| {
            store
                .check_now(CheckRequest::new(&policies, "hot", 1))
                .unwrap()
                .allowed
        });
        assert_eq!(admitted, LIMIT, "{kind}");
    }
}

fn keyed<A: Algorithm + From<Quota>>(kind: AlgorithmKind) {
    let policy = policy("p", kind, LIMIT, Duration::from_secs(60));
    let limiter = KeyedLimiter::with_max_keys(A::from(Quota::from(&policy)), policy, 10_000);
    let admitted = hammer(|| limiter.check("hot", T0, 1).allowed);
    assert_eq!(admitted, LIMIT, "{kind}");
}

#[test]
fn keyed_limiter_admits_exactly_the_limit() {
    keyed::<FixedWindow>(AlgorithmKind::FixedWindow);
    keyed::<SlidingLog>(AlgorithmKind::SlidingLog);
    keyed::<SlidingWindow>(AlgorithmKind::SlidingWindow);
    keyed::<TokenBucket>(AlgorithmKind::TokenBucket);
    keyed::<LeakyBucket>(AlgorithmKind::LeakyBucket);
    keyed::<Gcra>(AlgorithmKind::Gcra);
}

#[test]
fn multi_shard_checks_in_both_orders() {
    let store = MemoryStore::with_clock(100_000, ManualClock::new(T0));
    let a = Arc::new(
        Policy::builder(
            "a",
            AlgorithmKind::SlidingLog,
            1000,
            Duration::from_secs(60),
        )
        .build()
        .unwrap(),
    );
    let b = Arc::new(
        Policy::builder("b", AlgorithmKind::Gcra, 25, Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let turn = AtomicU64::new(0);
    let admitted = hammer(|| {
        // Keys in different shards; half the threads list them the other way round.
        let i = turn.fetch_add(1, Ordering::Relaxed);
        let (ka, kb) = (format!("a-{}", i % 7), "shared".to_string());
        let forward = [KeyedCheck::new(&a, &ka, 1), KeyedCheck::new(&b, &kb, 1)];
        let backward = [KeyedCheck::new(&b, &kb, 1), KeyedCheck::new(&a, &ka, 1)];
        let items = if i.is_multiple_of(2) {
            &forward
        } else {
            &backward
        };
        store.check_keyed_now(items).unwrap().allowed
    });
    assert_eq!(admitted, 25);
}
