//! The concurrency policy through the in-memory store:
//! - under any interleaving of acquire, release (own, stale, repeated) and expiry, the cost
//!   in flight never exceeds `limit`, and a request is admitted exactly when the leases still
//!   held leave room for it (a model of held leases decides the same);
//! - decided together with a rate policy, a denial by either takes nothing from the other;
//! - threads acquiring and releasing at once never have more than `limit` in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::spec::DEFAULT_LEASE;
use sluicegate_core::{
    AlgorithmKind, CheckRequest, Clock, Lease, ManualClock, MemoryStore, Policy, PolicySpec,
};

const T0: u64 = 1_700_000_000_000_000;
const LEASE_US: u64 = 1_000_000;

fn concurrency(limit: u64) -> Arc<Policy> {
    Arc::new(
        Policy::builder(
            "c",
            AlgorithmKind::Concurrency,
            limit,
            Duration::from_micros(LEASE_US),
        )
        .build()
        .unwrap(),
    )
}

#[derive(Debug, Clone)]
enum Op {
    Acquire(u64),
    /// Release the held lease at this index (mod the number held), once or twice.
    Release(usize, bool),
    /// Release a lease that was released before (stale): must change nothing.
    ReleaseStale(usize),
    Advance(u64),
}

fn op(limit: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..=limit).prop_map(Op::Acquire),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, twice)| Op::Release(i, twice)),
        1 => any::<usize>().prop_map(Op::ReleaseStale),
        2 => (0..LEASE_US / 2).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn in_flight_never_exceeds_limit(limit in 1u64..6, ops in prop::collection::vec(op(5), 1..80)) {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(1000, clock.clone());
        let policies = [concurrency(limit)];
        let mut held: Vec<Lease> = Vec::new();
        let mut released: Vec<Lease> = Vec::new();
        for op in ops {
            let now = clock.now();
            // The model: leases we hold that have not expired.
            held.retain(|l| l.expires_at > now);
            let in_flight: u64 = held.iter().map(|l| l.cost).sum();
            prop_assert!(in_flight <= limit);
            match op {
                Op::Acquire(cost) => {
                    let cost = cost.min(limit);
                    let v = store.check_now(CheckRequest::new(&policies, "k", cost)).unwrap();
                    prop_assert_eq!(v.allowed, in_flight + cost <= limit, "in flight {}", in_flight);
                    let d = v.decisions[0].decision;
                    if v.allowed {
                        prop_assert_eq!(d.remaining, limit - in_flight - cost);
                        held.extend(v.leases("k", cost));
                    } else {
                        // At now + retry_after enough leases have expired (nothing released).
                        let retry = d.retry_after.unwrap();
                        let still: u64 = held.iter().filter(|l| l.expires_at > now + retry).map(|l| l.cost).sum();
                        prop_assert!(still + cost <= limit);
                    }
                }
                Op::Release(i, twice) if !held.is_empty() => {
                    let lease = held.remove(i % held.len());
                    store.release_now(std::slice::from_ref(&lease));
                    if twice {
                        store.release_now(std::slice::from_ref(&lease));
                    }
                    released.push(lease);
                }
                Op::ReleaseStale(i) if !released.is_empty() => {
                    let lease = released[i % released.len()].clone();
                    prop_assert_eq!(store.release_now(std::slice::from_ref(&lease)), 0);
                }
                Op::Advance(us) => clock.advance(Duration::from_micros(us)),
                _ => {}
            }
            let read = store.check_now(CheckRequest::new(&policies, "k", 0)).unwrap();
            let now = clock.now();
            let in_flight: u64 = held.iter().filter(|l| l.expires_at > now).map(|l| l.cost).sum();
            prop_assert_eq!(read.decisions[0].decision.remaining, limit - in_flight);
        }
    }
}

#[test]
fn decided_atomically_with_a_rate_policy() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(1000, clock.clone());
    let rate = Arc::new(
        Policy::builder("r", AlgorithmKind::FixedWindow, 3, Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let policies = [concurrency(2), rate];
    let check = |cost| {
        store
            .check_now(CheckRequest::new(&policies, "k", cost))
            .unwrap()
    };
    let a = check(1);
    let b = check(1);
    assert!(a.allowed && b.allowed);
    // The concurrency policy denies: the window keeps its third request.
    assert!(!check(1).allowed);
    store.release_now(&a.leases("k", 1));
    let c = check(1);
    assert!(c.allowed);
    assert_eq!(c.decisions[1].decision.remaining, 0);
    // Now the window denies: the freed slot is not taken.
    store.release_now(&c.leases("k", 1));
    let d = check(1);
    assert!(!d.allowed);
    assert!(d.leases("k", 1).is_empty());
    assert_eq!(d.decisions[0].decision.remaining, 1);
}

#[test]
fn threads_never_hold_more_than_limit() {
    const LIMIT: u64 = 3;
    let store = MemoryStore::with_clock(1000, ManualClock::new(T0));
    let policies = [concurrency(LIMIT)];
    let in_flight = AtomicU64::new(0);
    let peak = AtomicU64::new(0);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..2_000 {
                    let v = store
                        .check_now(CheckRequest::new(&policies, "k", 1))
                        .unwrap();
                    if v.allowed {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        admitted.fetch_add(1, Ordering::Relaxed);
                        std::hint::spin_loop();
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        store.release_now(&v.leases("k", 1));
                    }
                }
            });
        }
    });
    assert!(peak.load(Ordering::SeqCst) <= LIMIT);
    // The clock never moved: every admission was made possible by a release.
    assert!(admitted.load(Ordering::Relaxed) >= LIMIT);
    let read = store
        .check_now(CheckRequest::new(&policies, "k", 0))
        .unwrap();
    assert_eq!(read.decisions[0].decision.remaining, LIMIT);
}

#[test]
fn spec_rules() {
    let spec = |json: &str| serde_json::from_str::<PolicySpec>(json).unwrap().build();
    let p =
        spec(r#"{"name": "c", "algorithm": "concurrency", "limit": 5, "lease": "30s"}"#).unwrap();
    assert_eq!(p.lease(), Some(30_000_000));
    assert_eq!(p.capacity(), 5);
    let p = spec(r#"{"name": "c", "algorithm": "concurrency", "limit": 5}"#).unwrap();
    assert_eq!(p.lease(), Some(DEFAULT_LEASE.as_micros() as u64));
    let round = PolicySpec::from_policy(&p).build().unwrap();
    assert_eq!(round, p);
    for bad in [
        r#"{"name": "c", "algorithm": "concurrency", "limit": 5, "period": "1s"}"#,
        r#"{"name": "c", "algorithm": "concurrency", "limit": 5, "burst": 2}"#,
        r#"{"name": "c", "algorithm": "concurrency", "limit": 5, "mode": "delay"}"#,
        r#"{"name": "c", "algorithm": "concurrency", "limit": 0}"#,
        r#"{"name": "c", "algorithm": "concurrency", "limit": 5, "lease": "0s"}"#,
        r#"{"name": "c", "algorithm": "gcra", "limit": 5, "period": "1s", "lease": "1s"}"#,
    ] {
        assert!(spec(bad).is_err(), "{bad} accepted");
    }
}
