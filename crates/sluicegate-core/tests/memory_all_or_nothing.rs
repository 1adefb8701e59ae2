//! The in-memory store's multi-policy checks are all-or-nothing: when one policy denies,
//! every other policy's state is exactly as before (compared with peeks), whichever the
//! algorithms, whether the policies share the key (one shard) or not (several shards).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, CheckRequest, Decision, KeyedCheck, ManualClock, MemoryStore, Mode, Policy,
};
use sluicegate_testkit::shared_policy;

const T0: u64 = 1_700_000_000_000_000;

fn peek(store: &MemoryStore<ManualClock>, policy: &Arc<Policy>, key: &str) -> Decision {
    let v = store
        .check_keyed_now(&[KeyedCheck::new(policy, key, 0)])
        .unwrap();
    v.decisions[0].decision
}

#[test]
fn a_denial_changes_no_policy_sharing_the_key() {
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(1000, clock.clone());
        let generous = shared_policy("generous", kind, 10, Duration::from_secs(60));
        let strict = shared_policy(
            "strict",
            AlgorithmKind::FixedWindow,
            2,
            Duration::from_secs(60),
        );
        let policies = [Arc::clone(&generous), Arc::clone(&strict)];
        for _ in 0..2 {
            let v = store
                .check_now(CheckRequest::new(&policies, "k", 1))
                .unwrap();
            assert!(v.allowed, "{kind}");
        }
        clock.advance(Duration::from_millis(10));
        let before = (peek(&store, &generous, "k"), peek(&store, &strict, "k"));
        assert_eq!(before.0.remaining, 8, "{kind}");
        for _ in 0..5 {
            let v = store
                .check_now(CheckRequest::new(&policies, "k", 1))
                .unwrap();
            assert!(!v.allowed, "{kind}");
            assert!(
                v.decisions[0].decision.allowed,
                "{kind}: generous alone would admit"
            );
        }
        let after = (peek(&store, &generous, "k"), peek(&store, &strict, "k"));
        assert_eq!(before, after, "{kind}: a denial changed state");
    }
}

#[test]
fn a_denial_changes_nothing_across_shards() {
    for kind in AlgorithmKind::ALL {
        let store = MemoryStore::with_clock(100_000, ManualClock::new(T0));
        let per_client = shared_policy("per_client", kind, 10, Duration::from_secs(60));
        let global = shared_policy(
            "global",
            AlgorithmKind::SlidingLog,
            3,
            Duration::from_secs(60),
        );
        // Many clients, one global key: their shards differ for most clients.
        for i in 0..3 {
            let client = format!("client-{i}");
            let items = [
                KeyedCheck::new(&per_client, &client, 1),
                KeyedCheck::new(&global, "all", 1),
            ];
            assert!(store.check_keyed_now(&items).unwrap().allowed, "{kind}");
        }
        for i in 3..40 {
            let client = format!("client-{i}");
            let items = [
                KeyedCheck::new(&per_client, &client, 1),
                KeyedCheck::new(&global, "all", 1),
            ];
            let v = store.check_keyed_now(&items).unwrap();
            assert!(!v.allowed, "{kind}");
            assert_eq!(
                peek(&store, &per_client, &client).remaining,
                10,
                "{kind}: {client} consumed"
            );
        }
        assert_eq!(store.len(), 4, "{kind}: denied clients are not tracked");
    }
}

#[test]
fn shadow_policies_never_deny_and_consume_only_when_they_would_admit() {
    let store = MemoryStore::with_clock(1000, ManualClock::new(T0));
    let shadow = Arc::new(
        Policy::builder("shadow", AlgorithmKind::Gcra, 1, Duration::from_secs(60))
            .mode(Mode::Shadow)
            .build()
            .unwrap(),
    );
    let policies = [Arc::clone(&shadow)];
    let first = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert!(first.allowed && first.decisions[0].decision.allowed);
    let second = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert!(second.allowed, "shadow mode never rejects");
    assert!(
        !second.decisions[0].decision.allowed,
        "but reports that it would"
    );
    assert_eq!(second.decisions[0].outcome.label(), "shadow_denied");
    assert_eq!(peek(&store, &shadow, "k").remaining, 0);
}

#[test]
fn refund_and_reset() {
    use sluicegate_core::Store;
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(1000, clock);
    let p = Arc::new(
        Policy::builder("p", AlgorithmKind::TokenBucket, 2, Duration::from_secs(60))
            .mode(Mode::Delay)
            .max_delay(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let policies = [Arc::clone(&p)];
    let request = CheckRequest::new(&policies, "k", 1);
    for _ in 0..2 {
        assert_eq!(store.check_now(request).unwrap().delay, 0);
    }
    let delayed = store.check_now(request).unwrap();
    assert_eq!(delayed.delay, 30_000_000);
    futures_ready(store.refund(&policies, "k", 1)).unwrap();
    assert_eq!(
        store.check_now(request).unwrap().delay,
        30_000_000,
        "the slot came back"
    );
    futures_ready(store.reset(&p, "k")).unwrap();
    assert_eq!(peek(&store, &p, "k").remaining, 2);
    assert!(store.is_empty());
}

/// The memory store's futures are ready at once.
fn futures_ready<T>(f: sluicegate_core::BoxFuture<'_, T>) -> T {
    use std::task::{Context, Poll, Waker};
    let mut f = f;
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}
