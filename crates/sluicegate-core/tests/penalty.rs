//! Penalties on the in-memory store: a denial keeps the key denied for the penalty, shadow
//! mode reports it without enforcing, a reset or a reload without the penalty lifts it.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Mode, Outcome, Policy, Store,
};

const T0: u64 = 1_764_000_000_000_000;
const MIN: u64 = 60_000_000;

fn policy(mode: Mode, penalty: Option<u64>) -> Arc<Policy> {
    let mut b =
        Policy::builder("p", AlgorithmKind::TokenBucket, 2, Duration::from_secs(60)).mode(mode);
    if let Some(minutes) = penalty {
        b = b.penalty(Duration::from_secs(minutes * 60));
    }
    Arc::new(b.build().unwrap())
}

fn check(store: &MemoryStore<ManualClock>, p: &Arc<Policy>, cost: u64) -> sluicegate_core::Verdict {
    store
        .check_now(CheckRequest::new(std::slice::from_ref(p), "k", cost))
        .unwrap()
}

#[test]
fn a_denied_key_stays_denied_for_the_penalty_and_no_longer() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(100, clock.clone());
    let p = policy(Mode::Reject, Some(10));
    assert!(check(&store, &p, 1).allowed);
    assert!(check(&store, &p, 1).allowed);
    let denied = check(&store, &p, 1);
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after(), Some(10 * MIN));
    // Five minutes on, the bucket is full again; the penalty still holds, not extended.
    clock.advance(Duration::from_secs(300));
    let still = check(&store, &p, 1);
    assert!(!still.allowed);
    assert_eq!(still.retry_after(), Some(5 * MIN));
    assert_eq!(still.decisions[0].decision.remaining, 0);
    // A read reports the penalty and starts nothing.
    assert!(!check(&store, &p, 0).decisions[0].decision.allowed);
    clock.advance(Duration::from_secs(300));
    assert!(check(&store, &p, 1).allowed, "the penalty is over");
}

#[test]
fn shadow_mode_reports_the_penalty_without_enforcing_it() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(100, clock.clone());
    let p = policy(Mode::Shadow, Some(10));
    for _ in 0..2 {
        assert_eq!(check(&store, &p, 1).decisions[0].outcome, Outcome::Allowed);
    }
    clock.advance(Duration::from_secs(120));
    // The bucket is full again, but the third request (denied at T0+0) started a penalty.
    let third_at_t0 = {
        let clock2 = ManualClock::new(T0);
        let s = MemoryStore::with_clock(100, clock2);
        for _ in 0..2 {
            check(&s, &p, 1);
        }
        check(&s, &p, 1)
    };
    assert!(third_at_t0.allowed);
    assert_eq!(third_at_t0.decisions[0].outcome, Outcome::ShadowDenied);
    assert_eq!(
        third_at_t0.decisions[0].decision.retry_after,
        Some(10 * MIN)
    );
    // On this store nothing was denied, so nothing is reported.
    assert_eq!(check(&store, &p, 1).decisions[0].outcome, Outcome::Allowed);
}

fn ready<T>(mut f: sluicegate_core::BoxFuture<'_, T>) -> T {
    use std::task::{Context, Poll, Waker};
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

#[test]
fn reset_and_removing_the_penalty_lift_it_and_a_mode_change_keeps_state() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(100, clock.clone());
    let p = policy(Mode::Reject, Some(10));
    for _ in 0..3 {
        check(&store, &p, 1);
    }
    assert!(!check(&store, &p, 1).allowed);
    ready(store.reset(&p, "k")).unwrap();
    assert!(check(&store, &p, 1).allowed, "reset ends the penalty");
    assert!(check(&store, &p, 1).allowed);
    assert!(!check(&store, &p, 1).allowed);
    // The reload drops the penalty (same counting: the state is kept, the bucket is empty).
    let without = policy(Mode::Reject, None);
    store.retain_policies(std::slice::from_ref(&without));
    let after = check(&store, &without, 1);
    assert!(!after.allowed);
    assert!(
        after.retry_after().unwrap() <= 30_000_000,
        "only the bucket's wait"
    );
    // Shadow now: still the same state (no refill), reported as shadow_denied.
    let shadow = policy(Mode::Shadow, None);
    store.retain_policies(std::slice::from_ref(&shadow));
    assert_eq!(
        check(&store, &shadow, 1).decisions[0].outcome,
        Outcome::ShadowDenied
    );
}
