//! `KeyedLimiter`'s own API: peek, refund, remove, and robustness when a caller skips
//! validation (a cost over capacity is denied, never a panic).

use std::time::Duration;

use sluicegate_core::algorithm::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, Quota, SlidingLog, SlidingWindow, TokenBucket,
};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, Policy};

const T0: u64 = 1_700_000_000_000_000;

fn limiter<A: Algorithm + From<Quota>>(kind: AlgorithmKind) -> KeyedLimiter<A> {
    let policy = Policy::builder("p", kind, 3, Duration::from_secs(1))
        .build()
        .unwrap();
    KeyedLimiter::with_max_keys(A::from(Quota::from(&policy)), policy, 100)
}

fn exercise<A: Algorithm + From<Quota>>(kind: AlgorithmKind) {
    let l = limiter::<A>(kind);
    // Over capacity: denied, nothing tracked.
    let d = l.check("k", T0, 4);
    assert!(!d.allowed, "{kind}");
    assert!(l.is_empty(), "{kind}");
    // Peek reads without tracking.
    assert_eq!(l.peek("k", T0).remaining, 3, "{kind}");
    assert!(l.is_empty(), "{kind}");
    // Consume, then remove: back to fresh.
    assert_eq!(l.check("k", T0, 2).remaining, 1, "{kind}");
    assert_eq!(l.peek("k", T0).remaining, 1, "{kind}");
    assert!(l.remove("k"), "{kind}");
    assert!(!l.remove("k"), "{kind}");
    assert_eq!(l.peek("k", T0).remaining, 3, "{kind}");
    assert!(l.allocated_bytes() > 0);
}

#[test]
fn every_algorithm() {
    exercise::<FixedWindow>(AlgorithmKind::FixedWindow);
    exercise::<SlidingLog>(AlgorithmKind::SlidingLog);
    exercise::<SlidingWindow>(AlgorithmKind::SlidingWindow);
    exercise::<TokenBucket>(AlgorithmKind::TokenBucket);
    exercise::<LeakyBucket>(AlgorithmKind::LeakyBucket);
    exercise::<Gcra>(AlgorithmKind::Gcra);
}

#[test]
fn refund_gives_back() {
    let l = limiter::<Gcra>(AlgorithmKind::Gcra);
    for _ in 0..3 {
        assert!(l.check("k", T0, 1).allowed);
    }
    assert!(!l.check("k", T0, 1).allowed);
    l.refund("k", T0, 1);
    assert!(l.check("k", T0, 1).allowed);
    assert_eq!(l.len(), 1);
    assert_eq!(l.max_keys(), 100);
    assert_eq!(l.policy().name(), "p");
}
